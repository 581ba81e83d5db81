"""Rows of a JSONL or CSV file (gzip allowed), and the templates that fill a task from a row.

Pure: reads bytes and renders values; knows nothing of task files, digests or pytest.

Templates are Python format strings over a row's fields: `"Solve: {question}"`. `{{` and `}}`
are literal braces; `{a.b}` is field `a.b` if the row has one, else key `b` of the mapping in
field `a`; `{n:03d}` formats a number. A string that is exactly one field (`"{answer}"`) keeps
the field's value as it is (a JSON number, list or object stays one). A field the row lacks is
an error of that row.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from string import Formatter
from typing import Any

from ..core.text import excerpt

Values = dict[str, Any]


class SourceError(Exception):
    """The source file as a whole cannot be used (missing, unreadable, empty, unknown format)."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


class RowError(ValueError):
    """A template could not be filled from one row; `loc` is where in the template."""

    def __init__(
        self, problem: str, loc: tuple[str | int, ...] = (), *, missing: str | None = None
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.loc = loc
        self.missing = missing
        """The field the row lacks, when that is the problem."""

    def at(self, *steps: str | int) -> RowError:
        """The same error, `steps` further from the template's root."""
        return RowError(self.problem, (*steps, *self.loc), missing=self.missing)


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a source file, or why it cannot be read."""

    line: int
    """1-based line where the row starts (a CSV record may span lines)."""
    index: int
    """0-based position among the file's rows."""
    values: Values | None
    problem: str | None = None


# -- reading -----------------------------------------------------------------------------------


def source_format(path: Path, declared: str | None) -> str:
    """`jsonl` or `csv`: as declared, else from the file's name (before a `.gz`)."""
    if declared is not None:
        return declared
    name = path.name.lower().removesuffix(".gz")
    suffix = name.rpartition(".")[2]
    if suffix in ("jsonl", "ndjson"):
        return "jsonl"
    if suffix == "csv":
        return "csv"
    raise SourceError(
        f"cannot tell the format of {path.name!r} from its name",
        hint="name it .jsonl or .csv (optionally .gz), or add `format: jsonl` or `format: csv`",
    )


def read_rows(path: Path, fmt: str) -> list[Row]:
    """Every row of the file, in order; raises SourceError when the file cannot be used."""
    data = _read_bytes(path)
    rows = _jsonl_rows(data) if fmt == "jsonl" else _csv_rows(data)
    if not rows:
        what = "JSON object per line" if fmt == "jsonl" else "header line and a record per line"
        raise SourceError(f"{path.name} holds no rows", hint=f"a {fmt} source has a {what}")
    return rows


MAX_GZIP_BYTES = 256 * 1024 * 1024
"""How many bytes a gzipped source may expand to: it is decompressed as a stream up to this,
so a small file that expands to gigabytes is refused instead of filling memory."""


def _read_bytes(path: Path) -> bytes:
    try:
        if not path.name.lower().endswith(".gz"):
            return path.read_bytes()
        with gzip.open(path) as stream:
            data = stream.read(MAX_GZIP_BYTES + 1)
        if len(data) > MAX_GZIP_BYTES:
            raise SourceError(
                f"{path.name} expands to more than {MAX_GZIP_BYTES // 2**20} MiB",
                hint="a gzipped source may hold at most that much; decompress it, or split it",
            )
        return data
    except OSError as exc:
        if isinstance(exc, gzip.BadGzipFile):
            raise SourceError(f"{path.name} is not a gzip file: {exc}") from None
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (EOFError, zlib.error) as exc:
        raise SourceError(f"{path.name} is a damaged gzip file: {exc}") from None


def _jsonl_rows(data: bytes) -> list[Row]:
    rows: list[Row] = []
    for number, line in enumerate(data.removeprefix(codecs.BOM_UTF8).split(b"\n"), 1):
        if not line.strip():
            continue
        index = len(rows)
        try:
            # Decoded strictly here: json.loads(bytes) lets encoded surrogates through.
            values = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            rows.append(Row(number, index, None, _not_utf8(line, exc)))
            continue
        except ValueError as exc:
            rows.append(Row(number, index, None, f"not valid JSON: {exc}"))
            continue
        except RecursionError:
            rows.append(Row(number, index, None, TOO_DEEP))
            continue
        if not isinstance(values, dict):
            kind = type(values).__name__
            rows.append(Row(number, index, None, f"a row must be a JSON object, not a {kind}"))
            continue
        if _deeper_than(values, MAX_NESTING, line):
            rows.append(Row(number, index, None, TOO_DEEP))
            continue
        if _SURROGATE_ESCAPE.search(line) and _lone_surrogate(values):
            problem = (
                "the row holds a lone surrogate (a \\ud800-\\udfff escape not in a pair): "
                "it is not a character, and no record could store it"
            )
            rows.append(Row(number, index, None, problem))
            continue
        rows.append(Row(number, index, values))
    return rows


def _not_utf8(line: bytes, exc: UnicodeDecodeError) -> str:
    """Where a JSONL row stops being UTF-8, and the bytes there (raw CESU-8 surrogates,
    `\\xed\\xa0\\x80`, included: UTF-8 cannot hold them, so no record could)."""
    end = exc.end
    while end < len(line) and end - exc.start < 4 and 0x80 <= line[end] < 0xC0:
        end += 1  # the continuation bytes of the character that is not one
    bad = line[exc.start : end].hex(" ")
    column = len(line[: exc.start].decode("utf-8", "replace")) + 1
    return f"the row is not UTF-8 text: bytes {bad} at column {column}: {SAVE_AS_UTF8}"


MAX_NESTING = 100
"""How deep a row's values may nest (lists and objects): deeper rows would make everything
that walks them (digests, records) overflow Python's stack."""


TOO_DEEP = f"the row nests lists or objects more than {MAX_NESTING} levels deep"


def _deeper_than(values: Values, limit: int, line: bytes) -> bool:
    """Whether the row nests deeper than `limit`; rows with fewer brackets are not walked."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(values, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in children if isinstance(v, dict | list))
    return False


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a surrogate: only rows with one can hold a lone surrogate."""


def _lone_surrogate(values: Values) -> bool:
    """Whether the row's text holds a surrogate that is not part of a pair (UTF-8 cannot
    encode it, so digests and records of its task would fail)."""
    try:
        json.dumps(values, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def _csv_rows(data: bytes) -> list[Row]:
    try:
        text, undecoded = data.decode("utf-8-sig"), False
    except UnicodeDecodeError:  # keep the bytes that are not UTF-8 apart, as surrogates
        text, undecoded = data.decode("utf-8-sig", "surrogateescape"), True
    reader = csv.reader(io.StringIO(text, newline=""))
    header = _header(reader)
    if undecoded and not _is_text(header):
        raise SourceError("the header line is not UTF-8 text", hint=SAVE_AS_UTF8)
    rows: list[Row] = []
    lines = _Lines(text)
    while True:
        start = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            return rows
        except csv.Error as exc:
            problem = f"not a valid CSV record: {exc}"
            if reader.line_num > start:  # the record ran over several lines
                problem += lines.spanned(start, reader.line_num)
            rows.append(Row(start, len(rows), None, problem))
            continue
        if not record:
            continue
        if undecoded and not _is_text(record):
            rows.append(
                Row(start, len(rows), None, f"the record is not UTF-8 text: {SAVE_AS_UTF8}")
            )
            continue
        if len(record) != len(header):
            problem = f"the record has {len(record)} fields, the header {len(header)}"
            if reader.line_num > start:  # the record ran over several lines
                problem += lines.spanned(start, reader.line_num)
            rows.append(Row(start, len(rows), None, problem))
            continue
        if reader.line_num > start and lines.is_last(reader.line_num):
            swallowed = lines.swallowed(start, reader.line_num)
            if swallowed:  # a quote left open took in the file's end, with a fitting count
                rows.append(Row(start, len(rows), None, swallowed))
                continue
        rows.append(Row(start, len(rows), dict(zip(header, record, strict=True))))


class _Lines:
    """The lines of a CSV text, split (as the reader splits them) only when a record spans
    several: then a quote left open may have swallowed the rows after it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = io.StringIO(self.text, newline="").readlines()
        return self._lines

    def spanned(self, start: int, end: int) -> str:
        """Why a record that failed ran from line `start` to `end`."""
        return f" ({self.swallowed(start, end) or f'the record runs from line {start} to {end}'})"

    def swallowed(self, start: int, end: int) -> str | None:
        """If a quote is still open at line `end` of a record from line `start`: where it
        opened, and the lines whose rows it took in (they are not read)."""
        opened, open_now = start, False
        for number, line in enumerate(self.lines[start - 1 : end], start):
            if line.count('"') % 2:
                opened = opened if open_now else number
                open_now = not open_now
        if not open_now:
            return None
        after = f"line {end}" if end == opened + 1 else f"lines {opened + 1}-{end}"
        return (
            f"a quote opened on line {opened} is never closed: it swallowed {after} "
            f"({end - opened} {'line' if end == opened + 1 else 'lines'}, not read as rows); "
            "close the quote"
        )

    def is_last(self, line: int) -> bool:
        return line >= len(self.lines)


SAVE_AS_UTF8 = "save the file as UTF-8"


def _is_text(fields: list[str]) -> bool:
    """Whether the fields hold no surrogate (in CSV text decoded with `surrogateescape`, each
    stands for a byte that is not UTF-8)."""
    try:
        "".join(fields).encode()
    except UnicodeEncodeError:
        return False
    return True


def _header(reader: Any) -> list[str]:
    try:
        header: list[str] = next(reader, [])
    except csv.Error as exc:
        raise SourceError(f"the header line is not valid CSV: {exc}") from None
    repeated = sorted(name for name, times in Counter(header).items() if times > 1)
    if repeated:
        raise SourceError(
            f"the header names column {repeated[0]!r} twice", hint="give every column its own name"
        )
    return header


# -- templates ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Text:
    """A compiled string template."""

    parts: tuple[tuple[str, str | None, str], ...]
    """(literal text, field name or None, format spec), in order."""
    whole: str | None
    """The field name when the template is exactly one field: its value keeps its type."""


def compile_template(value: Any, loc: tuple[str | int, ...] = ()) -> Any:
    """`value` with its strings compiled to Texts (strings without braces stay as they are);
    raises RowError (with `loc`) for a malformed template."""
    if isinstance(value, str):
        return _compile_text(value, loc) if "{" in value or "}" in value else value
    if isinstance(value, dict):
        return {key: compile_template(item, (*loc, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [compile_template(item, (*loc, i)) for i, item in enumerate(value)]
    return value


MAX_WIDTH = 10_000
"""The largest width or precision a template's format spec may ask for (`{q:>3000000000}`
would ask for gigabytes)."""


def _compile_text(text: str, loc: tuple[str | int, ...]) -> str | Text:
    try:
        parsed = list(Formatter().parse(text))
    except ValueError as exc:
        problem = f"bad template {text!r}: {exc} (write {{{{ and }}}} for a literal brace)"
        raise RowError(problem, loc) from None
    parts = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (not name or conversion or "{" in (spec or "")):
            problem = f"bad template {text!r}: name a field in every {{...}}"
            raise RowError(f"{problem}, without `!` conversions or nested braces", loc)
        if spec and any(int(n) > MAX_WIDTH for n in re.findall(r"\d+", spec)):
            problem = f"bad template {excerpt(text, 80)!r}: a width or precision above {MAX_WIDTH}"
            raise RowError(problem, loc)
        parts.append((literal, name, spec or ""))
    if all(name is None for _, name, _ in parts):
        return "".join(literal for literal, _, _ in parts)  # only escaped braces
    whole = parts[0][1] if len(parts) == 1 and not parts[0][0] and not parts[0][2] else None
    return Text(tuple(parts), whole)


def render(template: Any, row: Values) -> Any:
    """The compiled `template` filled from `row`; raises RowError naming the field."""
    if isinstance(template, Text):
        return _render_text(template, row)
    if isinstance(template, dict):
        return {key: _render_at(item, row, key) for key, item in template.items()}
    if isinstance(template, list):
        return [_render_at(item, row, i) for i, item in enumerate(template)]
    return template


def _render_at(template: Any, row: Values, step: str | int) -> Any:
    try:
        return render(template, row)
    except RowError as exc:
        raise exc.at(step) from None


def _render_text(text: Text, row: Values) -> Any:
    if text.whole is not None:
        return field_value(row, text.whole)
    out = []
    for literal, name, spec in text.parts:
        out.append(literal)
        if name is not None:
            out.append(_as_text(field_value(row, name), name, spec))
    return "".join(out)


def field_value(row: Values, name: str) -> Any:
    """The row's field `name`, else the dotted path `a.b` through mappings; RowError if none."""
    if name in row:
        return row[name]
    value: Any = row
    for key in name.split("."):
        if not isinstance(value, dict) or key not in value:
            fields = ", ".join(repr(f) for f in list(row)[:12]) or "none"
            problem = f"the row has no field {name!r} (its fields: {fields})"
            raise RowError(problem, missing=name)
        value = value[key]
    return value


def _as_text(value: Any, name: str, spec: str) -> str:
    """A field's value inside a longer string: text as is, other JSON values as JSON."""
    if spec:
        try:
            return format(value, spec)
        except (TypeError, ValueError) as exc:
            problem = f"cannot format field {name!r} ({value!r}) with {spec!r}: {exc}"
            raise RowError(problem) from None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, ensure_ascii=False)
