"""Attempts in flight (`--agenteval-concurrency`): wall time against the ideal and plain pytest.

For each scenario it prints the wall time of the agenteval run, the ideal
(attempts x latency / attempts in flight), and plain pytest's own wall time for the same number
of no-op items measured in the same run (with the same -n), then checks the issue's bound:
wall <= plain no-op wall + factor x ideal.

    python bench/concurrency.py              # every scenario, median of 3
    python bench/concurrency.py --quick      # smaller sizes, one repeat
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
from dataclasses import dataclass
from pathlib import Path

LATENCY = 0.05
PER_FILE = 100
"""Tasks per task file (a `tasks:` list), so collection is not what is measured."""


@dataclass(frozen=True)
class Scenario:
    name: str
    attempts: int
    concurrency: int
    workers: int = 0
    command: bool = False
    grader: bool = False
    """The agent answers at once and a `command` grader (a subprocess sleeping 50 ms) waits."""
    factor: float | None = None
    """The issue's bound: wall <= plain + factor x ideal (None: reported only)."""

    @property
    def in_flight(self) -> int:
        return self.concurrency * max(self.workers, 1)

    @property
    def ideal(self) -> float:
        return self.attempts * LATENCY / self.in_flight


SCENARIOS = [
    Scenario("2,000 x 50 ms, concurrency 64", 2000, 64, factor=1.5),
    Scenario("10,000 x 50 ms, concurrency 256", 10000, 256, factor=2.0),
    Scenario("2,000 x 50 ms, -n 2 x concurrency 32", 2000, 32, workers=2),
    Scenario("500 commands x 50 ms, concurrency 32", 500, 32, command=True),
    Scenario("200 command graders x 50 ms, concurrency 32", 200, 32, grader=True),
]
QUICK = [
    Scenario("500 x 50 ms, concurrency 64", 500, 64, factor=1.5),
    Scenario("500 x 50 ms, -n 2 x concurrency 32", 500, 32, workers=2),
    Scenario("100 commands x 50 ms, concurrency 32", 100, 32, command=True),
    Scenario("100 command graders x 50 ms, concurrency 32", 100, 32, grader=True),
]

AGENT = f"import time\n\n\ndef run(task):\n    time.sleep({LATENCY})\n    return 'ok'\n"
AT_ONCE = "def run(task):\n    return 'ok'\n"
COMMAND = f"sleep {LATENCY}; echo ok"
"""A real subprocess that waits 50 ms (a shell, so Python's start-up is not what is timed)."""


def make_dataset(root: Path, scenario: Scenario) -> None:
    ds = root / "ds"
    ds.mkdir(parents=True)
    if scenario.command:
        agent: object = {"command": ["/bin/sh", "-c", COMMAND], "stdin": "none"}
    else:
        agent = "agent:run"
        (ds / "agent.py").write_text(AT_ONCE if scenario.grader else AGENT)
    (ds / "agenteval.yaml").write_text(json.dumps({"name": "conc", "agent": agent}))
    grading = {"graders": [{"command": ["/bin/sh", "-c", COMMAND]}]} if scenario.grader else {}
    for start in range(0, scenario.attempts, PER_FILE):
        count = min(PER_FILE, scenario.attempts - start)
        tasks = [
            {"id": f"t{start + i}", "input": "q", "expected": "ok", **grading} for i in range(count)
        ]
        (ds / f"f{start // PER_FILE:04}.yaml").write_text(json.dumps({"tasks": tasks}))
    (root / "plain").mkdir()
    (root / "plain/test_noop.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('i', range({scenario.attempts}))\n"
        "def test_noop(i):\n    pass\n"
    )
    (root / "pytest.ini").write_text("[pytest]\n")


def timed(root: Path, args: list[str]) -> float:
    """Wall seconds of one session, from an empty run store (the parsed-spec cache is kept, as
    plain pytest keeps its bytecode cache: both sides are warm after the first run)."""
    shutil.rmtree(root / ".pytest_cache/agenteval/runs", ignore_errors=True)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_agenteval.plugin", *args]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return wall


def measure(scenario: Scenario, repeat: int) -> tuple[float, float]:
    """Median wall times (agenteval, plain no-op), the two sides alternating."""
    with tempfile.TemporaryDirectory(prefix="agenteval-bench-") as folder:
        root = Path(folder)
        make_dataset(root, scenario)
        xdist = ["-p", "xdist", "-n", str(scenario.workers)] if scenario.workers else []
        ours = ["--agenteval", "ds", "--agenteval-concurrency", str(scenario.concurrency)]
        walls, plains = [], []
        timed(root, [*ours, *xdist])  # warm-up: parse the task files once, compile the test
        timed(root, ["plain", *xdist])
        for _ in range(repeat):
            walls.append(timed(root, [*ours, *xdist]))
            plains.append(timed(root, ["plain", *xdist]))
        return statistics.median(walls), statistics.median(plains)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side (median)")
    parser.add_argument("--only", help="run the scenarios whose name contains this text")
    args = parser.parse_args()
    scenarios, repeat = (QUICK, 1) if args.quick else (SCENARIOS, args.repeat)
    scenarios = [s for s in scenarios if args.only is None or args.only in s.name]
    print(f"latency {LATENCY * 1000:.0f} ms per attempt; median of {repeat}; wall seconds")
    header = f"{'scenario':40} {'wall':>7} {'ideal':>7} {'plain':>7} {'wall/ideal':>10}  bound"
    print(header)
    for scenario in scenarios:
        wall, plain = measure(scenario, repeat)
        ideal = scenario.ideal
        bound = ""
        if scenario.factor is not None:
            limit = plain + scenario.factor * ideal
            verdict = "ok" if wall <= limit else "MISSED"
            bound = f"<= plain + {scenario.factor:g} x ideal = {limit:.2f} {verdict}"
        else:
            bound = f"(wall - plain) / ideal = {(wall - plain) / ideal:.2f}"
        print(
            f"{scenario.name:40} {wall:7.2f} {ideal:7.2f} {plain:7.2f} {wall / ideal:10.2f}  "
            f"{bound}",
            flush=True,
        )


if __name__ == "__main__":
    main()
