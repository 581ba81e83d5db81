"""Kill trial: a worker killed at a random moment never costs a committed attempt.

Runs a dataset with two variants under `-n 2 --agenteval-concurrency 8`, SIGKILLs one xdist
worker at a random moment of the session, then resumes until the run is complete. Every agent
call appends its attempt to a log, after looking in the run's records.jsonl: a call for an
attempt that already has a committed record there (one that is not a crash) is logged as paid
twice. After each repetition it checks that

- no committed record was replaced: in records.jsonl, no line for an attempt follows one of
  its lines that was not a crash record;
- no agent was called for an attempt whose record was committed (no "twice" in the log);
- the resumed run is complete with every attempt passed.

    python bench/kill_trial.py              # 20 repetitions
    python bench/kill_trial.py --reps 5 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from trial_runs import first_commit, pytest_run, records, replaced, resume_until_complete, workers

TASKS = 24
AGENTS = """
import json, pathlib, random, time

HERE = pathlib.Path(__file__).parent


def _committed(task, variant):
    for path in HERE.parent.glob(".pytest_cache/agenteval/runs/*/records.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if (record.get("task_id"), record.get("attempt"), record.get("variant")) == (
                task.id, task.attempt, variant
            ) and record.get("status") != "error":
                return True
    return False


def _call(variant, task):
    twice = _committed(task, variant)
    with (HERE / "calls.log").open("a") as log:
        log.write(f"{task.id} {task.attempt} {variant} {'twice' if twice else 'once'}\\n")
    time.sleep(random.uniform(0.05, 0.4))
    return "ok"


def a(task):
    return _call("a", task)


def b(task):
    return _call("b", task)
"""
ARGS = ["-p", "xdist", "-n", "2", "--agenteval-concurrency", "8", "--agenteval", "ds", "-q"]


def make(root: Path) -> None:
    ds = root / "ds"
    ds.mkdir(parents=True)
    (ds / "agenteval.yaml").write_text(
        "name: ds\nversion: '1'\nvariants:\n  a: agents:a\n  b: agents:b\n"
    )
    (ds / "agents.py").write_text(AGENTS)
    for i in range(TASKS):
        (ds / f"t{i}.yaml").write_text("input: question\nexpected: ok\n")
    (root / "pytest.ini").write_text("[pytest]\n")


def trial(root: Path, rng: random.Random) -> dict[str, object]:
    make(root)
    session = pytest_run(root, ARGS)
    kill_at = rng.uniform(0.0, 2.0)  # after the first record is committed: attempts running
    started = killed = None
    while session.poll() is None and killed is None:
        if started is None and first_commit(root):
            started = time.monotonic()
        if started is not None and time.monotonic() - started >= kill_at:
            found = workers(session.pid)
            if found:
                killed = rng.choice(found)
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.01)
    session.communicate()
    resumes = resume_until_complete(root, ARGS)
    calls = (root / "ds" / "calls.log").read_text().splitlines()
    lines = records(root)
    final = {(r["task_id"], r["attempt"], r.get("variant")): r["status"] for r in lines}
    return {
        "kill_at": round(kill_at, 2),
        "killed": killed is not None,
        "first_exit": session.returncode,
        "resumes": resumes,
        "calls": len(calls),
        "paid_twice": [c for c in calls if c.endswith("twice")],
        "replaced": replaced(lines),
        "crash_records": sum(1 for r in lines if r.get("phase") == "crash"),
        "all_passed": len(final) == 2 * TASKS and set(final.values()) == {"pass"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    totals: Counter[str] = Counter()
    bad = 0
    for rep in range(options.reps):
        with tempfile.TemporaryDirectory(prefix="kill-trial-") as folder:
            result = trial(Path(folder), rng)
        ok = not result["paid_twice"] and not result["replaced"] and result["all_passed"]
        bad += not ok
        totals["killed"] += bool(result["killed"])
        totals["crash_records"] += int(str(result["crash_records"]))
        totals["extra_calls"] += int(str(result["calls"])) - 2 * TASKS
        print(f"rep {rep + 1:2}: {'ok ' if ok else 'BAD'} {json.dumps(result)}", flush=True)
    print(
        f"{options.reps} repetitions, {totals['killed']} with a worker killed: "
        f"{bad} broke an invariant; {totals['crash_records']} crash records, "
        f"{totals['extra_calls']} calls re-run for attempts not committed when their worker died"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
