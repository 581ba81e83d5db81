"""Reading JSONL and CSV rows and filling templates from them, as plain unit tests."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_agenteval.sources.rows import (
    MAX_GZIP_BYTES,
    RowError,
    SourceError,
    compile_template,
    read_rows,
    render,
)


def fill(template: Any, row: dict[str, Any]) -> Any:
    return render(compile_template(template), row)


@pytest.mark.parametrize(
    ("template", "row", "value"),
    [
        ("{a}", {"a": 3}, 3),
        ("{a}", {"a": [1, {"b": None}]}, [1, {"b": None}]),
        ("n={a}", {"a": 3}, "n=3"),
        ("{a} {b}", {"a": True, "b": None}, "true null"),
        ("{a}", {"a": {"x": 1}}, {"x": 1}),
        ("x{a}", {"a": {"x": 1}}, 'x{"x": 1}'),
        ("{a:03d}", {"a": 7}, "007"),
        ("{{a}} {a}", {"a": "b"}, "{a} b"),
        ("{{}}", {}, "{}"),
        ("{m.level}", {"m": {"level": 2}}, 2),
        ("{m.level}", {"m.level": "flat", "m": {"level": 2}}, "flat"),
        ("no braces", {}, "no braces"),
        ({"k": ["{a}", "-{a}-"], "n": 1}, {"a": "v"}, {"k": ["v", "-v-"], "n": 1}),
        ([{"role": "user", "content": "{q}"}], {"q": "hi"}, [{"role": "user", "content": "hi"}]),
    ],
)
def test_templates_fill_from_a_row(template: Any, row: dict[str, Any], value: Any) -> None:
    """A whole-field template keeps the value's type; inside text, JSON values read as JSON;
    `{{ }}` are literal braces; dotted names reach into mappings; structures are walked."""
    assert fill(template, row) == value


def test_a_missing_field_names_the_field_and_where() -> None:
    """A field the row lacks is a RowError naming it, the row's fields and the template's place."""
    with pytest.raises(RowError) as info:
        fill({"msgs": [{"content": "{q}"}]}, {"a": 1})
    assert info.value.problem == "the row has no field 'q' (its fields: 'a')"
    assert info.value.loc == ("msgs", 0, "content")


@pytest.mark.parametrize("template", ["{", "a}", "{}", "{a!r}", "{a:{b}}"])
def test_malformed_templates_are_refused(template: str) -> None:
    """Unbalanced braces, empty fields, conversions and nested fields are errors up front."""
    with pytest.raises(RowError, match="bad template"):
        compile_template(template, ("input",))


def test_jsonl_rows_keep_their_lines(tmp_path: Path) -> None:
    """Blank lines are skipped but counted, so a bad row is reported at its real line; a byte
    order mark and CRLF line ends are fine."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\n[1]\n{"a": \n')
    rows = read_rows(path, "jsonl")
    assert [(r.line, r.index, r.values) for r in rows] == [
        (1, 0, {"a": 1}),
        (3, 1, None),
        (4, 2, None),
    ]
    assert rows[1].problem == "a row must be a JSON object, not a list"
    assert rows[2].problem is not None and rows[2].problem.startswith("not valid JSON")


def test_csv_header_problems_and_empty_files(tmp_path: Path) -> None:
    """A repeated column and a file without rows are SourceErrors saying what to do."""
    path = tmp_path / "r.csv"
    path.write_text("a,a\n1,2\n")
    with pytest.raises(SourceError, match="names column 'a' twice"):
        read_rows(path, "csv")
    path.write_text("a,b\n")
    with pytest.raises(SourceError, match="holds no rows"):
        read_rows(path, "csv")
    path.write_bytes(b"a\xff\n1\n")
    with pytest.raises(SourceError, match="the header line is not UTF-8"):
        read_rows(path, "csv")


