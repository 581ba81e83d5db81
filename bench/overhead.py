"""Harness overhead: pytest-agenteval attempts vs plain pytest items, measured side by side.

Generates, for two sizes, a dataset (one task file per task, 3 attempts, a trivial in-process
agent, an `equals` grader) and the equivalent plain-pytest module (one parametrized test per
attempt, calling the same agent and comparing). Runs both alternately, several times, and prints
per-item slopes between the two sizes (fixed start-up cost cancels out), their ratios, and peak
RSS slopes. Plugins autoload is off on both sides; ours is loaded with `-p agenteval`.

    python bench/overhead.py            # 1,000 / 10,000 tasks x 3 attempts (several minutes)
    python bench/overhead.py --quick    # small sizes, one repeat (< 60 s)
"""

from __future__ import annotations

import argparse
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
PLAIN = """
import pytest

def run(task_id):
    return 'answer ' + task_id

@pytest.mark.parametrize("task_id", [f"t{{i:05}}" for i in range({tasks})])
@pytest.mark.parametrize("attempt", range({attempts}))
def test_task(task_id, attempt):
    assert run(task_id).strip() == 'answer ' + task_id
"""


def make_workdir(root: Path, tasks: int) -> Path:
    work = root / f"n{tasks}"
    (work / "ds").mkdir(parents=True)
    (work / "pytest.ini").write_text("[pytest]\n")
    manifest = {
        "name": "bench",
        "version": "1",
        "agent": "agent:run",
        "defaults": {"attempts": ATTEMPTS},
    }
    (work / "ds/agenteval.yaml").write_text(json.dumps(manifest))
    (work / "ds/agent.py").write_text(AGENT)
    for i in range(tasks):
        (work / f"ds/t{i:05}.yaml").write_text(
            f"input: question {i}\nexpected: answer t{i:05}\ngraders: [equals]\n"
        )
    (work / "plain").mkdir()
    (work / "plain/test_plain.py").write_text(PLAIN.format(tasks=tasks, attempts=ATTEMPTS))
    return work


def run(work: Path, args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one pytest process."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(
            f"pytest {args} failed: {proc.stderr.read().decode() if proc.stderr else ''}"
        )
    return elapsed, usage.ru_maxrss


MODES = {
    "full run": ([], []),
    "full run + --junitxml": (["--junitxml=j.xml"], ["--junitxml=j.xml"]),
    "collect only": (["--co"], ["--co"]),
}


def ours(mode_args: list[str], resume: bool = False) -> list[str]:
    return [
        "-p",
        "agenteval",
        "--agenteval",
        "ds",
        *(["--resume-suite"] if resume else []),
        *mode_args,
    ]


def plain(mode_args: list[str]) -> list[str]:
    return ["plain", *mode_args]


def measure(works: dict[int, Path], repeats: int) -> dict[str, dict[str, list[tuple[float, int]]]]:
    """Median (seconds, rss) per (mode, side, size), sides alternating within each repeat."""
    samples: dict[str, dict[str, list[list[tuple[float, int]]]]] = {}
    for _ in range(repeats):
        for mode, (a, b) in MODES.items():
            for size, work in works.items():
                for side, args in (("plain", plain(b)), ("agenteval", ours(a))):
                    cell = samples.setdefault(mode, {}).setdefault(f"{side}:{size}", [])
                    cell.append([run(work, args)])
        for size, work in works.items():
            run(work, ours([]))  # a complete run to resume from
            cell = samples.setdefault("resume replay", {}).setdefault(f"agenteval:{size}", [])
            cell.append([run(work, ours([], resume=True))])
    return {
        mode: {key: [_median([s[0] for s in cells])] for key, cells in sides.items()}
        for mode, sides in samples.items()
    }


def _median(values: list[tuple[float, int]]) -> tuple[float, int]:
    return statistics.median(v[0] for v in values), int(statistics.median(v[1] for v in values))


def slope(
    cells: dict[str, list[tuple[float, int]]], side: str, sizes: list[int]
) -> tuple[float, float]:
    """Per-item seconds and KiB between the two sizes."""
    small, big = sizes
    (ts, ms), (tb, mb) = cells[f"{side}:{small}"][0], cells[f"{side}:{big}"][0]
    items = (big - small) * ATTEMPTS
    return (tb - ts) / items, (mb - ms) / items


def report_share(work: Path) -> tuple[float, float, int]:
    """Seconds to build and write summary.json/md/junit.xml from the store, vs one full run."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from pytest_agenteval.reports import write_reports
    from pytest_agenteval.store import Store
    from pytest_agenteval.summary import build_summary

    store = Store(work / ".pytest_cache/agenteval/store.sqlite")
    run_id = store.runs()[0].run_id
    wall, _ = run(work, ours(["--agenteval-run-id", f"share-{time.time_ns()}"]))
    start = time.perf_counter()
    info = store.run(run_id)
    assert info is not None
    rows, _ = store.index(run_id)
    summary = build_summary(info, rows, ks=None, session_counts={}, status="complete")
    write_reports(summary, work / "share", "any")
    return time.perf_counter() - start, wall, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = [100, 400] if args.quick else [1000, 10000]
    repeats = 1 if args.quick else args.repeats
    root = Path(tempfile.mkdtemp(prefix="agenteval-bench-"))
    try:
        works = {n: make_workdir(root, n) for n in sizes}
        results = measure(works, repeats)
        print(f"sizes: {sizes[0]} and {sizes[1]} tasks x {ATTEMPTS} attempts; median of {repeats}")
        print(
            f"{'mode':24} {'plain µs/item':>14} {'agenteval µs/item':>18} {'ratio':>6}   {'plain KiB':>9} {'ours KiB':>9}"
        )
        base_full = None
        for mode, cells in results.items():
            ours_t, ours_m = slope(cells, "agenteval", sizes)
            if "plain:" + str(sizes[0]) in cells:
                plain_t, plain_m = slope(cells, "plain", sizes)
                if mode == "full run":
                    base_full = ours_t
                print(
                    f"{mode:24} {plain_t * 1e6:14.0f} {ours_t * 1e6:18.0f} {ours_t / plain_t:6.2f}   {plain_m:9.2f} {ours_m:9.2f}"
                )
            else:
                first = base_full or float("nan")
                print(f"{mode:24} {'':14} {ours_t * 1e6:18.0f} {ours_t / first:6.2f}x first run")
        seconds, wall, records = report_share(works[sizes[1]])
        print(
            f"reports for {records} attempts: {seconds:.3f} s = {100 * seconds / wall:.1f}% of a {wall:.1f} s run"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
