"""Property-based tests (hypothesis): any input to a parser gets a value or a clear 4xx, never a crash.

The body parser, the query parameters, the Range parser and the record decoder are the
places where bytes from outside meet the code; these pin that no input makes them raise
anything but their documented error, and that the decoder never returns wrong data. The read
path's page renderer is pinned to its message-by-message definition.
"""

from __future__ import annotations

import json
from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault_app.config import Limits
from vault_app.http import HttpError, Request
from vault_app.ingest import parse_batch
from vault_app.params import int_param, parse_range, parse_time, wait_param
from vault_app.wire import batch_lines, wire_line, wire_lines
from vault_core.errors import FormatError, InvalidInput
from vault_core.messagebatch import MessageBatch
from vault_core.recordformat import (
    FLAG_KEY_IS_TEXT,
    MAX_OFFSET,
    MAX_TIMESTAMP_MS,
    Message,
    NewMessage,
    decode,
    encode,
)
from vault_core.times import to_millis

LIMITS = Limits(max_message_bytes=4096, max_batch_messages=50, max_batch_bytes=64 * 1024)
CONTENT_TYPES = st.sampled_from([None, "application/json", "application/x-ndjson", "text/plain"])
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(FAST, max_examples=60)
"""For the invalid UTF-8 cases: few shapes, each checked in every field."""

# Text that includes lone surrogates, which JSON can carry (as \ud800) but UTF-8 cannot.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=20) | st.text(max_size=20)
json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)
message = st.fixed_dictionaries(
    {},
    optional={
        "key": json_value,
        "value": json_value,
        "encoding": st.sampled_from(["base64", "utf-8", "text", "rot13", 7]) | json_value,
        "key_encoding": st.sampled_from(["base64", "utf-8", "rot13"]) | json_value,
    },
)
batch_doc = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=5) | json_value}, optional={"batch_id": json_value}
)