def test_a_record_that_is_not_utf8_is_its_rows_error(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (an encoded surrogate among them) spoil only their record."""
    path = tmp_path / "r.csv"
    path.write_bytes(b"a,b\n1,\xff\n2,\xed\xa0\x80\n3,ok\n")
    rows = read_rows(path, "csv")
    assert [(r.line, r.problem and r.problem.split(":")[0]) for r in rows] == [
        (2, "the record is not UTF-8 text"),
        (3, "the record is not UTF-8 text"),
        (4, None),
    ]


def test_an_open_quote_is_named(tmp_path: Path) -> None:
    """A CSV quote left open swallows the records after it: the error says which lines the
    record spans and asks about the quote."""
    path = tmp_path / "r.csv"
    path.write_text('id,q,a\n1,h,x\n2,"bad,x\n3,a,b\n')
    bad = [row for row in read_rows(path, "csv") if row.problem]
    assert len(bad) == 1 and bad[0].line == 3
    assert bad[0].problem == (
        "the record has 2 fields, the header 3 (a quote opened on line 3 is never closed: "
        "it swallowed line 4 (1 line, not read as rows); close the quote)"
    )


@pytest.mark.parametrize("broken", [10, 4990])
def test_a_quote_left_open_in_a_long_file_names_what_it_swallowed(
    tmp_path: Path, broken: int
) -> None:
    """A quote left open in a long CSV swallows rows up to the field limit (or to the file's
    end, where the field count may even fit): the error names the line the quote opened on and
    the lines it swallowed, which are exactly the rows missing; the rows after them are read."""
    padding = "." * 30
    lines = ["id,q", *(f"{i},question {i} padded {padding}" for i in range(1, 5001))]
    lines[broken] = f'{broken},"an open quote'
    path = tmp_path / "r.csv"
    path.write_text("\n".join(lines) + "\n")
    rows = read_rows(path, "csv")
    bad = [row for row in rows if row.problem]
    opened = broken + 1
    assert [row.line for row in bad] == [opened]
    swallowed = 5000 - len(rows)
    assert swallowed > 5
    assert (
        f"a quote opened on line {opened} is never closed: it swallowed lines "
        f"{opened + 1}-{opened + swallowed} ({swallowed} lines, not read as rows)"
    ) in (bad[0].problem or "")
    assert rows[-1].line == (5001 if broken == 10 else opened)  # the rows after it are read


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(JSON_VALUES, min_size=1, max_size=5))
def test_jsonl_values_round_trip_into_task_fields(tmp_path: Path, values: list[Any]) -> None:
    """Any JSON value written to a JSONL row comes back unchanged through `"{v}"` (the file is
    rewritten for each example)."""
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"v": v}) + "\n" for v in values))
    template = compile_template("{v}")
    assert [render(template, r.values or {}) for r in read_rows(path, "jsonl")] == values


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=5))
def test_csv_values_round_trip_into_task_fields(
    tmp_path: Path, values: list[tuple[str, str]]
) -> None:
    """Any text csv.writer quotes (commas, quotes, line breaks) comes back as written, also
    inside a longer template."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["a", "b"])
    rows = [(a.replace("\r", ""), b.replace("\r", "")) for a, b in values]
    writer.writerows(rows)
    path = tmp_path / "r.csv"
    path.write_bytes(buffer.getvalue().encode())
    template = compile_template("{a}|{b}")
    read = read_rows(path, "csv")
    assert [render(template, r.values or {}) for r in read] == [f"{a}|{b}" for a, b in rows]


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_at_the_cap(tmp_path: Path) -> None:
    """A small gzip that expands past MAX_GZIP_BYTES is a SourceError, read as a stream: it is
    never decompressed whole."""
    member = gzip.compress(b"\n" * 2**20)
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(member * (MAX_GZIP_BYTES // 2**20 + 1))
    assert path.stat().st_size < 2**20
    with pytest.raises(SourceError, match=r"bomb.jsonl.gz expands to more than 256 MiB"):
        read_rows(path, "jsonl")
