"""The deployment's Bicep files as pycep parses them, kept on disk by content for the xdist workers.

tests/test_infra.py takes many of its parameters from the parsed files (modules, outputs,
storage accounts, app settings), so every worker would parse all of them while collecting:
about 0.7 CPU-s each, the most of any test module. The controller parses them once before the
workers start (:func:`parse_all`) into pytest's cache directory, and each worker reads the
result as JSON, with neither pycep nor its grammar loaded; a file that changed since, or a
newer pycep, is parsed again. Without that directory (``-n 0``) every file is parsed in process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from pycep import BicepParser

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CACHE = ROOT / ".pytest_cache" / "d" / "mv-bicep"
"""Where ``config.cache.mkdir("mv-bicep")`` makes it (pytest's own cache directory, with its
supporting files, made by pytest)."""


def bicep_files() -> list[Path]:
    return sorted(INFRA.rglob("*.bicep"))


@functools.cache
def _pycep_version() -> str:
    return version("pycep-parser")


@functools.cache
def parser() -> BicepParser:
    """One pycep parser for every file: making one loads its grammar (~0.1 CPU-s, from lark's
    cache), as much as parsing a small file."""
    from pycep import BicepParser  # with its grammar: only where a file is parsed

    return BicepParser()


def parsed(path: Path) -> dict[str, Any]:
    """pycep's JSON view of a Bicep file (declarations by kind); raises what pycep raises."""
    source = path.read_bytes()
    key = hashlib.sha256(source + _pycep_version().encode()).hexdigest()[:32]
    cached = CACHE / f"{path.stem}-{key}.json"
    try:
        return cast(dict[str, Any], json.loads(cached.read_bytes()))
    except (OSError, ValueError):
        pass
    doc = cast(dict[str, Any], parser().parse(file_path=path))
    if not CACHE.is_dir():
        return doc
    partial = cached.with_suffix(f".{os.getpid()}")
    partial.write_text(json.dumps(doc))  # its strings are str subclasses (pycep's BicepElement)
    partial.replace(cached)  # whole or not at all, for workers reading at the same moment
    return doc


def parse_all(config: pytest.Config) -> None:
    """Parse every Bicep file that parses (the others are the tests' to report) into the cache."""
    if config.cache is None or config.cache.mkdir("mv-bicep") != CACHE:
        return  # no cache, or one elsewhere (``cache_dir``): each worker parses for itself
    for path in bicep_files():
        try:
            parsed(path)
        except Exception:
            pass
