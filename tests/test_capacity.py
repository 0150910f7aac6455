"""The capacity model (vault_client/capacity.py, pricing.py) and ``vault capacity``.

Pure and fast: arithmetic, the app's envelope code, and the command in-process. The worked
examples of docs/CAPACITY.md are checked by tests/test_docs.py; the model against the recorded
runs of the throttled benchmark (bench/results/throttled*.json) are the tests at the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from vault_client import capacity as model
from vault_client import pricing
from vault_client.capacity import Commits, Staging, Targets, Workload
from vault_client.cli import cli
from vault_core.recordformat import NewMessage

ROOT = Path(__file__).resolve().parent.parent
THROTTLED = ROOT / "bench" / "results" / "throttled.json"
THROTTLED_CLOSED = ROOT / "bench" / "results" / "throttled_closed.json"
"""``./dev bench throttled --closed-only``: the closed loop alone, on fewer configurations."""
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_design_numbers_copied_into_the_model_are_the_apps() -> None:
    from vault_app import envelope, open_writers, writer_fn
    from vault_core import blobs, tables

    assert model.INLINE_LIMIT == envelope.INLINE_LIMIT
    assert model.DRAIN_MESSAGES == writer_fn.DRAIN_MESSAGES
    assert model.LEASE_SECONDS == open_writers.WRITER_LEASE_SECONDS
    assert model.KEYS_PER_QUERY == tables.KEYS_PER_QUERY
    assert model.IDLE_SECONDS == open_writers.WRITER_IDLE_SECONDS
    assert blobs.DELETE_BATCH >= 1  # the model counts each blob of a Blob Batch delete anyway
    assert len(TRACEPARENT) == model.TRACEPARENT_CHARS


@pytest.mark.parametrize(
    ("value_bytes", "count"), [(0, 1), (1, 1), (200, 7), (1024, 42), (1024, 43), (5, 2000)]
)
@pytest.mark.parametrize("traced", [True, False])
def test_the_envelope_length_is_what_the_app_writes(value_bytes: int, count: int, traced: bool) -> None:
    from vault_app import envelope

    w = Workload(1, value_bytes, count, key_bytes=16, stream_name_bytes=16, traced=traced)
    messages = [NewMessage(b"v" * value_bytes, "k" * 16) for _ in range(count)]
    text = envelope.encode_messages(
        "key." + "a" * 40, "s" * 16, 1_700_000_000_000, messages, TRACEPARENT if traced else None
    )
    assert model.envelope_chars(w) == len(text)
    claim = envelope.encode_claim(
        "key." + "a" * 40,
        "s" * 16,
        1_700_000_000_000,
        f"{'s' * 16}/key.{'a' * 40}/{'f' * 32}.records",
        count,
        TRACEPARENT if traced else None,
    )
    assert model.claim_envelope_chars(w) == len(claim)


def test_a_batch_goes_to_a_claim_check_where_the_app_sends_it() -> None:
    # The app's two tests (vault_app/claimcheck.py): the cheap bound, then the envelope's length.
    def app_claims(value_bytes: int, count: int) -> bool:
        from vault_app import envelope

        if count * (value_bytes + 40) > envelope.INLINE_LIMIT:
            return True
        messages = [NewMessage(b"v" * value_bytes, "k" * 16) for _ in range(count)]
        text = envelope.encode_messages("key." + "a" * 40, "s" * 16, 1_700_000_000_000, messages, TRACEPARENT)
        return len(text) > envelope.INLINE_LIMIT

    for value_bytes, count in [(1024, 42), (1024, 43), (100, 362), (100, 363), (60_000, 1), (0, 10_000)]:
        assert model.claim_checked(Workload(1, value_bytes, count)) == app_claims(value_bytes, count)
    assert not model.claim_checked(Workload(1, 1024, 42)) and model.claim_checked(Workload(1, 1024, 43))


@pytest.mark.parametrize(
    ("size", "count"), [("small", 450), ("small", 1000), ("small", 3000), ("large", 150)]
)
def test_with_a_known_compression_the_model_sizes_inline_units_and_the_log_as_the_app_does(
    size: str, count: int
) -> None:
    """The app's own units of generated events, and the compression they show: the model's
    envelope and log bytes within 1 % of the app's (the unit headers are a share, not a count)."""
    from bench.events import events
    from vault_app import envelope
    from vault_core.stagedunits import staged_units
    from vault_core.writer import WriterSettings

    messages = events(count, size, seed=3)
    value_bytes = round(sum(len(m.value) for m in messages) / count)
    body = envelope.encode_claim_body(messages, 1_700_000_000_000, WriterSettings())
    units = staged_units(body).units
    compression = sum(len(u.stored) for u in units) / sum(u.payload_length for u in units)
    key_bytes = len(messages[0].key)
    w = Workload(1, value_bytes, count, key_bytes=key_bytes, stream_name_bytes=16, compression=compression)
    text = envelope.encode_units("key." + "a" * 40, "s" * 16, 1_700_000_000_000, body, count, TRACEPARENT)
    assert model.units_envelope_chars(w) == pytest.approx(len(text), rel=0.01)
    assert w.batch_bytes == pytest.approx(len(body), rel=0.01)
    fits = len(text) <= 60_000
    assert model.claim_checked(w) is (not fits) and model.inline_messages(w) is False
    assert model.queue_envelope_chars(w) == (
        model.units_envelope_chars(w) if fits else model.claim_envelope_chars(w)
    )
    assert model.claim_checked(
        Workload(1, value_bytes, count, key_bytes=key_bytes)
    )  # not known: a claim check


