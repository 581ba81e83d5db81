"""The run store: atomic commits, index without outputs, history, corruption, versions."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_agenteval.errors import StoreError
from pytest_agenteval.model import AttemptRecord
from pytest_agenteval.plan import make_plan
from pytest_agenteval.records import build_record
from pytest_agenteval.store import Store


def record(
    task: str, attempt: int, status: str = "pass", digest: str = "d1", **extra: Any
) -> dict[str, Any]:
    rec = build_record(
        key=("ds", task, attempt),
        digest=digest,
        run_digest="r1",
        agent={"override": None},
        tags=["t"],
        status=status,
        verdicts=[],
        result=None,
        started_at=1.0,
        duration=0.5,
        error="boom" if status == "error" else None,
        phase="agent" if status == "error" else None,
    )
    return {**rec, "output": "x" * 10_000, **extra}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "store.sqlite")
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    return store


def test_commit_index_and_full_record(store: Store) -> None:
    """The index holds small summaries; the payload holds the full, schema-valid record."""
    store.commit("r1", record("a", 0))
    store.commit("r1", record("a", 1, "error"))
    rows, bad = store.index("r1")
    assert not bad
    assert sorted((r.key, r.status) for r in rows) == [
        (("ds", "a", 0), "pass"),
        (("ds", "a", 1), "error"),
    ]
    assert all(len(json.dumps(r.summary)) < 1500 for r in rows)
    full = store.record("r1", ("ds", "a", 0))
    assert isinstance(full, dict) and full["output"] == "x" * 10_000
    AttemptRecord.model_validate(full)


def test_replacing_keeps_history(store: Store) -> None:
    store.commit("r1", record("a", 0, "fail"))
    store.commit("r1", record("a", 0, "pass"), replaces=True)
    full = store.record("r1", ("ds", "a", 0))
    assert isinstance(full, dict)
    assert full["status"] == "pass" and [p["status"] for p in full["previous"]] == ["fail"]


def test_unreadable_rows_are_reported_not_fatal(store: Store) -> None:
    """A row whose summary is garbage is listed as unreadable; the others still load."""
    store.commit("r1", record("a", 0))
    store.commit("r1", record("b", 0))
    store.conn.execute("UPDATE attempts SET summary='{trunc' WHERE task_id='b'")
    store.conn.commit()
    rows, bad = store.index("r1")
    assert [r.key for r in rows] == [("ds", "a", 0)]
    assert bad[0].key == ("ds", "b", 0) and "JSONDecodeError" in bad[0].problem


def test_runs_listing_and_latest(store: Store) -> None:
    store.commit("r1", record("a", 0))
    store.set_planned("r1", 3)
    store.create_run("r2", [{"name": "other", "version": "1"}], {})
    assert store.latest_run([{"name": "ds", "version": "9"}]) == "r1"
    info = store.run("r1")
    assert info is not None and (info.done, info.planned, info.status) == (1, 3, "running")
    with pytest.raises(StoreError, match="exists already"):
        store.create_run("r1", [], {})
    with pytest.raises(StoreError, match="being run by another pytest process"):
        store.claim_run("r1")
    store.finish_run("r1", "interrupted", {"exitstatus": 2})
    store.claim_run("r1")


def test_a_dead_owner_means_interrupted(store: Store) -> None:
    store.conn.execute(
        "UPDATE runs SET owner=? WHERE run_id='r1'",
        (f"{__import__('socket').gethostname()}:999999999",),
    )
    store.conn.commit()
    info = store.run("r1")
    assert info is not None and info.status == "interrupted"


def test_newer_store_schema_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "s.sqlite").close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    conn.execute("UPDATE meta SET value='agenteval.store/2'")
    conn.commit()
    with pytest.raises(StoreError, match="newer pytest-agenteval"):
        Store(tmp_path / "s.sqlite")


def test_corrupt_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "s.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a readable run store"):
        Store(tmp_path / "s.sqlite")


def test_plan_decisions(store: Store) -> None:
    """reuse / regrade / run, and the flags that force runs."""
    store.commit("r1", record("same", 0))
    store.commit("r1", record("graders", 0))
    store.commit("r1", record("err", 0, "error"))
    store.commit("r1", record("gone", 0))
    rows, _ = store.index("r1")
    plan = make_plan(rows, rerun_errors=False, rerun_all=False)
    plan.fetch = lambda key: store.record("r1", key)  # type: ignore[assignment,return-value]
    assert plan.decide(("ds", "same", 0), "d1", "r1")[0] == "reuse"
    action, data = plan.decide(("ds", "graders", 0), "d2", "r1")
    assert action == "regrade" and data["output"] == "x" * 10_000
    assert plan.decide(("ds", "graders", 0), "d2", "r1", regradable=False)[0] == "run"
    assert plan.decide(("ds", "gone", 0), "d2", "r2")[0] == "run"
    assert plan.decide(("ds", "new", 0), "d1", "r1")[0] == "run"
    assert plan.decide(("ds", "err", 0), "d2", "r1")[0] == "reuse"
    assert (
        make_plan(rows, rerun_errors=True, rerun_all=False).decide(("ds", "err", 0), "d1", "r1")[0]
        == "run"
    )
    assert (
        make_plan(rows, rerun_errors=False, rerun_all=True).decide(("ds", "same", 0), "d1", "r1")[0]
        == "run"
    )
