"""Packaging: what each distribution declares is what its code imports, and the habits around it.

* The core distribution (vault_core/pyproject.toml, ``message-vault-core``) declares exactly the
  packages vault_core imports. (Its wheel alone, installed into a clean virtualenv beside what
  it declares, reads a stream with Spark: tests/test_spark.py, on the session's Spark.)
* requirements.txt, the Function App's deploy list, covers every package that the deployed code
  (function_app.py, vault_app, vault_core without its Spark reader) imports, with the lower
  bounds pyproject declares and an upper bound.
* CI, ``./dev lint`` and pre-commit run the same checks.

Everything is derived from the files and the installed distributions' metadata, so that a
dependency added in the right places passes without touching this file.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

import vault_core

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "vault_core"
MAIN_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CORE_PYPROJECT = tomllib.loads((CORE / "pyproject.toml").read_text())
REQUIREMENTS = ROOT / "requirements.txt"
FIRST_PARTY = {"vault_core", "vault_app", "vault_local", "vault_client", "function_app", "bench", "tests"}


# -- what the code imports ------------------------------------------------------------------------
def python_files(*paths: Path) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        found += [f for f in files if not {"build", "__pycache__"} & set(f.relative_to(ROOT).parts)]
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_error_guarded(node: ast.Try) -> bool:
    """``try: import x`` / ``except ImportError:``: an optional package, used where it is installed."""
    names = {"ImportError", "ModuleNotFoundError"}
    caught = [h.type for h in node.handlers if h.type is not None]
    return any(
        (isinstance(t, ast.Name) and t.id in names)
        or (isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id in names for e in t.elts))
        for t in caught
    )


@functools.cache
def imported_modules(path: Path, module_level_only: bool = False, optional: bool = False) -> frozenset[str]:
    """Absolute imports that run: ``if TYPE_CHECKING:`` blocks are left out; function-level
    (lazy) imports count unless ``module_level_only``. Imports guarded by ``except ImportError``
    (optional packages) are left out, or with ``optional`` are the only ones found. Each file's
    once: the tests below ask again and again about the same files."""
    found: set[str] = set()

    def visit(node: ast.AST, guarded: bool = False) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                continue
            if module_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.Try) and _import_error_guarded(child):
                for statement in child.body:
                    visit(ast.Module(body=[statement], type_ignores=[]), True)
                for rest in (*child.handlers, *child.orelse, *child.finalbody):
                    visit(rest, guarded)
                continue
            if guarded != optional and isinstance(child, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                # ``from opentelemetry import trace``: a namespace package is owned by no one
                # distribution; the submodules it names are (or, for names, the package is).
                found.update(f"{child.module}.{alias.name}" for alias in child.names)
            visit(child, guarded)

    visit(ast.parse(path.read_text(), str(path)))
    return frozenset(found)


@functools.cache
def module_owners() -> dict[str, str]:
    """Module name -> the installed distribution whose files hold it (canonical name)."""
    owners: dict[str, str] = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for file in dist.files or []:
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".egg-info")) or ".." in parts:
                continue
            if file.suffix not in (".py", ".so", ".pyd"):
                continue
            stem = parts[-1].split(".", 1)[0]
            module = [*parts[:-1]] if stem == "__init__" else [*parts[:-1], stem]
            if module:
                owners.setdefault(".".join(module), name)
    return owners


def distribution_of(module: str) -> str | None:
    """The distribution providing ``module`` (or its nearest parent package); None for the
    standard library and this repository's own packages."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in FIRST_PARTY:
        return None
    owners = module_owners()
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        owner = owners.get(".".join(parts[:n]))
        if owner and owner != "message-vault-core":
            return owner
    raise AssertionError(f"no installed distribution provides {module!r}: is it declared and installed?")


def imported_distributions(
    paths: list[Path], module_level_only: bool = False, optional: bool = False
) -> dict[str, set[str]]:
    """Distribution -> the files importing it (``optional``: only where ``except ImportError`` guards it)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for module in imported_modules(path, module_level_only, optional):
            dist = distribution_of(module)
            if dist:
                found.setdefault(dist, set()).add(path.relative_to(ROOT).as_posix())
    return found


EXTRA_MODULES = {"queues.py": "queue", "aio.py": "queue"}
"""Core modules that exist for one of the core's extras (the Function App's queues; aio also
needs the aio extra's HTTP transport, which it does not import by name)."""
CORE_FILES = [p for p in python_files(CORE) if "spark" not in p.relative_to(CORE).parts]
SPARK_FILES = python_files(CORE / "spark")
APP_FILES = [*CORE_FILES, *python_files(ROOT / "vault_app", ROOT / "function_app.py")]


# -- what the distributions declare -----------------------------------------------------------------
def requirements(lines: list[str]) -> dict[str, Requirement]:
    found: dict[str, Requirement] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            assert name not in found, f"{req.name} is listed twice"
            found[name] = req
    return found


