"""Offline checks of the deployment: infra/*.bicep, infra/main.parameters.json, azure.yaml.

The Bicep compiler is not available here, so the Bicep files are parsed with pycep (a Lark
grammar for Bicep) and checked for what the compiler and linter would catch most often
(undeclared or unused identifiers, module wiring), for the vault's security properties, and
for the one thing no compiler can check: that the app settings the Bicep sets are exactly the
ones ``vault_app.config`` reads. CI also runs ``az bicep build``/``az bicep lint``
(.github/workflows/infra.yml).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from helpers import bicep

if TYPE_CHECKING:  # imported where a syntax tree is read: every worker collects this module, one runs it
    from lark import Token, Tree

try:
    from vault_app import config as app_config
except ModuleNotFoundError:  # the project is not installed: import it from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from vault_app import config as app_config

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
MAIN = INFRA / "main.bicep"
FUNCTION_APP = INFRA / "app" / "functionapp.bicep"
STAGING = INFRA / "app" / "storage-staging.bicep"
RBAC = INFRA / "app" / "rbac.bicep"
PARAMETERS = INFRA / "main.parameters.json"
AZURE_YAML = ROOT / "azure.yaml"
WORKFLOW = ROOT / ".github" / "workflows" / "infra.yml"
FUNCIGNORE = ROOT / ".funcignore"

BICEP_FILES = bicep.bicep_files()


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------------------------
# Parsing


@functools.cache
def doc(path: Path) -> dict[str, Any]:
    """pycep's JSON view of a Bicep file (declarations by kind), parsed once for the whole run
    (tests/helpers/bicep.py)."""
    return bicep.parsed(path)


def test_the_parse_kept_for_the_run_is_pycep_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bicep, "CACHE", tmp_path)
    fresh = bicep.parsed(FUNCTION_APP)
    assert [p.suffix for p in tmp_path.iterdir()] == [".json"]
    assert bicep.parsed(FUNCTION_APP) == fresh == bicep.parser().parse(file_path=FUNCTION_APP)


def collected(path: Path) -> dict[str, Any]:
    """``doc(path)`` for building test parameters: a file that does not parse yields nothing
    here, so that collection still succeeds and test_bicep_file_parses reports the error."""
    try:
        return doc(path)
    except Exception:
        return {}


@functools.cache
def syntax_tree(path: Path) -> Tree:
    """The Lark tree: unlike the JSON view it tells identifiers from string literals."""
    return bicep.parser().lark_parser.parse(path.read_text())


@functools.cache
def _expression_tree(expression: str) -> Tree:
    return bicep.parser().lark_parser.parse(f"var x = {expression}\n")


def body(config: dict[str, Any]) -> dict[str, Any]:
    """The object of a resource/module declaration, whatever loop or condition wraps it."""
    while "config" in config and ("loop_type" in config or "condition" in config):
        config = config["config"]
    return config


# --------------------------------------------------------------------------------------------
# Identifiers: what a file declares and what it references


def _interpolations(quoted: str) -> Iterator[str]:
    """The expressions inside ``${...}`` of a quoted Bicep string (nested strings allowed)."""
    text, i = quoted[1:-1], 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith("${", i):
            depth, j, in_string = 1, i + 2, False
            while depth:
                ch = text[j]
                if ch == "'":
                    in_string = not in_string
                elif not in_string and ch == "{":
                    depth += 1
                elif not in_string and ch == "}":
                    depth -= 1
                j += 1
            yield text[i + 2 : j - 1]
            i = j
            continue
        i += 1


def references(node: Tree | Token | None) -> set[str]:
    """Identifiers a subtree reads (member names after '.' or '::' are not identifiers)."""
    from lark import Token

    found: set[str] = set()

    def token(tok: Token) -> None:
        if tok.type == "QUOTED_INTERPOLATION":
            for expression in _interpolations(str(tok)):
                found.update(references(_expression_tree(expression)))

    def visit(n: Tree | Token | None, member: bool = False) -> None:
        if n is None:
            return
        if isinstance(n, Token):
            token(n)
            return
        kind, kids = n.data, n.children
        if kind == "string":
            tok = kids[0]
            assert isinstance(tok, Token), tok  # a string literal is one token
            if tok.type == "STRING":
                if not member:
                    found.add(str(tok))
            else:
                token(tok)
        elif kind in ("property_accessor", "nested_resource_accessor"):
            visit(kids[0], member)
            visit(kids[1], member=True)
        elif kind in ("index_accessor", "function_accessor"):
            visit(kids[0], member)
            for kid in kids[1:]:
                visit(kid)
        elif kind == "operator":
            visit(kids[0], member)
        elif kind == "lambda_expression":
            visit(kids[-1])
        elif kind in ("data_type", "type_api_pair", "module_path"):
            return
        elif kind == "key":
            for kid in kids:
                if isinstance(kid, Token):
                    token(kid)
        else:
            for kid in kids:
                visit(kid)

    visit(node)
    return found


def _name(element: Tree) -> str:
    from lark import Token

    return next(str(k) for k in element.children if isinstance(k, Token) and k.type == "STRING")


def declared(path: Path, kind: str) -> list[str]:
    """Top-level names of one kind: param, var, resource, module, output."""
    from lark import Tree

    return [_name(el) for el in syntax_tree(path).children if isinstance(el, Tree) and el.data == kind]


def declared_identifiers(path: Path) -> set[str]:
    """Everything an expression in this file may refer to (file-wide, which is permissive for
    loop and lambda variables, but enough to catch typos and stale names)."""
    from lark import Token

    tree = syntax_tree(path)
    names: set[str] = set()
    for kind in ("param", "var", "resource", "module", "custom_type", "custom_func"):
        names.update(declared(path, kind))
    for child in tree.find_data("child_resource"):
        names.add(_name(child))
    for loop in ("loop_array", "loop_array_index", "loop_object"):
        for node in tree.find_data(loop):
            names.update(str(k) for k in node.children if isinstance(k, Token) and k.type == "STRING")
    for node in tree.find_data("lambda_expression"):
        for arg in node.children[:-1]:
            names.update(references(arg))
    return names


def referenced_identifiers(path: Path) -> set[str]:
    from lark import Tree

    tree = syntax_tree(path)
    found: set[str] = set()
    for element in tree.children:
        if isinstance(element, Tree):
            found.update(references(element))
    return found


# --------------------------------------------------------------------------------------------
# Syntax, declarations and module wiring


@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_bicep_file_parses(path: Path) -> None:
    assert doc(path)
    assert syntax_tree(path)


def test_expected_bicep_files_exist() -> None:
    expected = {
        "infra/main.bicep",
        "infra/app/identity.bicep",
        "infra/app/monitoring.bicep",
        "infra/app/storage-vault.bicep",
        "infra/app/storage-staging.bicep",
        "infra/app/storage-host.bicep",
        "infra/app/functionapp.bicep",
        "infra/app/rbac.bicep",
    }
    assert expected <= {rel(p) for p in BICEP_FILES}


@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_no_undeclared_identifiers(path: Path) -> None:
    assert referenced_identifiers(path) - declared_identifiers(path) == set()


@pytest.mark.parametrize("kind", ["param", "var"])
@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_no_unused_declarations(path: Path, kind: str) -> None:
    assert set(declared(path, kind)) - referenced_identifiers(path) == set()


@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_every_parameter_has_a_description(path: Path) -> None:
    params = doc(path)["parameters"]
    undocumented = [
        name for name, p in params.items() if not any(d["type"] == "description" for d in p["decorators"])
    ]
    assert undocumented == []


@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_api_versions_are_pinned_and_stable(path: Path) -> None:
    versions = {name: r["api_version"] for name, r in doc(path).get("resources", {}).items()}
    assert {n: v for n, v in versions.items() if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", v)} == {}


MODULES = [(path, name) for path in BICEP_FILES for name in collected(path).get("modules", {})]
MODULE_IDS = [f"{rel(p)}:{n}" for p, n in MODULES]


def module_target(path: Path, name: str) -> Path:
    return path.parent / doc(path)["modules"][name]["detail"]["path"]


def test_main_uses_modules() -> None:
    assert {rel(module_target(p, n)) for p, n in MODULES} == {rel(p) for p in BICEP_FILES} - {
        "infra/main.bicep"
    }


@pytest.mark.parametrize(("path", "name"), MODULES, ids=MODULE_IDS)
def test_module_is_a_local_file(path: Path, name: str) -> None:
    assert doc(path)["modules"][name]["type"] == "local"  # no registry modules: not checkable offline
    assert module_target(path, name).is_file()


@pytest.mark.parametrize(("path", "name"), MODULES, ids=MODULE_IDS)
def test_module_params_are_declared_by_the_module(path: Path, name: str) -> None:
    passed = set(body(doc(path)["modules"][name]["config"]).get("params", {}))
    assert passed - set(doc(module_target(path, name))["parameters"]) == set()


@pytest.mark.parametrize(("path", "name"), MODULES, ids=MODULE_IDS)
def test_module_required_params_are_passed(path: Path, name: str) -> None:
    passed = set(body(doc(path)["modules"][name]["config"]).get("params", {}))
    params = doc(module_target(path, name))["parameters"]
    required = {p for p, spec in params.items() if spec["default"] is None}
    assert required - passed == set()


# --------------------------------------------------------------------------------------------
# Security


def _at(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = config[part]
    return config


def resources_of_type(resource_type: str) -> list[tuple[Path, str, dict[str, Any]]]:
    return [
        (path, name, body(r["config"]))
        for path in BICEP_FILES
        for name, r in collected(path).get("resources", {}).items()
        if r["type"] == resource_type and not r["existing"]
    ]


STORAGE_ACCOUNTS = resources_of_type("Microsoft.Storage/storageAccounts")
STORAGE_RULES = {
    "kind": "StorageV2",
    "properties.isHnsEnabled": False,  # page blobs are not supported with the hierarchical namespace
    "properties.minimumTlsVersion": "TLS1_2",
    "properties.allowSharedKeyAccess": False,
    "properties.allowBlobPublicAccess": False,
    "properties.supportsHttpsTrafficOnly": True,
}


def test_storage_accounts_are_declared_where_expected() -> None:
    assert sorted(rel(p) for p, _, _ in STORAGE_ACCOUNTS) == [
        "infra/app/storage-host.bicep",
        "infra/app/storage-staging.bicep",
        "infra/app/storage-vault.bicep",
    ]


@pytest.mark.parametrize("prop", sorted(STORAGE_RULES))
@pytest.mark.parametrize("account", STORAGE_ACCOUNTS, ids=[f"{rel(p)}:{n}" for p, n, _ in STORAGE_ACCOUNTS])
def test_storage_account_security(account: tuple[Path, str, dict[str, Any]], prop: str) -> None:
    assert _at(account[2], prop) == STORAGE_RULES[prop]


def test_vault_blob_soft_delete_is_on() -> None:
    (blob_service,) = [
        c
        for p, _, c in resources_of_type("Microsoft.Storage/storageAccounts/blobServices")
        if p.name == "storage-vault.bicep"
    ]
    assert blob_service["properties"]["deleteRetentionPolicy"]["enabled"] is True


def test_claim_check_blobs_expire() -> None:
    (policy,) = [c for _, _, c in resources_of_type("Microsoft.Storage/storageAccounts/managementPolicies")]
    (rule,) = policy["properties"]["policy"]["rules"]
    assert rule["enabled"] is True
    assert rule["definition"]["filters"]["prefixMatch"] == ["${claimCheckContainer.name}/"]
    assert "daysAfterModificationGreaterThan" in rule["definition"]["actions"]["baseBlob"]["delete"]


def test_application_insights_refuses_local_auth() -> None:
    (component,) = resources_of_type("Microsoft.Insights/components")
    assert component[2]["properties"]["DisableLocalAuth"] is True


SECRET_WORDS = {"key", "keys", "secret", "secrets", "password", "sas", "token", "connectionstring"}
SECRET_VALUES = re.compile(
    r"listkeys|listaccountsas|listservicesas|connectionstring|accountkey|password|secret|sharedaccess"
)
OUTPUTS = [(path, name) for path in BICEP_FILES for name in collected(path).get("outputs", {})]


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").lower()
    return set(spaced.split()) | {name.lower().replace("_", "")}


@pytest.mark.parametrize(("path", "name"), OUTPUTS, ids=[f"{rel(p)}:{n}" for p, n in OUTPUTS])
def test_output_is_not_a_secret(path: Path, name: str) -> None:
    assert _words(name) & SECRET_WORDS == set()
    assert not SECRET_VALUES.search(json.dumps(doc(path)["outputs"][name]).lower())


@pytest.mark.parametrize("path", BICEP_FILES, ids=rel)
def test_no_key_based_access_anywhere(path: Path) -> None:
    # The parsed view, so that comments explaining what is *not* done don't count.
    text = json.dumps(doc(path)).lower()
    assert not re.search(r"listkeys|accountkey=|defaultendpointsprotocol|listaccountsas|listservicesas", text)


# Role definition ids used in infra/ and the role each must be commented with.
ROLE_NAMES = {
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
    "ba92f5b4-2d11-453d-a403-e96b0029c9fe": "Storage Blob Data Contributor",
    "db58b8e5-c6ad-4a2a-8342-4190687cbf4a": "Storage Blob Delegator",
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88": "Storage Queue Data Contributor",
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3": "Storage Table Data Contributor",
    "76199698-9eea-4c19-bc75-cec21354c6b6": "Storage Table Data Reader",
    "3913510d-42f4-4e42-8a64-420c390055eb": "Monitoring Metrics Publisher",
}
GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
GUID_LINES = [
    (path, line) for path in BICEP_FILES for line in path.read_text().splitlines() if GUID.search(line)
]


def guid_in(line: str) -> str:
    match = GUID.search(line)
    assert match, line
    return match[0]


@pytest.mark.parametrize(("path", "line"), GUID_LINES, ids=[guid_in(line) for _, line in GUID_LINES])
def test_role_guid_is_a_known_role_named_in_a_comment(path: Path, line: str) -> None:
    guid = guid_in(line).lower()
    assert guid in ROLE_NAMES, f"{rel(path)}: unknown role id {guid}"
    code, _, comment = line.partition("//")
    assert guid in code and ROLE_NAMES[guid] in comment


ROLE_ASSIGNMENTS = resources_of_type("Microsoft.Authorization/roleAssignments")


@pytest.mark.parametrize(
    "assignment", ROLE_ASSIGNMENTS, ids=[f"{rel(p)}:{n}" for p, n, _ in ROLE_ASSIGNMENTS]
)
def test_role_assignment_name_is_a_stable_guid(assignment: tuple[Path, str, dict[str, Any]]) -> None:
    assert assignment[2]["name"]["function"]["type"] == "guid"


def _conditional(expr: Any) -> tuple[str, Any, Any]:
    ops = expr["operator"]["operands"]
    assert expr["operator"]["type"] == "conditional"
    return ops["condition"], ops["true_value"], ops["false_value"]


@pytest.mark.parametrize(
    ("roles_var", "expected"),
    [
        ("vaultContainerRoles", ["storageBlobDataContributor"]),
        ("vaultTableRoles", ["storageTableDataContributor"]),
        ("vaultReadTableRoles", ["storageTableDataReader"]),
        ("hostRoles", ["storageBlobDataOwner", "storageQueueDataContributor", "storageTableDataContributor"]),
    ],
)
def test_role_sets(roles_var: str, expected: list[str]) -> None:
    assert doc(RBAC)["variables"][roles_var]["value"] == expected


def test_the_vault_account_scope_carries_only_the_delegator_for_the_app() -> None:
    # The delegation key for user-delegation SAS can only be asked for at account scope, and
    # the Delegator role reads no data; the data roles are on the containers and tables.
    condition, narrow, wide = _conditional(doc(RBAC)["variables"]["vaultAccountRoles"]["value"])
    assert condition == "narrowVaultScopes" and narrow == ["storageBlobDelegator"]
    assert wide == ["storageBlobDataContributor", "storageBlobDelegator", "storageTableDataContributor"]


def test_no_queue_role_on_the_vault_account() -> None:
    """The code uses no queue there (VaultStorage has no queue endpoint setting)."""
    variables = json.dumps(
        {k: v for k, v in doc(RBAC)["variables"].items() if k.startswith(("vault", "container", "table"))}
    )
    assert "storageQueueDataContributor" not in variables
    assert not [n for n in app_config.VAULT_SERVICE_SUFFIXES if "queue" in n.lower()]


@pytest.mark.parametrize(
    ("assignment", "scope"),
    [
        ("vaultContainerAssignments", "vaultContainers"),
        ("vaultTableAssignments", "vaultTables"),
        ("vaultReadTableAssignments", "vaultReadTables"),
    ],
)
def test_the_apps_vault_data_roles_are_scoped_to_its_containers_and_tables(
    assignment: str, scope: str
) -> None:
    config = body(doc(RBAC)["resources"][assignment]["config"])
    assert config["scope"]["operator"]["operands"]["operand_1"] == scope
    existing = doc(RBAC)["resources"][scope]
    assert existing["existing"] is True
    assert existing["type"].endswith(("/containers", "/tables"))


def test_the_app_gets_narrow_scopes_on_the_vault_and_the_developer_the_account() -> None:
    app, deployer = main_module("appRoles")["params"], main_module("deployerRoles")["params"]
    assert app["narrowVaultScopes"] is True and deployer["narrowVaultScopes"] is False
    assert app["vaultContainerNames"] == ["streamsContainerName", "claimCheckContainerName"]
    tables = [_render(t, tablePrefix="mv") for t in doc(MAIN)["variables"][app["vaultTableNames"]]["value"]]
    assert set(tables) == APP_TABLES
    read = [_render(t, tablePrefix="mv") for t in doc(MAIN)["variables"][app["vaultReadTableNames"]]["value"]]
    assert (
        set(read) == APP_READ_TABLES and "vaultReadTableNames" not in main_module("deployerRoles")["params"]
    )


def _app_tables() -> set[str]:
    from vault_app.config import load_settings
    from vault_app.services import Services
    from vault_core.azure import azurite_connection_string

    services = Services(load_settings({"VaultStorage": azurite_connection_string()}))  # no request is sent
    index = services.vault.index
    return {index.catalog.name, index.index.name, services.batches.name}


APP_TABLES = {"mvcatalog", "mvindex", "mvbatches"}
APP_READ_TABLES = {"mvcheckpoints"}
"""Tables the app reads and never writes (the explorer's consumer groups)."""


def test_the_app_tables_are_the_ones_the_code_uses() -> None:
    assert _app_tables() == APP_TABLES
    from vault_app.config import load_settings
    from vault_app.services import Services
    from vault_core.azure import azurite_connection_string

    services = Services(load_settings({"VaultStorage": azurite_connection_string()}))  # no request is sent
    assert {services.checkpoints.table.name} == APP_READ_TABLES


# --------------------------------------------------------------------------------------------
# Network isolation (vnetEnabled)

NETWORK = INFRA / "app" / "network.bicep"
ENDPOINTS = {"vaultEndpoints": "vault", "stagingEndpoints": "staging", "hostEndpoints": "hostStorage"}


def test_network_isolation_is_off_by_default() -> None:
    param = doc(MAIN)["parameters"]["vnetEnabled"]
    assert param["type"] == "bool" and param["default"] is False


@pytest.mark.parametrize("module", ["network", "vaultEndpoints", "hostEndpoints"])
def test_the_network_pieces_exist_only_when_enabled(module: str) -> None:
    assert doc(MAIN)["modules"][module]["config"]["condition"] == "vnetEnabled"


def test_one_staging_endpoint_module_per_staging_account_when_enabled() -> None:
    loop = doc(MAIN)["modules"]["stagingEndpoints"]["config"]["loop_type"]
    assert _conditional(loop["detail"]["array_name"]) == ("vnetEnabled", "stagingAccountNames", [])


@pytest.mark.parametrize("module", ["vault", "staging", "hostStorage"])
def test_every_storage_account_is_private_when_enabled(module: str) -> None:
    assert main_module(module)["params"]["privateOnly"] == "vnetEnabled"


@pytest.mark.parametrize("account", STORAGE_ACCOUNTS, ids=[f"{rel(p)}:{n}" for p, n, _ in STORAGE_ACCOUNTS])
def test_a_private_account_refuses_public_network_access(account: tuple[Path, str, dict[str, Any]]) -> None:
    props = account[2]["properties"]
    assert _conditional(props["publicNetworkAccess"]) == ("privateOnly", "Disabled", "Enabled")
    assert _conditional(props["networkAcls"]["defaultAction"]) == ("privateOnly", "Deny", "Allow")
    assert _conditional(props["networkAcls"]["bypass"]) == ("privateOnly", "None", "AzureServices")
    assert "privateOnly" in doc(account[0])["parameters"]


def test_the_function_app_sends_its_outbound_traffic_through_the_vnet() -> None:
    site = _only("Microsoft.Web/sites")
    assert _conditional(site["properties"]["virtualNetworkSubnetId"]) == (
        {"function": {"type": "empty", "parameters": {"item_to_test": "appSubnetId"}}},
        None,
        "appSubnetId",
    )
    condition, subnet, none = _conditional(main_module("functionApp")["params"]["appSubnetId"])
    assert condition == "vnetEnabled" and none == ""
    assert json.dumps(subnet).count("appSubnetId") == 1 and '"network"' in json.dumps(subnet)


def test_the_app_subnet_is_delegated_for_flex_consumption_and_zones_cover_every_service() -> None:
    (vnet,) = [c for p, _, c in resources_of_type("Microsoft.Network/virtualNetworks") if p == NETWORK]
    app_subnet = next(s for s in vnet["properties"]["subnets"] if s["name"] == "app")
    assert [d["properties"]["serviceName"] for d in app_subnet["properties"]["delegations"]] == [
        "Microsoft.App/environments"
    ]
    assert doc(NETWORK)["variables"]["services"]["value"] == ["blob", "queue", "table"]
    zone = body(doc(NETWORK)["resources"]["zones"]["config"])
    assert zone["name"].startswith("privatelink.${service}.")


def _services(prefix: str) -> set[str]:
    return {
        s.name.split("__")[1].removesuffix("ServiceUri")
        for s in app_settings()
        if s.name.startswith(prefix + "__") and s.name.endswith("ServiceUri")
    }


@pytest.mark.parametrize(
    ("module", "connection"),
    [
        ("vaultEndpoints", "VaultStorage"),
        ("stagingEndpoints", "VaultStaging${i}"),
        ("hostEndpoints", "AzureWebJobsStorage"),
    ],
)
def test_each_account_gets_an_endpoint_for_every_service_the_app_uses_there(
    module: str, connection: str
) -> None:
    assert set(main_module(module)["params"]["services"]) == _services(connection)


# --------------------------------------------------------------------------------------------
# Function App


def _only(resource_type: str, path: Path = FUNCTION_APP) -> dict[str, Any]:
    (config,) = [c for p, _, c in resources_of_type(resource_type) if p == path]
    return config


@pytest.mark.parametrize(
    ("resource_type", "path", "expected"),
    [
        ("Microsoft.Web/serverfarms", "sku.name", "FC1"),
        ("Microsoft.Web/serverfarms", "sku.tier", "FlexConsumption"),
        ("Microsoft.Web/serverfarms", "properties.reserved", True),
        ("Microsoft.Web/sites", "kind", "functionapp,linux"),
        ("Microsoft.Web/sites", "identity.type", "UserAssigned"),
        ("Microsoft.Web/sites", "properties.httpsOnly", True),
        ("Microsoft.Web/sites", "properties.functionAppConfig.runtime.name", "python"),
        ("Microsoft.Web/sites", "properties.functionAppConfig.runtime.version", "3.11"),
        ("Microsoft.Web/sites", "properties.functionAppConfig.deployment.storage.type", "blobContainer"),
        (
            "Microsoft.Web/sites",
            "properties.functionAppConfig.deployment.storage.authentication.type",
            "UserAssignedIdentity",
        ),
    ],
)
def test_flex_consumption_app(resource_type: str, path: str, expected: Any) -> None:
    assert _at(_only(resource_type), path) == expected


def test_instance_count_is_bounded() -> None:
    site = _only("Microsoft.Web/sites")
    param = site["properties"]["functionAppConfig"]["scaleAndConcurrency"]["maximumInstanceCount"]
    decorators = {d["type"]: d["argument"] for d in doc(FUNCTION_APP)["parameters"][param]["decorators"]}
    assert 1 <= decorators["min_value"] <= decorators["max_value"] <= 1000


@dataclass(frozen=True)
class AppSetting:
    name: str  # may contain ${<index>} when generated once per staging account
    value: Any  # pycep expression
    index: str | None = None  # loop variable the name is generated with
    count: Any = None  # the loop's range count expression


def _settings_in(expr: Any, variables: dict[str, Any], index: str | None, count: Any) -> Iterator[AppSetting]:
    if isinstance(expr, str) and expr in variables:
        yield from _settings_in(variables[expr]["value"], variables, index, count)
    elif isinstance(expr, list):
        for item in expr:
            yield from _settings_in(item, variables, index, count)
    elif isinstance(expr, dict) and "loop_type" in expr:
        loop = expr["loop_type"]
        assert loop["type"] == "array", "staging settings: use [for i in range(0, count): ...]"
        source = loop["detail"]["array_name"]["function"]
        assert source["type"] == "range" and source["parameters"]["start_index"] == 0
        yield from _settings_in(
            expr["config"], variables, loop["detail"]["item_name"], source["parameters"]["count"]
        )
    elif isinstance(expr, dict) and set(expr) == {"name", "value"}:
        yield AppSetting(expr["name"], expr["value"], index, count)
    elif isinstance(expr, dict) and "function" in expr:
        for arg in expr["function"]["parameters"].values():
            yield from _settings_in(arg, variables, index, count)


@functools.cache
def app_settings() -> tuple[AppSetting, ...]:
    site = _only("Microsoft.Web/sites")
    expr = site["properties"]["siteConfig"]["appSettings"]
    return tuple(_settings_in(expr, doc(FUNCTION_APP)["variables"], None, None))


def setting_names(staging_accounts: int) -> list[str]:
    names = []
    for s in app_settings():
        if s.index is None:
            names.append(s.name)
        else:
            names += [s.name.replace(f"${{{s.index}}}", str(i)) for i in range(staging_accounts)]
    assert not [n for n in names if "${" in n], "setting names may only interpolate the loop index"
    return names


HOST_PREFIXES = (
    "AzureWebJobsStorage",
    "APPLICATIONINSIGHTS_",
    "FUNCTIONS_",
    "AzureFunctionsJobHost",
    "WEBSITE_",
)


def app_names(staging_accounts: int) -> list[str]:
    return [n for n in setting_names(staging_accounts) if not n.startswith(HOST_PREFIXES)]


@pytest.mark.parametrize("staging_accounts", [1, 2, 3])
def test_bicep_sets_every_setting_the_app_reads(staging_accounts: int) -> None:
    expected = set(app_config.PLAIN_SETTINGS) | set(app_config.identity_setting_names(staging_accounts))
    assert expected - set(app_names(staging_accounts)) == set()


@pytest.mark.parametrize("staging_accounts", [1, 2, 3])
def test_app_reads_every_setting_bicep_sets(staging_accounts: int) -> None:
    expected = set(app_config.PLAIN_SETTINGS) | set(app_config.identity_setting_names(staging_accounts))
    assert set(app_names(staging_accounts)) - expected == set()


@pytest.mark.parametrize("staging_accounts", [1, 2])
def test_no_setting_is_set_twice(staging_accounts: int) -> None:
    names = setting_names(staging_accounts)
    assert len(names) == len(set(names))


def test_staging_settings_loop_over_the_advertised_staging_account_count() -> None:
    (accounts,) = [s for s in app_settings() if s.name == app_config.STAGING_ACCOUNTS]
    looped = {json.dumps(s.count) for s in app_settings() if s.index is not None}
    assert looped == {json.dumps(accounts.value["function"]["parameters"]["value_to_convert"])}


@pytest.mark.parametrize(
    "name",
    [
        "AzureWebJobsStorage__credential",
        "AzureWebJobsStorage__clientId",
        "AzureWebJobsStorage__blobServiceUri",
        "AzureWebJobsStorage__queueServiceUri",
        "AzureWebJobsStorage__tableServiceUri",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    ],
)
def test_host_setting_is_set(name: str) -> None:
    assert name in setting_names(1)


def collected_settings() -> tuple[AppSetting, ...]:
    try:
        return app_settings()
    except Exception:  # reported by the tests that call app_settings() directly
        return ()


CONNECTION_SETTINGS = [s for s in collected_settings() if s.name.endswith(("__credential", "__clientId"))]


@pytest.mark.parametrize("setting", CONNECTION_SETTINGS, ids=[s.name for s in CONNECTION_SETTINGS])
def test_connections_use_the_user_assigned_identity(setting: AppSetting) -> None:
    if setting.name.endswith("__credential"):
        assert setting.value == "managedidentity"
    else:
        assert setting.value == "identityClientId"
        assert "identityClientId" in doc(FUNCTION_APP)["parameters"]


def test_application_insights_authenticates_with_entra_id() -> None:
    (auth,) = [s for s in app_settings() if s.name == "APPLICATIONINSIGHTS_AUTHENTICATION_STRING"]
    assert auth.value == "Authorization=AAD;ClientId=${identityClientId}"


PLAIN = [s for s in collected_settings() if s.name in app_config.PLAIN_SETTINGS]


@pytest.mark.parametrize("setting", PLAIN, ids=[s.name for s in PLAIN])
def test_plain_setting_comes_from_a_parameter(setting: AppSetting) -> None:
    value = setting.value
    if isinstance(value, dict):
        assert value["function"]["type"] == "string"
        value = value["function"]["parameters"]["value_to_convert"]
    fa = doc(FUNCTION_APP)
    assert value in fa["parameters"] or value in fa["variables"]


# --------------------------------------------------------------------------------------------
# main.bicep wiring


def main_module(name: str) -> dict[str, Any]:
    return body(doc(MAIN)["modules"][name]["config"])


@pytest.mark.parametrize(
    ("module_a", "param_a", "module_b", "param_b"),
    [
        ("staging", "queueCount", "functionApp", "stagingQueueCount"),
        ("staging", "queuePrefix", "functionApp", "queuePrefix"),
        ("vault", "claimCheckContainerName", "functionApp", "claimCheckContainerName"),
        ("appRoles", "stagingAccountNames", "functionApp", "stagingAccountNames"),
    ],
)
def test_staging_tier_and_app_get_the_same_value(
    module_a: str, param_a: str, module_b: str, param_b: str
) -> None:
    assert main_module(module_a)["params"][param_a] == main_module(module_b)["params"][param_b]


def test_one_staging_module_per_staging_account_name() -> None:
    loop = doc(MAIN)["modules"]["staging"]["config"]["loop_type"]
    assert loop["detail"]["array_name"] == main_module("functionApp")["params"]["stagingAccountNames"]


def _render(template: str, **values: Any) -> str:
    for name, value in values.items():
        template = template.replace(f"${{{name}}}", str(value))
    return template


@pytest.mark.parametrize(("prefix", "count"), [("mv-staging", 4), ("other", 2)])
def test_staging_queue_names_are_the_ones_the_app_uses(prefix: str, count: int) -> None:
    queues = {
        name: body(r["config"])["name"]
        for name, r in doc(STAGING)["resources"].items()
        if r["type"].endswith("/queues")
    }
    app_queues = app_config.VaultSettings(env={}, queues_per_account=count, queue_prefix=prefix).queue_names
    assert [_render(queues["queues"], queuePrefix=prefix, i=i) for i in range(count)] == app_queues
    assert [_render(queues["poisonQueues"], queuePrefix=prefix, i=i) for i in range(count)] == [
        f"{q}-poison" for q in app_queues
    ]


def test_tables_use_the_app_prefix() -> None:
    tables = doc(MAIN)["variables"]["tableNames"]["value"]
    expected = {"mvcatalog", "mvindex", "mvbatches", "mvcheckpoints"}
    assert {_render(t, tablePrefix="mv") for t in tables} == expected


def test_resource_token_is_derived_from_subscription_environment_and_location() -> None:
    token = doc(MAIN)["variables"]["resourceToken"]["value"]["function"]  # pycep snake-cases names
    assert token["type"] == "to_lower"
    unique = token["parameters"]["string_to_change"]["function"]
    assert unique["type"] == "unique_string"
    args = list(unique["parameters"].values())
    assert args[0]["operator"]["operands"]["operand_1"]["function"]["type"] == "subscription"
    assert args[1:] == ["environmentName", "location"]


@pytest.mark.parametrize(
    "name",
    [
        "AZURE_LOCATION",
        "AZURE_RESOURCE_GROUP",
        "AZURE_FUNCTION_APP_NAME",
        "VAULT_API_URL",
        "VAULT_STORAGE_ACCOUNT",
        "VAULT_STAGING_ACCOUNT_NAMES",
    ],
)
def test_main_output_for_azd(name: str) -> None:
    assert name in doc(MAIN)["outputs"]


def test_main_outputs_are_upper_snake_case() -> None:
    assert [n for n in doc(MAIN)["outputs"] if not re.fullmatch(r"[A-Z][A-Z0-9_]*", n)] == []


def test_api_url_points_at_the_functions_api_route() -> None:
    url = doc(MAIN)["outputs"]["VAULT_API_URL"]["value"]
    assert url.startswith("https://${") and url.endswith("}/api")


# --------------------------------------------------------------------------------------------
# azd: main.parameters.json and azure.yaml


@functools.cache
def parameters() -> dict[str, Any]:
    return json.loads(PARAMETERS.read_text())["parameters"]


def test_parameters_file_passes_only_declared_parameters() -> None:
    assert set(parameters()) - set(doc(MAIN)["parameters"]) == set()


def test_parameters_file_passes_every_required_parameter() -> None:
    required = {n for n, p in doc(MAIN)["parameters"].items() if p["default"] is None}
    assert required - set(parameters()) == set()


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("environmentName", "${AZURE_ENV_NAME}"),
        ("location", "${AZURE_LOCATION}"),
        ("principalId", "${AZURE_PRINCIPAL_ID}"),
    ],
)
def test_parameters_file_uses_azd_variables(param: str, value: str) -> None:
    assert parameters()[param]["value"] == value


