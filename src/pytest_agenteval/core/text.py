"""Arbitrary agent text made short and safe for messages, Markdown, JSON and XML."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

TRUNCATION_MARK = "…[truncated {n} chars]…"
_SURROGATE = re.compile("[\ud800-\udfff]")
_XML_INVALID = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def excerpt(text: str, limit: int = 300) -> str:
    """`text` cut to about `limit` characters, keeping its head and tail around a marker."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 20)
    head, tail = keep * 2 // 3, keep // 3
    return text[:head] + TRUNCATION_MARK.format(n=len(text) - head - tail) + text[-tail:]


def xml_safe(text: str) -> str:
    """Replace characters XML 1.0 cannot hold (control characters, lone surrogates) with `\\xNN`."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
"""What a terminal must not be sent as it is: control characters but newline and tab (C0,
DEL and C1: `\x1b` starts the sequences that set a title or clear the screen, `\r` rewrites
a line) and lone surrogates (which UTF-8 cannot encode)."""


def printable(text: str) -> str:
    """`text` (what an agent, a grader or a file name may hold) for a terminal: control
    characters shown as escapes (`\x1b`, `\x07`, a lone surrogate `\\udcff`), newlines and
    tabs kept as they are."""
    if text.isprintable() or not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(text: str) -> str:
    """`text` as valid Unicode: lone surrogates (which UTF-8 cannot hold) become U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def json_encoder(
    *,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
    acyclic: bool = False,
) -> Callable[[Any], str]:
    """`json.dumps(value, ensure_ascii=False, ...)` as one call into the C encoder: what
    `JSONEncoder.encode` does, without its two Python frames and the closure it makes per
    call (records, index lines and digests are encoded on every attempt's path). The same
    text, circular references refused alike (a fresh marker table per call). `acyclic`: for
    values that cannot hold a cycle (records, whose values `json_safe` copied): one encoder
    made once, no marker table (a cycle would be a RecursionError)."""
    if c_make_encoder is None:  # no C accelerator: the standard encoder
        return json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys, default=default).encode
    make, escape = c_make_encoder, encode_basestring
    default = default or json.JSONEncoder().default  # refuses as json.dumps does
    # markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan
    options = (default, escape, None, ": ", ", ", sort_keys, False, True)
    if acyclic:
        shared = make(None, *options)  # keeps no state between calls: safe in any thread

        def encode_acyclic(value: Any) -> str:
            if type(value) is str:
                return escape(value)
            return "".join(shared(value, 0))

        return encode_acyclic

    def encode(value: Any) -> str:
        if type(value) is str:  # as JSONEncoder.encode: the string alone
            return escape(value)
        return "".join(make({}, *options)(value, 0))

    return encode


json_text = json_encoder()
"""`json.dumps(value, ensure_ascii=False)` of any value (a request's body, a summary's line)."""

_PLAIN = (int, float, bool, type(None))
_JSON = json_encoder(default=str)


def json_safe(value: object) -> object:
    """Any value as plain JSON types with valid text (unknown objects become their str): a
    fresh copy, what a JSON round trip gives. Dicts with str keys, lists, tuples and plain
    scalars (a trace's events, usage) are copied in one walk; anything else takes the round
    trip. A value JSON cannot hold (one that holds itself, a tuple as a key, nesting too deep
    to walk) becomes its text: a record is never lost to what an agent or a grader gave."""
    kind = type(value)
    if kind is str:  # a task's input or expected answer, as a rule
        return clean_text(value)  # type: ignore[arg-type]
    if kind in _PLAIN:
        return value
    with contextlib.suppress(_Unusual, RecursionError):
        return _copied(value)
    try:
        return json.loads(clean_text(_JSON(value)))
    except (ValueError, TypeError, RecursionError):  # circular, a key JSON has none of, deep
        return _as_text(value)


def _as_text(value: object) -> str:
    try:
        return clean_text(str(value))
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to store>"


class _Unusual(Exception):
    """A value `_copied` leaves to the JSON round trip."""


def _copied(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return clean_text(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {_key(key): _copied(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_copied(item) for item in value]
    raise _Unusual


def _key(key: Any) -> str:
    if type(key) is not str:
        raise _Unusual  # an int, float, bool or None key: JSON's own spelling of it
    return clean_text(key)


def dollars(amount: float) -> str:
    """An amount of money for a person: `$1.73`, and below a dollar with the digits that keep
    it from reading as nothing (`$0.003`, not `$0.00`)."""
    if amount == 0 or abs(amount) >= 0.995:
        return f"${amount:.2f}"
    digits = f"{amount:.6f}".rstrip("0")
    return f"${digits}" if len(digits.split(".")[1]) > 2 else f"${amount:.2f}"


def decode_output(data: bytes) -> str:
    """Program output as text; invalid UTF-8 becomes replacement characters, never an error."""
    return data.decode("utf-8", errors="replace")


def counted(n: int, word: str) -> str:
    """`1 task`, `2 tasks`: a count and its noun, singular or plural."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
