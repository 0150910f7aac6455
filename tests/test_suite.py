"""The suite's own machinery, where it can go wrong silently: the test modules' bytecode that the
controller writes for the xdist workers (tests/helpers/precompile.py) is the one pytest reads, and
the constants of the project's sources it has Hypothesis keep (tests/helpers/unicode_tables.py)
are where the workers' Hypothesis looks for them."""

from __future__ import annotations

import gc
import hashlib
import sys
import uuid
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc
from helpers import precompile, unicode_tables


def test_the_rewritten_bytecode_written_once_is_what_pytest_reads(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as ./dev test runs it, whatever the shell says
    module = tmp_path / "test_example.py"
    module.write_text("def test_it():\n    x = 1\n    assert x == 2\n")
    pyc = tmp_path / "__pycache__" / f"test_example{PYC_TAIL}"

    assert precompile.rewrite_test_modules(pytestconfig, [module]) == 1
    code = _read_pyc(module, pyc)
    assert code is not None, "pytest would not read it"
    assert "@pytest_ar" in code.co_names  # the asserts are rewritten, not merely compiled
    assert precompile.rewrite_test_modules(pytestconfig, [module]) == 0  # up to date: left alone

    module.write_text("def test_it():\n    assert 1 == 1\n")
    assert precompile.rewrite_test_modules(pytestconfig, [module]) == 1  # its source changed


def test_every_test_module_is_found(pytestconfig: pytest.Config) -> None:
    found = {p.name for p in precompile.test_modules(pytestconfig)}
    assert Path(__file__).name in found and "test_infra.py" in found
    assert not {"conftest.py", "timeline.py"} & found


def test_a_test_module_that_does_not_compile_is_left_to_the_worker_that_collects_it(
    pytestconfig: pytest.Config, tmp_path: Path
) -> None:
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_it(:\n")
    assert precompile.rewrite_test_modules(pytestconfig, [broken]) == 0


def test_only_the_plugins_named_in_pyproject_are_loaded_and_no_library_is_rewritten(
    pytestconfig: pytest.Config,
) -> None:
    """pyproject.toml's addopts turn off plugin autoloading: a package that declares a pytest
    plugin would otherwise have all its modules assertion-rewritten on import (Hypothesis in every
    worker, Schemathesis where the OpenAPI test runs), compiled again wherever the venv has no
    rewritten bytecode cached."""
    import anyio
    import hypothesis
    from _pytest.assertion.rewrite import AssertionRewritingHook

    plugins = pytestconfig.pluginmanager
    assert all(plugins.has_plugin(name) for name in ("xdist", "timeout", "hypothesispytest"))
    assert not plugins.has_plugin("schemathesis") and not plugins.has_plugin("anyio")
    for library in (hypothesis, anyio):
        assert not isinstance(library.__loader__, AssertionRewritingHook), library
    assert isinstance(sys.modules[__name__].__loader__, AssertionRewritingHook)  # the tests' are


def test_the_constants_of_the_project_s_sources_are_kept_where_hypothesis_looks(tmp_path: Path) -> None:
    from hypothesis.configuration import storage_directory

    sources = unicode_tables.sources()
    assert unicode_tables.ROOT / "vault_core" / "recordformat.py" in sources
    assert unicode_tables.ROOT / "function_app.py" in sources
    assert not any(p.relative_to(unicode_tables.ROOT).parts[0] in ("tests", ".venv") for p in sources)

    source = tmp_path / "sample.py"
    constant = uuid.uuid4().int % 10**15
    source.write_text(f"LIMIT = {constant}\n")
    kept = storage_directory("constants").path / hashlib.sha1(source.read_bytes()).hexdigest()[:16]
    assert unicode_tables.build_constants([source]) == 1
    assert str(constant) in kept.read_text()  # what a worker's Hypothesis reads instead of the source
    kept.unlink()


def test_the_garbage_collector_off_while_collecting_is_on_for_the_tests() -> None:
    """conftest turns it off in a process that collects, and on again once collected."""
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_codec_table_found_a_block_at_a_time_is_the_one_found_a_code_point_at_a_time() -> None:
    """Hypothesis's own definition, one code point at a time, around and across the surrogates
    (blocks that encode whole, and blocks that do not)."""

    def one_at_a_time(start: int, stop: int) -> tuple[list[int], list[int]]:
        encodable, not_round_trip = [], []
        for point in range(start, stop):
            try:
                encoded = chr(point).encode(unicode_tables.CODEC)
            except UnicodeError:
                continue
            encodable.append(point)
            if encoded.decode(unicode_tables.CODEC) != chr(point):
                not_round_trip.append(point)
        return encodable, not_round_trip

    def points(intervals: list[tuple[int, int]]) -> list[int]:
        return [p for low, high in intervals for p in range(low, high + 1)]

    start, stop = 0xD000, 0xE100
    encodable, not_round_trip = unicode_tables.codec_intervals(unicode_tables.CODEC, start, stop, block=300)
    assert (points(encodable), points(not_round_trip)) == one_at_a_time(start, stop)
    assert unicode_tables.codec_intervals(unicode_tables.CODEC) == ([(0, 0xD7FF), (0xE000, 0x10FFFF)], [])


def test_the_codec_table_is_kept_where_and_as_hypothesis_reads_it(tmp_path: Path) -> None:
    """A made-up table (only ASCII), so that Hypothesis's answer is the file's, not its own."""
    from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
    from hypothesis.internal.charmap import intervals_from_codec

    home = storage_directory(intent_to_write=False).home_directory
    set_hypothesis_home_dir(tmp_path)
    try:
        path = unicode_tables.write_codec_table(unicode_tables.CODEC, ([(0, 127)], [(10, 10)]))
        assert path is not None and path.is_relative_to(tmp_path)
        encodable, not_round_trip = intervals_from_codec.__wrapped__(unicode_tables.CODEC)  # past its cache
    finally:
        set_hypothesis_home_dir(home)
    assert (encodable.intervals, not_round_trip.intervals) == (((0, 127),), ((10, 10),))
