"""The project's structure, read from its source (pure and fast: nothing is imported or run).

* The storage SDKs are called by the storage adapters alone; everything above them sees the
  vault's own types and errors (vault_core/translation.py).
* The layers point one way: vault_core knows nothing of the app, the client or the local host;
  within the app, access control (vault_app.auth) knows nothing of the settings, and the
  settings nothing of the services and handlers above them (LAYERS).
* No import cycles among the project's modules, lazy imports inside functions included.
* No module, test or benchmark imports another module's private (``_``) names.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vault_core", "vault_app", "vault_client", "vault_local")

ADAPTERS = {
    "vault_core.azure",  # the account: SDK clients, SAS, adapter factories
    "vault_core.translation",  # SDK exceptions -> vault_core.errors
    "vault_core.pageblob",  # stream page blobs, leases, the streams container
    "vault_core.blobs",  # ordinary blobs (claim checks)
    "vault_core.queues",
    "vault_core.tables",
    "vault_core.aio",  # the async clients of the request path's waits (commit records, queue lengths)
}
STORAGE_SDKS = ("azure.storage", "azure.data", "azure.core")
ALLOWED_EVERYWHERE = ("azure.core.credentials",)
"""Credential types (tokens for the API, SAS credentials for Spark) are not storage calls."""
RUNTIME_STAND_IN = ("vault_local",)
"""The local Functions host plays the Functions runtime, which reads the staging queues itself."""

KNOWN_CYCLES: set[frozenset[str]] = set()
"""None: the host, its pool of workers, the worker process and the route table are separate
modules (vault_local/host.py, workers.py, worker.py, routes.py)."""


def modules() -> dict[str, Path]:
    found = {"function_app": ROOT / "function_app.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


@functools.cache
def parsed(path: Path) -> ast.Module:
    """Each file parsed once: the tests below read the same sources (they run on one xdist
    worker, conftest's WHOLE_MODULES). The trees are only read, never changed."""
    return ast.parse(path.read_text(encoding="utf-8"))


def statements(node: ast.AST) -> Iterator[ast.stmt]:
    """Every statement under ``node``, nested ones too (in functions, classes, branches, handlers):
    where imports and ``global`` are. Unlike ``ast.walk`` it skips expressions, which hold neither
    and are most of a tree's nodes: this module's CPU halves."""
    for field in node._fields:
        children = getattr(node, field)
        if isinstance(children, list):
            for child in children:
                if isinstance(child, ast.stmt):
                    yield child
                    yield from statements(child)
                elif isinstance(child, ast.excepthandler | ast.match_case):
                    yield from statements(child)


NESTED_IMPORTS = """
import a
def f():
    import b
    class C:
        from c import d
try:
    import e
except ImportError:
    import f
else:
    import g
finally:
    import h
match x:
    case 1:
        import i
with open(p) as k, lock:
    if y:
        import j
    else:
        global z
lam = lambda: __import__("not_a_statement")
"""


def test_statements_reach_every_nested_statement_as_ast_walk_does() -> None:
    tree = ast.parse(NESTED_IMPORTS)
    walked = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    assert sorted(map(id, statements(tree))) == sorted(map(id, walked))
    names = {a.name for n in statements(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    assert names == set("abdefghij")


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, anywhere in it (functions and TYPE_CHECKING blocks too)."""
    for node in statements(parsed(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if submodule in MODULES else node.module


@functools.cache
def project_graph() -> dict[str, set[str]]:
    return {name: {m for m in imports(path) if m in MODULES} for name, path in MODULES.items()}


def test_the_module_list_is_the_project() -> None:
    assert {"vault_core.reader", "vault_app.api", "vault_client.rawlog", "vault_local.host"} <= set(MODULES)
    assert set(MODULES) >= ADAPTERS, "an adapter named here no longer exists"


def test_only_the_storage_adapters_import_the_storage_sdks() -> None:
    offenders = {
        f"{name}: {imported}"
        for name, path in MODULES.items()
        if name not in ADAPTERS and not name.startswith(RUNTIME_STAND_IN)
        for imported in imports(path)
        if imported.startswith(STORAGE_SDKS) and not imported.startswith(ALLOWED_EVERYWHERE)
    }
    assert not offenders, "SDK calls belong in an adapter (see vault_core/translation.py):\n" + "\n".join(
        sorted(offenders)
    )


def test_the_core_does_not_reach_up_into_the_app_the_client_or_the_host() -> None:
    above: dict[str, tuple[str, ...]] = {
        "vault_core": ("vault_app", "vault_client", "vault_local", "function_app", "azure.functions")
    }
    above["vault_client"] = ("vault_app", "vault_local", "function_app", "azure.functions")
    offenders = {
        f"{name}: {imported}"
        for name, path in MODULES.items()
        for layer, forbidden in above.items()
        if name.split(".")[0] == layer
        for imported in imports(path)
        if imported.startswith(forbidden)
    }
    assert not offenders, "\n".join(sorted(offenders))


LAYERS = (
    ("vault_core",),
    ("vault_app.auth",),  # pure: who a caller is and what it may do
    ("vault_app.config",),  # the settings, which name auth's rules
    ("vault_app", "vault_client"),  # services, staging, the writer, the handlers; the client
    ("function_app",),  # the triggers and bindings
    ("vault_local",),  # the local stand-in for the Functions runtime, which imports the app
)
"""Lowest first: a module may import its own layer and those below, never one above."""


def layer(module: str) -> int:
    """The layer of the longest prefix in LAYERS that names ``module`` (or its package)."""
    found = [
        (len(prefix), rank)
        for rank, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert found, f"{module} is in no layer"
    return max(found)[1]


def test_layer_takes_the_longest_prefix() -> None:
    assert [layer(m) for m in ("vault_core.reader", "vault_app.auth.policy", "vault_app.config")] == [0, 1, 2]
    assert [layer(m) for m in ("vault_app.guard", "function_app", "vault_local.host")] == [3, 4, 5]


def test_no_import_runs_up_a_layer() -> None:
    upward = {
        f"{name} ({layer(name)}) imports {imported} ({layer(imported)})"
        for name, targets in project_graph().items()
        for imported in targets
        if layer(imported) > layer(name)
    }
    assert not upward, "\n".join(sorted(upward))


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_there_are_no_import_cycles() -> None:
    found = [c for c in cycles(project_graph()) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


# -- state -------------------------------------------------------------------------------------
STATELESS_CALLS = ("logging.getLogger", "TypeVar", "re.compile", "frozenset", "tuple")
"""Module-level calls that build nothing a request or an invocation could change."""

KNOWN_MODULE_STATE = {
    "vault_app.telemetry._active",
    "vault_app.telemetry._lock",
}
"""What still lives in vault_app's module globals rather than in vault_app.runtime.Runtime: the
process's telemetry (OpenTelemetry's own providers are process-wide). Never to be added to."""


def module_state(name: str, path: Path) -> set[str]:
    """The module's mutable globals: objects built at import (not constants, not type aliases),
    names rebound by ``global``, and functions that cache what they return."""
    tree = parsed(path)
    found = set()
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        built = isinstance(value, ast.Call) and not ast.unparse(value.func).endswith(STATELESS_CALLS)
        if isinstance(target, ast.Name) and built and not target.id.isupper():
            found.add(target.id)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            "cache" in ast.unparse(d) for d in node.decorator_list
        ):
            found.add(node.name)
    found |= {n for node in statements(tree) if isinstance(node, ast.Global) for n in node.names}
    return {f"{name}.{n}" for n in found}


def test_module_state_finds_built_objects_globals_and_caches() -> None:
    source = ROOT / "tests" / "data" / "module_state_example.py"
    assert module_state("m", source) == {"m.pool", "m.cached", "m.current"}


def test_the_app_keeps_no_new_state_in_module_globals() -> None:
    found = {
        state
        for name, path in MODULES.items()
        if name.startswith("vault_app") or name == "function_app"
        for state in module_state(name, path)
    }
    found.discard("function_app.app")  # the Functions entry point the runtime discovers
    found.discard("function_app.runtime")  # built once, the app's one runtime
    found.discard("function_app.settings")
    assert found == KNOWN_MODULE_STATE, (
        f"new module state: {sorted(found - KNOWN_MODULE_STATE)}; "
        f"gone (remove from KNOWN_MODULE_STATE): {sorted(KNOWN_MODULE_STATE - found)}"
    )


def test_no_module_imports_another_modules_private_names() -> None:
    """Product code, tests and benchmarks alike: a name another module needs is public."""
    users = [
        *MODULES.items(),
        *(
            (f"{p.parent.name}/{p.name}", p)
            for d in ("tests", "bench")
            for p in sorted((ROOT / d).glob("*.py"))
        ),
    ]
    offenders = {
        f"{name}: from {node.module} import {alias.name}"
        for name, path in users
        for node in statements(parsed(path))
        if isinstance(node, ast.ImportFrom) and node.module in MODULES
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.endswith("__")
    }
    assert not offenders, "make it public, or keep it where it is used:\n" + "\n".join(sorted(offenders))