def test_a_queue_does_four_operations_for_a_lone_batch_and_about_two_at_load() -> None:
    assert model.queue_operations(0) == 0
    assert model.queue_operations(1) == 4  # put, the host's get, an empty drain receive, delete
    at_load = model.queue_operations(1000) / 1000
    assert 2 < at_load < 2 + 1 / model.DRAIN_MESSAGES + 0.02


def test_commits_take_a_writer_cycle_of_batches_and_at_most_48() -> None:
    w = Workload(1, 1024, 100)
    assert Commits.of(w, 1).batches_per_commit == 1 and Commits.of(w, 1).per_second == 1
    busy = Commits.of(w, 100)
    assert busy.batches_per_commit == 100 * model.WRITER_CYCLE_SECONDS
    assert busy.per_second == pytest.approx(1 / model.WRITER_CYCLE_SECONDS)
    flooded = Commits.of(w, 10_000)
    assert flooded.batches_per_commit == 48 and flooded.per_second == pytest.approx(10_000 / 48)
    # 48 batches of 100 x 1,072-byte records: 5,145,600 bytes, two Put Page writes and ten rows of
    # index points (5 MiB) besides the 48 b rows; four lookups of 15 ids.
    assert (flooded.put_pages, flooded.table_transactions, flooded.lookups) == (2, 1, 4)


def test_a_stream_idle_longer_than_its_writer_reopens_for_most_batches() -> None:
    w = Workload(1, 200, 1)
    sparse = Commits.of(w, 1 / 60)  # a batch a minute
    assert sparse.opens_per_second * 60 == pytest.approx(math.exp(-10 / 60))  # 85 % of its batches
    assert sparse.open_share == pytest.approx(1 - math.exp(-10 / 60))
    busy = Commits.of(w, 10)
    assert busy.opens_per_second < 1e-40 and busy.open_share == pytest.approx(1)
    # Each reopen costs the catalog partition three entities besides the commit's upsert.
    assert sparse.catalog_entities == pytest.approx(sparse.per_second + 3 * sparse.opens_per_second)


def test_scaled_targets_scale_every_rate_and_nothing_else() -> None:
    scaled = Targets().scaled(0.05)
    assert scaled.queue_messages == 100 and scaled.account_requests == 1000 and scaled.scale == 0.05
    assert scaled.blob_bytes == 3 * model.MiB and scaled.partition_entities == 100
    with pytest.raises(ValueError):
        Targets().scaled(0)
    # CPU does not scale: the writers' limit is the same behind a throttling front.
    w = Workload(2000, 1024, 100, streams=8)
    full = {x.resource: x for x in model.loads(w, Staging(1, 4), Targets())}
    twentieth = {x.resource: x for x in model.loads(w, Staging(1, 4), scaled)}
    writer = "the hot stream's queue writer"
    assert twentieth[writer].target == full[writer].target
    queue = "the hot stream's staging queue"
    assert twentieth[queue].utilisation == pytest.approx(20 * full[queue].utilisation)


