"""Per-attempt cost of variants: 4 variants x 1 attempt against 1 variant x 4 attempts.

Both layouts hold the same number of attempts per task (4) and run the same trivial in-process
agent with an `equals` grader, so any difference is what variants cost: items named by
variant, an agent looked up per variant, keys and records carrying the variant. A dataset
without `variants:` (`agent:`, 4 attempts) is measured beside them. Each layout runs at two
sizes, alternately and several times; the per-attempt cost is the slope between the sizes
(start-up cost cancels out), the median of the repeats. CPU time of the pytest process tree
(`RUSAGE_CHILDREN`) is measured, which a busy shared machine disturbs far less than wall time;
`--instructions` counts instructions instead (valgrind's cachegrind around the pytest process,
one run per size), which the machine's load does not change at all.

    python bench/variants.py                  # 250 / 1,000 tasks x 4 attempts, 3 repeats
    python bench/variants.py --quick          # 100 / 400 tasks, 1 repeat
    python bench/variants.py --instructions   # 100 / 400 tasks, instructions per attempt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

AGENT = "def run(task):\n    return 'answer ' + task.id\n"
LAYOUTS: dict[str, tuple[dict[str, object], int]] = {
    "no variants, 4 attempts": ({"agent": "agent:run"}, 4),
    "1 variant, 4 attempts": ({"variants": {"a": "agent:run"}}, 4),
    "4 variants, 1 attempt": ({"variants": {v: "agent:run" for v in "abcd"}}, 1),
}
"""Each layout: its manifest's agent part and its attempts per task (4 attempts a task)."""


def make_dataset(root: Path, tasks: int, manifest: dict[str, object], attempts: int) -> Path:
    work = root
    (work / "ds").mkdir(parents=True)
    (work / "pytest.ini").write_text("[pytest]\n")
    data = {"name": "bench", "version": "1", "defaults": {"attempts": attempts}, **manifest}
    (work / "ds/agenteval.yaml").write_text(json.dumps(data))
    (work / "ds/agent.py").write_text(AGENT)
    for i in range(tasks):
        (work / f"ds/t{i:05}.yaml").write_text(
            f"input: question {i}\nexpected: answer t{i:05}\ngraders: [equals]\n"
        )
    return work


PYTEST = [sys.executable, "-m", "pytest", "-p", "agenteval", "--agenteval", "ds", "-q"]
CACHEGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
ENV = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
INSTRUCTIONS = False
"""Count instructions (cachegrind) instead of measuring CPU time (`--instructions`)."""


def cost(work: Path) -> float:
    """CPU seconds (user + system) of one full run from an empty run store, or with
    INSTRUCTIONS the instructions it executed."""
    shutil.rmtree(work / ".pytest_cache", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [*CACHEGRIND, *PYTEST] if INSTRUCTIONS else PYTEST
    done = subprocess.run(argv, cwd=work, env=ENV, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"run failed in {work}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    if INSTRUCTIONS:
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        assert found, done.stderr[-2000:]
        return float(found[1].replace(",", ""))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 / 400 tasks, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (valgrind), 100 / 400"
    )
    args = parser.parse_args()
    global INSTRUCTIONS
    INSTRUCTIONS = args.instructions
    small, large = (100, 400) if args.quick or args.instructions else (250, 1000)
    repeats = 1 if args.quick or args.instructions else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        works = {
            (name, n): make_dataset(Path(tmp) / f"{i}-{n}", n, *layout)
            for i, (name, layout) in enumerate(LAYOUTS.items())
            for n in (small, large)
        }
        for work in works.values():  # warm the spec cache and the page cache
            subprocess.run(PYTEST, cwd=work, capture_output=True, env=ENV)
        times: dict[tuple[str, int], list[float]] = {key: [] for key in works}
        for _ in range(repeats):
            for key, work in works.items():
                times[key].append(cost(work))
    attempts = 4 * (large - small)
    slopes = {
        name: (statistics.median(times[name, large]) - statistics.median(times[name, small]))
        / attempts
        for name in LAYOUTS
    }
    unit, scale = ("k instructions", 1e-3) if INSTRUCTIONS else ("CPU ms", 1e3)
    print(f"{unit} per attempt (slope {small} -> {large} tasks x 4 attempts, median of {repeats}):")
    for name, slope in slopes.items():
        print(f"  {name:<26} {slope * scale:9.3f}")
    ratio = slopes["4 variants, 1 attempt"] / slopes["1 variant, 4 attempts"]
    print(f"4 variants / 1 variant: {ratio:.3f}x")
    ratio = slopes["1 variant, 4 attempts"] / slopes["no variants, 4 attempts"]
    print(f"1 variant / no variants: {ratio:.3f}x")


if __name__ == "__main__":
    main()
