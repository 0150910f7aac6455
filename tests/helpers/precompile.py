"""The test modules' rewritten bytecode, made once by the controller before the xdist workers start.

pytest rewrites a test module's ``assert`` statements before compiling it, and caches the result
beside it (``__pycache__/NAME.cpython-3X-pytest-V.pyc``, keyed by a hash of the source). Every
xdist worker imports every test module to collect it, so on a fresh clone, where no such cache
exists, each worker would parse, rewrite and compile all of them again, at once and racing on
the same files: about 3.5 CPU-s a worker. The controller, which collects nothing, writes them
once instead; the workers then read them as they would after any earlier run.

This uses pytest's own rewriting functions (private to pytest): should they move, nothing is
written here and each worker rewrites for itself, as pytest does without this.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pytest


def test_modules(config: pytest.Config) -> list[Path]:
    """The files under the configured test paths that pytest rewrites as test modules."""
    patterns = config.getini("python_files")
    found: set[Path] = set()
    for where in config.getini("testpaths"):
        directory = config.rootpath / where
        for pattern in patterns:
            found.update(directory.rglob(pattern))
    return sorted(found)


def rewrite_test_modules(config: pytest.Config, paths: Iterable[Path] | None = None) -> int:
    """Write the rewritten bytecode of each test module whose cache is missing or stale; how many."""
    if sys.dont_write_bytecode:
        return 0
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):  # another pytest, or assertion rewriting is off
        return 0
    written = 0
    for path in test_modules(config) if paths is None else paths:
        cache = get_cache_dir(path)
        pyc = cache / (path.name[:-3] + PYC_TAIL)
        if _read_pyc(path, pyc) is not None:
            continue
        try:
            source_hash, code = _rewrite_test(path, config)
        except (SyntaxError, ValueError, OSError):
            continue  # the worker that collects it reports the error, as without this
        cache.mkdir(exist_ok=True)
        written += _write_pyc(state, code, source_hash, pyc)
    return written