def digits(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """What ``\\d{min_size,max_size}`` matches (any Unicode decimal digit, as ``\\d`` in a str
    pattern), drawn as one string: ``st.from_regex`` draws it digit by digit, at four times the CPU."""
    return st.text(st.characters(categories=["Nd"]), min_size=min_size, max_size=max_size)


integer_text = st.tuples(st.sampled_from(["", "-"]), digits(1, 5000)).map("".join)
"""What ``-?\\d{1,5000}`` matches."""
range_text = st.tuples(digits(0, 3000), digits(0, 3000)).map(lambda ab: f"bytes={ab[0]}-{ab[1]}")
"""What ``bytes=\\d{0,3000}-\\d{0,3000}`` matches."""


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _not_utf8_nor_ascii(raw: bytes) -> bool:
    """Bytes that break UTF-8 without breaking the JSON around them (no quote, no backslash)."""
    return _not_utf8(raw) and all(b >= 0x80 for b in raw)


def parses_or_4xx(body: bytes, content_type: str | None) -> None:
    try:
        messages, batch_id = parse_batch(body, content_type, LIMITS)
    except HttpError as exc:
        assert 400 <= exc.status < 500 and exc.message
        json.dumps({"error": exc.code, "message": exc.message})  # the answer can be sent
        return
    assert messages and all(isinstance(m.value, bytes) for m in messages)
    for m in messages:
        m.key_bytes()  # every accepted key can be stored
    assert batch_id is None or isinstance(batch_id, str)


@FAST
@given(st.binary(max_size=2000), CONTENT_TYPES)
def test_any_bytes_as_a_body_parse_or_get_a_4xx(body: bytes, content_type: str | None) -> None:
    parses_or_4xx(body, content_type)


@FAST
@given(batch_doc | json_value, st.sampled_from([None, "application/json"]))
def test_any_json_document_as_a_body_parses_or_gets_a_4xx(doc: Any, content_type: str | None) -> None:
    parses_or_4xx(json.dumps(doc).encode(), content_type)


@settings(FAST, max_examples=100)  # up to five documents each: what a line holds is the test above's
@given(st.lists(message | json_value, max_size=5))
def test_any_ndjson_lines_parse_or_get_a_4xx(lines: list[Any]) -> None:
    parses_or_4xx("\n".join(json.dumps(x) for x in lines).encode(), "application/x-ndjson")


@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
def test_deeply_nested_json_is_a_400(content_type: str) -> None:
    with pytest.raises(HttpError) as err:
        parse_batch(b"[" * 100_000 + b"]" * 100_000, content_type, Limits())
    assert err.value.status == 400 and err.value.message


@pytest.mark.parametrize("field", ["key", "value"])
def test_a_lone_surrogate_in_a_key_or_value_is_a_400(field: str) -> None:
    with pytest.raises(HttpError) as err:
        body = {"key": {"key": "a\ud800b", "value": "v"}, "value": {"value": "a\ud800b"}}[field]
        parse_batch(json.dumps({"messages": [body]}).encode(), None, Limits())
    assert err.value.status == 400 and "lone surrogate" in err.value.message


NOT_UTF8 = [
    b"\xff",  # never in UTF-8
    b"\x80",  # a continuation byte alone
    b"\xc3",  # a sequence cut short
    b"\xc0\xaf",  # an overlong "/"
    b"\xe0\x80\xaf",  # an overlong "/", three bytes
    b"\xed\xa0\x80",  # an encoded surrogate (U+D800)
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf8\x88\x80\x80\x80",  # a five-byte form
]
TEXT_FIELDS = [
    ("batch_id", lambda bad: b'{"batch_id": "b' + bad + b'", "messages": [{"value": "v"}]}'),
    ("message 1 value", lambda bad: b'{"messages": [{"value": "v"}, {"value": "a' + bad + b'b"}]}'),
    ("message 0 key", lambda bad: b'{"messages": [{"key": "' + bad + b'", "value": "v"}]}'),
    ("message 0 encoding", lambda bad: b'{"messages": [{"value": "v", "encoding": "' + bad + b'"}]}'),
    (
        "message 0 key_encoding",
        lambda bad: b'{"messages": [{"value": "v", "key_encoding": "x' + bad + b'"}]}',
    ),
]


@SOME
@given(
    st.sampled_from(NOT_UTF8) | st.binary(min_size=1, max_size=4).filter(_not_utf8_nor_ascii),
    st.sampled_from(TEXT_FIELDS),
)
def test_invalid_utf8_in_a_field_is_a_400_that_names_the_field(bad: bytes, field: Any) -> None:
    name, make = field
    with pytest.raises(HttpError) as err:
        parse_batch(make(bad), None, LIMITS)
    assert err.value.status == 400 and err.value.message.startswith(f"{name} is not valid UTF-8"), err.value


@SOME
@given(st.sampled_from(NOT_UTF8), st.integers(0, 2), st.sampled_from(["value", "key"]))
def test_invalid_utf8_on_an_ndjson_line_is_a_400_that_names_the_line(
    bad: bytes, line: int, field: str
) -> None:
    lines = [b'{"value": "v"}'] * 3
    lines[line] = (
        b'{"' + field.encode() + b'": "' + bad + b'", "value": "w"}'
        if field == "key"
        else (b'{"value": "' + bad + b'"}')
    )
    with pytest.raises(HttpError) as err:
        parse_batch(b"\n".join(lines), "application/x-ndjson", LIMITS)
    assert err.value.status == 400 and err.value.message.startswith(
        f"message {line} {field} is not valid UTF-8"
    )


@SOME
@given(st.sampled_from(NOT_UTF8), batch_doc)
def test_invalid_utf8_anywhere_in_a_json_body_is_a_4xx(bad: bytes, doc: Any) -> None:
    body = json.dumps(doc).encode()
    for at in range(0, len(body) + 1, max(1, len(body) // 7)):
        parses_or_4xx(body[:at] + bad + body[at:], None)


def test_an_unknown_key_encoding_is_a_400() -> None:
    with pytest.raises(HttpError) as err:
        parse_batch(b'{"messages": [{"key": "k", "key_encoding": "rot13", "value": "v"}]}', None, Limits())
    assert err.value.status == 400 and "key_encoding" in err.value.message


@FAST
@given(st.text(max_size=60) | integer_text)
def test_any_time_parameter_is_a_time_in_range_or_a_400(raw: str) -> None:
    try:
        ms = parse_time(raw)
    except HttpError as exc:
        assert exc.status == 400
        return
    assert 0 <= ms <= MAX_TIMESTAMP_MS


@FAST
@given(st.text(max_size=60) | st.integers() | st.datetimes() | st.datetimes(timezones=st.timezones()))
def test_the_one_time_parser_gives_an_integer_or_invalid_input(when: Any) -> None:
    """The API's ``at``, Spark's ``fromTime`` and the client's ``at`` all go through it."""
    try:
        ms = to_millis(when)
    except InvalidInput:
        assert isinstance(when, str)
        return
    assert isinstance(ms, int)
    if isinstance(when, str) and when.strip().lstrip("-").isdigit():
        assert ms == int(when)


@FAST
@given(
    st.text(max_size=60) | range_text,
    st.integers(0, 2**44),
)
def test_any_range_header_is_a_range_or_a_400(header: str, committed: int) -> None:
    try:
        start, end = parse_range(header, committed)
    except HttpError as exc:
        assert exc.status == 400
        return
    assert start >= 0 and end >= 0


@FAST
@given(st.text(max_size=30) | integer_text)
def test_any_integer_or_wait_parameter_is_in_range_or_a_400(raw: str) -> None:
    request = Request("GET", query={"limit": raw, "wait": raw})
    for read in (lambda: int_param(request, "limit", 1000, 1, 10_000), lambda: wait_param(request)):
        try:
            value = read()
        except HttpError as exc:
            assert exc.status == 400
            continue
        assert 0 <= value <= 10_000


records = st.lists(
    st.builds(NewMessage, st.binary(max_size=300), st.binary(max_size=40) | st.text(max_size=20)),
    min_size=1,
    max_size=5,
)


@FAST
@given(st.binary(max_size=3000), st.integers(0, 2**40), st.booleans())
def test_random_bytes_decode_to_records_or_a_format_error(data: bytes, base: int, complete: bool) -> None:
    try:
        decode(data, base, complete=complete)
    except FormatError:
        pass


@FAST
@given(records, st.integers(0, 2**40), st.data())
def test_a_flipped_bit_is_detected_never_returned_as_data(
    messages: list[NewMessage], base: int, data: st.DataObject
) -> None:
    good = encode(messages, base, 1_700_000_000_000)
    original, _ = decode(good, base, complete=True)
    bit = data.draw(st.integers(0, len(good) * 8 - 1))
    flipped = bytearray(good)
    flipped[bit // 8] ^= 1 << (bit % 8)
    try:
        got, _ = decode(bytes(flipped), base, complete=True)
    except FormatError:
        return
    assert got == original  # only a flip in bytes no record covers (page padding) may pass


text_or_binary = st.text(max_size=8).map(str.encode) | st.binary(max_size=8)
read_messages = st.lists(
    st.builds(
        Message,
        st.integers(0, MAX_OFFSET),
        st.integers(0, MAX_TIMESTAMP_MS),
        text_or_binary,
        text_or_binary,
        st.sampled_from([0, FLAG_KEY_IS_TEXT]),
    ),
    max_size=6,
)


@SOME
@given(read_messages, st.booleans())
def test_a_page_made_column_by_column_has_the_lines_made_message_by_message(
    messages: list[Message], force_b64: bool
) -> None:
    assert wire_lines(messages, force_b64) == [wire_line(m, force_b64) for m in messages]


def as_batch(messages: list[Message], padding: bytes) -> MessageBatch:
    """``messages`` as one batch whose key and value buffers hold ``padding`` before and after
    them, as a batch cut from a unit's buffers does (its boundaries then start past 0)."""
    key_ends, value_ends = array("I", [len(padding)]), array("I", [len(padding)])
    for m in messages:
        key_ends.append(key_ends[-1] + len(m.key))
        value_ends.append(value_ends[-1] + len(m.value))
    return MessageBatch(
        array("q", [m.offset for m in messages]),
        array("q", [m.timestamp for m in messages]),
        array("B", [m.flags for m in messages]),
        key_ends,
        padding + b"".join(m.key for m in messages) + padding,
        value_ends,
        padding + b"".join(m.value for m in messages) + padding,
        0,
        False,
    )


@SOME
@given(
    st.lists(read_messages.filter(bool), max_size=3),
    st.booleans(),
    st.sampled_from([b"", b"pad", b"\xff" * 40]),
)
def test_a_page_made_from_batch_columns_has_the_lines_made_message_by_message(
    pages: list[list[Message]], force_b64: bool, padding: bytes
) -> None:
    pages = [sorted(messages) for messages in pages]  # a batch's offsets increase
    batches = [as_batch(messages, padding) for messages in pages]
    expected = [wire_line(m, force_b64) for messages in pages for m in messages]
    assert batch_lines(batches, force_b64) == expected


def test_ids_past_48_bits_are_formatted_as_message_id_formats_them() -> None:
    wide = [Message(MAX_OFFSET + 1, MAX_TIMESTAMP_MS + 2, b"k", b"v", FLAG_KEY_IS_TEXT)]
    assert batch_lines([as_batch(wide, b"")], False) == [wire_line(wide[0], False)]
