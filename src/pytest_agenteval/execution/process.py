"""Run a program with a timeout that kills its whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..core.environment import Finished
from ..core.text import decode_output


def run_program(
    argv: Sequence[str],
    *,
    cwd: Path,
    stdin: bytes | None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Finished:
    """Run `argv` (no shell) in its own session; on timeout SIGKILL the group, children included.

    Raises OSError when the program cannot be started.
    """
    # Always an explicit environment: with none, the child execs with the C `environ`, which
    # pytest's main thread rewrites at every item (PYTEST_CURRENT_TEST) while attempts in
    # flight start programs from other threads: a race that fails the exec with EFAULT.
    full_env = {**os.environ, **env} if env else os.environ.copy()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=full_env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _RUNNING.add(proc)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = _drain(proc)
        timed_out = True
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        _RUNNING.discard(proc)
    return Finished(proc.returncode, decode_output(out), decode_output(err), timed_out)


_RUNNING: set[subprocess.Popen[bytes]] = set()
"""Programs `run_program` is waiting on now, in any thread."""


def kill_running() -> int:
    """SIGKILL the process groups of every program `run_program` is waiting on (Ctrl-C's grace
    is over); returns how many."""
    found = list(_RUNNING)
    for proc in found:
        _kill_group(proc)
    return len(found)


def _drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """What the killed program wrote; a descendant that left the group may hold the pipes."""
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        return b"", b"(output lost: a process that left the group kept the pipes open)"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def child_pids() -> set[int]:
    """This process's direct children (Linux /proc; elsewhere none are known)."""
    return set(_children_of(os.getpid()))


def kill_tree(pid: int) -> bool:
    """SIGKILL a process and everything below it (its whole group when it leads one)."""
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return True
        for child in _children_of(pid):
            kill_tree(child)
        os.kill(pid, signal.SIGKILL)
        return True
    return False


def thread_children(native_id: int | None) -> list[int]:
    """The processes started by one thread of this process and still its children (Linux
    /proc; a child whose thread ended is adopted by another thread and no longer listed)."""
    if native_id is None:
        return []
    path = f"/proc/{os.getpid()}/task/{native_id}/children"
    with contextlib.suppress(OSError), open(path) as f:
        return [int(child) for child in f.read().split()]
    return []


def _children_of(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for thread in os.scandir(f"/proc/{pid}/task"):
            with open(os.path.join(thread.path, "children")) as f:
                found += [int(child) for child in f.read().split()]
    return found
