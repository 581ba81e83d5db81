"""Shards: which part of a suite one CI machine runs, split by task so pass@k stays local.

A task goes to the shard whose number gives the highest hash of (task, shard number)
(rendezvous hashing). The choice depends on the task's own key and N only, so adding or removing
tasks never moves another task, and every attempt of a task lands in one shard. Tasks of one
dataset have the same number of attempts, so shards of equal task counts are also balanced by
attempts: for 2,000 tasks into 4 shards the largest shard is within a few percent of the mean
(`bench/shards.py` measures it).

Load errors have no attempts and no key to hash: shard 1 reports them, so merging N shards
counts each once.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

AUTO = "auto"
INDEX_VAR, TOTAL_VAR = "CI_NODE_INDEX", "CI_NODE_TOTAL"
"""GitLab's `parallel:` variables (1-based); a GitHub Actions matrix sets them in `env:`."""
_SHAPE = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `total`, counted from 1."""

    index: int
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    def holds(self, dataset: str, task_id: str) -> bool:
        """Whether this shard runs the task."""
        return shard_of(dataset, task_id, self.total) == self.index

    @property
    def reports_load_errors(self) -> bool:
        """Only shard 1 reports tasks that could not be loaded (they belong to no shard)."""
        return self.index == 1


def shard_of(dataset: str, task_id: str, total: int) -> int:
    """The shard (1..total) that runs a task: the highest-weight shard for its key."""
    key = f"{dataset}\0{task_id}\0".encode()
    return max(range(1, total + 1), key=lambda number: _weight(key, number))


def _weight(key: bytes, number: int) -> bytes:
    return hashlib.blake2b(key + str(number).encode(), digest_size=8).digest()


def parse_shard(value: str) -> Shard | str:
    """`I/N` with 1 <= I <= N, or `auto` (resolved later from the environment)."""
    if value.strip() == AUTO:
        return AUTO
    match = _SHAPE.fullmatch(value)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a shard: write I/N (e.g. 2/4, 1 <= I <= N) or auto"
        )
    return _checked(int(match[1]), int(match[2]), repr(value))


def _checked(index: int, total: int, shown: str) -> Shard:
    if total < 1 or not 1 <= index <= total:
        raise argparse.ArgumentTypeError(
            f"{shown} is not a shard: I/N needs 1 <= I <= N (shards are counted from 1)"
        )
    return Shard(index, total)


def resolve_shard(value: Shard | str | None, env: Mapping[str, str]) -> Shard | None:
    """The shard to run: `auto` reads CI_NODE_INDEX and CI_NODE_TOTAL (both unset: no shard)."""
    if value is None or isinstance(value, Shard):
        return value
    index, total = env.get(INDEX_VAR, "").strip(), env.get(TOTAL_VAR, "").strip()
    if not index and not total:
        return None
    if not (index.isdigit() and total.isdigit()):
        raise argparse.ArgumentTypeError(
            f"auto reads {INDEX_VAR} and {TOTAL_VAR}, which must be whole numbers "
            f"(they are {index!r} and {total!r}); a GitHub Actions matrix sets them in env:"
        )
    return _checked(int(index), int(total), f"{INDEX_VAR}={index} {TOTAL_VAR}={total}")