def declared(project: dict[str, Any], *extras: str) -> dict[str, Requirement]:
    lines = list(project["project"].get("dependencies", []))
    for extra in extras:
        lines += project["project"]["optional-dependencies"][extra]
    return requirements(lines)


def core_extras_of_the_app() -> set[str]:
    """The core's extras the app installs (``message-vault-core[queue,aio]``)."""
    core = declared(MAIN_PYPROJECT)["message-vault-core"]
    return set(core.extras)


def deploy_list() -> dict[str, Requirement]:
    return requirements(REQUIREMENTS.read_text().splitlines())


def lower_bound(req: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def upper_bound(req: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in req.specifier if s.operator in ("<", "<=")]
    return min(bounds) if bounds else None


# -- the core distribution --------------------------------------------------------------------------
def test_the_core_declares_exactly_what_it_imports() -> None:
    core = CORE_PYPROJECT["project"]
    base = set(requirements(core["dependencies"]))
    extras = {name: set(requirements(reqs)) for name, reqs in core["optional-dependencies"].items()}
    uses = imported_distributions(CORE_FILES)
    assert set(uses) == base | extras["queue"], uses
    # what the core uses where it is installed (the Function App does without) has an extra of its own
    assert set(imported_distributions(CORE_FILES, optional=True)) == extras["arrow"]
    spark_only = set(imported_distributions(SPARK_FILES)) - set(uses)
    assert spark_only == extras["spark"]


def test_importing_the_core_needs_only_its_base_dependencies() -> None:
    """What a module imports at import time must be installed by ``pip install message-vault-core``:
    extras (azure-storage-queue) are imported where they are used."""
    base = set(requirements(CORE_PYPROJECT["project"]["dependencies"]))
    extras = CORE_PYPROJECT["project"]["optional-dependencies"]
    plain = [p for p in CORE_FILES if p.name not in EXTRA_MODULES]
    at_import = imported_distributions(plain, module_level_only=True)
    assert {d: f for d, f in at_import.items() if d not in base} == {}
    for name, extra in EXTRA_MODULES.items():  # an extra's own adapter needs just that extra
        uses = imported_distributions([CORE / name], module_level_only=True)
        assert set(uses) <= base | set(requirements(extras[extra])), name
        for path in plain:  # and no plain module imports it when it is imported
            assert f"vault_core.{name[:-3]}" not in imported_modules(path, module_level_only=True), path


def test_the_core_wheel_carries_every_core_package() -> None:
    tool = CORE_PYPROJECT["tool"]["setuptools"]
    assert tool["package-dir"] == {"vault_core": "."}
    packages = {
        ".".join(("vault_core", *p.parent.relative_to(CORE).parts))
        for p in python_files(CORE)
        if p.name == "__init__.py"
    }
    assert set(tool["packages"]) == packages


def test_the_app_distribution_depends_on_this_core() -> None:
    core = CORE_PYPROJECT["project"]
    main = MAIN_PYPROJECT["project"]
    pins = [r for r in map(Requirement, main["dependencies"]) if canonicalize_name(r.name) == core["name"]]
    assert [str(r.specifier) for r in pins] == [f"=={core['version']}"]
    # One version: the app's is read from vault_core.__version__, which the core declares too.
    assert "version" in main["dynamic"]
    assert MAIN_PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "vault_core.__version__"}
    assert core["version"] == vault_core.__version__
    spark = requirements(main["optional-dependencies"]["spark"])
    assert spark[core["name"]].extras == {"spark"}
    assert "vault_core*" not in MAIN_PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]


