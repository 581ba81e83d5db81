"""Resume planning over a 100,000-record store, and the cost of committing each attempt.

1. Fills a run store with 102,000 attempt records (34,000 tasks x 3 attempts, with realistic
   verdicts and 1 KB outputs) and times what `--resume-suite` does before any test runs: read
   the index and build the plan, then decide every planned attempt (target: <= 2 s).
2. Times committing each attempt (two appended lines) while filling that store.
3. Runs a dataset with the store and with commits replaced by a no-op (a bench-only plugin)
   and prints the per-attempt difference: what durable records cost inside a real run.

    python bench/resume_plan.py
    python bench/resume_plan.py --quick      # 10,000 records, small runs
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

from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import AgentResult, Verdict
from pytest_agenteval.core.records import AttemptRecord, new_record
from pytest_agenteval.store.plan import make_plan
from pytest_agenteval.store.runs import Store


def record(task: int, attempt: int) -> AttemptRecord:
    passed = (task + attempt) % 4 != 0
    verdict = Verdict(
        "equals", passed, "output equals expected" if passed else "expected 'a', got 'b'"
    )
    return new_record(
        key=AttemptId(dataset="bench", task_id=f"t{task:06}", variant=None, attempt=attempt),
        digest=f"{task:016x}",
        run_digest=f"{task:016x}",
        agent={"override": None, "manifest": {"bench": "callable:agent:run"}, "version": None},
        tags=["bench"],
        status="pass" if passed else "fail",
        verdicts=[verdict],
        result=AgentResult(output="x" * 1000),
        started_at=time.time(),
        duration=0.01,
    )


def fill(path: Path, records: int) -> tuple[Store, float]:
    store = Store(path)
    store.create_run("bench", [{"name": "bench", "version": "1"}], {})
    start = time.perf_counter()
    for i in range(records):
        store.commit("bench", record(i // 3, i % 3))
    return store, (time.perf_counter() - start) / records


def plan_seconds(store: Store, records: int) -> tuple[float, float]:
    start = time.perf_counter()
    rows, bad = store.index("bench")
    plan = make_plan(rows, rerun_errors=False, rerun_all=False)
    planned = time.perf_counter() - start
    assert len(rows) == records and not bad
    start = time.perf_counter()
    actions = [
        plan.decide(
            AttemptId(dataset="bench", task_id=f"t{i // 3:06}", variant=None, attempt=i % 3),
            f"{i // 3:016x}",
            f"{i // 3:016x}",
        ).action
        for i in range(records)
    ]
    assert set(actions) == {"reuse"}
    return planned, time.perf_counter() - start


NO_STORE = """
def pytest_configure(config):
    from pytest_agenteval.store.runs import Store

    Store.commit = lambda self, run_id, record, replaces=False: None
"""


def pytest_seconds(work: Path, *args: str) -> float:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(work)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "agenteval", "--agenteval", "ds", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def commit_share(root: Path, sizes: list[int], repeats: int) -> tuple[float, float]:
    """Per-attempt seconds of a full run, and how much of it committing records costs: runs
    with the store against runs whose commits do nothing (slopes between two sizes)."""
    times: dict[tuple[str, int], list[float]] = {}
    for tasks in sizes:
        work = root / f"run{tasks}"
        (work / "ds").mkdir(parents=True)
        (work / "pytest.ini").write_text("[pytest]\n")
        (work / "nostore.py").write_text(NO_STORE)
        manifest = {"name": "b", "version": "1", "agent": "agent:run", "defaults": {"attempts": 3}}
        (work / "ds/agenteval.yaml").write_text(json.dumps(manifest))
        (work / "ds/agent.py").write_text("def run(task):\n    return 'ok'\n")
        for i in range(tasks):
            (work / f"ds/t{i:05}.yaml").write_text("input: q\nexpected: ok\n")
        for _ in range(repeats):
            times.setdefault(("store", tasks), []).append(pytest_seconds(work))
            times.setdefault(("none", tasks), []).append(pytest_seconds(work, "-p", "nostore"))

    def slope(kind: str) -> float:
        small, big = (statistics.median(times[(kind, n)]) for n in sizes)
        return (big - small) / ((sizes[1] - sizes[0]) * 3)

    return slope("store"), slope("store") - slope("none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    records = 10_000 if args.quick else 102_000
    root = Path(tempfile.mkdtemp(prefix="agenteval-plan-"))
    try:
        store, commit = fill(root / "store", records)
        size = sum(f.stat().st_size for f in (root / "store/runs/bench").iterdir()) / 2**20
        print(f"store: {records} records, {size:.0f} MiB; commit {commit * 1e6:.0f} us/attempt")
        store.close()
        store = Store(root / "store")
        planned, decided = plan_seconds(store, records)
        print(f"resume plan: index + plan {planned:.2f} s, deciding every attempt {decided:.2f} s")
        sizes = [200, 1000] if args.quick else [1000, 5000]
        per_attempt, commit_cost = commit_share(root, sizes, 1 if args.quick else 3)
        print(
            f"full run {per_attempt * 1e6:.0f} us/attempt, of which committing records "
            f"{commit_cost * 1e6:.0f} us ({100 * commit_cost / per_attempt:.0f}%)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
