"""What traces, live phases and the OpenTelemetry switch cost an attempt that uses none of them.

Every attempt now gets a trace (`task.trace`), a watch on it during its agent call, its phase
noted five or six times (in memory; an xdist worker's set written to its file at most once a
second), its timings in its record, and a check whether OpenTelemetry is on. The overhead
bench's dataset (a trivial in-process agent, an `equals` grader, 3 attempts per task) runs at
two sizes; the per-attempt cost is the slope between them (start-up cost cancels out):

- `before`: the code this branch started from (a `git worktree` of REV, default `main`, put
  first on PYTHONPATH);
- `after`: this tree, with the `otel` extra installed (and off);
- `after, no otel`: this tree with `opentelemetry` made unimportable (not installed).

CPU time of the pytest process tree is measured by default (alternating, median of the
repeats); `--instructions` counts instructions with cachegrind instead (one run per size),
which the load of a shared machine does not change.

    python bench/traces.py                    # 100 / 400 tasks x 3 attempts, CPU, 3 repeats
    python bench/traces.py --instructions     # the same sizes, instructions per attempt
    python bench/traces.py --xdist            # -n 2 (the workers' running files), CPU
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

HERE = Path(__file__).resolve().parent.parent
ATTEMPTS = 3
AGENT = "def run(task):\n    return 'answer ' + task.id\n"
BLOCK = """import sys


class _NoOtel:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError("opentelemetry is not installed (blocked by bench/traces.py)")


sys.meta_path.insert(0, _NoOtel())
"""
CACHEGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def make_dataset(root: Path, tasks: int) -> Path:
    (root / "ds").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    manifest = {"name": "bench", "version": "1", "agent": "agent:run"}
    (root / "ds/agenteval.yaml").write_text(json.dumps({**manifest, "defaults": {"attempts": 3}}))
    (root / "ds/agent.py").write_text(AGENT)
    for i in range(tasks):
        (root / f"ds/t{i:05}.yaml").write_text(
            f"input: question {i}\nexpected: answer t{i:05}\ngraders: [equals]\n"
        )
    return root


def cost(work: Path, pythonpath: list[Path], extra: list[str], instructions: bool) -> float:
    """CPU seconds of one full run from an empty run store (or its instructions)."""
    shutil.rmtree(work / ".pytest_cache/agenteval/runs", ignore_errors=True)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    argv = [sys.executable, "-m", "pytest", "-p", "agenteval", "--agenteval", "ds", "-q", *extra]
    if instructions:
        argv = [*CACHEGRIND, *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"run failed in {work}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    if instructions:
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        assert found, done.stderr[-2000:]
        return float(found[1].replace(",", ""))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def worktree(root: Path, rev: str) -> Path:
    """A checkout of `rev` (its `src` goes first on PYTHONPATH)."""
    path = root / "before"
    subprocess.run(
        ["git", "-C", str(HERE), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="main", help="the code to compare with (default main)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="100,400", help="task counts (default 100,400)")
    parser.add_argument("--instructions", action="store_true", help="count instructions")
    parser.add_argument("--xdist", action="store_true", help="runs at -n 2 (CPU time only)")
    args = parser.parse_args()
    small, large = (int(n) for n in args.sizes.split(","))
    repeats = 1 if args.instructions else args.repeats
    extra = ["-p", "xdist", "-n", "2"] if args.xdist else []
    root = Path(tempfile.mkdtemp(prefix="agenteval-traces-"))
    before = worktree(root, args.rev)
    try:
        blocker = root / "no-otel"
        blocker.mkdir()
        (blocker / "sitecustomize.py").write_text(BLOCK)
        sides = {
            f"before ({args.rev})": [before / "src"],
            "after": [],
            "after, no otel": [blocker],
        }
        works = {n: make_dataset(root / f"n{n}", n) for n in (small, large)}
        for work in works.values():  # the spec cache and the page cache, warm
            cost(work, [], extra, False)
        samples: dict[tuple[str, int], list[float]] = {}
        for _ in range(repeats):
            for side, path in sides.items():
                for n, work in works.items():
                    value = cost(work, path, extra, args.instructions)
                    samples.setdefault((side, n), []).append(value)
        attempts = (large - small) * ATTEMPTS
        unit, scale = ("k instructions", 1e-3) if args.instructions else ("CPU µs", 1e6)
        layout = " at -n 2" if args.xdist else ""
        print(
            f"{unit} per attempt{layout} (slope {small} -> {large} tasks x {ATTEMPTS}, "
            f"median of {repeats}):"
        )
        slopes = {}
        for side in sides:
            high = statistics.median(samples[(side, large)])
            low = statistics.median(samples[(side, small)])
            slopes[side] = (high - low) / attempts
            print(f"  {side:<22} {slopes[side] * scale:10.1f}")
        first = next(iter(sides))
        print(f"after / before: {slopes['after'] / slopes[first]:.3f}x")
        off = slopes["after"] / slopes["after, no otel"]
        print(f"otel installed (off) / not installed: {off:.3f}x")
    finally:
        subprocess.run(
            ["git", "-C", str(HERE), "worktree", "remove", "--force", str(before)],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
