"""The capacity model: what a workload asks of Azure Storage and the Function App, and which of
Azure's scale targets it meets first (docs/CAPACITY.md explains it and works examples through it).

Pure arithmetic over the design as the code has it: no storage, no clock, no I/O. One POST and
one commit are counted request by request (docs/CAPACITY.md "What one POST and one commit
cost"), the loads are summed per resource that Azure throttles on its own (a queue, a storage
account, a table partition, a page blob), and each is divided by its target. Everything scales
by :meth:`Targets.scaled`, so the same model predicts a throttling proxy that enforces the
targets divided by a factor.

Three kinds of constants:

* Azure's published targets, each with the page it comes from;
* the design's own numbers, imported from ``vault_core`` where that is pure, and otherwise
  copied here from ``vault_app`` (the client may not import the app) with a test
  (``tests/test_capacity.py``) that fails when the two differ;
* estimates measured on this project's benchmarks, marked as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from vault_core.limits import DEFAULT_READ_BYTES
from vault_core.pagelog import MAX_PAGE_BLOB_SIZE, MAX_PAGE_WRITE
from vault_core.recordformat import HEADER_SIZE
from vault_core.rows import TRANSACTION_LIMIT
from vault_core.unitformat import UNIT_HEADER_SIZE, UNIT_TARGET_BYTES, UNIT_TARGET_MESSAGES
from vault_core.writer import CATALOG_INTERVAL_MS, INDEX_SPACING, MAX_BATCHES_PER_COMMIT, MAX_GROWTH

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# -- Azure's targets ----------------------------------------------------------------------------
# https://learn.microsoft.com/azure/storage/queues/scalability-targets
QUEUE_MESSAGES_PER_SECOND = 2_000
"""One queue: "up to 2,000 messages per second" (1 KiB messages). Counted here as every message
operation on the queue (put, get, delete), which is how a queue's partition sees them."""
# https://learn.microsoft.com/azure/storage/common/scalability-targets-standard-account
ACCOUNT_REQUESTS_PER_SECOND = 20_000
"""One standard (GPv2) storage account, default everywhere; 40,000 in the large regions
listed on the same page (East US, West Europe, ...), which ``--large-region`` uses."""
LARGE_REGION_ACCOUNT_REQUESTS_PER_SECOND = 40_000
ACCOUNT_INGRESS_BYTES_PER_SECOND = 25e9 / 8
"""25 Gbps by default; 60 Gbps in the large regions."""
LARGE_REGION_INGRESS_BYTES_PER_SECOND = 60e9 / 8
ACCOUNT_EGRESS_BYTES_PER_SECOND = 50e9 / 8
"""50 Gbps by default; 200 Gbps in the large regions."""
LARGE_REGION_EGRESS_BYTES_PER_SECOND = 200e9 / 8
ACCOUNT_CAPACITY_BYTES = 5 * 1024**5
"""5 PiB per account by default (more on request)."""
# https://learn.microsoft.com/azure/storage/tables/scalability-targets
TABLE_PARTITION_ENTITIES_PER_SECOND = 2_000
"""One table partition: "up to 2,000 entities per second" (1 KiB entities)."""
# https://learn.microsoft.com/azure/storage/blobs/scalability-targets
PAGE_BLOB_REQUESTS_PER_SECOND = 500
"""One page blob: "up to 500 requests per second"."""
PAGE_BLOB_BYTES_PER_SECOND = 60 * MiB
"""One page blob: "up to 60 MiB per second", reads and writes together."""
# https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan
FLEX_MAX_INSTANCES = 1000
"""Flex Consumption: at most 1,000 instances per app (``maximumInstanceCount``)."""
FLEX_VCPUS = {512: 0.25, 2048: 1.0, 4096: 2.0}
"""vCPUs of a Flex Consumption instance by its memory size (MB)."""

