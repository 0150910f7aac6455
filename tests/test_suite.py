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
