"""Input of tests/test_layers.py's module_state test: what it must find, and what not."""

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

log = logging.getLogger(__name__)
LIMIT = int("3")
Handler = Callable[[int], int]
pool = ThreadPoolExecutor(2)
current = None


@lru_cache(maxsize=1)
def cached() -> int:
    return LIMIT


def use(value: None) -> None:
    global current
    current = value
