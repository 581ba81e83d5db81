"""The run store: append-only commits, an index without outputs, history, damage, locking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import aid
from pytest_agenteval.core.errors import StoreError
from pytest_agenteval.core.model import AgentResult, Status
from pytest_agenteval.core.records import AttemptRecord, new_record
from pytest_agenteval.store.index import IndexRow, read_index
from pytest_agenteval.store.plan import make_plan
from pytest_agenteval.store.problems import StoreProblem
from pytest_agenteval.store.runs import Store


def record(task: str, attempt: int, status: Status = "pass", digest: str = "d1") -> AttemptRecord:
    return new_record(
        key=aid("ds", task, attempt),
        digest=digest,
        run_digest="r1",
        agent={"override": None},
        tags=["t"],
        status=status,
        verdicts=[],
        result=AgentResult(output="x" * 10_000),
        started_at=1.0,
        duration=0.5,
        error="boom" if status == "error" else None,
        phase="agent" if status == "error" else None,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path)
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    return store


def test_commit_index_and_full_record(store: Store) -> None:
    """The index holds small summaries; the full, schema-valid record lives apart."""
    store.commit("r1", record("a", 0))
    store.commit("r1", record("a", 1, "error"))
    rows, bad = store.index("r1")
    assert not bad
    assert sorted((r.key.to_json(), r.status) for r in rows) == [
        (["ds", "a", 0], "pass"),
        (["ds", "a", 1], "error"),
    ]
    index = (store.runs_dir / "r1/index.jsonl").read_text()
    assert len(index) < 3000, "outputs must not be in the index"
    full = store.record("r1", aid("ds", "a", 0))
    assert full is not None and full.output == "x" * 10_000
    assert AttemptRecord.from_json(full.to_json()) == full


def test_replacing_keeps_history_and_the_newest_wins(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replacements chain their history; once the index is read, no replace reads it again."""
    store.commit("r1", record("a", 0, "fail"))
    store.index("r1")
    reads: list[int] = []
    original = Store.index

    def counted_index(self: Store, *a: Any, **k: Any) -> tuple[list[IndexRow], list[StoreProblem]]:
        reads.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(Store, "index", counted_index)
    store.commit("r1", record("a", 0, "error"), replaces=True)
    store.commit("r1", record("a", 0, "pass"), replaces=True)
    assert reads == []
    (row,), _ = store.index("r1")
    assert row.status == "pass"
    full = store.record("r1", aid("ds", "a", 0))
    assert full is not None and [p["status"] for p in full.previous] == ["error", "fail"]


def test_unreadable_lines_are_reported_not_fatal(store: Store) -> None:
    """A garbled line is listed as unreadable with its place; the others still load."""
    store.commit("r1", record("a", 0))
    store.commit("r1", record("b", 0))
    index = store.runs_dir / "r1/index.jsonl"
    first, second = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(first + b'{"not": "a record"}\n' + second[:30])
    assert list(read_index(index).rows) == [aid("ds", "a", 0)]
    rows, bad = store.index("r1")
    assert [r.key for r in rows] == [aid("ds", "a", 0), aid("ds", "b", 0)], "b's record is intact"
    assert [b.where.rsplit(":", 1)[1] for b in bad] == ["2", "3"]
    assert "missing field 'schema'" in bad[0].problem
    assert "not valid JSON" in bad[1].problem


def test_runs_listing_latest_and_locking(tmp_path: Path, store: Store) -> None:
    store.commit("r1", record("a", 0))
    store.set_planned("r1", 3)
    other = Store(tmp_path)
    info = other.run("r1", count=True)
    assert info is not None and (info.done, info.planned, info.status) == (1, 3, "running")
    with pytest.raises(StoreError, match="being run by another pytest process"):
        other.claim_run("r1")
    store.create_run("r2", [{"name": "other", "version": "1"}], {})
    assert store.latest_run([{"name": "ds", "version": "9"}]) == "r1"
    with pytest.raises(StoreError, match="exists already"):
        store.create_run("r1", [], {})
    store.finish_run("r1", "interrupted", {"exitstatus": 2})
    other.claim_run("r1")
    assert [r.run_id for r in other.runs()] == ["r1", "r2"]


