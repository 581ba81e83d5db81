"""Harness overhead: pytest-agenteval attempts vs plain pytest items, side by side.

For each size, generates a dataset (one task file per task, 3 attempts each, a trivial
in-process agent, an `equals` grader) and the equivalent plain-pytest module (one test
parametrized over the same tasks x attempts, calling the same agent and comparing). Runs plain
and agenteval alternately, several times, and prints per-item slopes between consecutive sizes
(start-up cost cancels out), their ratio, and the peak-RSS slope. Plugin autoload is off on both
sides; ours is loaded with `-p agenteval`. Every agenteval run starts from an empty run store;
task files parsed before are reused from the spec cache, except in the "cold" mode.

    python bench/overhead.py             # 100 / 1,000 / 10,000 tasks x 3 attempts, 3 repeats
    python bench/overhead.py --quick     # 100 / 1,000 tasks, 1 repeat (< 60 s)
    python bench/overhead.py --xdist --cpu --sizes 1000,10000   # -n 2 / -n 4 slopes

`--cpu` measures the CPU time of the whole pytest process tree (xdist's workers included), which
a busy shared machine disturbs far less than wall time.
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

ATTEMPTS = 3
AGENT = "def run(task):\n    return 'answer ' + task.id\n"
PLAIN = """import pytest


def run(task_id):
    return "answer " + task_id


@pytest.mark.parametrize("task_id", [f"t{{i:05}}" for i in range({tasks})])
@pytest.mark.parametrize("attempt", range({attempts}))
def test_task(task_id, attempt):
    assert run(task_id).strip() == "answer " + task_id
"""
MODES = {
    "full run": [],
    "full run + --junitxml": ["--junitxml=out.xml"],
    "collect only": ["--co"],
    "collect only, cold": ["--co"],
}
XDIST_MODES = {
    "-n 2": ["-p", "xdist", "-n", "2"],
    "-n 4": ["-p", "xdist", "-n", "4"],
}
"""`--xdist`: full runs with xdist's workers, plain pytest with the same `-n` as the baseline
(autoload is off, so xdist is loaded by name on both sides)."""


def make_workdir(root: Path, tasks: int) -> Path:
    work = root / f"n{tasks}"
    (work / "ds").mkdir(parents=True)
    (work / "plain").mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")
    manifest = {"name": "bench", "version": "1", "agent": "agent:run"}
    (work / "ds/agenteval.yaml").write_text(json.dumps({**manifest, "defaults": {"attempts": 3}}))
    (work / "ds/agent.py").write_text(AGENT)
    for i in range(tasks):
        (work / f"ds/t{i:05}.yaml").write_text(
            f"input: question {i}\nexpected: answer t{i:05}\ngraders: [equals]\n"
        )
    (work / "plain/test_plain.py").write_text(PLAIN.format(tasks=tasks, attempts=ATTEMPTS))
    return work


CPU_TIME = False
"""Measure the process's CPU time (user + system) instead of wall time: on a shared, busy
machine wall time mostly measures the neighbours (`--cpu`)."""


def run(work: Path, args: list[str]) -> tuple[float, int]:
    """Seconds (wall, or CPU with --cpu) and peak RSS (KiB) of one pytest process."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pytest {' '.join(args)} in {work} failed")
    if CPU_TIME:
        elapsed = usage.ru_utime + usage.ru_stime
    return elapsed, usage.ru_maxrss


def ours(work: Path, mode_args: list[str], *, fresh: bool = True, cold: bool = False) -> list[str]:
    """Our command line; `fresh`: an empty run store; `cold`: no parsed-spec cache either."""
    if fresh:
        shutil.rmtree(work / ".pytest_cache/agenteval/runs", ignore_errors=True)
    if cold:
        (work / ".pytest_cache/agenteval/specs.json").unlink(missing_ok=True)
    return ["-p", "agenteval", "--agenteval", "ds", *mode_args]


Samples = dict[tuple[str, str, int], list[tuple[float, int]]]


