"""Live phases: while a slow run goes on, progress.json lists each running attempt with its
phase and model turn (an xdist worker's through its file in the run folder), `agenteval
status` prints them, and the session's last word lists none."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import WORKERS, DatasetMaker, run_ids
from pytest_agenteval.cli import main

WAITING = '''
import pathlib
import time


def wait(task):
    """One model turn, then wait on the test's gate file: inside a tool, or not."""
    gate = pathlib.Path(task.metadata["gate"])
    task.trace.model_call(model="m1", input_tokens=1, output_tokens=1)
    if task.metadata.get("in_tool"):
        with task.trace.tool("bash", {"cmd": "wait for the gate"}) as run:
            while not gate.exists():
                time.sleep(0.02)
            run.done(exit_status=0, output="")
    else:
        while not gate.exists():
            time.sleep(0.02)
    return "ok"
'''


def progress_of(root: Path) -> dict[str, Any] | None:
    ids = run_ids(root)
    if not ids:
        return None
    path = root / ".pytest_cache/agenteval/runs" / ids[-1] / "progress.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def wait_for_running(root: Path, count: int, timeout: float = 60) -> dict[str, Any]:
    """progress.json once it lists `count` running attempts in their agent's phases."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = progress_of(root)
        running = (data or {}).get("running") or []
        if len(running) == count and all(r["phase"] in ("agent", "tool") for r in running):
            assert data is not None
            return data
        time.sleep(0.05)
    raise AssertionError(f"progress.json never listed {count} running attempts: {data}")


@pytest.mark.parametrize("workers", WORKERS)
def test_progress_lists_the_running_attempts_with_their_phases(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    workers: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two attempts waiting on a file the test creates: progress.json names both with their
    phase (one inside a tool, one in its agent), when each entered it and its model turn;
    `status` prints them; after the gate opens the run completes and lists none."""
    gate = pytester.path / "gate"
    root = dataset(
        {
            "in_tool.yaml": {
                "input": "q",
                "expected": "ok",
                "metadata": {"gate": str(gate), "in_tool": True},
            },
            "thinking.yaml": {"input": "q", "expected": "ok", "metadata": {"gate": str(gate)}},
        },
        manifest={"agent": "waiting:wait"},
    )
    (root / "waiting.py").write_text(WAITING)
    layout = workers or ["--agenteval-concurrency", "2"]
    proc = pytester.popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", *layout],
        stdin=subprocess.DEVNULL,
    )
    try:
        data = wait_for_running(pytester.path, 2)
        running = {r["task"]: r for r in data["running"]}
        assert running["in_tool"]["phase"] == "tool" and running["thinking"]["phase"] == "agent"
        for entry in running.values():
            assert (entry["dataset"], entry["variant"], entry["attempt"], entry["turn"]) == (
                "ds",
                None,
                0,
                1,
            )
            assert entry["since"] <= data["updated_at"]
        capsys.readouterr()
        cache = str(pytester.path / ".pytest_cache")
        assert main(["status", "--cache-dir", cache]) == 0
        out = capsys.readouterr().out
        assert "running (2 in flight):" in out and "in_tool [attempt 0] tool" in out
        assert "thinking [attempt 0] agent" in out and "turn 1" in out
    finally:
        gate.write_text("open")
        proc.communicate(timeout=120)
    assert proc.returncode == 0
    final = progress_of(pytester.path)
    assert final is not None and final["status"] == "complete" and "running" not in final
