"""How balanced `--agenteval-shard` is, and what choosing a task's shard costs.

Rendezvous hashing balances only on average; this prints, for suites of several sizes and id
styles, each shard's task count and how far the largest is above the mean, plus the time to
place one task. Run: `python bench/shards.py` (`--quick` for a smoke run).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable

from pytest_agenteval.core.shards import shard_of

STYLES: dict[str, Callable[[int], str]] = {
    "task-<i>": lambda i: f"task-{i}",
    "django__django-<n>": lambda i: f"django__django-{10000 + 7 * i}",
    "<i:05d>": lambda i: f"{i:05d}",
}


def main(quick: bool) -> None:
    sizes = (
        [(200, 4), (2000, 4)] if quick else [(50, 4), (200, 4), (2000, 4), (2000, 8), (20000, 4)]
    )
    print(f"{'tasks':>6} {'N':>2}  {'ids':20} {'tasks per shard':40} largest/mean")
    for n, total in sizes:
        for style, make in STYLES.items():
            counts = Counter(shard_of("ds", make(i), total) for i in range(n))
            shown = "/".join(str(counts[s]) for s in range(1, total + 1))
            print(
                f"{n:>6} {total:>2}  {style:20} {shown:40} {max(counts.values()) / (n / total):.3f}"
            )
    n = 2000 if quick else 20000
    start = time.perf_counter()
    for i in range(n):
        shard_of("ds", f"task-{i}", 4)
    per_task = (time.perf_counter() - start) / n
    print(f"placing one task among 4 shards: {per_task * 1e6:.1f} µs")


if __name__ == "__main__":
    main("--quick" in sys.argv)