# -- the design (copies of vault_app's numbers; tests/test_capacity.py keeps them equal) ---------
INLINE_LIMIT = 60_000
"""``vault_app.envelope.INLINE_LIMIT``: the longest envelope that travels inline."""
CLAIM_BOUND_PER_MESSAGE = 40
"""``vault_app.claimcheck``: values + 40 bytes per message over the inline limit go to a blob
without encoding the envelope first."""
DRAIN_MESSAGES = 32
"""``vault_app.writer_fn.DRAIN_MESSAGES``: messages per drain receive."""
LEASE_SECONDS = 15
"""``vault_app.open_writers.WRITER_LEASE_SECONDS``; stream and queue-owner leases are renewed
every third of it."""
IDLE_SECONDS = 10.0
"""``vault_app.open_writers.WRITER_IDLE_SECONDS``: a stream's writer (and a queue's ownership)
is given up after this long without a batch; the next batch opens it again."""
OPEN_BLOB_REQUESTS = 6
"""Opening and closing a stream's writer, on its blob: create if missing, lease, properties, the
tail page, the rescan from the last index point (one ranged read), and the lease's release."""
OPEN_INDEX_ENTITIES = 2
"""... on its index partition: the last index point's query and the re-derived rows' transaction."""
OPEN_CATALOG_ENTITIES = 3
"""... on the catalog partition: the stream's row inserted if new, and upserted at open and close."""
KEYS_PER_QUERY = 15
"""``vault_core.tables.KEYS_PER_QUERY``: batch ids looked up per Tables query before an append."""
BATCH_ID_CHARS = 44
"""A producer's batch id in the envelope: ``key.`` and 40 hex digits (the client always sends an
``Idempotency-Key``)."""
TRACEPARENT_CHARS = 55
"""A W3C traceparent, carried in the envelope when telemetry is on (it is, as deployed)."""
TIMESTAMP_DIGITS = 13
CLAIM_NAME_EXTRA = 42
"""A claim-check blob name is ``<stream>/<batch id>/<32 hex>.records``: the stream, the id, and 42."""

# -- CPU, measured by ./dev bench capacity_cpu (the app's staging and writer code on Azurite,
# BENCHMARKS.md) and ./dev bench parse; one vCPU of a Flex instance is taken to be as fast as a
# core of the machine that measured them (docs/CAPACITY.md §3). -----------------------------------
WRITER_CYCLE_SECONDS = 0.2
"""How long one writer invocation takes at load (drain, append, delete): a stream's batches
arriving within it share a commit. ./dev bench ingest: POST to visible p50 233 ms."""
STAGING_CPU_SECONDS_PER_POST = 0.012
STAGING_CPU_SECONDS_PER_MESSAGE = 5e-6
STAGING_CPU_SECONDS_PER_KIB = 4.5e-6
"""``Stager.stage``: the status row's insert and update and the queue message (3.4-4.2 SDK
calls' worth), the digest, the envelope or the claim-check blob."""
PARSE_CPU_SECONDS_PER_MESSAGE = 0.4e-6
PARSE_CPU_SECONDS_PER_KIB = 0.64e-6
"""Parsing a JSON POST body (./dev bench parse)."""
HTTP_CPU_SECONDS_PER_REQUEST = 0.002
"""The rest of an HTTP invocation in the Python worker (dispatch, the credential's check, the
answer): an estimate, not measured."""
WRITER_CPU_SECONDS_PER_BATCH = 0.0053
WRITER_CPU_SECONDS_PER_MESSAGE = 8e-6
WRITER_CPU_SECONDS_PER_KIB = 10e-6
"""``writer_fn.write_staged``: per batch its delete and its share of the receives and the
commit's requests (1.6 to 2.1 SDK calls' worth); per message and KiB, decoding the envelope or the
claim-check records and encoding and checksumming the log (18 µs a 1 KiB message, as the
in-memory writer measures too). One queue's writer is one Python process on the queue's owner
instance (docs/ARCHITECTURE.md §3.7), so it has one vCPU at most."""
CPU_TARGET_UTILISATION = 0.7
"""Instances are counted for 70 % busy CPU, the margin an autoscaler keeps."""


@dataclass(frozen=True)
class Targets:
    """Azure's targets, or a fraction of them (a throttling proxy's scaled ones)."""

    queue_messages: float = QUEUE_MESSAGES_PER_SECOND
    account_requests: float = ACCOUNT_REQUESTS_PER_SECOND
    account_ingress: float = ACCOUNT_INGRESS_BYTES_PER_SECOND
    account_egress: float = ACCOUNT_EGRESS_BYTES_PER_SECOND
    partition_entities: float = TABLE_PARTITION_ENTITIES_PER_SECOND
    blob_requests: float = PAGE_BLOB_REQUESTS_PER_SECOND
    blob_bytes: float = PAGE_BLOB_BYTES_PER_SECOND
    scale: float = 1.0
    """The factor every rate above was multiplied by (1: Azure's own)."""

    @classmethod
    def large_region(cls) -> Targets:
        """The account targets of the large regions (East US, West Europe, ...)."""
        return cls(
            account_requests=LARGE_REGION_ACCOUNT_REQUESTS_PER_SECOND,
            account_ingress=LARGE_REGION_INGRESS_BYTES_PER_SECOND,
            account_egress=LARGE_REGION_EGRESS_BYTES_PER_SECOND,
        )

    def scaled(self, factor: float) -> Targets:
        """Every target times ``factor`` (0.05: Azure's targets divided by 20)."""
        if factor <= 0:
            raise ValueError("the scale factor must be positive")
        return Targets(
            self.queue_messages * factor,
            self.account_requests * factor,
            self.account_ingress * factor,
            self.account_egress * factor,
            self.partition_entities * factor,
            self.blob_requests * factor,
            self.blob_bytes * factor,
            self.scale * factor,
        )


