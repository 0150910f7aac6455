"""docs/FORMAT.md and docs/ARCHITECTURE.md say what the code does: numbers, offsets, keys, examples.

Pure and fast: no storage. Each test reads a marked example or a table from a document and
compares it with the code, so a change on either side that the other does not follow fails here.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vault_core import pagelog, unitformat
from vault_core import recordformat as fmt
from vault_core.index import minute_key, offset_key, time_key
from vault_core.pagelog import CommitState, CommittedBatch
from vault_core.recordformat import NewMessage, encode, message_id
from vault_core.stagedunits import COPY_FRACTION, StagedUnits
from vault_core.unitformat import UNIT_TARGET_BYTES, UNIT_TARGET_MESSAGES
from vault_core.writer import WriterSettings

ROOT = Path(__file__).resolve().parent.parent
FORMAT_MD = (ROOT / "docs" / "FORMAT.md").read_text(encoding="utf-8")
ARCHITECTURE_MD = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
HOST_JSON = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
GOLDEN = (ROOT / "tests" / "data" / "record-v1.bin").read_bytes()
TS = 1_700_000_000_000

Table = tuple[list[str], list[list[str]]]


# -- reading Markdown ---------------------------------------------------------------------------
def tables(text: str) -> list[Table]:
    """Every pipe table: its header cells and its body rows (cells stripped)."""
    found: list[Table] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2:
            rows = [[c.strip() for c in row.strip().strip("|").split("|")] for row in block]
            found.append((rows[0], [r for r in rows[2:]]))
        block = []
    return found


def after(text: str, marker: str) -> str:
    """The text after an HTML comment marker such as ``<!-- record-v1.bin -->``."""
    tag = f"<!-- {marker} -->"
    assert text.count(tag) == 1, f"marker {tag} must occur exactly once"
    return text.split(tag, 1)[1]


def first_code_block(text: str) -> str:
    match = re.search(r"```[a-z]*\n(.*?)\n```", text, re.S)
    assert match, "no fenced code block"
    return match.group(1)


def first_table(text: str) -> Table:
    return tables(text)[0]


def code(cell: str) -> str:
    """The content of a cell's (first) backtick span."""
    match = re.search(r"`([^`]*)`", cell)
    assert match, f"no `code` in table cell {cell!r}"
    return match.group(1)


def column(header: list[str], name: str) -> int:
    return header.index(name)


