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


@dataclass(frozen=True)
class ShardVars:
    """Where one CI system says which parallel job this is, and how it counts."""

    system: str
    index: str
    total: str
    first: int
    """The number of the first job: 1 for GitLab, 0 for the others."""


SHARD_VARS = (
    ShardVars(
        "GitLab parallel: (or a GitHub Actions matrix's env:)", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1
    ),
    ShardVars("CircleCI parallelism", "CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),
    ShardVars("Buildkite parallelism", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),
    ShardVars("a Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", "JOB_COMPLETIONS", 0),
)
"""What `auto` reads, first match wins. Kubernetes sets only the index: the Job's pod template
sets `JOB_COMPLETIONS` to its `completions` (see the README's recipe)."""
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
    """The shard to run: `auto` reads the first CI system's variables that are set (none: all)."""
    if value is None or isinstance(value, Shard):
        return value
    for found in SHARD_VARS:
        index, total = env.get(found.index, "").strip(), env.get(found.total, "").strip()
        if index or total:
            return _from_vars(found, index, total)
    return None


def _from_vars(found: ShardVars, index: str, total: str) -> Shard:
    shown = f"{found.index}={index or '(unset)'} {found.total}={total or '(unset)'}"
    if not (index.isdigit() and total.isdigit()):
        raise argparse.ArgumentTypeError(
            f"auto read {found.system}'s {found.index} and {found.total}, which must both be "
            f"whole numbers ({shown}); set both in the job's env:"
        )
    # Job numbers counted from 0 become shards counted from 1.
    counted = "" if found.first == 1 else f" ({found.index} counts from {found.first})"
    return _checked(int(index) + 1 - found.first, int(total), shown + counted)