def test_staging_capacity_grows_with_queues_and_accounts_until_the_account_binds() -> None:
    w = Workload(1000, 100, 10, streams=64)
    t = Targets().scaled(0.05)

    def staged(s: Staging) -> float:
        return model.capacity(w, s, t, counted=lambda x: x.staging and x.unit != "vCPU").messages_per_second

    one, eight = staged(Staging(1, 1)), staged(Staging(1, 8))
    assert eight / one == pytest.approx(8, rel=0.15)
    sixteen, two_accounts = staged(Staging(1, 16)), staged(Staging(2, 8))
    assert two_accounts > sixteen  # one account of 16 queues is past its own target


def test_steered_staging_fills_every_queue_even_for_one_stream() -> None:
    w = Workload(1000, 100, 10)
    t = Targets().scaled(0.05)

    def staged(s: Staging) -> float:
        return model.capacity(w, s, t, counted=lambda x: x.staging and x.unit != "vCPU").messages_per_second

    assert staged(Staging(1, 8)) == pytest.approx(staged(Staging(1, 1)))  # one stream, one home queue
    assert staged(Staging(1, 8, steered=True)) / staged(Staging(1, 1)) == pytest.approx(8, rel=0.15)


def test_the_plan_leaves_a_hot_stream_it_cannot_spread_over_the_headroom() -> None:
    hot = Workload(60_000, 1024, 1000, streams=20, hot_share=0.9)
    p = model.plan(hot, Targets())
    over = {x.resource for x in p.over}
    assert "the hot stream's queue writer" in over  # 54,000 msgs/s of one stream: one writer
    assert "the hot stream's page blob bytes" in over  # and 110 MiB/s on its blob, reads included
    assert p.staging.queues <= 4  # and it did not buy queues that cannot help it
    # The blob's 60 MiB/s, written and read once: 29,348 msgs/s of the hot stream, 90 % of all.
    assert p.capacity.binding.resource == "the hot stream's page blob bytes"
    assert p.capacity.messages_per_second == pytest.approx(60 * model.MiB / 2 / 1072 / 0.9)


def test_one_stream_with_a_share_is_an_error() -> None:
    with pytest.raises(ValueError):
        Workload(1, 1, 1, streams=1, hot_share=0.5)
    with pytest.raises(ValueError):
        Workload(0, 1, 1)


def test_event_hubs_units_follow_bytes_or_events_whichever_binds() -> None:
    p = model.plan(Workload(5000, 100, 100), Targets())
    standard, premium = pricing.event_hubs(p)
    assert standard.units == 5  # 5,000 events/s, though only 0.6 MB/s
    assert standard.events_monthly == pytest.approx(5000 * pricing.SECONDS_PER_MONTH / 1e6 * 0.028)
    assert premium.units == 1 and premium.events_monthly == 0
    big = model.plan(Workload(100_000, 4000, 100, streams=50), Targets())
    standard, premium = pricing.event_hubs(big)
    assert standard.units == math.ceil(100_000 * 4016 / 1e6) and standard.namespaces == 11
    assert premium.units == math.ceil(100_000 * 4016 / 5e6)


def test_a_month_prices_every_line_at_the_list_price() -> None:
    p = model.plan(Workload(1000, 200, 10), Targets())
    month = pricing.bill(p)
    lines = {x.item: x for x in month.lines}
    assert lines["staging queue operations"].monthly == pytest.approx(
        lines["staging queue operations"].quantity * 0.004 / 1e4
    )
    assert "claim-check blob writes" not in lines  # 10 x 200 B travel inline
    assert month.monthly == pytest.approx(sum(x.monthly for x in month.lines))
    assert month.data_gb_per_month == pytest.approx(1000 * (32 + 16 + 200) * pricing.SECONDS_PER_MONTH / 1e9)


# -- the command -----------------------------------------------------------------------------------
def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["capacity", *args], prog_name="vault")
    return result.exit_code, result.stdout, result.stderr


