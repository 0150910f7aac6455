"""A month of a capacity plan at Azure's list prices, beside Event Hubs for the same workload.

Pure arithmetic on top of :mod:`vault_client.capacity`. The prices are pay-as-you-go list prices
in US dollars for one region, as recorded on the date below (docs/CAPACITY.md "Prices" says where
each one comes from); :class:`PriceList` takes others, so a plan can be priced for another region
or a negotiated rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vault_client.capacity import (
    WRITER_CYCLE_SECONDS,
    Commits,
    Plan,
    claim_checked,
    queue_operations,
)
from vault_core.limits import DEFAULT_READ_BYTES

PRICES_REGION = "East US"
PRICES_CURRENCY = "USD"
PRICES_DATE = "2026-11-25"
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
GB = 1e9
"""Storage and Event Hubs bill decimal units."""

# https://learn.microsoft.com/azure/event-hubs/event-hubs-scalability, event-hubs-quotas
EVENT_HUBS_TU_INGRESS_BYTES = 1e6
"""A Standard throughput unit: 1 MB/s or 1,000 events/s in, whichever comes first."""
EVENT_HUBS_TU_INGRESS_EVENTS = 1000
EVENT_HUBS_TU_EGRESS_BYTES = 2e6
"""... and 2 MB/s or 4,096 events/s out."""
EVENT_HUBS_TU_EGRESS_EVENTS = 4096
EVENT_HUBS_STANDARD_MAX_TUS = 40
"""Throughput units per Standard namespace."""
EVENT_HUBS_PU_INGRESS_BYTES = 5e6
"""A Premium processing unit: "about 5-10 MB/s" in, depending on the workload (the lower end)."""
EVENT_HUBS_PREMIUM_MAX_PUS = 16
"""Processing units per Premium namespace."""


@dataclass(frozen=True)
class PriceList:
    """Pay-as-you-go list prices (LRS storage, standard general-purpose v2 accounts)."""

    queue_per_10k_operations: float = 0.004
    table_per_10k_transactions: float = 0.00036
    table_gb_month: float = 0.045
    page_blob_per_10k_operations: float = 0.0005
    page_blob_gb_month: float = 0.045
    blob_hot_per_10k_writes: float = 0.05
    blob_hot_per_10k_reads: float = 0.004
    flex_per_gb_second: float = 0.000026
    flex_per_million_executions: float = 0.40
    flex_free_gb_seconds: float = 100_000
    flex_free_executions: float = 250_000
    event_hubs_standard_tu_hour: float = 0.03
    event_hubs_standard_per_million_events: float = 0.028
    event_hubs_premium_pu_hour: float = 1.233


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    """Per month, in ``unit``."""
    unit: str
    monthly: float


@dataclass(frozen=True)
class Bill:
    lines: list[CostLine]
    storage_per_month_kept: float
    """What one month of the workload's data costs for every month it is kept (page blobs)."""
    data_gb_per_month: float

    @property
    def monthly(self) -> float:
        return sum(line.monthly for line in self.lines)


def _per_month(per_second: float) -> float:
    return per_second * SECONDS_PER_MONTH


