"""Files written by format version 1 stay readable: a stored run kept as golden files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pytest_agenteval.cli import main
from pytest_agenteval.core.records import AttemptRecord
from pytest_agenteval.reporting.summary import Summary
from pytest_agenteval.store.runs import Store

GOLDEN = Path(__file__).parent / "golden" / "v1"


def test_v1_run_store_reads_and_re_renders_the_same_summary(tmp_path: Path) -> None:
    """A run stored by v1 loads, its records validate, and its summary re-renders equal."""
    shutil.copytree(GOLDEN, tmp_path / "agenteval")
    store = Store(tmp_path / "agenteval")
    info = store.run("golden1", count=True)
    assert info is not None and (info.done, info.status) == (4, "complete")
    rows, bad = store.index("golden1")
    assert not bad and {(r.dataset, r.task_id, r.attempt) for r in rows} == {
        ("golden", t, a) for t in ("add", "boom") for a in (0, 1)
    }
    for record in store.records("golden1"):
        assert AttemptRecord.from_json(record.to_json()) == record
    stored = json.loads((GOLDEN / "runs/golden1/summary.json").read_text())
    Summary.model_validate(stored)
    assert (
        main(["report", "golden1", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "out")])
        == 0
    )
    again = json.loads((tmp_path / "out/summary.json").read_text())
    for key in ("metrics", "tasks", "tags", "n_attempts", "dataset", "agent"):
        assert again[key] == stored[key], key
