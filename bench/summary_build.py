"""The cost of the session's end: `build_summary` and `write_reports` over a big run's rows.

    python bench/summary_build.py            # 30,000 rows (10,000 tasks x 3 attempts)
    python bench/summary_build.py --tasks 1000
    python bench/summary_build.py --tasks 2500 --variants 4   # the same rows as 4 variants

Synthetic index rows (every status, tags, usage, costs), no pytest: CPU seconds, best of
`--repeats`, so the neighbours on a busy machine count for little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from store_damage import best_of

from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.reporting.reports import write_reports
from pytest_agenteval.reporting.summary import Summary, build_summary
from pytest_agenteval.store.index import IndexRow
from pytest_agenteval.store.runs import RunInfo

ATTEMPTS = 3
STATUSES = ("pass", "pass", "fail", "error")


def rows(tasks: int, variants: list[str] | None = None) -> list[IndexRow]:
    """`tasks` x ATTEMPTS rows of varied outcome, tags and spend (for each of `variants`)."""
    out = []
    names: list[str | None] = [*variants] if variants else [None]
    for t, a, variant in product(range(tasks), range(ATTEMPTS), names):
        status = STATUSES[(t * 7 + a + len(variant or "")) % len(STATUSES)]
        out.append(
            IndexRow(
                AttemptId(dataset="bench", task_id=f"task-{t:05d}", variant=variant, attempt=a),
                "d",
                "r",
                status,
                1.0 if status == "pass" else 0.0,
                0.01 * ((t + a) % 50 + 1),
                100 + t % 17,
                20 + a,
                0.001 * (t % 5) if t % 3 else None,
                (f"tag{t % 12}", "all"),
                "" if status == "pass" else f"expected {t}, got {t + a}",
                "agent" if status == "error" else None,
                "",
                model="m1" if t % 4 else "m2",
                variant=variant,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks (x3 attempts)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", type=int, default=0, help="variants of every task")
    args = parser.parse_args()
    names = [f"v{'x' * i}" for i in range(args.variants)] or None
    data = rows(args.tasks, names)
    run = RunInfo(
        run_id="bench",
        datasets=[{"name": "bench", "version": "1"}],
        agent={"override": "bench:agent", "manifest": {}, "version": None},
        created_at=0.0,
        updated_at=0.0,
        planned=len(data),
        done=len(data),
        status="complete",
        sessions=[],
        variants=names,
    )

    def build() -> Summary:
        return build_summary(run, data, ks=None, session_counts={}, status="complete")

    summary = build()
    with tempfile.TemporaryDirectory() as out:
        built = best_of(args.repeats, build)
        written = best_of(args.repeats, lambda: write_reports(summary, Path(out), "any"))
    print(f"{len(data):,} rows: build_summary {built:.3f} s, write_reports {written:.3f} s (CPU)")


if __name__ == "__main__":
    main()