def test_both_distributions_carry_the_mit_license() -> None:
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert (CORE / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    for project in (MAIN_PYPROJECT, CORE_PYPROJECT):
        assert project["project"]["license"] == "MIT"
        assert project["project"]["license-files"] == ["LICENSE"]
        # SPDX expressions and license-files need setuptools 77.
        (backend,) = (Requirement(r) for r in project["build-system"]["requires"] if "setuptools" in r)
        setuptools = lower_bound(backend)
        assert setuptools is not None and setuptools >= Version("77")


# -- the Function App's deploy list -------------------------------------------------------------------
def test_requirements_cover_every_package_the_function_app_imports() -> None:
    deployed = deploy_list()
    missing = {d: sorted(f) for d, f in imported_distributions(APP_FILES).items() if d not in deployed}
    assert missing == {}, "add these to requirements.txt (and pyproject.toml)"


def test_requirements_leave_out_spark() -> None:
    spark = requirements(CORE_PYPROJECT["project"]["optional-dependencies"]["spark"])
    assert set(spark).isdisjoint(deploy_list())


@pytest.mark.parametrize("name", sorted(deploy_list()))
def test_a_deployed_requirement_is_declared_and_bounded(name: str) -> None:
    """Same name and extras as pyproject declares, the same lower bound, and an upper bound
    that the declared range allows, so a deploy installs a tested major version."""
    pinned = deploy_list()[name]
    sources = {
        "vault_core/pyproject.toml": declared(CORE_PYPROJECT, *core_extras_of_the_app()),
        "pyproject.toml": declared(MAIN_PYPROJECT, "app"),
    }
    matches = {where: reqs[name] for where, reqs in sources.items() if name in reqs}
    assert matches, f"{name} is deployed but neither pyproject.toml declares it"
    low, high = lower_bound(pinned), upper_bound(pinned)
    assert low is not None and high is not None and low < high, f"{pinned}: needs >=low,<high"
    for where, req in matches.items():
        assert pinned.extras == req.extras, where
        assert lower_bound(req) == low, f"{where} declares {req}, requirements.txt {pinned}"
        declared_high = upper_bound(req)
        assert declared_high is None or high <= declared_high, f"{where} declares {req}"
        assert req.specifier.contains(low, prereleases=True)


# -- the same checks everywhere -----------------------------------------------------------------------
def dev_lint_commands() -> list[list[str]]:
    """The commands of ``./dev lint``, each as its words (``.venv/bin/ruff check .``)."""
    (line,) = [ln for ln in (ROOT / "dev").read_text().splitlines() if ln.strip().startswith("lint)")]
    body = line.split(")", 1)[1].rstrip(" ;")
    commands = [c.strip().split() for c in re.split(r"&&|;", body)]
    assert ["setup"] in commands, "./dev lint must install what it needs"
    return [c for c in commands if c and c[0].startswith(".venv/bin/")]


def test_dev_lint_runs_ruff_ruff_format_and_mypy_over_tests_and_bench() -> None:
    commands = dev_lint_commands()
    assert [".venv/bin/ruff", "check", "."] in commands
    assert [".venv/bin/ruff", "format", "--check", "."] in commands
    assert [".venv/bin/mypy"] in commands
    assert {"tests", "bench"} <= set(MAIN_PYPROJECT["tool"]["mypy"]["files"])


def test_ci_runs_lint_and_tests() -> None:
    run = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "./dev lint" in run and "./dev test" in run


def test_pre_commit_config_is_valid_and_runs_what_dev_lint_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from pre_commit.commands.validate_config import validate_config  # type: ignore[import-untyped]

    config = ROOT / ".pre-commit-config.yaml"
    assert validate_config([str(config)]) == 0, capsys.readouterr().out  # `pre-commit validate-config`
    hooks = [h for repo in yaml.safe_load(config.read_text())["repos"] for h in repo["hooks"]]
    entries = [h["entry"].split() for h in hooks]
    for command in dev_lint_commands():
        tool = command[:2] if command[0].endswith("/ruff") else command[:1]
        assert any(e[: len(tool)] == tool for e in entries), f"no pre-commit hook runs {' '.join(tool)}"
    (mypy,) = [h for h in hooks if h["entry"].split()[0].endswith("/mypy")]
    assert mypy["pass_filenames"] is False  # the files of [tool.mypy], as ./dev lint checks


@functools.cache
def workflow(name: str) -> dict[Any, Any]:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def test_github_workflow_runs_dev_lint_and_dev_test() -> None:
    doc = workflow("ci.yml")
    triggers = doc[True]  # YAML 1.1 reads the key `on` as a boolean
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = doc["jobs"].values()
    assert job["runs-on"].startswith("ubuntu-")
    uses = {s["uses"].split("@")[0]: s.get("with", {}) for s in steps(job) if "uses" in s}
    assert uses["actions/setup-python"]["python-version"] == "3.11"
    assert SpecifierSet(MAIN_PYPROJECT["project"]["requires-python"]).contains("3.11")
    assert str(uses["actions/setup-node"]["node-version"]) == "20"
    runs = [s["run"].strip() for s in steps(job) if "run" in s]
    assert runs.index("./dev lint") < runs.index("./dev test")


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / ".github" / "workflows").glob("*.yml")))
def test_a_workflow_installing_the_project_installs_its_core_too(name: str) -> None:
    """message-vault depends on message-vault-core, which is not on any index: every
    ``pip install -e .`` must also name ./vault_core, or it fails on a fresh runner."""
    for job in workflow(name)["jobs"].values():
        for step in steps(job):
            for line in str(step.get("run", "")).splitlines():
                if re.search(r"pip install .*-e [\"']?\.[\"'\[ ]|pip install .*-e [\"']?\.$", line):
                    assert "./vault_core" in line, f"{name}: {line.strip()}"


def test_the_synapse_install_list_is_what_the_core_wheel_declares() -> None:
    """docs/SPARK.md tells a Synapse pool which packages to add beside the core wheel."""
    text = (ROOT / "docs" / "SPARK.md").read_text()
    section = text.split("## Synapse, step by step", 1)[1]
    block = re.search(r"```\n(.*?)\n\s*```", section, re.S)
    assert block, "no requirements block in the Synapse steps"
    listed = requirements(block[1].splitlines())
    assert listed == requirements(CORE_PYPROJECT["project"]["dependencies"])
    assert "pip wheel ./vault_core" in section
