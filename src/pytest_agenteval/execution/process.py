"""Run a program with a timeout that kills its whole process group, keeping a bounded part of
what it writes."""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.environment import Finished
from ..core.text import decode_output

MAX_OUTPUT = 1024 * 1024
"""Bytes kept of a program's stdout, and of its stderr: past it the first and the last half
are kept around a note of the full size, so a program that writes gigabytes costs the pytest
process (and the attempt's record) at most this much per stream."""
OUTPUT_CUT = "\n…[output cut: {total:,} bytes written, the {cut:,} in the middle not kept]…\n"
"""What stands in a kept output for the bytes cut from its middle."""
_CUT_SAID = OUTPUT_CUT.partition("{")[0]
DRAIN_SECONDS = 5.0
"""How long a killed program's pipes are read before what it wrote is given up."""


def run_program(
    argv: Sequence[str],
    *,
    cwd: Path,
    stdin: bytes | None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    limit: int = MAX_OUTPUT,
) -> Finished:
    """Run `argv` (no shell) in its own session; on timeout SIGKILL the group, children included.
    Of stdout and of stderr at most `limit` bytes each are kept (head and tail).

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
    pipes = _Pipes(proc, stdin, limit)
    try:
        timed_out = not pipes.read(timeout)
        if timed_out:
            _kill_group(proc)
            if not pipes.read(DRAIN_SECONDS):  # a descendant that left the group holds them
                pipes.lost()
        proc.wait()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        _RUNNING.discard(proc)
        pipes.close()
    return Finished(proc.returncode, pipes.out.text(), pipes.err.text(), timed_out)


def was_cut(text: str) -> bool:
    """Whether a kept output had its middle cut."""
    return _CUT_SAID in text


class Kept:
    """What is kept of one stream: its first and last `limit // 2` bytes, and its size."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            keep = self.limit - self.limit // 2
            if len(self.tail) > 2 * keep:  # trimmed now and then, not at every chunk
                del self.tail[:-keep]

    def text(self) -> str:
        """The stream as text, its middle cut (and the cut said) when it was over `limit`."""
        if self.total <= self.limit:
            return decode_output(bytes(self.head + self.tail))
        tail = self.tail[-(self.limit - self.limit // 2) :] if self.limit > 1 else b""
        cut = self.total - len(self.head) - len(tail)
        note = OUTPUT_CUT.format(total=self.total, cut=cut)
        return decode_output(bytes(self.head)) + note + decode_output(bytes(tail))


class _Pipes:
    """A program's stdin fed and its stdout and stderr read at once, as `communicate` does,
    but keeping only what `Kept` keeps."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, limit: int) -> None:
        self.proc = proc
        self.out, self.err = Kept(limit), Kept(limit)
        self.selector = selectors.DefaultSelector()
        self.input = memoryview(stdin or b"")
        self.written = 0
        if proc.stdin is not None:
            if self.input:
                self.selector.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        self.selector.register(proc.stdout, selectors.EVENT_READ, self.out)
        self.selector.register(proc.stderr, selectors.EVENT_READ, self.err)

    def read(self, timeout: float | None) -> bool:
        """Feed and read until both outputs are closed (True) or `timeout` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.selector.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            for key, _ in self.selector.select(left):
                if key.data is None:
                    self._write(key)
                    continue
                data = os.read(key.fd, 65536)
                if data:
                    key.data.add(data)
                else:
                    self._done(key.fileobj)
        if deadline is None:
            return True
        try:  # the program closed its outputs: it ends, or it is still running at the timeout
            self.proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            return False
        return True

    def _write(self, key: selectors.SelectorKey) -> None:
        chunk = self.input[self.written : self.written + select.PIPE_BUF]
        try:
            self.written += os.write(key.fd, chunk)
        except BrokenPipeError:  # the program does not read its stdin: fine
            self.written = len(self.input)
        if self.written >= len(self.input):
            self._done(key.fileobj)

    def _done(self, pipe: Any) -> None:
        self.selector.unregister(pipe)
        pipe.close()

    def lost(self) -> None:
        self.err.add(b"(output lost: a process that left the group kept the pipes open)")

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            self._done(key.fileobj)
        self.selector.close()


_RUNNING: set[subprocess.Popen[bytes]] = set()
"""Programs `run_program` is waiting on now, in any thread."""


def kill_running() -> int:
    """SIGKILL the process groups of every program `run_program` is waiting on (Ctrl-C's grace
    is over); returns how many."""
    found = list(_RUNNING)
    for proc in found:
        _kill_group(proc)
    return len(found)


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
