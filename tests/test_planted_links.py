"""Links planted in a run folder, the provider folders or a workspace are never followed: a
capped session does not write its spend into a host file, a stop or note read through a link
is none, and a write whose temporary name is a link refuses."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from helpers import DatasetMaker, aid, task
from pytest_agenteval.core.errors import StoreError
from pytest_agenteval.store.files import RunFiles, locked, running_note, write_json
from pytest_agenteval.store.inflight import InFlight
from pytest_agenteval.store.ledger import LEDGER_FILE, Ledger, Paid, run_spend
from pytest_agenteval.store.locks import locked as lock_file
from pytest_agenteval.store.stops import STOP_FILE, STOP_SCHEMA, Stops


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host file outside every run folder: it must never change nor be read into one."""
    path = tmp_path_factory.mktemp("host") / "passwd"
    path.write_text(f"root:x:0:0:{uuid.uuid4().hex}\n")
    return path


def test_a_planted_spend_link_stops_a_capped_session_and_leaves_the_host_file(
    pytester: pytest.Pytester, dataset: DatasetMaker, canary: Path
) -> None:
    """A spend ledger link in the run folder of a resumed, capped session is a store problem
    said in one line naming the file; the file it points at keeps its bytes."""
    root = dataset({"t1.yaml": task()}, manifest={"agent": "ok:run"})
    (root / "ok.py").write_text("def run(task):\n    return 'ok'\n")
    args = ["--agenteval", "ds", "--agenteval-run-id", "r1", "--agenteval-max-cost", "1"]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    spend = pytester.path / ".pytest_cache/agenteval/runs/r1" / LEDGER_FILE
    before = canary.read_bytes()
    spend.unlink(missing_ok=True)
    spend.symlink_to(canary)
    result = pytester.runpytest_subprocess(*args, "--resume-suite", "--agenteval-rerun")
    assert canary.read_bytes() == before
    assert result.ret != 0
    said = "\n".join(result.outlines + result.errlines)
    assert f"{spend} is a symbolic link, not a regular file" in said
    assert "Traceback" not in said


def test_an_older_versions_spend_link_is_not_read(tmp_path: Path, canary: Path) -> None:
    """A `spend` link (the ledger of an older version) where a new ledger would count it is
    a StoreError naming it, to a call and to the summary; the host file keeps its bytes."""
    before = canary.read_bytes()
    (tmp_path / "spend").symlink_to(canary)
    with pytest.raises(StoreError, match=r"/spend is a symbolic link, not a regular file"):
        Ledger(tmp_path).hold(Paid(1.0, 1, 1))
    (tmp_path / LEDGER_FILE).unlink()
    with pytest.raises(StoreError, match=r"/spend is a symbolic link, not a regular file"):
        run_spend(tmp_path)
    assert canary.read_bytes() == before


def test_run_files_open_no_link(tmp_path: Path, canary: Path) -> None:
    """A `lock` or `index.jsonl` link in a run folder is a StoreError naming it; the lock
    check and the running note read none; the host file keeps its bytes."""
    before = canary.read_bytes()
    folder = tmp_path / "r1"
    folder.mkdir()
    (folder / "lock").symlink_to(canary)
    with pytest.raises(StoreError, match=r"r1/lock is a symbolic link, not a regular file"):
        RunFiles(folder)
    assert locked(folder) is None and running_note(folder) is None
    (folder / "lock").unlink()
    (folder / "index.jsonl").symlink_to(canary)
    files = RunFiles(folder)
    with pytest.raises(StoreError, match=r"index.jsonl is a symbolic link.*remove it"):
        files.lock()
    files.close()
    with pytest.raises(StoreError, match=r"spend is a symbolic link"):
        (folder / "spend").symlink_to(canary)
        with lock_file(folder / "spend"):
            pass
    assert canary.read_bytes() == before


def test_a_json_write_never_truncates_through_its_temporary_name(
    tmp_path: Path, canary: Path
) -> None:
    """A link planted where `write_json` puts its temporary file is refused, not truncated
    through; the notes a process keeps (in flight, running) are not written through either."""
    before = canary.read_bytes()
    (tmp_path / f".progress.json.{os.getpid()}.tmp").symlink_to(canary)
    with pytest.raises(StoreError, match=r"progress\.json"):
        write_json(tmp_path / "progress.json", {"schema": "x"})
    (tmp_path / "inflight").mkdir()
    (tmp_path / "inflight/gw0.json").symlink_to(canary)
    InFlight(tmp_path / "inflight/gw0.json").note(aid("ds", "t", 0), True)
    assert canary.read_bytes() == before


def test_a_stop_through_a_link_is_no_stop(tmp_path: Path) -> None:
    """A `stop.json` that is a link to a stop elsewhere is not adopted (a regular one is)."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"schema": STOP_SCHEMA, "kind": "budget", "reason": "x"}))
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / STOP_FILE).symlink_to(elsewhere)
    assert Stops(run_dir).reason() is None
    (run_dir / STOP_FILE).unlink()
    shutil.copy(elsewhere, run_dir / STOP_FILE)
    assert Stops(run_dir).reason() == "x"
