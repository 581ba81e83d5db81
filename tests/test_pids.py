"""Whether a process still runs, with a real zombie: a killed child not yet reaped (what an
xdist worker of a killed session stays in a container whose PID 1 reaps nothing) is gone
for orphan sweeps and `agenteval status`, though `kill(pid, 0)` still finds it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_agenteval.core.pids import start_time
from pytest_agenteval.execution.sandboxes import session_alive, session_label
from pytest_agenteval.store.progress import writer_alive


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_killed_child_not_yet_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        label = session_label(child.pid)
        written_by = {"session": {"host": label.split("/")[0], "pid": child.pid}}
        assert start_time(child.pid) == label.split("/")[2]
        assert session_alive(label) and writer_alive(written_by)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        os.kill(child.pid, 0)  # still found: a zombie, not reaped (we have not waited)
        assert start_time(child.pid) is None
        assert not session_alive(label)
        assert writer_alive(written_by) is False
    finally:
        child.kill()
        child.wait()
    assert start_time(child.pid) is None
    assert not session_alive(label)


def test_this_process_runs() -> None:
    assert start_time(os.getpid()) not in (None, "?")
    assert session_alive(session_label())
