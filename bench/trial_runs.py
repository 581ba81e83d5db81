"""What the kill trials share: a pytest run in a folder, its xdist workers, the run's records,
and the invariants over records.jsonl a killed process must never break.

An attempt's record is *committed* once records.jsonl holds a line for it that the plan would
not run again: any line but a crash record (written by the controller for the attempts of a
worker that died) or a run-wide stop (`stopped`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

Key = tuple[object, ...]
"""An attempt as records name it: (task id, attempt, variant)."""

RERUN_PHASES = ("crash", "stopped")
"""Phases of records a resume runs again: not committed."""


def pytest_run(
    root: Path, args: list[str], *extra: str, group: bool = False
) -> subprocess.Popen[bytes]:
    """pytest with only this plugin and xdist loaded, in `root`; `group`: in a process group
    of its own (its xdist workers too), so the whole session can be killed at once."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": ""}
    argv = [sys.executable, "-m", "pytest", "-p", "agenteval", *args, *extra]
    return subprocess.Popen(
        argv,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=group,
    )


def resume_until_complete(root: Path, args: list[str], tries: int = 4) -> int:
    """`--resume-suite` until a session passes; the number of sessions it took."""
    for resumes in range(1, tries + 1):
        resume = pytest_run(root, args, "--resume-suite")
        out, _ = resume.communicate()
        if resume.returncode == 0:
            return resumes
    raise SystemExit(f"the run did not complete after {tries} resumes:\n{out.decode()[-3000:]}")


def workers(pid: int) -> list[int]:
    """The pytest process's children: its xdist workers."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def run_dir(root: Path) -> Path:
    """The one run folder in `root`."""
    (found,) = root.glob(".pytest_cache/agenteval/runs/*/run.json")
    return found.parent


def first_commit(root: Path) -> bool:
    """Whether a record has been written in `root`'s run."""
    return any(p.stat().st_size for p in root.glob(".pytest_cache/agenteval/runs/*/records.jsonl"))


def records(root: Path, *, partial: bool = False) -> list[dict[str, object]]:
    """The lines of the run's records.jsonl; `partial`: while processes may be writing it (a
    line being written is left out, no run yet is no line)."""
    found = list(root.glob(".pytest_cache/agenteval/runs/*/records.jsonl"))
    if partial and not found:
        return []
    (path,) = found
    lines = []
    for line in filter(str.strip, path.read_text().splitlines()):
        try:
            lines.append(json.loads(line))
        except ValueError:
            if not partial:
                raise
    return lines


def key_of(record: dict[str, object]) -> Key:
    return (record["task_id"], record["attempt"], record.get("variant"))


def committed(lines: list[dict[str, object]]) -> set[Key]:
    """The attempts with a committed record among `lines`."""
    return {key_of(r) for r in lines if r.get("phase") not in RERUN_PHASES}


def replaced(lines: list[dict[str, object]]) -> list[Key]:
    """Attempts with a line after one of theirs that was committed."""
    done: set[Key] = set()
    found: list[Key] = []
    for record in lines:
        key = key_of(record)
        if key in done:
            found.append(key)
        if record.get("phase") not in RERUN_PHASES:
            done.add(key)
    return found
