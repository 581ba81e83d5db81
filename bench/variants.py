"""Per-attempt cost of a run with 4 variants against a run of one agent, attempts equal.

Each size makes two datasets of the same number of attempts (3 per task): one agent on 4N
tasks, and 4 variants (four trivial in-process agents) on N tasks. Both run alternately from
an empty run store, several times; the per-attempt slope between consecutive sizes cancels
start-up, and the ratio of the slopes is the price of variants. Plugin autoload is off; ours is
loaded with `-p agenteval`, as in overhead.py.

    python bench/variants.py             # N = 100 / 1,000, 3 repeats, CPU time
    python bench/variants.py --quick     # N = 50 / 300, 1 repeat
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import overhead

VARIANTS = ("a", "b", "c", "d")
ATTEMPTS = 3
AGENTS = "".join(f"def run_{v}(task):\n    return 'answer ' + task.id\n\n\n" for v in VARIANTS)


def make_dataset(folder: Path, tasks: int, variants: bool) -> None:
    """`tasks` task files under `folder`, run by one agent or by the four variants."""
    folder.mkdir(parents=True)
    manifest: dict[str, object] = {"name": "bench", "version": "1"}
    if variants:
        manifest["variants"] = {v: f"agent:run_{v}" for v in VARIANTS}
    else:
        manifest["agent"] = "agent:run_a"
    manifest["defaults"] = {"attempts": ATTEMPTS}
    (folder / "agenteval.yaml").write_text(json.dumps(manifest))
    (folder / "agent.py").write_text(AGENTS)
    for i in range(tasks):
        (folder / f"t{i:05}.yaml").write_text(
            f"input: question {i}\nexpected: answer t{i:05}\ngraders: [equals]\n"
        )


def make_workdir(root: Path, n: int) -> Path:
    work = root / f"n{n}"
    make_dataset(work / "one", 4 * n, variants=False)
    make_dataset(work / "four", n, variants=True)
    (work / "pytest.ini").write_text("[pytest]\n")
    return work


def command(work: Path, side: str) -> list[str]:
    """A fresh run of one side's dataset (its run store emptied first)."""
    shutil.rmtree(work / ".pytest_cache/agenteval/runs", ignore_errors=True)
    return ["-p", "agenteval", "--agenteval", side]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wall", action="store_true", help="wall time, not CPU time")
    args = parser.parse_args()
    overhead.CPU_TIME = not args.wall
    sizes = [50, 300] if args.quick else [100, 1000]
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory(prefix="agenteval-variants-") as tmp:
        works = {n: make_workdir(Path(tmp), n) for n in sizes}
        samples: dict[tuple[str, int], list[float]] = {}
        for _ in range(repeats):
            for n, work in works.items():
                for side in ("one", "four"):
                    seconds, _ = overhead.run(work, command(work, side))
                    samples.setdefault((side, n), []).append(seconds)
        what = "wall time" if args.wall else "CPU time of the process tree"
        print(f"{ATTEMPTS} attempts per task, median of {repeats}, {what}")
        print(f"{'attempts':>18} {'one agent us':>13} {'4 variants us':>14} {'ratio':>6}")
        for small, big in itertools.pairwise(sizes):
            attempts = (big - small) * 4 * ATTEMPTS
            one, four = (
                (statistics.median(samples[(s, big)]) - statistics.median(samples[(s, small)]))
                / attempts
                for s in ("one", "four")
            )
            span = f"{small * 4 * ATTEMPTS:,}-{big * 4 * ATTEMPTS:,}"
            print(f"{span:>18} {one * 1e6:13.0f} {four * 1e6:14.0f} {four / one:6.2f}")


if __name__ == "__main__":
    main()
