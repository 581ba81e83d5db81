"""The attempt record's one definition: what it writes, byte for byte, and what each form holds."""

from __future__ import annotations

import json
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import aid
from pytest_agenteval.core.error_classes import phase_class
from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import AgentResult, Verdict
from pytest_agenteval.core.payloads import NewRecord, ShippedRecord, from_wire, ship
from pytest_agenteval.core.records import (
    FIELDS,
    INDEX_LINE,
    UNATTRIBUTED_CRASH,
    AttemptRecord,
    Detail,
    index_entry,
    new_record,
    placed,
    record_schema,
    to_json_text,
)
from pytest_agenteval.core.text import excerpt
from pytest_agenteval.reporting.metrics import Attempt
from pytest_agenteval.store.index import IndexRow, explain, parse_line, row_of
from pytest_agenteval.store.runs import Store

WRITTEN = Path(__file__).parent / "golden" / "v1" / "written"
"""A record and index line of each kind as format `/1` wrote them before the record's fields
were defined once (captured from the code at 2eb7b1b)."""
RECORD_AT = 123
"""The byte offset the golden index lines place their records at."""


def examples() -> dict[str, AttemptRecord]:
    """A plain pass, a failure with every optional fact, an agent error and a counted crash."""
    plain = new_record(
        key=aid("ds", "t1", 0),
        digest="d1",
        run_digest="r1",
        agent={"spec": "agent:run"},
        tags=(),
        status="pass",
        verdicts=[Verdict("equals", True, "equal")],
        result=AgentResult(output="answer t1"),
        started_at=1000.5,
        duration=0.25,
    )
    answer = {
        "output": "x\ud800y",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost": 0.01, "model": "m1"},
        "transcript": [{"role": "user", "content": "q"}],
        "artifacts": {"f.txt": "hi"},
        "call": {"model": "m1", "retries": 1},
    }
    full = new_record(
        key=aid("ds", "tä", 2),
        digest="d2",
        run_digest="r2",
        agent={"spec": "agent:run", "version": "2"},
        tags=["math", "hard"],
        status="fail",
        verdicts=[
            Verdict("equals", False, "differs\nby one", None),
            Verdict("judge", True, "ok", 0.5, {"usage": {"cost": 0.002}}),
        ],
        result=AgentResult.model_validate(answer),
        started_at=2000.0,
        duration=1.5,
        regraded=True,
        task_input={"q": "2+2"},
        expected="4",
        wait=0.125,
    )
    error = new_record(
        key=aid("ds", "t3", 1),
        digest="d3",
        run_digest="r3",
        agent={},
        tags=["x"],
        status="error",
        verdicts=[],
        result=None,
        started_at=3000.0,
        duration=0.0,
        error="Traceback...\nValueError: boom",
        error_type="ValueError",
        phase="agent",
    )
    crash = new_record(
        key=aid("ds", "t4", 0),
        digest="d4",
        run_digest="r4",
        agent={},
        tags=(),
        status="error",
        verdicts=[],
        result=None,
        started_at=4000.0,
        duration=0.0,
        error="died",
        error_type="WorkerCrash",
        phase="crash",
    ).with_previous(
        (
            {"phase": "crash", "error_type": "WorkerCrash", "previous": []},
            {"phase": "crash", "error_type": UNATTRIBUTED_CRASH},
        )
    )
    return {"plain": plain, "full": full, "error": error, "crash": crash}