@dataclass(frozen=True)
class Workload:
    """What producers and consumers do, in the units a producer knows."""

    messages_per_second: float
    message_bytes: int
    """Bytes of each message's value."""
    batch_messages: int
    """Messages per POST."""
    streams: int = 1
    hot_share: float | None = None
    """The busiest stream's share of the messages; the rest spread evenly over the others.
    None: every stream the same (1 / streams)."""
    key_bytes: int = 16
    """Bytes of each message's key (a text key)."""
    consumers: int = 1
    """How many times every message is read back (consumer groups, Spark jobs)."""
    stream_name_bytes: int = 16
    traced: bool = True
    """Telemetry on: every envelope carries the POST's traceparent."""
    compression: float | None = None
    """What the app's codec makes of these messages in format 2 units, stored ÷ payload bytes
    (BENCHMARKS.md: zstd 0.30 for ~100 B JSON events, 0.22 for ~1 KiB ones). None: not known, so
    the log is counted in format 1's bytes and every batch over the inline limit as a claim check
    (upper bounds: a batch whose units fit travels inline, ARCHITECTURE.md §2.2)."""

    def __post_init__(self) -> None:
        if self.messages_per_second <= 0 or self.message_bytes < 0 or self.key_bytes < 0:
            raise ValueError("messages per second must be positive, sizes not negative")
        if self.batch_messages < 1 or self.streams < 1 or self.consumers < 0:
            raise ValueError("batches hold at least one message, and there is at least one stream")
        if self.hot_share is not None and not (0 < self.hot_share <= 1):
            raise ValueError("the hot stream's share must be above 0 and at most 1")
        if self.hot_share is not None and self.streams == 1 and self.hot_share != 1:
            raise ValueError("with one stream, the hot stream has every message")
        if self.compression is not None and not (0 < self.compression <= 1):
            raise ValueError("compression is stored ÷ payload bytes: above 0 and at most 1")

    @property
    def hot(self) -> float:
        return self.hot_share if self.hot_share is not None else 1 / self.streams

    @property
    def other_share(self) -> float:
        """The share of each stream that is not the hot one."""
        return 0.0 if self.streams == 1 else (1 - self.hot) / (self.streams - 1)

    @property
    def posts_per_second(self) -> float:
        return self.messages_per_second / self.batch_messages

    @property
    def record_bytes(self) -> float:
        """One message in the log: format 1's header, key and value (docs/FORMAT.md §2); with a
        ``compression``, its share of a format 2 unit (§11): its 8 bytes of boundaries, key and
        value as compressed, and its share of the unit's header and leading boundaries."""
        if self.compression is None:
            return HEADER_SIZE + self.key_bytes + self.message_bytes
        payload = 8 + self.key_bytes + self.message_bytes
        per_unit = max(1, min(UNIT_TARGET_MESSAGES, UNIT_TARGET_BYTES // payload))
        return self.compression * payload + (UNIT_HEADER_SIZE + 8) / per_unit

    @property
    def batch_bytes(self) -> float:
        """One batch in the log, and in its claim-check blob (or inline units)."""
        return self.batch_messages * self.record_bytes

    @property
    def log_bytes_per_second(self) -> float:
        return self.messages_per_second * self.record_bytes

    def at(self, messages_per_second: float) -> Workload:
        return replace(self, messages_per_second=messages_per_second)


@dataclass(frozen=True)
class Staging:
    """The staging tier: ``VAULT_STAGING_ACCOUNTS`` × ``VAULT_STAGING_QUEUES``."""

    accounts: int = 1
    queues_per_account: int = 4
    steered: bool = False
    """A throttled queue's batches go to other queues (staging steered by queue health): past
    its stream placement the tier fills evenly, so at capacity every queue carries as much."""

    @property
    def queues(self) -> int:
        return self.accounts * self.queues_per_account


# -- one POST and one commit ----------------------------------------------------------------------
def _base64_chars(n: int) -> int:
    return 4 * math.ceil(n / 3)


def _trace_chars(w: Workload) -> int:
    """What an envelope's ``tp`` adds: the POST's traceparent, when telemetry is on."""
    return len(',"tp":""') + TRACEPARENT_CHARS if w.traced else 0


def envelope_chars(w: Workload) -> int:
    """Characters of a batch's inline envelope (vault_app/envelope.py), for ASCII keys and names."""
    header = len('{"v":1,"id":"","stream":"","ts":,"m":[]}') + BATCH_ID_CHARS
    header += w.stream_name_bytes + TIMESTAMP_DIGITS
    row = len('["",true,""]') + w.key_bytes + _base64_chars(w.message_bytes)
    trace = _trace_chars(w)
    return header + w.batch_messages * row + (w.batch_messages - 1) + trace


def claim_envelope_chars(w: Workload) -> int:
    """Characters of a claim-check pointer envelope."""
    name = w.stream_name_bytes + BATCH_ID_CHARS + CLAIM_NAME_EXTRA
    fixed = len('{"v":1,"id":"","stream":"","ts":,"claim":"","n":}') + BATCH_ID_CHARS + w.stream_name_bytes
    trace = _trace_chars(w)
    return fixed + TIMESTAMP_DIGITS + name + len(str(w.batch_messages)) + trace


def units_envelope_chars(w: Workload) -> int:
    """Characters of a batch's inline units envelope (format 2, with a known ``compression``)."""
    fixed = len('{"v":2,"id":"","stream":"","ts":,"u":"","n":}') + BATCH_ID_CHARS + w.stream_name_bytes
    trace = _trace_chars(w)
    units = _base64_chars(math.ceil(w.batch_bytes))
    return fixed + TIMESTAMP_DIGITS + units + len(str(w.batch_messages)) + trace


def inline_messages(w: Workload) -> bool:
    """Whether a batch travels as inline messages (vault_app/claimcheck.py's first two tests)."""
    bound = w.batch_messages * (w.message_bytes + CLAIM_BOUND_PER_MESSAGE)
    return bound <= INLINE_LIMIT and envelope_chars(w) <= INLINE_LIMIT


def claim_checked(w: Workload) -> bool:
    """Whether a batch travels as a claim-check blob: not as inline messages, nor as inline units
    (which only a known ``compression`` tells; without it, every such batch is counted as one)."""
    if inline_messages(w):
        return False
    return w.compression is None or units_envelope_chars(w) > INLINE_LIMIT


def queue_envelope_chars(w: Workload) -> int:
    """Characters of the queue message a batch travels in: messages, units or a pointer."""
    if inline_messages(w):
        return envelope_chars(w)
    return claim_envelope_chars(w) if claim_checked(w) else units_envelope_chars(w)


@dataclass(frozen=True)
class Commits:
    """How one stream's batches become commits (docs/ARCHITECTURE.md §3.2-3.4)."""

    batches_per_second: float
    batches_per_commit: float
    per_second: float
    put_pages: int
    """Put Page requests per commit (writes of at most 4 MiB)."""
    table_transactions: int
    """Entity-group transactions per commit: ``b`` rows and index points, 100 rows each."""
    lookups: int
    """Tables queries per append: the batch ids looked up before it, 15 per query."""
    opens_per_second: float
    """How often the stream's writer is opened again after idling (batches arriving as a
    Poisson stream: those that come more than IDLE_SECONDS after the one before)."""
    open_share: float
    """The share of the time the stream's writer is open (and renews its lease)."""

    @classmethod
    def of(cls, w: Workload, batches_per_second: float) -> Commits:
        # A writer invocation takes every batch that arrived during the one before it, and a
        # commit holds at most MAX_BATCHES_PER_COMMIT of a stream's batches.
        per = min(max(batches_per_second * WRITER_CYCLE_SECONDS, 1.0), MAX_BATCHES_PER_COMMIT)
        commit_bytes = per * w.batch_bytes
        rows = per + 2 * commit_bytes / INDEX_SPACING  # b rows, then an o and a t row per MiB
        idle = math.exp(-batches_per_second * IDLE_SECONDS)  # a gap longer than the idle time
        return cls(
            batches_per_second,
            per,
            batches_per_second / per,
            max(1, math.ceil(commit_bytes / MAX_PAGE_WRITE)),
            max(1, math.ceil(rows / TRANSACTION_LIMIT)),
            max(1, math.ceil(per / KEYS_PER_QUERY)),
            batches_per_second * idle,
            1 - idle,
        )

    @property
    def blob_requests(self) -> float:
        """Put Page and Set Blob Metadata, lease renewals while open, and the requests of opening
        the writer again, per second."""
        renewals = self.open_share / (LEASE_SECONDS / 3)
        return self.per_second * (self.put_pages + 1) + renewals + self.opens_per_second * OPEN_BLOB_REQUESTS

    @property
    def index_entities(self) -> float:
        """Entities per second on the stream's index partition (a query counts one)."""
        return (
            self.per_second * (self.batches_per_commit + self.lookups)
            + self.opens_per_second * OPEN_INDEX_ENTITIES
        )

    @property
    def table_requests(self) -> float:
        return (
            self.per_second * (self.table_transactions + self.lookups)
            + self.opens_per_second * OPEN_INDEX_ENTITIES
        )

    @property
    def catalog_entities(self) -> float:
        """The catalog row's upserts (at most one a second) and the opens' catalog requests."""
        return (
            min(self.per_second, 1000 / CATALOG_INTERVAL_MS) + self.opens_per_second * OPEN_CATALOG_ENTITIES
        )


def queue_operations(batches_per_second: float) -> float:
    """Operations per second on one staging queue carrying ``batches_per_second``.

    Each batch: a put (the POST), a delete (the host's for the trigger, the writer's for a drained
    one). Each invocation: the host's get of its trigger and the drain's receives of 32, the last
    one short. Invocations run one at a time per queue, about one per writer cycle at load.
    """
    if batches_per_second <= 0:
        return 0.0
    invocations = min(batches_per_second, 1 / WRITER_CYCLE_SECONDS)
    gets = 2 * invocations + (batches_per_second - invocations) / DRAIN_MESSAGES
    return 2 * batches_per_second + gets


# -- loads against targets ------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    """One throttled resource: its load, its target, and whether the staging tier's size moves it."""

    resource: str
    load: float
    target: float
    unit: str
    staging: bool = False
    """True for the staging queues and accounts and the queues' writers: a larger staging tier
    spreads this load (down to what the hot stream alone puts on it)."""

    @property
    def utilisation(self) -> float:
        return self.load / self.target if self.target else 0.0


def _queue_shares(w: Workload, queues: int) -> tuple[float, float]:
    """(the hot stream's queue, the busiest other queue): their shares of all batches, with the
    streams spread as evenly as they can be (a hash of real names does worse): the hot stream
    keeps its queue to itself while the others fit elsewhere as lightly loaded."""
    others = w.streams - 1
    if queues == 1:
        return 1.0, 0.0
    elsewhere = math.ceil(others / (queues - 1)) * w.other_share
    if elsewhere <= w.hot:
        return w.hot, elsewhere
    on_hot = others // queues
    return w.hot + on_hot * w.other_share, math.ceil((others - on_hot) / (queues - 1)) * w.other_share


def cpu_seconds(w: Workload) -> float:
    """Function App CPU-seconds per second: HTTP, parsing, staging and writing."""
    per_post = HTTP_CPU_SECONDS_PER_REQUEST + STAGING_CPU_SECONDS_PER_POST
    per_message = PARSE_CPU_SECONDS_PER_MESSAGE + STAGING_CPU_SECONDS_PER_MESSAGE
    per_kib = PARSE_CPU_SECONDS_PER_KIB + STAGING_CPU_SECONDS_PER_KIB
    http = w.posts_per_second * per_post + w.messages_per_second * (
        per_message + per_kib * w.message_bytes / KiB
    )
    return http + writer_cpu_seconds(w.posts_per_second, w)


def writer_cpu_seconds(batches_per_second: float, w: Workload) -> float:
    """CPU-seconds per second of the writer of a queue carrying ``batches_per_second``."""
    per_message = WRITER_CPU_SECONDS_PER_MESSAGE + WRITER_CPU_SECONDS_PER_KIB * w.message_bytes / KiB
    return batches_per_second * (WRITER_CPU_SECONDS_PER_BATCH + w.batch_messages * per_message)


def instances(w: Workload, staging: Staging, memory_mb: int = 2048) -> float:
    """Instances the app runs: the HTTP functions' CPU at CPU_TARGET_UTILISATION, plus one owner
    per staging queue (each queue's writing happens on its owner, docs/ARCHITECTURE.md §3.7)."""
    http = cpu_seconds(w) - writer_cpu_seconds(w.posts_per_second, w)
    return math.ceil(max(http, 0.0) / (FLEX_VCPUS[memory_mb] * CPU_TARGET_UTILISATION)) + staging.queues


def staging_loads(w: Workload, staging: Staging, targets: Targets, memory_mb: int = 2048) -> list[Load]:
    """The loads a bigger staging tier spreads: its queues, its accounts, and the queues' writers."""
    batches = w.posts_per_second
    hot_queue, other_queue = _queue_shares(w, staging.queues)
    # The account holding the hot stream's queue holds other queues too.
    others_in_account = min(staging.queues_per_account - 1, max(w.streams - 1, 0))
    if staging.steered:
        per_queue = queue_operations(batches / staging.queues)
        hot_ops = other_ops = per_queue
        others_in_account = staging.queues_per_account - 1
    else:
        hot_ops = queue_operations(batches * hot_queue)
        other_ops = queue_operations(batches * other_queue)
    envelope = queue_envelope_chars(w)
    one_vcpu = min(1.0, FLEX_VCPUS[memory_mb])  # a queue's writer is one Python process
    t = targets
    return [
        Load("the hot stream's staging queue", hot_ops, t.queue_messages, "operations/s", True),
        Load("the busiest other staging queue", other_ops, t.queue_messages, "operations/s", True),
        Load(
            "the busiest staging account",
            hot_ops + others_in_account * other_ops,
            t.account_requests,
            "requests/s",
            True,
        ),
        Load(
            "staging account ingress",
            batches * envelope / staging.accounts,
            t.account_ingress,
            "bytes/s",
            True,
        ),
        Load(
            "the hot stream's queue writer",
            writer_cpu_seconds(batches * hot_queue, w),
            one_vcpu,
            "vCPU",
            True,
        ),
        Load(
            "the busiest other queue's writer",
            writer_cpu_seconds(batches * other_queue, w),
            one_vcpu,
            "vCPU",
            True,
        ),
    ]


def vault_loads(w: Workload, staging: Staging, targets: Targets, memory_mb: int = 2048) -> list[Load]:
    """The loads on the vault account, its tables and blobs, and the Function App, which no
    staging tier spreads."""
    batches = w.posts_per_second
    claimed = claim_checked(w)
    hot = Commits.of(w, batches * w.hot)
    other = Commits.of(w, batches * w.other_share)

    # The POSTs' status rows and claim-check blobs, then every stream's commits and reads.
    requests = batches * (2 + (1 if claimed else 0))  # reserve, mark staged, (claim-check upload)
    if claimed:
        requests += 2 * batches  # the writer's get and delete (a Blob Batch's parts count one each)
    catalog = 0.0
    for c, share, count in ((hot, w.hot, 1), (other, w.other_share, w.streams - 1)):
        if count == 0 or c.per_second == 0:
            continue
        stream_bytes = w.log_bytes_per_second * share
        reads = w.consumers * max(c.per_second, stream_bytes / DEFAULT_READ_BYTES)
        grow = stream_bytes / MAX_GROWTH  # a resize per GiB once the blob is large
        requests += count * (c.blob_requests + c.table_requests + reads + grow)
        catalog += count * c.catalog_entities
    requests += catalog + staging.queues / (LEASE_SECONDS / 3)  # queue owner leases
    claim_bytes = w.log_bytes_per_second if claimed else 0.0

    hot_bytes = w.log_bytes_per_second * w.hot
    hot_reads = w.consumers * max(hot.per_second, hot_bytes / DEFAULT_READ_BYTES)
    hot_blob = hot.blob_requests + hot_reads
    hot_entities = hot.index_entities + 2 * hot_bytes / INDEX_SPACING
    t = targets
    return [
        Load("the vault account", requests, t.account_requests, "requests/s"),
        Load("vault account ingress", w.log_bytes_per_second + claim_bytes, t.account_ingress, "bytes/s"),
        Load(
            "vault account egress",
            w.log_bytes_per_second * w.consumers + claim_bytes,
            t.account_egress,
            "bytes/s",
        ),
        Load("the hot stream's index partition", hot_entities, t.partition_entities, "entities/s"),
        Load("the catalog partition", catalog, t.partition_entities, "entities/s"),
        Load("the hot stream's page blob", hot_blob, t.blob_requests, "requests/s"),
        Load("the hot stream's page blob bytes", hot_bytes * (1 + w.consumers), t.blob_bytes, "bytes/s"),
        Load("Function App instances", instances(w, staging, memory_mb), FLEX_MAX_INSTANCES, "instances"),
    ]


def loads(w: Workload, staging: Staging, targets: Targets, memory_mb: int = 2048) -> list[Load]:
    """Every throttled resource's load for this workload on this configuration."""
    return staging_loads(w, staging, targets, memory_mb) + vault_loads(w, staging, targets, memory_mb)


def busiest(found: list[Load]) -> Load:
    return max(found, key=lambda x: x.utilisation)


# -- capacity and plan --------------------------------------------------------------------------
@dataclass(frozen=True)
class Capacity:
    """The most messages/s a configuration takes with a workload's shape, and what stops more."""

    messages_per_second: float
    binding: Load


def capacity(
    w: Workload,
    staging: Staging,
    targets: Targets,
    memory_mb: int = 2048,
    counted: Callable[[Load], bool] = lambda _: True,
) -> Capacity:
    """The rate at which the first ``counted`` resource reaches its target (bisection: every load
    grows with the rate)."""

    def worst(rate: float) -> Load:
        return busiest([x for x in loads(w.at(rate), staging, targets, memory_mb) if counted(x)])

    lo, hi = 0.0, 1.0
    while worst(hi).utilisation < 1:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            raise ValueError("no target binds this workload")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if worst(mid).utilisation < 1 else (lo, mid)
    return Capacity(lo, worst(hi))


MAX_STAGING_ACCOUNTS = 250
"""Storage accounts per subscription and region (the same page's first row)."""
MAX_QUEUES_PER_ACCOUNT = 64
"""The most the planner tries; more queues per account stop helping near ten anyway (the
account's own target)."""
LARGEST_STAGING = Staging(MAX_STAGING_ACCOUNTS, MAX_QUEUES_PER_ACCOUNT)


@dataclass(frozen=True)
class Plan:
    workload: Workload
    staging: Staging
    loads: list[Load]
    capacity: Capacity
    cpu: float
    headroom: float
    targets: Targets
    memory_mb: int

    @property
    def over(self) -> list[Load]:
        """Loads above the headroom: what must change (a bigger tier cannot fix those left)."""
        return [x for x in self.loads if x.utilisation > self.headroom]


def plan(w: Workload, targets: Targets, headroom: float = 0.8, memory_mb: int = 2048) -> Plan:
    """The smallest staging tier (fewest queues, then fewest accounts) that keeps every staging
    queue and account within ``headroom`` of its target, where any tier can; then the loads."""
    if not 0 < headroom <= 1:
        raise ValueError("headroom is a fraction of the targets: above 0, at most 1")
    # What the hot stream asks of its queue and its queue's writer even alone on a queue: no tier
    # takes those below that, so the search asks no less of them.
    alone = {x.resource: x.utilisation for x in staging_loads(w, LARGEST_STAGING, targets, memory_mb)}
    best: Staging | None = None
    for accounts in range(1, MAX_STAGING_ACCOUNTS + 1):
        if best is not None and accounts > best.queues:
            break
        for per_account in range(1, MAX_QUEUES_PER_ACCOUNT + 1):
            s = Staging(accounts, per_account)
            if best is not None and s.queues >= best.queues:
                break
            found = staging_loads(w, s, targets, memory_mb)
            if all(x.utilisation <= max(headroom, alone[x.resource] * (1 + 1e-9)) for x in found):
                best = s
                break
    return evaluate(w, best or LARGEST_STAGING, targets, headroom, memory_mb)


def evaluate(
    w: Workload, staging: Staging, targets: Targets, headroom: float = 0.8, memory_mb: int = 2048
) -> Plan:
    """The loads and the capacity of a given staging tier."""
    return Plan(
        w,
        staging,
        loads(w, staging, targets, memory_mb),
        capacity(w, staging, targets, memory_mb),
        cpu_seconds(w),
        headroom,
        targets,
        memory_mb,
    )


def stream_fills_in_seconds(w: Workload) -> float:
    """How long until the hot stream's page blob reaches the 8 TiB maximum."""
    return MAX_PAGE_BLOB_SIZE / (w.log_bytes_per_second * w.hot)


def account_fills_in_seconds(w: Workload) -> float:
    """How long until the vault account holds its default maximum (streams are never trimmed)."""
    return ACCOUNT_CAPACITY_BYTES / w.log_bytes_per_second


# -- a staging tier at its targets: what it commits and what it admits ---------------------------
def saturated_queue_operations(batches_per_invocation: float) -> float:
    """Operations per batch on a staging queue at its target with batches waiting, so that each
    writer invocation takes ``batches_per_invocation`` of them: the batch's put and delete, and
    per invocation the host's get of the trigger and the drain's receives of 32 until a short
    one. One batch per invocation costs 4 (as :func:`queue_operations`); many, towards 2 + 1/32.
    An invocation whose drain found batches drains again (rounds, vault_app.writer_fn): its
    rounds' receives are counted as one invocation's; ``./dev bench throttled --closed-only``
    measured 0.27 receives a batch on one throttled queue against 0.25 here (docs/CAPACITY.md
    §7.2). Not counted: renewals, and the hand-backs of steered batches."""
    n = max(batches_per_invocation, 1.0)
    receives = 2 + math.floor((n - 1) / DRAIN_MESSAGES)
    return 2 + receives / n


@dataclass(frozen=True)
class Throughput:
    """What a steered staging tier does when more is offered than it takes, in messages/s.

    ``committed`` is what it **sustains**: every batch staged is also received and deleted by
    its queue's writer within the queues' and accounts' targets and the writers' one vCPU each.
    ``admitted`` is what it accepts when producers do not wait for their batches: a send is one
    request and a refused one costs no token, so sends can take every token of a queue and
    leave its writer none (docs/CAPACITY.md §7)."""

    committed: float
    committed_binding: str
    """What stops more being committed: a staging queue, a staging account, a queue's writer."""
    admitted: float
    admitted_binding: str
    operations_per_batch: float
    """Staging queue operations per committed batch."""


@dataclass(frozen=True)
class Measured:
    """What a run of the throttled benchmark measured that the counted model leaves out, for
    checking the model against that run (docs/CAPACITY.md §7.3); ``vault capacity`` never uses
    it. Both come from the throttling front's own counts in the run's steady window."""

    operations_per_batch: float
    """Staging queue operations a committed batch cost, every kind counted: besides the
    counted send, delete and receives, the renewals of drained messages, the hand-backs of
    steered batches (a send, a delete and a receive each), re-sends and empty receives."""
    unused_share: float = 0.0
    """The share of the queues' target no request asked for (their token buckets full): time
    a queue's writer was not receiving while batches waited, or every batch in flight was in a
    writer's round or on its way back to its producer. A forecast takes only the share unused
    while no writer invocation ran (the host's pacing between invocations, docs/CAPACITY.md §7.4)."""
    ceiling: float | None = None
    """Messages/s the same host and producers committed on the configuration with no target
    binding (the benchmark's ceiling phase, its front at Azure's own targets): what the CPU the
    machine gave them serves, a limit the counted model leaves to Azure's one vCPU a writer."""

    def __post_init__(self) -> None:
        if self.operations_per_batch <= 0 or not 0 <= self.unused_share < 1:
            raise ValueError("operations a batch are positive; the unused share is in [0, 1)")
        if self.ceiling is not None and self.ceiling <= 0:
            raise ValueError("a measured ceiling is positive")


def staging_throughput(
    w: Workload,
    staging: Staging,
    targets: Targets,
    *,
    batches_per_invocation: float | None = None,
    measured: Measured | None = None,
) -> Throughput:
    """The most a steered staging tier commits and admits with a workload's batches (its shape:
    the rate is what is found). ``batches_per_invocation``: batches waiting on a queue when its
    writer starts an invocation; by default a writer cycle's worth at half the queue's target
    (Azure's scale), behind a throttling front as many as producers keep in flight per queue.
    ``measured``: a benchmark run's own operations a batch and unused share instead of the
    counted ones (with its unused share, the run's accounting of its queues' requests, not a
    forecast), and its machine's measured ceiling as one more limit."""
    per_queue = targets.queue_messages
    if batches_per_invocation is None:
        batches_per_invocation = per_queue / 2 * WRITER_CYCLE_SECONDS
    ops = saturated_queue_operations(batches_per_invocation)
    account_bound = staging.queues_per_account * per_queue > targets.account_requests
    per_account = targets.account_requests if account_bound else staging.queues_per_account * per_queue
    requests = staging.accounts * per_account  # staging requests/s the tier's queues get
    if measured is not None:
        ops = measured.operations_per_batch
        requests *= 1 - measured.unused_share
    where = "staging account" if account_bound else "staging queue"
    committed, binding = requests / ops, where
    by_writers = staging.queues / writer_cpu_seconds(1.0, w)  # one vCPU per queue's writer
    if by_writers < committed:
        committed, binding = by_writers, "queue writer CPU"
    if (
        measured is not None
        and measured.ceiling is not None
        and measured.ceiling < committed * w.batch_messages
    ):
        committed, binding = measured.ceiling / w.batch_messages, "the machine's CPU (measured)"
    return Throughput(committed * w.batch_messages, binding, requests * w.batch_messages, where, ops)
