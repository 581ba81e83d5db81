"""Which Docker daemon a container goes to: the rule, as a pure function of what each daemon
holds (`DockerSession._try_place` gathers the counts and takes the slots).

A daemon's load is its containers alive over its bound. An unbounded daemon is not "always
room": it counts as bounded like the roomiest bounded daemon beside it (as 1 when none is
bounded), so `[plain, {url: B, max_sandboxes: 2}]` puts containers on both, in turns, until
B is full, and the plain one takes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Daemon:
    """What placement knows of one daemon of a task's."""

    host: str | None
    """Its address (None: the default daemon)."""
    bound: int | None
    """Its own `max_sandboxes` (None: unbounded)."""
    alive: int
    """Containers alive on it: a bounded daemon's slots held on this machine, else this
    process's containers there (made or reserved)."""
    made: int = 0
    """Containers this process placed there so far (equal daemons take turns by it)."""


def share(daemons: Sequence[Daemon]) -> int:
    """The bound an unbounded daemon counts as: the largest bound beside it, else 1."""
    return max((d.bound for d in daemons if d.bound is not None), default=1)


def ranked(daemons: Sequence[Daemon]) -> list[str | None]:
    """The daemons' addresses in the order placement tries them, the least loaded first (alive
    over bound, an unbounded one's bound being `share`), ties to the fewest alive, then the
    fewest made; a bounded daemon that is full is left out."""
    unbounded = share(daemons)

    def load(d: Daemon) -> tuple[float, int, int]:
        return (d.alive / (d.bound or unbounded), d.alive, d.made)

    open_ = [d for d in daemons if d.bound is None or d.alive < d.bound]
    return [d.host for d in sorted(open_, key=load)]
