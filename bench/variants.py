"""Per-attempt cost of variants: 4 variants x 1 attempt against 1 variant x 4 attempts.

Both layouts hold the same number of attempts per task (4) and run the same trivial in-process
agent with an `equals` grader, so any difference is what variants cost: items named by
variant, an agent looked up per variant, keys and records carrying the variant. A dataset
without `variants:` (`agent:`, 4 attempts) is measured beside them. Each layout runs at two
sizes, alternately and several times; the per-attempt cost is the slope between the sizes
(start-up cost cancels out), the median of the repeats. CPU time of the pytest process tree
(`RUSAGE_CHILDREN`) is measured, which a busy shared machine disturbs far less than wall time.

    python bench/variants.py                  # 250 / 1,000 tasks x 4 attempts, 3 repeats
    python bench/variants.py --quick          # 100 / 400 tasks, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import os
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


def cpu_seconds(work: Path) -> float:
    """CPU time (user + system) of one full run from an empty run store."""
    shutil.rmtree(work / ".pytest_cache", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "agenteval", "--agenteval", "ds", "-q"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"run failed in {work}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 / 400 tasks, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    small, large = (100, 400) if args.quick else (250, 1000)
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        works = {
            (name, n): make_dataset(Path(tmp) / f"{i}-{n}", n, *layout)
            for i, (name, layout) in enumerate(LAYOUTS.items())
            for n in (small, large)
        }
        for work in works.values():  # warm the spec cache and the page cache
            cpu_seconds(work)
        times: dict[tuple[str, int], list[float]] = {key: [] for key in works}
        for _ in range(repeats):
            for key, work in works.items():
                times[key].append(cpu_seconds(work))
    attempts = 4 * (large - small)
    slopes = {
        name: (statistics.median(times[name, large]) - statistics.median(times[name, small]))
        / attempts
        for name in LAYOUTS
    }
    print(f"CPU ms per attempt (slope {small} -> {large} tasks x 4 attempts, median of {repeats}):")
    for name, slope in slopes.items():
        print(f"  {name:<26} {slope * 1000:7.3f}")
    ratio = slopes["4 variants, 1 attempt"] / slopes["1 variant, 4 attempts"]
    print(f"4 variants / 1 variant: {ratio:.3f}x")
    ratio = slopes["1 variant, 4 attempts"] / slopes["no variants, 4 attempts"]
    print(f"1 variant / no variants: {ratio:.3f}x")


if __name__ == "__main__":
    main()
