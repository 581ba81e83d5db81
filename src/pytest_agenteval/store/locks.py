"""flock'd files this process holds, and the rule that keeps them its own.

A forked child (an agent's `ProcessPoolExecutor`) inherits the descriptors of the locks held,
and a flock is released only when every copy is closed: a pool's long-lived worker would hold
the lock forever. Children close their copies at once (`os.register_at_fork`), which leaves
the parent's lock held. The run's spend ledger and the agents' limits (`execution/limits.py`)
hold their locks here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

HELD: set[int] = set()
"""Descriptors of the locks this process holds (slots, pace, spend): not its children's."""


def _close_held_in_child() -> None:
    for fd in list(HELD):
        with contextlib.suppress(OSError):
            os.close(fd)  # this copy only: the parent's lock stays
    HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


@contextlib.contextmanager
def locked(path: Path, mode: int = fcntl.LOCK_EX) -> Iterator[int]:
    """`path` opened and flock'd for the block (a copy a forked child gets is closed)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    HELD.add(fd)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        HELD.discard(fd)
        os.close(fd)  # releases the lock
