"""Collecting tasks from a JSONL source vs the same tasks in YAML vs plain pytest, side by side.

For each size N, writes one dataset whose N tasks are the rows of one JSONL file (one
`source:` task file), one dataset with the same N tasks written in YAML (`tasks:` lists of 100
per file: what a benchmark converted to YAML looks like), and a plain-pytest module with one
test parametrized N times. Measures `pytest --co -q` of each (1 attempt per task), alternating,
and prints the per-item slopes between consecutive sizes (start-up cost cancels out) and the
ratios. YAML is measured warm (its files parsed before: the spec cache applies) and cold;
rows never go through the spec cache (each session reads the source; see the README).

    python bench/sources.py              # 10,000 / 100,000 tasks, 3 repeats
    python bench/sources.py --quick      # 1,000 / 10,000 tasks, 1 repeat
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = """import pytest


@pytest.mark.parametrize("task_id", [f"t{{i:06}}" for i in range({tasks})])
def test_task(task_id):
    assert task_id
"""
TEMPLATE = """source: rows.jsonl
id: "t/{id}"
input: "Solve: {question}"
expected: "{answer}"
metadata: {level: "{level}"}
graders: [equals]
"""
PER_FILE = 100


def make_workdir(root: Path, tasks: int) -> Path:
    """`rows/` (one JSONL source), `yaml/` (tasks lists) and `plain/` for N tasks."""
    work = root / f"n{tasks}"
    for name in ("rows", "yaml", "plain"):
        (work / name).mkdir(parents=True)
        manifest = {"name": name, "version": "1", "agent": "agent:run"}
        if name != "plain":
            (work / name / "agenteval.yaml").write_text(json.dumps(manifest))
    (work / "pytest.ini").write_text("[pytest]\n")
    rows = [
        {"id": f"{i:06}", "question": f"question {i}", "answer": f"answer {i}", "level": i % 5}
        for i in range(tasks)
    ]
    (work / "rows/tasks.yaml").write_text(TEMPLATE)
    (work / "rows/rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for start in range(0, tasks, PER_FILE):
        chunk = [
            {
                "id": f"t/{r['id']}",
                "input": f"Solve: {r['question']}",
                "expected": r["answer"],
                "metadata": {"level": r["level"]},
                "graders": ["equals"],
            }
            for r in rows[start : start + PER_FILE]
        ]
        (work / f"yaml/t{start:06}.yaml").write_text(json.dumps({"tasks": chunk}))
    (work / "plain/test_plain.py").write_text(PLAIN.format(tasks=tasks))
    return work


CPU_TIME = False


def run(work: Path, args: list[str]) -> float:
    """Seconds (wall, or CPU with --cpu) of one `pytest --co -q` process."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:randomly", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pytest {' '.join(args)} in {work} failed")
    return usage.ru_utime + usage.ru_stime if CPU_TIME else elapsed


def sides(work: Path) -> dict[str, list[str]]:
    """Each side's command line; `yaml cold` first drops the parsed-spec cache."""
    ours = ["-p", "agenteval", "--agenteval"]
    return {
        "plain": ["plain"],
        "jsonl rows": [*ours, "rows"],
        "yaml warm": [*ours, "yaml"],
        "yaml cold": [*ours, "yaml"],
    }


def measure(works: dict[int, Path], repeats: int) -> dict[tuple[str, int], list[float]]:
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for size, work in works.items():
            for side, args in sides(work).items():
                if side == "yaml cold":
                    (work / ".pytest_cache/agenteval/specs.json").unlink(missing_ok=True)
                samples.setdefault((side, size), []).append(run(work, args))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", help="task counts, e.g. 1000,10000 (default 10000,100000)")
    parser.add_argument("--cpu", action="store_true", help="measure CPU time, not wall time")
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu
    sizes = [1000, 10000] if args.quick else [10000, 100000]
    if args.sizes:
        sizes = [int(n) for n in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    root = Path(tempfile.mkdtemp(prefix="agenteval-bench-sources-"))
    try:
        works = {n: make_workdir(root, n) for n in sizes}
        for work in works.values():  # fill the spec cache for "yaml warm"
            run(work, sides(work)["yaml warm"])
        samples = measure(works, repeats)
        median = {key: statistics.median(values) for key, values in samples.items()}
        print(f"collect only (--co), 1 attempt per task, median of {repeats}")
        for small, big in itertools.pairwise(sizes):
            print(f"\nat {big:,} tasks (slope from {small:,}), µs per task")
            plain = (median[("plain", big)] - median[("plain", small)]) / (big - small)
            for side in sides(works[big]):
                per = (median[(side, big)] - median[(side, small)]) / (big - small)
                print(f"  {side:12} {per * 1e6:8.1f}  {per / plain:5.2f}x plain")
            total = ", ".join(f"{s} {median[(s, big)]:.2f}s" for s in sides(works[big]))
            print(f"  whole runs at {big:,}: {total}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
