"""End-to-end test helpers: a dataset writer, a scriptable test agent, summary reading."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.shards import shard_of

WORKERS = [
    pytest.param([], id="solo"),
    pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow),
]
"""A test's two process layouts: one process (the default suite) and two xdist workers (slow:
`.ci/run` runs it; the default suite keeps its own xdist tests in test_xdist.py)."""


def run_layout(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest in the layout `args` ask for: real xdist workers in a subprocess, one
    process in this one (no interpreter start and plugin import per run)."""
    if "-n" in args:
        return pytester.runpytest_subprocess(*args)
    return pytester.runpytest(*args)


def default_sigint() -> None:
    """`preexec_fn` of a child a test sends Ctrl-C: a shell that ignores SIGINT (nohup, some CI
    runners) passes that on to every child, where Python then leaves it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# An agent driven by each task's metadata; it logs every call so tests can count them, also
# across processes (xdist workers, killed runs).
AGENT = """
import os, pathlib, time


LOG = pathlib.Path(__file__).with_name("calls.log")


def run(task):
    with LOG.open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")
    meta = task.metadata
    if "sleep" in meta:
        time.sleep(meta["sleep"])
    if "raise" in meta:
        raise RuntimeError(meta["raise"])
    if "exit" in meta:
        os._exit(meta["exit"])
    if "signal" in meta:
        os.kill(os.getpid(), meta["signal"])
    answers = meta.get("answers")
    if answers:
        return str(answers[task.attempt % len(answers)])
    return str(meta.get("answer", ""))


async def run_async(task):
    import asyncio
    await asyncio.sleep(meta_sleep(task))
    return run(task)


def meta_sleep(task):
    return task.metadata.get("async_sleep", 0)
"""


class DatasetMaker:
    """Writes a dataset folder (manifest, tasks, the test agent) below pytester's directory.

    `check` is called with each dataset's root once it is written.
    """

    def __init__(self, root: Path, check: Callable[[Path], None] | None = None) -> None:
        self.root = root
        self.check = check

    def __call__(
        self,
        tasks: Mapping[str, str | Mapping[str, Any]],
        *,
        name: str = "ds",
        folder: str = "ds",
        manifest: dict[str, Any] | None = None,
    ) -> Path:
        root = self.root / folder
        root.mkdir(parents=True, exist_ok=True)
        data = {"name": name, "version": "1", "agent": "agent:run", **(manifest or {})}
        (root / "agenteval.yaml").write_text(json.dumps(data))
        (root / "agent.py").write_text(AGENT)
        for rel, content in tasks.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            text = textwrap.dedent(content) if isinstance(content, str) else json.dumps(content)
            path.write_text(text)
        if self.check is not None:
            self.check(root)
        return root

    def calls(self, folder: str = "ds") -> list[str]:
        log = self.root / folder / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


def task(answer: Any = None, expected: Any = "ok", **fields: Any) -> dict[str, Any]:
    """A task dict whose test-agent answer and expected value are given."""
    meta = fields.pop("metadata", {})
    if answer is not None:
        meta["answer"] = answer
    return {"input": "question", "expected": expected, "metadata": meta, **fields}


def run_ids(root: Path) -> list[str]:
    """The stored runs below `root`, oldest first by when each was created (from run.json, not
    from file times: two runs within one clock tick of the file system have equal mtimes).
    Runs whose run.json is not written yet are left out."""
    found = []
    for meta in (root / ".pytest_cache/agenteval/runs").glob("*/run.json"):
        data = json.loads(meta.read_text())
        found.append((data["created_at"], data["run_id"]))
    return [run_id for _, run_id in sorted(found)]


def latest_run(root: Path) -> str:
    """The newest run's id: what a test means when it did not name one."""
    ids = run_ids(root)
    assert ids, f"no run stored below {root}"
    return ids[-1]


def summary_of(pytester: pytest.Pytester, run_id: str | None = None) -> dict[str, Any]:
    """summary.json of the given run, or of the run whose summary was written last."""
    runs = pytester.path / ".pytest_cache/agenteval/runs"
    if run_id is not None:
        return cast(dict[str, Any], json.loads((runs / run_id / "summary.json").read_text()))
    summaries: list[dict[str, Any]] = [
        json.loads(p.read_text()) for p in runs.glob("*/summary.json")
    ]
    assert summaries, "no summary.json written"
    return max(summaries, key=lambda s: s["finished_at"])


def stored(root: Path, run_id: str | None = None) -> list[tuple[str, int, str]]:
    """(task id, attempt, status) of the newest (or given) run's committed records."""
    from pytest_agenteval.store.runs import Store

    if run_id is None:
        ids = run_ids(root)
        if not ids:
            return []
        run_id = ids[-1]
    store = Store(root / ".pytest_cache/agenteval")
    try:
        rows, _ = store.index(run_id)
    finally:
        store.close()
    return sorted((r.task_id, r.attempt, r.status) for r in rows)


def latest_record(
    root: Path, task_id: str, attempt: int, run_id: str | None = None
) -> dict[str, Any]:
    """The newest (or given) run's full stored record of one attempt, as JSON."""
    from pytest_agenteval.store.runs import Store

    store = Store(root / ".pytest_cache/agenteval")
    record = store.record(run_id or latest_run(root), aid("ds", task_id, attempt))
    store.close()
    assert record is not None
    return record.to_json()


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without run id, timings and per-session counts, for equality checks."""
    volatile = ("run_id", "created_at", "finished_at", "spend")  # spend: what each session paid
    result = {k: v for k, v in summary.items() if k not in volatile}
    result["counts"] = {k: summary["counts"][k] for k in ("pass", "fail", "error")}
    result["totals"] = {k: v for k, v in summary["totals"].items() if not k.startswith("duration")}
    result["tasks"] = [
        {**t, "attempts": [{k: v for k, v in a.items() if k != "duration"} for a in t["attempts"]]}
        for t in summary["tasks"]
    ]
    return result


def ids_in_shards(total: int, per_shard: int) -> dict[int, list[str]]:
    """Task ids chosen so that each of `total` shards holds `per_shard` of them."""
    found: dict[int, list[str]] = {i: [] for i in range(1, total + 1)}
    n = 0
    while any(len(v) < per_shard for v in found.values()):
        shard = shard_of("ds", f"t{n}", total)
        if len(found[shard]) < per_shard:
            found[shard].append(f"t{n}")
        n += 1
    return found


def aid(dataset: str, task_id: str, attempt: int, variant: str | None = None) -> AttemptId:
    """An attempt's identity, written short for tests."""
    return AttemptId(dataset=dataset, task_id=task_id, variant=variant, attempt=attempt)


T = TypeVar("T")


@contextlib.contextmanager
def sampling(measure: Callable[[], T]) -> Iterator[list[T]]:
    """`measure()` called over and over from a thread while the block runs (how many
    containers are alive, say); the list fills as it goes and stops with the block."""
    seen: list[T] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(measure())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()


def run_killing_holder(
    pytester: pytest.Pytester, requests: Callable[[], int], at: int, pid_file: Path, killed: Path
) -> pytest.RunResult:
    """`--agenteval ds -n 2`, SIGKILLing the worker whose agent wrote its pid to `pid_file`
    once the server has seen `at` requests (`requests()`); `killed` is touched after."""
    done = threading.Event()

    def kill_the_holder() -> None:
        while not done.wait(0.01):
            if requests() >= at and pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                killed.touch()
                return

    killer = threading.Thread(target=kill_the_holder)
    killer.start()
    try:
        return pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2")
    finally:
        done.set()
        killer.join()