def _defaulted() -> list[tuple[str, str]]:
    try:
        passed = parameters()
    except ValueError:  # reported by the tests that read it directly
        return []
    return [(n, p["value"]) for n, p in passed.items() if re.fullmatch(r"\$\{\w+=.*\}", p["value"])]


DEFAULTED = _defaulted()


@pytest.mark.parametrize(("param", "value"), DEFAULTED, ids=[n for n, _ in DEFAULTED])
def test_parameters_file_defaults_match_bicep_defaults(param: str, value: str) -> None:
    fallback = value[2:-1].split("=", 1)[1]
    assert fallback == str(doc(MAIN)["parameters"][param]["default"])


@functools.cache
def azure_yaml() -> dict[str, Any]:
    return yaml.safe_load(AZURE_YAML.read_text())


def test_azure_yaml_points_at_the_bicep() -> None:
    infra = azure_yaml()["infra"]
    assert infra["provider"] == "bicep"
    assert (ROOT / infra["path"] / f"{infra['module']}.bicep") == MAIN


def test_azure_yaml_declares_the_function_service() -> None:
    assert azure_yaml()["services"] == {"api": {"project": ".", "language": "python", "host": "function"}}


def test_function_app_is_tagged_with_the_azure_yaml_service() -> None:
    assert doc(MAIN)["variables"]["serviceName"]["value"] in azure_yaml()["services"]
    assert main_module("functionApp")["params"]["serviceName"] == "serviceName"