def test_a_dead_owner_means_interrupted(tmp_path: Path) -> None:
    """A run whose process died (no lock holder) shows as interrupted and can be claimed."""
    code = (
        "import sys, time; from pathlib import Path; from pytest_agenteval.store.runs import Store;"
        f"s = Store(Path({str(tmp_path)!r})); s.create_run('r', [{{'name': 'd', 'version': '1'}}], {{}});"
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    store = Store(tmp_path)
    assert store.run("r").status == "running"  # type: ignore[union-attr]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert store.run("r").status == "interrupted"  # type: ignore[union-attr]
    store.claim_run("r")


def test_newer_run_schema_is_refused(store: Store) -> None:
    meta = json.loads((store.runs_dir / "r1/run.json").read_text())
    (store.runs_dir / "r1/run.json").write_text(json.dumps({**meta, "schema": "agenteval.run/2"}))
    with pytest.raises(StoreError, match="newer pytest-agenteval"):
        Store(store.root).run("r1")


def test_commit_survives_kill_9(tmp_path: Path) -> None:
    """Every record committed before a SIGKILL is readable afterwards."""
    here, root = str(Path(__file__).parent), str(tmp_path)
    code = (
        f"import sys; from pathlib import Path; sys.path.insert(0, {here!r});"
        "from test_store import record; from pytest_agenteval.store.runs import Store;"
        f"s = Store(Path({root!r})); s.create_run('r', [{{'name': 'ds', 'version': '1'}}], {{}});"
        "[(s.commit('r', record(f't{i}', 0)), print(i, flush=True)) for i in range(100000)]"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while int(proc.stdout.readline()) < 300:
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rows, bad = Store(tmp_path).index("r")
    assert len(rows) >= 300
    # A kill between a record's append (its commit) and its index line's leaves that one
    # record unindexed: it is indexed from records.jsonl, said, and nothing runs again.
    assert all(
        p.problem == "has no line for 1 attempts records.jsonl holds"
        and p.effect.endswith("nothing runs again")
        for p in bad
    ), bad


def test_plan_decisions(store: Store) -> None:
    """reuse / regrade / run, and the flags that force runs."""
    store.commit("r1", record("same", 0))
    store.commit("r1", record("graders", 0))
    store.commit("r1", record("err", 0, "error"))
    store.commit("r1", record("gone", 0))
    rows, _ = store.index("r1")
    plan = make_plan(rows, rerun_errors=False, rerun_all=False)
    plan.fetch = lambda key: store.record("r1", key)
    assert plan.decide(aid("ds", "same", 0), "d1", "r1").action == "reuse"
    decision = plan.decide(aid("ds", "graders", 0), "d2", "r1")
    assert decision.action == "regrade" and decision.record is not None
    assert decision.record.output == "x" * 10_000
    assert plan.decide(aid("ds", "graders", 0), "d2", "r1", regradable=False).action == "run"
    assert plan.decide(aid("ds", "gone", 0), "d2", "r2").action == "run"
    assert plan.decide(aid("ds", "new", 0), "d1", "r1").action == "run"
    assert plan.decide(aid("ds", "err", 0), "d2", "r1").action == "reuse"
    rerun_errors = make_plan(rows, rerun_errors=True, rerun_all=False)
    assert rerun_errors.decide(aid("ds", "err", 0), "d1", "r1").action == "run"
    rerun_all = make_plan(rows, rerun_errors=False, rerun_all=True)
    assert rerun_all.decide(aid("ds", "same", 0), "d1", "r1").action == "run"


def test_held_rows_equal_the_index_read_back(tmp_path: Path) -> None:
    """The rows a session keeps as it commits are what reading its index back would give."""
    store = Store(tmp_path)
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    store.hold("r1", ())
    usage = {"model": "m", "input_tokens": 3, "output_tokens": 4, "cost": 0.5}
    crash = replace(record("b", 0, "error"), phase="crash", error_type="crash")
    for made in (record("a", 0), record("a", 1, "fail"), replace(record("c", 0), usage=usage)):
        store.commit("r1", made)
    store.commit("r1", crash)
    store.commit("r1", record("a", 1, "error"), replaces=True)
    store.commit("r1", replace(crash, previous=({"phase": "crash"},)), replaces=True)
    held = store.rows("r1")
    assert held == store.index("r1", for_plan=False)[0]
    assert {(row.task_id, row.attempt): row.crashes for row in held}[("b", 0)] == 2
    assert held[2].model == "m"