def bill(p: Plan, prices: PriceList = PriceList()) -> Bill:
    """The plan's month: the operations of every POST and commit, and the Function App's time."""
    w, s = p.workload, p.staging
    batches = w.posts_per_second
    claimed = claim_checked(w)
    queue_ops = s.queues * queue_operations(batches / s.queues)

    table_tx = 2 * batches  # the status row: reserve, mark staged
    page_ops = 0.0
    for share, count in ((w.hot, 1), (w.other_share, w.streams - 1)):
        c = Commits.of(w, batches * share)
        if count == 0 or c.per_second == 0:
            continue
        stream_bytes = w.log_bytes_per_second * share
        reads = w.consumers * max(c.per_second, stream_bytes / DEFAULT_READ_BYTES)
        table_tx += count * (c.table_requests + c.catalog_entities)
        page_ops += count * (c.blob_requests + reads)
    instances = next(x.load for x in p.loads if x.resource == "Function App instances")
    gb_seconds = _per_month(instances * p.memory_mb / 1024)
    executions = _per_month(batches + s.queues / WRITER_CYCLE_SECONDS)  # POSTs and writer invocations
    data_gb = _per_month(w.log_bytes_per_second) / GB
    rows_gb = _per_month(batches * 2 * 300) / GB  # a status row and a b row per batch, ~300 B each

    lines = [
        CostLine("staging queue operations", _per_month(queue_ops), "operations", 0.0),
        CostLine("table transactions", _per_month(table_tx), "transactions", 0.0),
        CostLine("page blob operations", _per_month(page_ops), "operations", 0.0),
        CostLine("Function App memory time", max(gb_seconds - prices.flex_free_gb_seconds, 0), "GB-s", 0.0),
        CostLine(
            "Function App executions", max(executions - prices.flex_free_executions, 0), "executions", 0.0
        ),
        CostLine("table storage (one month's rows)", rows_gb, "GB-month", 0.0),
    ]
    price = [
        prices.queue_per_10k_operations / 1e4,
        prices.table_per_10k_transactions / 1e4,
        prices.page_blob_per_10k_operations / 1e4,
        prices.flex_per_gb_second,
        prices.flex_per_million_executions / 1e6,
        prices.table_gb_month,
    ]
    if claimed:
        lines.append(CostLine("claim-check blob writes", _per_month(batches), "writes", 0.0))
        lines.append(CostLine("claim-check blob reads", _per_month(batches), "reads", 0.0))
        price += [prices.blob_hot_per_10k_writes / 1e4, prices.blob_hot_per_10k_reads / 1e4]
    priced = [
        CostLine(x.item, x.quantity, x.unit, x.quantity * each) for x, each in zip(lines, price, strict=True)
    ]
    return Bill(priced, data_gb * prices.page_blob_gb_month, data_gb)


@dataclass(frozen=True)
class EventHubs:
    """Event Hubs sized for the same messages (one event each) and the same readers."""

    tier: str
    units: int
    """Throughput units (Standard) or processing units (Premium)."""
    namespaces: int
    units_monthly: float
    events_monthly: float

    @property
    def monthly(self) -> float:
        return self.units_monthly + self.events_monthly


def event_hubs(p: Plan, prices: PriceList = PriceList()) -> tuple[EventHubs, EventHubs]:
    """(Standard, Premium) for the plan's workload: ingress and the consumers' egress."""
    w = p.workload
    event_bytes = w.message_bytes + w.key_bytes
    ingress = w.messages_per_second * event_bytes
    tus = max(
        math.ceil(ingress / EVENT_HUBS_TU_INGRESS_BYTES),
        math.ceil(w.messages_per_second / EVENT_HUBS_TU_INGRESS_EVENTS),
        math.ceil(ingress * w.consumers / EVENT_HUBS_TU_EGRESS_BYTES),
        math.ceil(w.messages_per_second * w.consumers / EVENT_HUBS_TU_EGRESS_EVENTS),
        1,
    )
    standard = EventHubs(
        "Standard",
        tus,
        math.ceil(tus / EVENT_HUBS_STANDARD_MAX_TUS),
        tus * prices.event_hubs_standard_tu_hour * HOURS_PER_MONTH,
        _per_month(w.messages_per_second) / 1e6 * prices.event_hubs_standard_per_million_events,
    )
    pus = max(math.ceil(ingress / EVENT_HUBS_PU_INGRESS_BYTES), 1)
    premium = EventHubs(
        "Premium",
        pus,
        math.ceil(pus / EVENT_HUBS_PREMIUM_MAX_PUS),
        pus * prices.event_hubs_premium_pu_hour * HOURS_PER_MONTH,
        0.0,
    )
    return standard, premium