def resolve(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def constant_rows(text: str) -> list[tuple[str, str]]:
    """(value literal, code path) of every row of every table with a Value and a Code column."""
    out = []
    for header, rows in tables(text):
        if "Value" in header and "Code" in header:
            v, c = column(header, "Value"), column(header, "Code")
            out += [(code(row[v]), code(row[c])) for row in rows]
    return out


# -- FORMAT.md: the record ----------------------------------------------------------------------
def test_the_hex_dump_is_the_golden_record() -> None:
    dump = first_code_block(after(FORMAT_MD, "record-v1.bin"))
    assert bytes.fromhex(dump) == GOLDEN
    assert dump == encode([NewMessage(b"hello", "k")], 100, TS).hex(" ")  # the documented command


def test_the_annotated_fields_reassemble_the_golden_record() -> None:
    header, rows = first_table(after(FORMAT_MD, "record-v1.bin"))
    assert header == ["Offset", "Bytes", "Field", "Decoded"]
    position = 0
    for row in rows:
        offset, data, field = int(row[0]), bytes.fromhex(code(row[1])), code(row[2])
        assert offset == position, f"{field} documented at {offset}; the field before ends at {position}"
        assert GOLDEN[offset : offset + len(data)] == data, field
        if field not in ("key", "value"):
            assert offset == getattr(fmt, f"{field.upper()}_OFFSET"), field
        position += len(data)
    assert position == len(GOLDEN)


def test_the_record_field_table_matches_the_header_struct() -> None:
    layout = ["Offset", "Size", "Type", "Field", "Meaning"]
    [(_, rows)] = [t for t in tables(FORMAT_MD) if t[0] == layout]
    type_of = {"4s": "byte[4]", "I": "u32", "B": "u8", "H": "u16", "Q": "u64", "q": "i64"}
    struct_types = [type_of[t] for t in re.findall(r"\d*[A-Za-z]", fmt.HEADER.format.lstrip("<>=!@"))]
    header_rows = [r for r in rows if r[1].isdigit()]
    assert [r[2] for r in header_rows] == struct_types
    end = 0  # where the previous field ends: each field must start there
    derivation = None
    for offset_cell, size_cell, type_cell, field_cell, _ in header_rows:
        field, size = code(field_cell), int(size_cell)
        m = re.fullmatch(r"(\d+)(?: = (\d+) \+ (\d+))?", offset_cell)
        assert m, f"offset of {field} must read 'N' or 'N = previous + size': {offset_cell!r}"
        offset = int(m.group(1))
        assert offset == end, field
        if derivation is None:
            assert m.group(2) is None, field
        else:
            assert (int(m.group(2)), int(m.group(3))) == derivation, field
        assert size == struct.calcsize("<" + {v: k for k, v in type_of.items()}[type_cell]), field
        assert offset == getattr(fmt, f"{field.upper()}_OFFSET"), field
        derivation, end = (offset, size), offset + size
    assert derivation is not None
    assert end == fmt.HEADER_SIZE == fmt.HEADER.size == 32
    key_row, value_row = (r for r in rows if not r[1].isdigit())
    assert (code(key_row[3]), code(value_row[3])) == ("key", "value")
    assert key_row[0] == f"{fmt.KEY_OFFSET} = {derivation[0]} + {derivation[1]}"
    assert value_row[0] == f"{fmt.HEADER_SIZE} + key_length"


def test_every_constant_in_format_md_matches_the_code() -> None:
    rows = constant_rows(FORMAT_MD)
    for literal, path in rows:
        assert ast.literal_eval(literal) == resolve(path), f"FORMAT.md says {path} = {literal}"
    documented = {path.rsplit(".", 1)[1] for _, path in rows}
    required = {
        "HEADER_SIZE",
        "MAX_KEY_BYTES",
        "MAX_VALUE_BYTES",
        "MAX_RECORD_BYTES",
        "MAGIC",
        "FORMAT_VERSION",
        "FLAG_COMPRESSION_MASK",
        "FLAG_KEY_IS_TEXT",
        "KNOWN_FLAGS",
        "PAGE_SIZE",
        "MAX_PAGE_WRITE",
    }
    assert required <= documented, f"FORMAT.md's tables lack {sorted(required - documented)}"


def test_the_magic_bytes_and_version_in_the_text_match_the_code() -> None:
    assert fmt.MAGIC.hex(" ").upper() in FORMAT_MD  # "F5 4D 56 4C"
    assert FORMAT_MD.splitlines()[0].endswith(f"Format version {fmt.UNIT_VERSION}")
    assert f"| 8 = 4 + 4 | 1 | u8 | `version` | Record format version: {fmt.FORMAT_VERSION}. |" in FORMAT_MD
    assert f"{fmt.MAX_KEY_BYTES:,}" in FORMAT_MD and f"{fmt.MAX_VALUE_BYTES:,}" in FORMAT_MD


def test_the_sections_are_the_ones_the_code_and_brief_refer_to() -> None:
    headings = re.findall(r"^## (\d+) (.+)$", FORMAT_MD, re.M)
    assert [int(n) for n, _ in headings] == list(range(1, 12))
    titles = dict((int(n), t) for n, t in headings)
    assert titles[2] == "Record" and titles[6] == "Stream blob and commit record" and titles[7] == "Reading"
    assert titles[11] == "Format version 2: units"


# -- FORMAT.md: the version 2 unit (§11) --------------------------------------------------------
GOLDEN_UNIT = (ROOT / "tests" / "data" / "unit-v2.bin").read_bytes()


def test_the_unit_hex_dump_is_the_golden_unit_and_the_documented_command_prints_it() -> None:
    dump = first_code_block(after(FORMAT_MD, "unit-v2.bin"))
    assert bytes.fromhex(dump) == GOLDEN_UNIT
    unit = unitformat.encode_unit([b"k", b"k"], [b"hello", b"world!"], 100, TS, codec=0, key_is_text=True)
    assert dump == unit.hex(" ")
    command = re.findall(r'-c "(.*)"', FORMAT_MD.split("### 11.9 Worked examples", 1)[1])[0]
    assert "encode_unit([b'k', b'k'], [b'hello', b'world!'], 100, 1_700_000_000_000, codec=0" in command


def test_the_annotated_unit_reassembles_the_golden_unit_and_decodes_as_described() -> None:
    header, rows = tables(after(FORMAT_MD, "unit-v2.bin"))[0]
    assert header == ["Offset", "Bytes", "Field", "Decoded"]
    position = 0
    for row in rows:
        offset, data, field = int(row[0]), bytes.fromhex(code(row[1])), code(row[2])
        assert offset == position, field
        assert GOLDEN_UNIT[offset : offset + len(data)] == data, field
        if hasattr(unitformat, f"{field.upper()}_OFFSET"):
            assert offset == getattr(unitformat, f"{field.upper()}_OFFSET"), field
        position += len(data)
    assert position == len(GOLDEN_UNIT) == 75
    messages, end = fmt.decode(GOLDEN_UNIT, 100, complete=True)
    assert [(m.offset, m.id, m.key, m.value) for m in messages] == [
        (100, "018bcfe56800000000000064", b"k", b"hello"),
        (101, "018bcfe56800000000000065", b"k", b"world!"),
    ]
    assert end == 75 and messages[-1].next_offset == 175


def test_the_unit_field_table_matches_the_unit_header_struct() -> None:
    header, rows = first_table(after(FORMAT_MD, "unit-fields"))
    assert header == ["Offset", "Size", "Type", "Unit field", "Meaning"]
    type_of = {"4s": "byte[4]", "I": "u32", "B": "u8", "H": "u16", "Q": "u64", "q": "i64"}
    fields = re.findall(r"\d*[A-Za-z]", unitformat.UNIT_HEADER.format.lstrip("<"))
    header_rows = [r for r in rows if r[1].isdigit()]
    assert [r[2] for r in header_rows] == [type_of[t] for t in fields]
    end = 0
    for offset_cell, size_cell, _, field_cell, _ in header_rows:
        field = code(field_cell)
        assert int(offset_cell.split(" ")[0]) == end == getattr(unitformat, f"{field.upper()}_OFFSET"), field
        end += int(size_cell)
    assert end == unitformat.UNIT_HEADER_SIZE == 38
    assert code(rows[-1][3]) == "stored" and rows[-1][0] == f"{end} = 30 + 8"


@pytest.mark.parametrize("name", ["unit-v2-zstd.bin", "unit-v2-lz4.bin"])
def test_the_compressed_golden_units_hold_the_documented_events(name: str) -> None:
    data = (ROOT / "tests" / "data" / name).read_bytes()
    messages, end = fmt.decode(data, 0, complete=True)
    assert end == len(data) and len(messages) == 8 and {m.key for m in messages} == {b"orders"}
    described = [  # §11.9's rule for message i
        f'{{"id":{1000 + i},"user":"u-{17 * i % 97:03d}","amount":{13.07 * i:.2f},'
        f'"ts":"2023-11-14T22:13:2{i}Z"}}'
        for i in range(8)
    ]
    assert [m.value.decode() for m in messages] == described
    assert all(f"`{v}`" in FORMAT_MD for v in (described[0], described[7]))
    assert {m.timestamp for m in messages} == {TS} and [m.offset for m in messages] == list(range(8))
    assert f"`{messages[0].id}` to `{messages[7].id}`" in FORMAT_MD
    assert messages[7].next_offset == len(data) and data[9] == (0x09 if "zstd" in name else 0x0A)
    if name == "unit-v2-zstd.bin":
        assert f"the unit is {len(data)} bytes" in FORMAT_MD and data[38:42] == bytes.fromhex("28b52ffd")
        assert f"`crc` 0x{struct.unpack_from('<I', data, 4)[0]:08X}" in FORMAT_MD
    else:
        stored = struct.unpack_from("<I", data, 18)[0]
        assert f"{stored} stored bytes, a\nunit of {len(data)} bytes" in FORMAT_MD


def test_the_corrupt_golden_record_fails_its_checksum_as_section_10_1_says() -> None:
    bad = (ROOT / "tests" / "data" / "record-v1-corrupt.bin").read_bytes()
    assert [i for i in range(len(GOLDEN)) if GOLDEN[i] != bad[i]] == [37] and len(bad) == len(GOLDEN)
    with pytest.raises(fmt.CorruptRecord) as caught:
        fmt.decode(bad, 100, complete=True)
    stored, computed = caught.value.stored_crc, caught.value.computed_crc
    assert f"stored CRC 0x{stored:08X}, computed 0x{computed:08X}" in FORMAT_MD


@pytest.mark.parametrize("name", ["unit-v2-zstd.bin", "unit-v2-lz4.bin", "stream-mixed.bin"])
def test_the_hex_dumps_of_section_11_9_are_the_golden_files(name: str) -> None:
    """An outside decoder is checked against these bytes: they must be the files the tests read."""
    data = (ROOT / "tests" / "data" / name).read_bytes()
    assert bytes.fromhex(first_code_block(after(FORMAT_MD, name))) == data


def test_the_mixed_golden_log_reads_as_section_11_9_says() -> None:
    data = (ROOT / "tests" / "data" / "stream-mixed.bin").read_bytes()
    messages, end = fmt.decode(data, 0, complete=True)
    assert end == len(data) == 214
    assert [(m.offset, m.value) for m in messages] == [
        (o, b'{"n":%d}' % i) for i, o in enumerate([0, 40, 80, 120, 121, 122])
    ]
    assert [m.timestamp for m in messages] == [TS] * 3 + [TS + 1500] * 3
    assert f"`{messages[0].id}` (offset 0) to\n`{messages[-1].id}` (offset 122)" in FORMAT_MD
    assert data[8] == 1 and data[120 + 8] == 2 and data[120 + 9] == 0x08


def test_the_message_id_example() -> None:
    assert first_code_block(after(FORMAT_MD, "message-id")) == message_id(TS, 100)


def test_the_index_key_examples() -> None:
    for key in (offset_key(100), time_key(TS, 100), offset_key(0), time_key(TS, 0), minute_key(TS)):
        assert key in FORMAT_MD, key


# -- FORMAT.md: the commit record ---------------------------------------------------------------
def metadata_table(marker: str) -> dict[str, str]:
    header, rows = first_table(after(FORMAT_MD, marker))
    assert header == ["Key", "Value"]
    return {code(k): code(v) for k, v in rows}


def test_every_metadata_key_of_the_code_is_documented_and_no_other() -> None:
    keys = {v for k, v in vars(pagelog).items() if k.startswith("META_")}
    assert keys, "pagelog.py defines no META_ keys?"
    for key in keys:
        assert f"`{key}`" in FORMAT_MD, f"commit record key {key} is not documented"
    assert set(re.findall(r"\bmv_[a-z_]+", FORMAT_MD)) <= keys


def test_the_commit_example_is_what_the_code_computes() -> None:
    before, after_ = metadata_table("commit:before"), metadata_table("commit:after")
    for meta in (before, after_):  # both tables are commit records the code reads and writes back the same
        assert CommitState.from_metadata(meta, None, 0).to_metadata() == meta
    state = CommitState.from_metadata(before, None, 0)
    batches = [
        ("batch-B", [NewMessage(b"c" * 100, "user-1")]),
        ("batch-C", [NewMessage(b"d" * 200, "user-2"), NewMessage(b"e" * 200, "user-2")]),
    ]
    ts = TS + 1500
    offset, count, expected = state.committed, state.count, []
    for batch_id, messages in batches:
        size = len(encode(messages, offset, ts))
        expected.append(CommittedBatch(batch_id, offset, offset + size, len(messages), ts))
        offset, count = offset + size, count + len(messages)
    new = CommitState(
        committed=offset, count=count, first_ts=state.first_ts, last_ts=ts, batches=tuple(expected)
    )
    assert new.to_metadata() == after_
    start = state.committed // pagelog.PAGE_SIZE * pagelog.PAGE_SIZE
    end = (offset + pagelog.PAGE_SIZE - 1) // pagelog.PAGE_SIZE * pagelog.PAGE_SIZE
    assert f"Put Page bytes {start}–{end - 1}" in FORMAT_MD


# -- ARCHITECTURE.md ------------------------------------------------------------------------------
def find(doc: Any, key: str) -> Any:
    """The value of ``key`` anywhere in a JSON document (host.json keys are unique)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for value in doc.values():
            hit = find(value, key)
            if hit is not None:
                return hit
    return None


def test_the_quoted_host_json_matches_host_json() -> None:
    blocks = re.findall(r"```json\n(.*?)\n```", ARCHITECTURE_MD, re.S)
    [quoted] = [json.loads(b) for b in blocks if '"queues"' in b]
    assert quoted["extensions"]["queues"] == HOST_JSON["extensions"]["queues"]
    assert quoted["functionTimeout"] == HOST_JSON["functionTimeout"]


def test_the_host_json_settings_table_matches_host_json() -> None:
    [(_, rows)] = [t for t in tables(ARCHITECTURE_MD) if t[0][:2] == ["Setting", "Value"]]
    for row in rows:
        key, value = code(row[0]), json.loads(code(row[1]))
        assert find(HOST_JSON, key) == value, f"ARCHITECTURE.md says {key} = {value!r}"
    assert {code(r[0]) for r in rows} >= set(HOST_JSON["extensions"]["queues"])


def test_every_constant_in_architecture_md_matches_the_code() -> None:
    rows = constant_rows(ARCHITECTURE_MD)
    assert len(rows) >= 10
    for literal, path in rows:
        assert ast.literal_eval(literal) == resolve(path), f"ARCHITECTURE.md says {path} = {literal}"


def test_the_envelope_examples_are_what_the_code_writes_and_reads() -> None:
    from vault_app import envelope

    inline = first_code_block(after(ARCHITECTURE_MD, "envelope:inline"))
    messages = [NewMessage(b'{"total": 42}', "order-1"), NewMessage(b"\x00\x01", b"\xff")]
    assert inline == envelope.encode_messages("batch-B", "orders", TS + 1200, messages)
    assert envelope.decode(inline).messages == messages
    units = first_code_block(after(ARCHITECTURE_MD, "envelope:units"))
    body = envelope.encode_claim_body(messages, TS + 1200, WriterSettings())
    assert units == envelope.encode_units("batch-B", "orders", TS + 1200, body, 2)
    staged = envelope.decode(units).records
    assert isinstance(staged, StagedUnits) and [u.size for u in staged.units] == [1, 1]
    claim = first_code_block(after(ARCHITECTURE_MD, "envelope:claim"))
    name = "orders/big-1/5f0c2d0e9a8b4c7e8d1f2a3b4c5d6e7f.records"
    assert claim == envelope.encode_claim("big-1", "orders", TS + 1200, name, 5000, units=True)
    assert envelope.decode(claim).claim == name
    assert '"v":1' in envelope.encode_claim("big-1", "orders", TS + 1200, name, 5000)  # records


@pytest.mark.parametrize(("accounts", "account", "queue"), [(1, 0, "mv-staging-2"), (2, 1, "mv-staging-2")])
def test_the_sharding_example(accounts: int, account: int, queue: str) -> None:
    from vault_app.config import load_settings
    from vault_app.services import Services
    from vault_core.azure import azurite_connection_string

    env = {f"VaultStaging{i}": azurite_connection_string() for i in range(accounts)}
    env["VAULT_STAGING_ACCOUNTS"] = str(accounts)
    chosen = Services(load_settings(env)).queue_for("orders")  # builds clients only; no request is sent
    assert (chosen.account, chosen.name) == (account, queue)
    assert f"{zlib.crc32(b'orders'):,}" in ARCHITECTURE_MD


@pytest.mark.parametrize("record_format", [1, 2])
def test_claim_check_blobs_are_frames_from_offset_zero_as_format_md_says(record_format: int) -> None:
    from vault_app import envelope

    assert "### 6.8 Claim-check blobs" in FORMAT_MD
    assert "at least a quarter of either target of §11.7 (512 messages, or 256 KiB of payload)" in FORMAT_MD
    assert UNIT_TARGET_MESSAGES // COPY_FRACTION == 512 and UNIT_TARGET_BYTES // COPY_FRACTION == 256 * 1024
    messages = [NewMessage(b"v" * 70_000, "k"), NewMessage(b"\x00", b"\x01")]
    body = envelope.encode_claim_body(messages, TS, WriterSettings(record_format=record_format))
    frames, end = fmt.decode(body, 0, complete=True)
    assert end == len(body) and frames[0].offset == 0
    assert [(r.value, r.timestamp) for r in frames] == [(m.value, TS) for m in messages]
    assert {body[8]} == {record_format}  # the first frame's version; one version a blob
    pointer = envelope.decode(envelope.encode_claim("big-1", "orders", TS, "big-1.records", len(messages)))
    claimed = envelope.decode_claimed(pointer, body).records
    assert claimed is not None and claimed.data == body
    if record_format == 1:
        assert isinstance(claimed, fmt.EncodedBatch) and claimed.starts == [0, frames[1].offset]
    else:  # text keys, then binary ones: two units (§11.7)
        assert isinstance(claimed, StagedUnits) and [u.offset for u in claimed.units] == [0, frames[1].offset]


# -- API.md ---------------------------------------------------------------------------------------
API_MD = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")


def test_every_limit_of_the_api_is_in_api_md_as_the_code_states_it() -> None:
    from vault_core import limits

    rows = constant_rows(API_MD)
    for literal, path in rows:
        assert ast.literal_eval(literal) == resolve(path), f"API.md says {path} = {literal}"
    stated = {n for n, v in vars(limits).items() if n.isupper() and isinstance(v, int)}
    assert {path.rsplit(".", 1)[1] for _, path in rows} == stated
    mib = limits.MiB
    for prose in (
        f"value ≤ {limits.MAX_MESSAGE_BYTES // mib} MiB (`VAULT_MAX_MESSAGE_BYTES`)",
        f"≤ {limits.MAX_BATCH_MESSAGES:,} messages per batch (`VAULT_MAX_BATCH_MESSAGES`)",
        f"≤ {limits.MAX_BATCH_BYTES // mib} MiB request body",
        f"`?wait=SECONDS` (0-{limits.MAX_WAIT_SECONDS})",
        f"`limit` 1-{limits.MAX_READ_MESSAGES:,} (default {limits.DEFAULT_READ_MESSAGES})",
        f"`max_bytes` 1 to {limits.MAX_READ_BYTES // mib} MiB "
        f"(default {limits.DEFAULT_READ_BYTES // mib} MiB)",
        f"`wait` 0-{limits.MAX_WAIT_SECONDS}:",
        f"At most {limits.MAX_READ_BYTES // mib} MiB per response",
    ):
        assert prose in " ".join(API_MD.split()), f"API.md does not say {prose!r}"


# -- SECURITY.md ----------------------------------------------------------------------------------
SECURITY_MD = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
README_MD = (ROOT / "README.md").read_text(encoding="utf-8")


def _caller(cell: str) -> Any:
    from vault_app.auth.identity import ANONYMOUS, Principal

    value = code(cell) if "`" in cell else ""
    if cell.startswith("token with app role"):
        return Principal("token", id="someone", roles=frozenset({value}))
    if cell.startswith("token in group"):
        return Principal("token", id="someone", groups=frozenset({value}))
    if cell.startswith("token of"):
        return Principal("token", id=value)
    if cell.startswith("key"):
        return Principal("key", id=value)
    if cell == "anonymous":
        return ANONYMOUS
    assert cell == "token without roles or grants", cell
    return Principal("token", id="nobody")


def test_the_policy_example_decides_what_security_md_says() -> None:
    from vault_app.auth.policy import Action, Policy, parse_grants, parse_patterns, permissions

    policy = Policy(
        parse_grants(first_code_block(after(SECURITY_MD, "policy-example"))), parse_patterns("public-*")
    )
    header, rows = first_table(after(SECURITY_MD, "decisions"))
    assert header == ["Caller", "Action", "Stream", "Allowed"] and len(rows) >= 10
    for caller, action, stream, allowed in rows:
        got = permissions(_caller(caller), policy).allows(Action(action), code(stream))
        assert got is (allowed == "yes"), (caller, action, stream)


def test_security_md_lists_exactly_the_auth_settings() -> None:
    from vault_app import config

    [(_, rows)] = [t for t in tables(SECURITY_MD) if t[0][:2] == ["Setting", "Default"]]
    assert [code(r[0]) for r in rows] == list(config.AUTH_SETTINGS)


def test_the_app_roles_file_holds_roles_the_vault_understands() -> None:
    from vault_app.auth.policy import role_permission

    roles = json.loads((ROOT / "infra" / "app-roles.json").read_text())
    assert {r["value"] for r in roles} == {"Vault.Read.All", "Vault.Write.All", "Vault.Admin"}
    for role in roles:
        assert role_permission(role["value"]) is not None and f"`{role['value']}`" in SECURITY_MD
        assert set(role["allowedMemberTypes"]) == {"User", "Application"} and role["isEnabled"] is True


def test_every_app_setting_is_in_the_readme_and_the_local_settings_sample() -> None:
    from vault_app import config

    [(_, rows)] = [t for t in tables(README_MD) if t[0][:2] == ["Setting", "Default"]]
    documented = " ".join(r[0] for r in rows)
    sample = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    for name in config.PLAIN_SETTINGS:
        assert f"`{name}`" in documented, f"README's settings table lacks {name}"
        assert name in sample, f"local.settings.sample.json lacks {name}"
    assert {n for n in sample if n.startswith("VAULT_")} == set(config.PLAIN_SETTINGS)
    config.load_settings(sample)  # the sample is a valid configuration


# -- CAPACITY.md ----------------------------------------------------------------------------------
CAPACITY_MD = (ROOT / "docs" / "CAPACITY.md").read_text(encoding="utf-8")


def test_every_target_in_capacity_md_is_the_models() -> None:
    rows = constant_rows(CAPACITY_MD)
    assert len(rows) >= 7
    for literal, path in rows:
        assert ast.literal_eval(literal) == resolve(path), f"CAPACITY.md says {path} = {literal}"


@pytest.mark.parametrize("example", re.findall(r"<!-- capacity:(\w+) -->", CAPACITY_MD))
def test_the_capacity_examples_are_what_vault_capacity_prints(example: str) -> None:
    import shlex

    from click.testing import CliRunner

    from vault_client.cli import cli

    command, _, printed = first_code_block(after(CAPACITY_MD, f"capacity:{example}")).partition("\n")
    assert command.startswith("$ vault capacity ")
    result = CliRunner().invoke(cli, shlex.split(command.removeprefix("$ vault ")), prog_name="vault")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip() == printed, (
        f"CAPACITY.md's {example} example is not what vault capacity prints"
    )


# -- docs/CLIENT.md: the defaults it quotes are the code's ------------------------------------------
CLIENT_MD = (ROOT / "docs" / "CLIENT.md").read_text(encoding="utf-8")


def _documented_value(text: str) -> Any:
    """A default as CLIENT.md writes it: ``1 MiB``, ``0.05 s``, or a Python expression."""
    from vault_client.retry import RetryPolicy

    text = re.sub(r"^([\d.]+) MiB$", r"\1 * 1024 * 1024", text.strip())
    return eval(re.sub(r"^([\d.]+) s$", r"\1", text), {"RetryPolicy": RetryPolicy})


@pytest.mark.parametrize("call", ["Producer", "Consumer.connect"])
def test_the_client_guide_quotes_each_signature_default_as_the_code_has_it(call: str) -> None:
    import inspect

    from vault_client import Consumer, Producer

    block = re.search(rf"^{re.escape(call)}\((.*?)\)$", CLIENT_MD, re.M | re.S)
    assert block, f"CLIENT.md has no {call}(...) signature"
    documented = dict(re.findall(r"(\w+)=([^,]+?)(?=,|$)", block.group(1).replace("\n", " ")))
    functions: list[Callable[..., Any]] = (
        [Producer.__init__] if call == "Producer" else [Consumer.connect, Consumer.__init__]
    )
    defaults = {
        name: p.default
        for f in functions
        for name, p in inspect.signature(f).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    assert documented and {k: _documented_value(v) for k, v in documented.items()} == {
        k: defaults[k] for k in documented
    }


def test_the_client_guide_quotes_the_default_retry_policy() -> None:
    from vault_client.retry import RetryPolicy

    quoted = re.search(r"`retry=None` is `(RetryPolicy\([^)]*\))`", CLIENT_MD)
    assert quoted and _documented_value(quoted.group(1)) == RetryPolicy()


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_the_client_guide_quotes_each_cli_default_as_the_cli_has_it(command: str) -> None:
    from vault_client.cli import cli

    section = CLIENT_MD.split(f"### `vault {command} ")[1].split("\n### ")[0]
    quoted = re.findall(r"`(--[a-z-]+)`(?: seconds)? \(([\d.]+(?: MiB| s)?)\)", section)
    options = {o: p for p in cli.commands[command].params for o in getattr(p, "opts", [])}
    assert quoted and {o: _documented_value(v) for o, v in quoted} == {
        o: options[o].default for o, _ in quoted
    }
