"""The attempt record's one definition: what it writes, byte for byte, and what each form holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_agenteval.core.model import AgentResult, Verdict
from pytest_agenteval.core.records import (
    UNATTRIBUTED_CRASH,
    AttemptRecord,
    index_entry,
    new_record,
    placed,
    ship,
    to_json_text,
)

WRITTEN = Path(__file__).parent / "golden" / "v1" / "written"
"""A record and index line of each kind as format `/1` wrote them before the record's fields
were defined once (captured from the code at 2eb7b1b)."""
RECORD_AT = 123
"""The byte offset the golden index lines place their records at."""


def examples() -> dict[str, AttemptRecord]:
    """A plain pass, a failure with every optional fact, an agent error and a counted crash."""
    plain = new_record(
        key=("ds", "t1", 0),
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
        key=("ds", "tä", 2),
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
        key=("ds", "t3", 1),
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
        key=("ds", "t4", 0),
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