def test_ci_workflow_is_valid_yaml() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["jobs"]


@pytest.mark.parametrize(
    "pattern",
    # vault_local holds the development token issuer: it must never reach a deployment.
    [".venv", "node_modules", "tests", "bench", "docs", ".git", "__azurite*", "vault_local"],
)
def test_funcignore_excludes(pattern: str) -> None:
    assert pattern in FUNCIGNORE.read_text().splitlines()


# -- App Service Authentication ------------------------------------------------------------------
def test_easy_auth_is_configured_with_the_registration_whenever_the_app_trusts_its_header() -> None:
    """VAULT_EASY_AUTH=true makes the app trust X-MS-CLIENT-PRINCIPAL, which only App Service
    Authentication sets (and strips from what clients send): the setting is true exactly when
    this deployment configures Easy Auth, with the app registration's client id and issuer."""
    (setting,) = [s for s in app_settings() if s.name == "VAULT_EASY_AUTH"]
    assert setting.value == {"function": {"type": "string", "parameters": {"value_to_convert": "easyAuthOn"}}}
    on = doc(FUNCTION_APP)["variables"]["easyAuthOn"]["value"]["operator"]
    assert on["type"] == "and" and on["operands"]["operand_1"] == "easyAuth"
    needs_client = on["operands"]["operand_2"]["operator"]
    assert needs_client["type"] == "not"
    assert needs_client["operands"]["bool_value"] == {
        "function": {"type": "empty", "parameters": {"item_to_test": "authClientId"}}
    }
    (resource,) = [
        r["config"]
        for r in collected(FUNCTION_APP)["resources"].values()
        if r["type"] == "Microsoft.Web/sites/config"
    ]
    assert resource["condition"] == "easyAuthOn"
    config = resource["config"]
    assert config["name"] == "authsettingsV2" and config["properties"]["platform"]["enabled"] is True
    aad = config["properties"]["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] is True and aad["registration"]["clientId"] == "authClientId"
    assert aad["registration"]["openIdIssuer"].endswith("${authTenantId}/v2.0")
    assert aad["validation"]["allowedAudiences"] == ["authClientId", "api://${authClientId}"]
    # Keys and anonymous reads stay the app's to judge: Easy Auth lets such requests through.
    assert config["properties"]["globalValidation"]["unauthenticatedClientAction"] == "AllowAnonymous"


def test_main_passes_the_app_registration_to_easy_auth() -> None:
    (module,) = [m for m in collected(MAIN)["modules"].values() if "easyAuth" in body(m["config"])["params"]]
    params = body(module["config"])["params"]
    assert params["easyAuth"] == "easyAuth" and params["authClientId"] == "authClientId"