def _golden(name: str) -> list[str]:
    return (WRITTEN / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("index", range(4), ids=list(examples()))
def test_records_and_index_lines_are_written_byte_for_byte_as_before(index: int) -> None:
    """A record, its index line and its shipped form are the bytes format `/1` always wrote."""
    record = list(examples().values())[index]
    text, line = _golden("records.jsonl")[index], _golden("index.jsonl")[index]
    entry = to_json_text(index_entry(record))
    assert record.to_text() == text
    assert placed(entry, RECORD_AT, len(text.encode()) + 1) == line
    shipped_entry = line.rpartition(', "record"')[0] + "}"
    assert ship("run", entry, text) == f"run\n{shipped_entry}\n{text}"


def _with_variant(record: AttemptRecord, variant: str) -> AttemptRecord:
    return AttemptRecord.from_json(record.to_json() | {"variant": variant})


def test_every_attribute_of_a_record_is_one_stored_field_and_round_trips() -> None:
    """Each attribute of the record is read back by exactly one field, and every kind of record
    (a variant's too) reads back equal to itself from its stored JSON."""
    attributes = [f.name for f in dataclass_fields(AttemptRecord)]
    read = [f.attribute for f in FIELDS if f.stored and f.read is not None]
    assert sorted(read) == sorted(attributes)
    for record in (*examples().values(), _with_variant(examples()["full"], "v1")):
        assert AttemptRecord.from_text(record.to_text()) == record
        written = list(record.to_json())
        assert written == [f.name for f in FIELDS if f.stored and f.name in written]


def test_an_index_line_holds_exactly_the_declared_index_fields() -> None:
    """The index line has the declared index fields in `INDEX_LINE`'s order, the optional ones
    only when they say something, and the row it reads as has a column for each."""
    declared = {f.name for f in FIELDS if f.index is not None}
    assert set(INDEX_LINE) == declared
    row_columns = {f.name for f in dataclass_fields(IndexRow)} - {"key"}
    assert row_columns | {"schema", "dataset", "task_id", "attempt"} == declared
    optional = {f.name for f in FIELDS if f.index is not None and f.omit}
    for record in (*examples().values(), _with_variant(examples()["plain"], "v1")):
        entry = index_entry(record)
        assert list(entry) == [name for name in INDEX_LINE if name in entry]
        assert declared - set(entry) <= optional
        line = placed(to_json_text(entry), 7, 9).encode()
        row, where = parse_line(line, {}, True)
        assert where == (7, 9) and row.key == record.key
        back = {name: getattr(row, name) for name in row_columns}
        assert back == {name: _as_row(entry, name) for name in row_columns}
        assert row_of(entry) == replace(row, digest="", run_digest="", replay="")


def test_what_a_report_carries_and_a_failure_shows_agree_with_the_record() -> None:
    """A new record on a report (typed in its process, one string to xdist's controller) is
    its record's JSON and index entry, naming its key; the detail a failure shows is the
    record's own fields (same names and types), also when replayed from its index line."""
    annotations = {f.name: f.type for f in dataclass_fields(AttemptRecord)}
    assert {f.name: f.type for f in dataclass_fields(Detail)}.items() <= annotations.items()
    for record in (*examples().values(), _with_variant(examples()["full"], "v1")):
        shipped = from_wire(NewRecord("regrade", record).ship())
        entry = to_json_text(index_entry(record))
        fields = json.loads(entry)
        assert shipped == ShippedRecord("regrade", record.key, entry, record.to_text(), fields)
        assert AttemptId.of_fields(fields) == record.key
        detail = record.detail()
        shown = {f.name: getattr(detail, f.name) for f in dataclass_fields(Detail)}
        assert shown == {name: getattr(record, name) for name in shown}
        row, _ = parse_line(placed(entry, 0, 1).encode(), {}, True)
        replayed = row.detail()
        if record.status == "pass":
            assert replayed == Detail()
            continue
        assert replayed.output == excerpt(record.output or "", 300)
        assert replayed.error == record.error
        assert [v.as_dict(details=False) for v in replayed.verdicts] == [
            v.as_dict(details=False) for v in record.verdicts
        ]


def _as_row(entry: dict[str, Any], name: str) -> Any:
    """What a row holds for an index entry's field (an absent optional field: its default)."""
    if name == "tags":
        return tuple(entry["tags"])
    if name == "error_class" and entry["status"] == "error":  # implied by its phase
        return entry.get(name) or phase_class(entry["phase"])
    return entry.get(
        name, 0 if name in ("crashes", "retries", "cache_hits", "cache_misses") else None
    )


def test_model_cache_counts_reach_the_index_line_and_read_back() -> None:
    """An attempt whose agent call and judge the model cache answered or missed: its index
    line counts the hits and misses of both and what the hits first cost, and reads back as
    the same row; a record without them writes none of these fields (format `/1`)."""
    full = examples()["full"]
    usage = {**(full.usage or {}), "cached_calls": 2, "cached_cost": 0.25, "cache_misses": 1}
    judge = Verdict("judge", True, "ok", 0.5, {"usage": {"cost": 0.0, "cached_calls": 1}})
    cached = replace(full, usage=usage, verdicts=(*full.verdicts, judge))
    entry = index_entry(cached)
    assert (entry["cache_hits"], entry["cache_misses"], entry["cached_cost"]) == (3, 1, 0.25)
    row, _ = parse_line(placed(to_json_text(entry), 0, 1).encode(), {}, True)
    assert (row.cache_hits, row.cache_misses, row.cached_cost) == (3, 1, 0.25)
    assert row_of(entry) == replace(row, replay="", digest="", run_digest="")
    for record in examples().values():
        assert not {"cache_hits", "cache_misses", "cached_cost"} & set(index_entry(record))


def test_a_variant_is_part_of_the_identity_and_absent_without_one(tmp_path: Path) -> None:
    """Two variants of one attempt are two stored attempts read back apart (also from a torn
    line), and a record without a variant names none."""
    plain = examples()["plain"]
    assert '"variant"' not in plain.to_text() and plain.key == AttemptId(
        dataset="ds", task_id="t1", variant=None, attempt=0
    )
    assert plain.key.to_json() == ["ds", "t1", 0] and plain.key.plan_key == "ds\x00t1\x000"
    one, two = _with_variant(plain, "v1"), _with_variant(plain, "v2")
    assert one.to_text().startswith('{"schema": "agenteval.record/1", "dataset": "ds", "variant"')
    assert one.key.to_json() == ["ds", "t1", 0, "v1"] and one.key.variant == "v1"
    assert one.key != two.key != plain.key
    assert len({k.seed for k in (plain.key, one.key, two.key)}) == 3
    store = Store(tmp_path)
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    for record in (plain, one, two):
        store.commit("r1", record)
    rows, problems = store.index("r1")
    assert problems == [] and {row.key: row.variant for row in rows} == {
        plain.key: None,
        one.key: "v1",
        two.key: "v2",
    }
    assert {r.key for r in store.records("r1")} == {plain.key, one.key, two.key}
    line = placed(to_json_text(index_entry(two)), 0, 1)
    torn = line[: line.index('"digest"')].encode()
    assert explain(torn)[1] == two.key
    mistyped = line.replace('"variant": "v2"', '"variant": 3').encode()
    with pytest.raises(TypeError):
        parse_line(mistyped, {}, True)
    assert explain(mistyped)[0] == "at variant: expected a string, got 3"


def test_the_record_schema_names_the_stored_fields_by_their_json_names() -> None:
    """`agenteval schema record` lists exactly the fields a stored record has (`input`, not the
    attribute `task_input`), and every kind of record has its required ones."""
    schema = record_schema()
    assert list(schema["properties"]) == [f.name for f in FIELDS if f.stored]
    for record in examples().values():
        assert set(schema["required"]) <= set(record.to_json())


def test_what_metrics_read_of_an_attempt_is_declared_index_fields() -> None:
    """Every fact the metrics' `Attempt` protocol reads is a field of the index line, which both
    a stored row and a record hold."""
    read = {name for name in vars(Attempt) if not name.startswith("_")}
    assert read and read <= {f.name for f in FIELDS if f.index is not None}
    record, row = examples()["full"], row_of(index_entry(examples()["full"]))
    assert {name: getattr(record, name) for name in read} == {
        name: getattr(row, name) for name in read
    }


def _sandboxed(record: AttemptRecord) -> AttemptRecord:
    captured = {"image": "sha256:ab", "environment": {"python": "Python 3.12.1", "sh": ""}}
    return AttemptRecord.from_json(record.to_json() | captured)


def test_a_sandbox_record_keeps_its_image_and_captured_environment() -> None:
    """A sandboxed attempt's record keeps the image id and the captured environment after the
    other new fields (absent without a sandbox), round-trips, and its index line and row hold
    the environment (what the summary's drift check reads)."""
    plain = examples()["plain"]
    assert '"image"' not in plain.to_text() and '"environment"' not in plain.to_text()
    for record in (_sandboxed(plain), _sandboxed(examples()["full"])):
        assert AttemptRecord.from_text(record.to_text()) == record
        assert list(record.to_json())[-2:] == ["image", "environment"]
        entry = index_entry(record)
        assert entry["environment"] == {"python": "Python 3.12.1", "sh": ""}
        assert list(entry) == [name for name in INDEX_LINE if name in entry]
        row, _ = parse_line(placed(to_json_text(entry), 7, 9).encode(), {}, True)
        assert row.environment == record.environment == row_of(entry).environment
    mistyped = placed(to_json_text(index_entry(plain) | {"environment": 3}), 7, 9).encode()
    assert parse_line(mistyped, {}, True)[0].environment is None


def test_an_error_class_is_written_only_where_its_phase_does_not_imply_it() -> None:
    """A 429 after retries (class `rate_limited`, phase agent) writes its class in the record
    and its index line, and both read it back; an agent error implied by its phase writes
    none (format /1's bytes as before) and reads back `agent_error`; an old record of a timeout
    without a class reads back `timeout`, derived from its error type."""
    error = examples()["error"]
    assert "error_class" not in error.to_text() and "error_class" not in index_entry(error)
    assert AttemptRecord.from_text(error.to_text()).error_class == "agent_error"
    limited = replace(error, error_class="rate_limited")
    entry = index_entry(limited)
    assert json.loads(limited.to_text())["error_class"] == entry["error_class"] == "rate_limited"
    assert AttemptRecord.from_text(limited.to_text()).error_class == "rate_limited"
    row, _ = parse_line(placed(to_json_text(entry), 7, 9).encode(), {}, True)
    assert row.error_class == row_of(entry).error_class == "rate_limited"
    old = json.loads(error.to_text()) | {"error_type": "AgentTimeout"}
    assert AttemptRecord.from_json(old).error_class == "timeout"
    assert examples()["plain"].error_class is None