def measure(works: dict[int, Path], repeats: int, modes: dict[str, list[str]]) -> Samples:
    """(mode, side, size) -> samples; plain and agenteval alternate within every repeat."""
    samples: Samples = {}
    for _ in range(repeats):
        for size, work in works.items():
            for mode, args in modes.items():
                samples.setdefault((mode, "plain", size), []).append(run(work, ["plain", *args]))
                cold = mode.endswith("cold")
                samples.setdefault((mode, "ours", size), []).append(
                    run(work, ours(work, args, cold=cold))
                )
                if mode == "full run":  # replay everything that run just recorded
                    resume = ours(work, ["--resume-suite"], fresh=False)
                    samples.setdefault(("resume replay", "ours", size), []).append(
                        run(work, resume)
                    )
    return samples


def slope(samples: Samples, mode: str, side: str, sizes: tuple[int, int]) -> tuple[float, float]:
    """Median per-item seconds and KiB between two sizes."""
    small, big = (samples[(mode, side, n)] for n in sizes)
    items = (sizes[1] - sizes[0]) * ATTEMPTS
    seconds = statistics.median(b[0] for b in big) - statistics.median(s[0] for s in small)
    kib = statistics.median(b[1] for b in big) - statistics.median(s[1] for s in small)
    return seconds / items, kib / items


def print_slopes(samples: Samples, sizes: tuple[int, int], modes: list[str]) -> None:
    print(f"\nat {sizes[1] * ATTEMPTS:,} attempts (slope from {sizes[0] * ATTEMPTS:,})")
    head = ("mode", "plain us", "ours us", "ratio", "plain KiB", "ours KiB", "ratio")
    print("{:22} {:>9} {:>9} {:>6} {:>10} {:>9} {:>6}".format(*head))
    for mode in modes:
        ours_s, ours_m = slope(samples, mode, "ours", sizes)
        if mode == "resume replay":
            first_run = slope(samples, "full run", "ours", sizes)[0]
            ratio = ours_s / first_run
            print(f"{mode:22} {'':>9} {ours_s * 1e6:9.0f} {ratio:6.2f} (vs ours' first run)")
            continue
        plain_s, plain_m = slope(samples, mode, "plain", sizes)
        print(
            f"{mode:22} {plain_s * 1e6:9.0f} {ours_s * 1e6:9.0f} {ours_s / plain_s:6.2f}"
            f" {plain_m:10.2f} {ours_m:9.2f} {ours_m / plain_m:6.2f}"
        )


def report_share(work: Path) -> tuple[float, int]:
    """Seconds the session end takes for the big run: read the index, summarize, write files."""
    from pytest_agenteval.reporting.reports import write_reports
    from pytest_agenteval.reporting.summary import build_summary
    from pytest_agenteval.store.runs import Store

    run(work, ours(work, []))
    store = Store(work / ".pytest_cache/agenteval")
    (run_id,) = [p.name for p in store.runs_dir.iterdir()]
    start = time.perf_counter()
    info = store.run(run_id)
    assert info is not None
    rows, _ = store.index(run_id, for_plan=False)
    summary = build_summary(info, rows, ks=None, session_counts={}, status="complete")
    write_reports(summary, work / "reports", "any")
    return time.perf_counter() - start, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--sizes", help="task counts to measure, e.g. 100,1000 (default 100,1000,10000)"
    )
    parser.add_argument("--cpu", action="store_true", help="measure CPU time, not wall time")
    parser.add_argument(
        "--xdist", action="store_true", help="full runs at -n 2 and -n 4 only (slopes per -n)"
    )
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu
    sizes = [100, 1000] if args.quick else [100, 1000, 10000]
    if args.sizes:
        sizes = [int(n) for n in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    root = Path(tempfile.mkdtemp(prefix="agenteval-bench-"))
    try:
        works = {n: make_workdir(root, n) for n in sizes}
        modes = XDIST_MODES if args.xdist else MODES
        samples = measure(works, repeats, modes)
        measure_ = "CPU time of the process tree" if CPU_TIME else "wall time"
        print(f"{ATTEMPTS} attempts per task, median of {repeats}, {measure_}")
        shown = list(modes) if args.xdist else [*modes, "resume replay"]
        for pair in itertools.pairwise(sizes):
            print_slopes(samples, pair, shown)
        if args.xdist:
            return
        big = statistics.median(s[0] for s in samples[("full run", "ours", sizes[-1])])
        seconds, records = report_share(works[sizes[-1]])
        share = 100 * seconds / big
        print(f"\nreports for {records:,} attempts: {seconds:.2f} s, {share:.1f}% of the run")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
