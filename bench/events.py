"""Realistic generated JSON events for the format benchmarks: varied fields, ids, numbers and
timestamps, so that no codec is flattered by repeated bytes.

``event(rng, i, "small")`` is about 100 bytes, ``event(rng, i, "large")`` about 1 KiB.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from vault_core.recordformat import NewMessage

_TYPES = ["page_view", "click", "add_to_cart", "purchase", "search", "login", "logout", "refund"]
_COUNTRIES = ["DE", "FR", "US", "GB", "NL", "SE", "PL", "ES", "IT", "JP", "BR", "IN"]
_AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
]
_WORDS = [
    "red",
    "blue",
    "green",
    "large",
    "small",
    "organic",
    "steel",
    "cotton",
    "wireless",
    "smart",
    "classic",
    "travel",
]


def _ts(rng: random.Random, i: int) -> str:
    ms = 1_764_000_000_000 + i * 37 + rng.randint(0, 36)
    s, ms = divmod(ms, 1000)
    return f"2025-11-{24 + s // 86400 % 5:02d}T{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{ms:03d}Z"


def event(rng: random.Random, i: int, size: str) -> bytes:
    doc: dict[str, object] = {
        "id": f"{rng.getrandbits(64):016x}",
        "ts": _ts(rng, i),
        "type": rng.choice(_TYPES),
        "user": rng.randint(1, 2_000_000),
        "amount": round(rng.lognormvariate(3, 1.2), 2),
    }
    if size == "large":
        doc |= {
            "session": f"{rng.getrandbits(128):032x}",
            "country": rng.choice(_COUNTRIES),
            "agent": rng.choice(_AGENTS),
            "ip": ".".join(str(rng.randint(1, 254)) for _ in range(4)),
            "items": [
                {
                    "sku": f"SKU-{rng.randint(10000, 99999)}",
                    "name": " ".join(rng.choices(_WORDS, k=3)),
                    "qty": rng.randint(1, 5),
                    "price": round(rng.uniform(1, 400), 2),
                }
                for _ in range(rng.randint(7, 10))
            ],
            "latency_ms": round(rng.expovariate(1 / 80), 3),
            "flags": rng.sample(["beta", "mobile", "returning", "promo", "vip", "ab-7", "ab-8"], 3),
            "referrer": f"https://example.{rng.choice(['com', 'org', 'net'])}/{rng.getrandbits(40):010x}",
        }
    return json.dumps(doc, separators=(",", ":")).encode()


def events(n: int, size: str, seed: int = 1) -> list[NewMessage]:
    """``n`` events keyed by user bucket (text keys, as the HTTP API writes them)."""
    rng = random.Random(seed)
    return [NewMessage(event(rng, i, size), f"user-{rng.randint(0, 999):03d}") for i in range(n)]


def event_batches(n: int, size: str, per: int, seed: int = 1) -> Iterator[list[NewMessage]]:
    """The same ``n`` events as :func:`events`, ``per`` at a time: millions of them without
    holding them all in memory at once."""
    rng = random.Random(seed)
    for first in range(0, n, per):
        yield [
            NewMessage(event(rng, i, size), f"user-{rng.randint(0, 999):03d}")
            for i in range(first, min(n, first + per))
        ]
