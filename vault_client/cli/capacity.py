"""``vault capacity``: what a workload takes in Azure, what breaks first, and what it costs a month.

No vault is needed: the command runs the capacity model (:mod:`vault_client.capacity`) and the
price list (:mod:`vault_client.pricing`) on the workload its flags describe (docs/CAPACITY.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from vault_client import pricing
from vault_client.capacity import (
    FLEX_VCPUS,
    Load,
    Plan,
    Staging,
    Targets,
    Workload,
    account_fills_in_seconds,
    claim_checked,
    envelope_chars,
    evaluate,
    inline_messages,
    plan,
    stream_fills_in_seconds,
    units_envelope_chars,
)
from vault_client.cli.options import F
from vault_core import limits

MiB = 1024 * 1024
DAY = 86_400


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 or x == int(x) else f"{x:,.2f}"


def _amount(unit: str, x: float) -> str:
    if unit == "bytes/s":
        return f"{x / MiB:,.1f} MiB/s"
    if unit == "vCPU":
        return f"{x:.2f} vCPU"
    return f"{_number(x)} {unit}"


def _count(n: float, word: str) -> str:
    return f"{_number(n)} {word}" + ("" if n == 1 else "s")


def _money(x: float) -> str:
    return f"${x:,.0f}"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} hours" if seconds < 2 * DAY else f"{seconds / DAY:,.0f} days"


def _check_share(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise click.BadParameter("a share above 0 and at most 1 (0.1 is 10 %)", ctx, param)
    return value


def _whole(
    name: str, least: int, default: int | None, help: str | None = None, *, metavar: str = "N"
) -> Callable[[F], F]:
    """An option taking a whole number of at least ``least`` (shown with its default, if any)."""
    return click.option(
        name, type=click.IntRange(min=least), metavar=metavar, default=default, show_default=True, help=help
    )


@click.command()
@click.option(
    "--messages-per-second", type=click.FloatRange(min=0, min_open=True), metavar="RATE", required=True
)
@_whole("--message-bytes", 0, 1024, "Bytes of a value.", metavar="BYTES")
@_whole("--batch-messages", 1, 100, "Messages per POST.")
@_whole("--streams", 1, 1)
@click.option(
    "--hot-stream-share",
    type=float,
    metavar="SHARE",
    callback=_check_share,
    help="The busiest stream's share of the messages (default: all streams alike).",
)
@_whole("--key-bytes", 0, 16, metavar="BYTES")
@_whole("--consumers", 0, 1, "Reads of every message.")
@_whole("--staging-accounts", 1, None, "Evaluate this tier instead of planning one.")
@_whole("--staging-queues", 1, None, "Queues per staging account (with the above).")
@click.option(
    "--instance-memory", type=click.Choice(["512", "2048", "4096"]), default="2048", show_default=True
)
@click.option(
    "--headroom", type=click.FloatRange(0, 1, min_open=True), metavar="SHARE", default=0.8, show_default=True
)
@click.option(
    "--large-region", is_flag=True, help="The account targets of East US, West Europe and the like."
)
@click.option(
    "--target-scale",
    type=click.FloatRange(min=0, min_open=True),
    metavar="FACTOR",
    default=1.0,
    show_default=True,
    help="Every target times this (0.05 for a throttling proxy at Azure's targets / 20).",
)
@click.option(
    "--compression",
    type=click.FloatRange(min=0, max=1, min_open=True),
    metavar="RATIO",
    default=None,
    help="Stored / payload bytes of format 2 units of these messages (zstd on JSON events: about "
    "0.3 at 100 B, 0.22 at 1 KiB). Without it: the log in format 1's bytes, and every batch over "
    "the inline limit a claim check (upper bounds).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def capacity(
    messages_per_second: float,
    message_bytes: int,
    batch_messages: int,
    streams: int,
    hot_stream_share: float | None,
    key_bytes: int,
    consumers: int,
    staging_accounts: int | None,
    staging_queues: int | None,
    instance_memory: str,
    headroom: float,
    large_region: bool,
    target_scale: float,
    compression: float | None,
    as_json: bool,
) -> None:
    """Plan a deployment for a workload: staging queues and accounts, the load on every target
    Azure throttles at, Function App instances, the first limit that binds, and a month at list
    prices beside Event Hubs Standard and Premium.

    Without --staging-accounts/--staging-queues it picks the smallest staging tier that keeps
    every queue, staging account and queue writer within --headroom of its target.
    """
    if streams == 1 and hot_stream_share not in (None, 1.0):
        raise click.BadParameter("with one stream, it has every message", param_hint="'--hot-stream-share'")
    _check_api_limits(message_bytes, batch_messages)
    workload = Workload(
        messages_per_second,
        message_bytes,
        batch_messages,
        streams,
        hot_stream_share,
        key_bytes=key_bytes,
        consumers=consumers,
        compression=compression,
    )
    targets = (Targets.large_region() if large_region else Targets()).scaled(target_scale)
    memory = int(instance_memory)
    if staging_accounts is None and staging_queues is None:
        chosen = plan(workload, targets, headroom, memory)
    else:
        chosen = evaluate(
            workload, Staging(staging_accounts or 1, staging_queues or 4), targets, headroom, memory
        )
    doc = report(chosen)
    click.echo(json.dumps(doc, indent=2) if as_json else text(chosen, doc))


def _check_api_limits(message_bytes: int, batch_messages: int) -> None:
    """A workload the API would refuse is a usage error, not a plan (docs/API.md "Limits")."""
    if message_bytes > limits.MAX_MESSAGE_BYTES:
        raise click.BadParameter(
            f"at most {limits.MAX_MESSAGE_BYTES:,} bytes", param_hint="'--message-bytes'"
        )
    if batch_messages > limits.MAX_BATCH_MESSAGES:
        raise click.BadParameter(
            f"at most {limits.MAX_BATCH_MESSAGES:,} messages", param_hint="'--batch-messages'"
        )
    if message_bytes * batch_messages > limits.MAX_BATCH_BYTES:
        raise click.BadParameter(
            f"a POST of {batch_messages:,} values of {message_bytes:,} bytes is over the "
            f"{limits.MAX_BATCH_BYTES // MiB} MiB request limit",
            param_hint="'--batch-messages'",
        )


def report(p: Plan) -> dict[str, Any]:
    """The plan as JSON: every figure the text shows, unrounded."""
    w = p.workload
    standard, premium = pricing.event_hubs(p)
    month = pricing.bill(p)
    return {
        "workload": {
            "messages_per_second": w.messages_per_second,
            "message_bytes": w.message_bytes,
            "key_bytes": w.key_bytes,
            "batch_messages": w.batch_messages,
            "streams": w.streams,
            "hot_stream_share": w.hot,
            "consumers": w.consumers,
            "posts_per_second": w.posts_per_second,
            "log_bytes_per_second": w.log_bytes_per_second,
            "compression": w.compression,
            "claim_check": claim_checked(w),
            "inline_units": not inline_messages(w) and not claim_checked(w),
            "envelope_characters": envelope_chars(w),
        },
        "targets_scale": p.targets.scale,
        "headroom": p.headroom,
        "staging": {"accounts": p.staging.accounts, "queues_per_account": p.staging.queues_per_account},
        "loads": [
            {
                "resource": x.resource,
                "load": x.load,
                "target": x.target,
                "unit": x.unit,
                "utilisation": x.utilisation,
                "staging": x.staging,
            }
            for x in p.loads
        ],
        "over_headroom": [x.resource for x in p.over],
        "capacity": {
            "messages_per_second": p.capacity.messages_per_second,
            "first_limit": p.capacity.binding.resource,
        },
        "function_app": {
            "cpu_seconds_per_second": p.cpu,
            "instances": _instances(p).load,
            "instance_memory_mb": p.memory_mb,
        },
        "hot_stream_full_in_seconds": stream_fills_in_seconds(w),
        "vault_account_full_in_seconds": account_fills_in_seconds(w),
        "monthly_cost": {
            "currency": pricing.PRICES_CURRENCY,
            "region": pricing.PRICES_REGION,
            "prices_of": pricing.PRICES_DATE,
            "lines": [
                {"item": x.item, "quantity": x.quantity, "unit": x.unit, "cost": x.monthly}
                for x in month.lines
            ],
            "total": month.monthly,
            "data_gb_per_month": month.data_gb_per_month,
            "storage_per_month_kept": month.storage_per_month_kept,
        },
        "event_hubs": [
            {
                "tier": eh.tier,
                "units": eh.units,
                "namespaces": eh.namespaces,
                "units_cost": eh.units_monthly,
                "events_cost": eh.events_monthly,
                "total": eh.monthly,
            }
            for eh in (standard, premium)
        ],
    }


def _instances(p: Plan) -> Load:
    return next(x for x in p.loads if x.resource == "Function App instances")


def text(p: Plan, doc: dict[str, Any]) -> str:
    w = p.workload
    hot = f"hot stream {w.hot:.1%}" if w.streams > 1 else "one stream"
    if inline_messages(w) or claim_checked(w):
        envelope = "claim-check blobs" if claim_checked(w) else "inline envelopes"
        chars = envelope_chars(w)  # a claim check's: the messages' envelope that did not fit
    else:
        envelope, chars = "inline units", units_envelope_chars(w)
    out = [
        f"workload: {_number(w.messages_per_second)} msgs/s of {_number(w.message_bytes)} B "
        f"(keys {w.key_bytes} B), {_number(w.batch_messages)} per POST, {_count(w.streams, 'stream')} "
        f"({hot}), read {w.consumers}x",
        f"  {_number(w.posts_per_second)} POSTs/s as {envelope} (envelope {_number(chars)} "
        f"characters), {w.log_bytes_per_second / MiB:,.1f} MiB/s of log"
        + (f" (compression {w.compression:g})" if w.compression is not None else ""),
        f"staging: {_count(p.staging.accounts, 'account')} x {_count(p.staging.queues_per_account, 'queue')}"
        + (f"; Azure's targets x {p.targets.scale:g}" if p.targets.scale != 1 else ""),
        "",
        f"{'resource':<38}{'load':>20}{'target':>20}{'use':>7}",
    ]
    for x in p.loads:
        mark = " <" if x.utilisation > p.headroom else ""
        load, target = _amount(x.unit, x.load), _amount(x.unit, x.target)
        out.append(f"{x.resource:<38}{load:>20}{target:>20}{x.utilisation:>7.0%}{mark}")
    out += [
        f"('<': over the {p.headroom:.0%} headroom)",
        "",
        f"first limit that binds: {p.capacity.binding.resource}, "
        f"at {_number(p.capacity.messages_per_second)} msgs/s with this workload's shape",
        f"function app: {p.cpu:,.1f} vCPU busy, {_number(_instances(p).load)} instances of "
        f"{p.memory_mb} MB ({FLEX_VCPUS[p.memory_mb]:g} vCPU each)",
        f"the hot stream's blob is full (8 TiB) in {_duration(doc['hot_stream_full_in_seconds'])}; "
        f"the vault account (5 PiB) in {_duration(doc['vault_account_full_in_seconds'])}",
        "",
        f"a month at list prices ({pricing.PRICES_CURRENCY}, {pricing.PRICES_REGION}, "
        f"pay as you go, prices of {pricing.PRICES_DATE}):",
    ]
    cost = doc["monthly_cost"]
    for line in cost["lines"]:
        quantity = _number(line["quantity"])
        out.append(f"  {line['item']:<36}{quantity:>24} {line['unit']:<13}{_money(line['cost']):>12}")
    out += [
        f"  {'total':<74}{_money(cost['total']):>12}",
        f"  and {_money(cost['storage_per_month_kept'])} a month for every month of data kept "
        f"({_number(cost['data_gb_per_month'])} GB)",
        "",
        "event hubs for the same messages and readers (retention 7 days Standard, 90 Premium):",
    ]
    for eh in doc["event_hubs"]:
        units = ("throughput unit" if eh["tier"] == "Standard" else "processing unit") + (
            "" if eh["units"] == 1 else "s"
        )
        namespaces = _count(eh["namespaces"], "namespace")
        total = _money(eh["total"])
        out.append(
            f"  {eh['tier']:<9}{_number(eh['units']):>7} {units} in {namespaces:<14}{total:>22} a month"
        )
    return "\n".join(out)