def test_json_has_every_figure_for_scripts() -> None:
    code, out, _ = run("--messages-per-second", "5000", "--batch-messages", "50", "--streams", "4", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["workload"]["posts_per_second"] == 100 and doc["workload"]["claim_check"] is True
    assert doc["workload"]["compression"] is None and doc["workload"]["inline_units"] is False
    assert doc["staging"] == {"accounts": 1, "queues_per_account": 1}
    resources = [x["resource"] for x in doc["loads"]]
    assert "the vault account" in resources and "the catalog partition" in resources
    assert doc["capacity"]["first_limit"] in resources and doc["capacity"]["messages_per_second"] > 5000
    assert (
        doc["monthly_cost"]["region"] == "East US" and doc["monthly_cost"]["prices_of"] == pricing.PRICES_DATE
    )
    assert [x["tier"] for x in doc["event_hubs"]] == ["Standard", "Premium"]


def test_a_given_tier_is_evaluated_rather_than_planned() -> None:
    code, out, _ = run(
        "--messages-per-second",
        "500",
        "--batch-messages",
        "1",
        "--staging-accounts",
        "2",
        "--staging-queues",
        "3",
        "--target-scale",
        "0.05",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0 and doc["staging"] == {"accounts": 2, "queues_per_account": 3}
    assert doc["targets_scale"] == 0.05
    assert "the hot stream's staging queue" in doc["over_headroom"]  # 500 lone batches/s vs 100 ops/s


def test_the_text_names_the_first_limit_and_the_costs() -> None:
    code, out, _ = run("--messages-per-second", "1000", "--message-bytes", "200", "--batch-messages", "1")
    assert code == 0
    assert "first limit that binds: the hot stream's queue writer" in out
    assert "the hot stream's staging queue" in out and "102% <" in out
    assert "a month at list prices (USD, East US" in out and "Premium" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "Missing option '--messages-per-second'"),
        (["--messages-per-second", "0"], "--messages-per-second"),
        (["--messages-per-second", "10", "--streams", "4", "--hot-stream-share", "1.5"], "at most 1"),
        (["--messages-per-second", "10", "--hot-stream-share", "0.5"], "with one stream"),
        (["--messages-per-second", "10", "--instance-memory", "1024"], "--instance-memory"),
        (["--messages-per-second", "10", "--message-bytes", "2000000"], "at most 1,048,576 bytes"),
        (["--messages-per-second", "10", "--batch-messages", "20000"], "at most 10,000 messages"),
        (["--messages-per-second", "10", "--message-bytes", "4096", "--batch-messages", "5000"], "16 MiB"),
        (["--messages-per-second", "10", "--compression", "0"], "--compression"),
        (["--messages-per-second", "10", "--compression", "1.5"], "--compression"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    code, out, err = run(*args)
    assert code == 2 and out == "" and err.startswith("vault: error: ") and fragment in err


def test_a_saturated_queue_spends_two_operations_a_batch_and_two_an_invocation() -> None:
    assert model.saturated_queue_operations(1) == 4 == model.queue_operations(1)
    assert model.saturated_queue_operations(8) == 2 + 2 / 8  # the host's get, one short receive
    assert model.saturated_queue_operations(32) == 2 + 2 / 32  # the trigger, then 31 in one receive
    assert model.saturated_queue_operations(33) == 2 + 3 / 33  # a full receive, then an empty one
    assert model.saturated_queue_operations(10_000) == pytest.approx(2 + 1 / model.DRAIN_MESSAGES, rel=1e-3)


def test_a_steered_tier_commits_its_queues_target_over_operations_and_admits_its_target() -> None:
    w = Workload(1, 100, 20, streams=32)
    scaled = Targets().scaled(1 / 800)  # a queue 2.5 requests/s, an account 25
    one = model.staging_throughput(w, Staging(1, 1, steered=True), scaled, batches_per_invocation=8)
    assert one.committed == pytest.approx(2.5 / 2.25 * 20) and one.committed_binding == "staging queue"
    assert one.admitted == 2.5 * 20 and one.operations_per_batch == 2.25
    eight = model.staging_throughput(w, Staging(1, 8, steered=True), scaled, batches_per_invocation=8)
    assert eight.committed == pytest.approx(8 * one.committed)
    # Sixteen queues on one account: its 25 requests/s bind before the queues' 40.
    sixteen = model.staging_throughput(w, Staging(1, 16, steered=True), scaled, batches_per_invocation=8)
    assert sixteen.committed_binding == "staging account" and sixteen.committed == pytest.approx(
        25 / 2.25 * 20
    )
    assert model.staging_throughput(
        w, Staging(2, 8, steered=True), scaled, batches_per_invocation=8
    ).committed == pytest.approx(2 * eight.committed)
    # At Azure's own targets a queue's writer fills its vCPU first with batches this small.
    full = model.staging_throughput(w, Staging(1, 1, steered=True), Targets())
    assert full.committed_binding == "queue writer CPU"
    assert full.committed == pytest.approx(20 / model.writer_cpu_seconds(1.0, w))


def test_a_runs_measured_operations_and_unused_target_replace_the_counted_ones() -> None:
    w = Workload(1, 100, 20, streams=32)
    scaled = Targets().scaled(1 / 800)  # a queue 2.5 requests/s
    m = model.Measured(operations_per_batch=3.0, unused_share=0.25)
    four = model.staging_throughput(
        w, Staging(1, 4, steered=True), scaled, batches_per_invocation=8, measured=m
    )
    assert four.committed == pytest.approx(4 * 2.5 * 0.75 / 3.0 * 20) and four.operations_per_batch == 3
    counted = model.staging_throughput(w, Staging(1, 4, steered=True), scaled, batches_per_invocation=8)
    assert four.committed / counted.committed == pytest.approx(2.25 / 3.0 * 0.75)
    for bad in ((0.0, 0.0), (2.0, 1.0), (2.0, -0.1)):
        with pytest.raises(ValueError):
            model.Measured(*bad)


def test_a_measured_ceiling_binds_where_it_is_below_the_queues_and_nowhere_else() -> None:
    """The machine's ceiling, measured with no target binding, is one more limit: the least wins."""
    w = Workload(1, 100, 20, streams=32)
    scaled = Targets().scaled(1 / 800)  # two queues: 2 x 2.5 / 2.5 operations x 20 = 40 msgs/s
    two = Staging(1, 2, steered=True)
    low = model.staging_throughput(w, two, scaled, measured=model.Measured(2.5, ceiling=30.0))
    assert (low.committed, low.committed_binding) == (30.0, "the machine's CPU (measured)")
    high = model.staging_throughput(w, two, scaled, measured=model.Measured(2.5, ceiling=60.0))
    assert (high.committed, high.committed_binding) == (pytest.approx(40.0), "staging queue")
    with pytest.raises(ValueError):
        model.Measured(2.5, ceiling=0.0)


# -- the model against the throttled benchmark -------------------------------------------------
WITHIN = 0.15
SATURATED = 0.85
"""A run whose staging queues carried at least this share of their target is storage-bound:
there the model must be within WITHIN of what was committed."""


def _throttled(path: Path = THROTTLED) -> dict[str, Any]:
    """bench/results/throttled.json as ./dev bench throttled writes it (bench/throttled.py's
    docstring): ``settings`` and ``runs``, among them one closed-loop run per configuration
    (``load`` "sustained": ``in_flight``, ``committed_msgs_per_s``, ``queue_ops_per_s``,
    ``queue_ops_per_committed_batch``) and the open loop at 3 x (``admitted_msgs_per_s``)."""
    if not path.exists():
        pytest.skip(f"no bench/results/{path.name} yet: ./dev bench throttled writes it")
    return dict(json.loads(path.read_text()))


def _bench_workload(settings: dict[str, Any]) -> Workload:
    """The throttled benchmark's workload, from its ``settings`` (1 msg/s: the model scales it)."""
    return Workload(
        1.0,
        settings["message_bytes"],
        settings["messages_per_post"],
        streams=settings["streams"],
        key_bytes=2,
    )


def _predicted(settings: dict[str, Any], run: dict[str, Any]) -> model.Throughput:
    w = _bench_workload(settings)
    waiting = run["in_flight"] / run["queues"] if "in_flight" in run else None
    return model.staging_throughput(
        w,
        Staging(run["accounts"], run["queues_per_account"], steered=True),
        Targets().scaled(1 / run.get("factor", settings["factor"])),
        batches_per_invocation=waiting,
    )


def test_the_throttled_benchmark_commits_at_most_the_model_and_as_much_where_storage_binds() -> None:
    """Each configuration's committed messages/s with closed-loop producers (every batch staged
    is drained before its producer sends another), against the model's committed throughput
    for the benchmark's workload on steered staging at the benchmark's factor.

    Where the run kept its staging queues at their target, storage bound, and the model must
    be within 15 %. Where it did not, something the model leaves out bound first (waits after
    refusals and on one writer invocation per queue, docs/CAPACITY.md §7: every run recorded
    so far), and the model, a storage limit, must not be below what was measured.
    BENCHMARKS.md shows each ratio."""
    doc = _throttled()
    assert {(r["queues"], r["accounts"]) for r in doc["runs"] if r["load"] == "sustained"} >= {
        (1, 1),
        (8, 1),
        (8, 2),
    }, "1 to 8 queues, 1 and 2 accounts"
    misses = _committed_misses(doc)
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("name", ["throttled_closed", "throttled_closed_renewed"])
def test_the_closed_loop_reruns_commit_at_most_the_model_and_lose_nothing(name: str) -> None:
    """The reduced runs (``--closed-only``: 1, 2, 4 and 8 q over 1 account and 2 q over 2) never
    above the model by more than 15 %, one queue the nearest to it (docs/CAPACITY.md §7.2-7.3:
    0.94 of it in the last run, 0.84 in the run of 04bd8eb with its queue at 89 % of its
    target), and every POST they accepted read back exactly once."""
    doc = _throttled(THROTTLED_CLOSED.with_name(f"{name}.json"))
    assert {(r["queues"], r["accounts"]) for r in doc["runs"]} >= {(1, 1), (2, 1), (4, 1), (8, 1), (2, 2)}
    ratios = {name: ratio for name, ratio, _used in _committed_ratios(doc)}
    assert max(ratios.values()) <= 1 + WITHIN, ratios
    assert max(ratios, key=lambda name: ratios[name]) == "1 q / 1 acct", ratios
    assert all(c["lost"] == c["duplicated"] == c["not_yet_committed"] == 0 for c in doc["readback"])


def test_one_queue_commits_within_15_percent_of_the_model_in_the_run_of_the_rounds() -> None:
    """The run of the drain rounds before the renewal check went from every 5 s to every 2.5 s
    (29490a6): the full rule, and one queue within 15 % (0.90)."""
    doc = _throttled(THROTTLED_CLOSED.with_name("throttled_closed_rounds.json"))
    misses = _committed_misses(doc)
    assert not misses, "\n".join(misses)
    assert doc["figures"]["1 q / 1 acct, sustained: committed ÷ model"] == pytest.approx(1, abs=WITHIN)


@pytest.mark.parametrize(
    "name",
    [
        "throttled_closed_scaled",
        "throttled_closed_factor",
        "throttled_closed_inflight",
        "throttled_closed_paced",
        "throttled_closed_slower",
        "throttled_closed_repeat",
    ],
)
def test_other_closed_loop_runs_commit_at_most_the_model_and_lose_nothing(name: str) -> None:
    """Runs at other factors (docs/CAPACITY.md §7.2) and of the writer before its rounds: the
    same rule; nothing lost or duplicated (a batch still queued when the read-back gave up is
    late, not lost)."""
    doc = _throttled(THROTTLED_CLOSED.with_name(f"{name}.json"))
    misses = _committed_misses(doc)
    assert not misses, "\n".join(misses)
    assert all(c["lost"] == c["duplicated"] == 0 for c in doc["readback"])


@pytest.mark.parametrize("name", ["throttled_closed", "throttled_closed_repeat", "throttled_closed_slower"])
def test_the_closed_loop_reruns_are_the_model_with_their_measured_operations_and_idle_target(
    name: str,
) -> None:
    """Since c4c4bda a run counts, per configuration, every queue operation a committed batch
    cost and the share of its queues' target that no request asked for (docs/CAPACITY.md §7.3).
    With those two in place of the counted ones (``capacity.Measured``), the model accounts for
    what every configuration committed within 15 %: the queues' requests go where the front
    says, and nothing else is left out. The unused share is measured, not predicted."""
    doc = _throttled(THROTTLED_CLOSED.with_name(f"{name}.json"))
    if name == "throttled_closed":  # its one queue ran at 93 % of its target
        assert not _committed_misses(doc), "one queue, at its target, within 15 % of the counted model"
    settings = doc["settings"]
    for r in doc["runs"]:
        seconds = r["front_seconds"]
        budget = r["queues"] * settings["targets"]["queue_messages"] / r["factor"] * seconds
        measured = model.Measured(r["queue_ops_per_committed_batch"], r["unused_queue_tokens"] / budget)
        ratio, config = _committed_over_model(settings, r, measured)
        assert ratio == pytest.approx(1, abs=WITHIN), (config, ratio)
        figure = f"{config}, sustained: committed ÷ model with the run's operations and unused target"
        assert doc["figures"][figure] == pytest.approx(ratio), "BENCHMARKS.md's ratio is this one"


def _committed_over_model(
    settings: dict[str, Any], r: dict[str, Any], measured: model.Measured
) -> tuple[float, str]:
    """A throttled run's committed messages/s over the model of its configuration with what was
    ``measured`` in it, and the configuration's name as bench/throttled.py's run_name gives it."""
    w = _bench_workload(settings)
    predicted = model.staging_throughput(
        w,
        Staging(r["accounts"], r["queues_per_account"], steered=True),
        Targets().scaled(1 / r["factor"]),
        batches_per_invocation=r["in_flight"] / r["queues"],
        measured=measured,
    )
    config = f"{r['queues']} q / {r['accounts']} acct"
    if r["factor"] != settings["factor"]:
        config += f" ÷ {r['factor']:g}, {r['in_flight'] // r['queues']} in flight a queue"
    return r["committed_msgs_per_s"] / predicted.committed, config


@pytest.mark.parametrize(
    "name",
    [
        "throttled_closed_ceiling",
        "throttled_closed_ceiling_1600",
        "throttled_closed_ceiling_inflight",
        "throttled_closed_quiet",
        "throttled_closed_side_by_side",
        "throttled_closed_side_by_side_loaded",
        "throttled_closed_empty_round_pause",
        "throttled_closed_quiet_side_by_side",
    ],
)
def test_the_forecast_is_the_least_of_the_queues_target_over_the_runs_operations_and_the_machines_ceiling(
    name: str,
) -> None:
    """Since 5957c98 the closed loop's producers confirm their commits by reading their streams
    back, and each configuration's ceiling is measured right after its throttled window with
    the front at Azure's own targets (docs/CAPACITY.md §7.4). The forecast, the least of its
    queues' target over the operations a committed batch cost them (every kind, counted by the
    front) and that ceiling, takes nothing from the window's outcome but those operations: no
    run commits above it by more than 15 %; BENCHMARKS.md's ratio is this one; and every accepted
    POST was read back at most once, none lost (a batch still queued when the read-back gave up
    is late, not lost: 53 on 8 queues at ÷ 3,200)."""
    doc = _throttled(THROTTLED_CLOSED.with_name(f"{name}.json"))
    for config, ratio in _committed_over_forecast(doc).items():
        assert ratio <= 1 + WITHIN, (config, ratio)
    assert all(c["lost"] == c["duplicated"] == 0 for c in doc["readback"])


@pytest.mark.parametrize(
    "name",
    [
        "throttled_closed_host_paced",
        "throttled_closed_sticky",
        "throttled_closed_sticky_repeat",
        "throttled_closed_handbacks_paced",
        "throttled_closed_handbacks_paced_repeat",
        "throttled_closed_handbacks_paced_third",
    ],
)
def test_with_the_host_paced_as_azure_s_and_streams_kept_on_their_queue_the_forecast_holds(name: str) -> None:
    """Since the local host polls and retries as the Functions host does and a stream sticks to
    its busy queue (docs/CAPACITY.md §7.4), the forecast also leaves out the queues' target unused
    while no writer invocation ran (the host's pacing between invocations, measured in the run):
    every configuration but the one named commits within 15 % of it, none above; nothing lost or
    duplicated. Since the writer paces its hand-backs (§7.5), every configuration of every run."""
    doc = _throttled(THROTTLED_CLOSED.with_name(f"{name}.json"))
    ratios = _committed_over_forecast(doc)
    assert set(ratios) == {"1 q / 1 acct", "2 q / 1 acct", "4 q / 1 acct", "8 q / 1 acct", "2 q / 2 acct"}
    outside = {c: r for c, r in ratios.items() if r != pytest.approx(1, abs=WITHIN)}
    assert outside == HOST_PACED_OUTSIDE_15_PERCENT[name], ratios
    assert all(c["lost"] == c["duplicated"] == 0 for c in doc["readback"])


HOST_PACED_OUTSIDE_15_PERCENT: dict[str, dict[str, Any]] = {
    "throttled_closed_host_paced": {"2 q / 1 acct": pytest.approx(0.818, abs=0.001)},  # sticking 0.75 s
    "throttled_closed_sticky": {},
    "throttled_closed_sticky_repeat": {"2 q / 2 acct": pytest.approx(0.836, abs=0.001)},  # load 24 to 29
    "throttled_closed_handbacks_paced": {},  # hand-backs paced (docs/CAPACITY.md §7.5)
    "throttled_closed_handbacks_paced_repeat": {},
    "throttled_closed_handbacks_paced_third": {},
}
"""The configurations of each run that missed 15 %, and by how much (BENCHMARKS.md)."""


def _committed_over_forecast(doc: dict[str, Any]) -> dict[str, float]:
    """Each closed-loop run's committed messages/s over its forecast (bench/throttled.py's
    ``forecast``): its queues' target over the operations a committed batch cost them, less the
    share unused between invocations where the host paces as Azure's, or the machine's measured
    ceiling; BENCHMARKS.md's ratio checked against it."""
    settings = doc["settings"]
    out = {}
    for r in doc["runs"]:
        assert r["producers_confirm"] == "by reading back"
        idle = 0.0
        if "host_pacing" in r:
            budget = r["queues"] * settings["targets"]["queue_messages"] / r["factor"] * r["front_seconds"]
            idle = r["unused_queue_tokens_by_writer"]["between invocations"] / budget
        ceiling = r["ceiling"]["committed_msgs_per_s"]
        measured = model.Measured(r["queue_ops_per_committed_batch"], idle, ceiling=ceiling)
        ratio, config = _committed_over_model(settings, r, measured)
        assert doc["figures"][f"{config}, sustained: committed ÷ forecast"] == pytest.approx(ratio)
        out[config] = ratio
    return out


def _committed_ratios(doc: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Each closed-loop run of a recorded result: its name as the figures give it, committed ÷
    the model, and its queues' operations ÷ their target; BENCHMARKS.md's ratio checked."""
    settings = doc["settings"]
    out = []
    for r in (r for r in doc["runs"] if r["load"] == "sustained"):
        ratio = r["committed_msgs_per_s"] / _predicted(settings, r).committed
        factor = r.get("factor", settings["factor"])
        used = r["queue_ops_per_s"] / (r["queues"] * settings["targets"]["queue_messages"] / factor)
        name = f"{r['queues']} q / {r['accounts']} acct"
        if factor != settings["factor"]:  # bench/throttled.py's run_name
            name += f" ÷ {factor:g}, {r['in_flight'] // r['queues']} in flight a queue"
        figure = f"{name}, sustained: committed ÷ model"
        assert doc["figures"][figure] == pytest.approx(ratio), "BENCHMARKS.md's ratio is this model's"
        out.append((name, ratio, used))
    return out


def _committed_misses(doc: dict[str, Any]) -> list[str]:
    """What a recorded run's closed-loop figures break of the rule above (none: an empty list)."""
    misses = []
    for name, ratio, used in _committed_ratios(doc):
        if used >= SATURATED and abs(ratio - 1) > WITHIN:
            misses.append(f"{name}: queues at {used:.0%} of their target, committed / model {ratio:.2f}")
        if ratio > 1 + WITHIN:
            misses.append(f"{name}: committed {ratio:.2f} x the model's storage limit")
    return misses


def test_the_throttled_benchmark_admits_at_most_the_model_and_on_one_queue_as_much() -> None:
    """At 3 x in the open loop producers' sends take the queues' tokens and the writers get what
    is left: admitted is at most the model's admission (every token a send), within 15 % of it
    on one queue (a tier with nowhere to steer retries its one queue), and far above what the
    tier commits meanwhile. On 2 to 8 queues the steered tier admitted 0.62-0.98 of it
    (docs/CAPACITY.md §7)."""
    doc = _throttled()
    runs = [r for r in doc["runs"] if r["load"] == 3.0 and "admitted_msgs_per_s" in r]
    assert runs
    for r in runs:
        ratio = r["admitted_msgs_per_s"] / _predicted(doc["settings"], r).admitted
        assert ratio <= 1 + WITHIN, r
        if r["queues"] == 1:
            assert ratio == pytest.approx(1, abs=WITHIN), r
        assert r["committed_msgs_per_s"] < r["admitted_msgs_per_s"] / 2, r


def test_the_command_has_help() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "--messages-per-second" in out and "--hot-stream-share" in out and "--json" in out
