"""Money and time: a spend cap holds within the calls in flight at the server, limits hold for
calls given up on and in forked children, costs are finite, and durations tell the call from
the wait for a slot."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, latest_record, latest_run, run_killing_holder, task
from pytest_agenteval.cli import main
from pytest_agenteval.core.records import AttemptRecord
from test_providers import KEY, KEY_ENV, openai_agent

SLOW_GRADER = """


def grade(output):
    time.sleep(0.2)  # the main thread lags behind the calls in flight
    return output == "ok"
"""


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "n2"])
def test_spend_past_the_cap_is_at_most_the_calls_in_flight_at_the_server(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer, workers: list[str]
) -> None:
    """With `max_in_flight: 4` at concurrency 16 and a main thread slower than the server, the
    spend past `--agenteval-max-cost` is at most 4 calls' cost (the server counts the calls)."""
    chat_server.reset(latency=0.1)
    root = dataset(
        {
            f"t{i:02}.yaml": {"input": "<<ok>>", "graders": [{"python": "slow:grade"}]}
            for i in range(24)
        },
        manifest={
            "agent": openai_agent(chat_server),
            "limits": {"max_in_flight": 4},
            # 100 prompt tokens at $1000 per million: $0.10 a call
            "pricing": {"served-model-1": {"input_per_mtok": 1000, "output_per_mtok": 0}},
        },
    )
    (root / "slow.py").write_text(SLOW_GRADER)
    cap, per_call = 0.35, 0.10
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "16", "--agenteval-max-cost", str(cap),
        "--agenteval-no-probe",  # the price is of the model the server answers with, not asks
        *workers,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0
    spent = len(chat_server.requests) * per_call
    assert spent >= cap
    assert spent - cap <= 4 * per_call + 1e-9, f"{len(chat_server.requests)} calls"


BAD_USAGE_AGENT = """
import pathlib
from pytest_agenteval import AgentResult, Usage

USAGES = {
    "nan": {"cost": float("nan")},
    "inf": {"cost": float("inf")},
    "negative": {"cost": -1.0},
    "tokens": {"input_tokens": -5},
}


def run(task):
    with pathlib.Path(__file__).with_name("calls.log").open("a") as log:
        log.write(task.id + "\\n")
    return AgentResult(output="ok", usage=Usage(**USAGES[task.id]))
"""


USAGE_CASES = ("nan", "inf", "negative", "tokens")


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
def test_a_cost_that_is_not_a_finite_non_negative_number_is_refused(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A NaN, infinite or negative cost and a negative token count (from a Python agent or a
    command agent's JSON) make the attempt an error naming the field; nothing written holds
    NaN, and a resume with the same cap calls no agent again and finds no damage."""
    command = {"command": [sys.executable, "{dataset}/cmd.py"], "output": "json", "stdin": "none"}
    tasks: dict[str, str | dict[str, Any]] = {
        f"{name}.yaml": {"input": "q", "expected": "ok"} for name in USAGE_CASES
    }
    tasks["json.yaml"] = {"input": "q", "expected": "ok", "agent": command}
    root = dataset(tasks, manifest={"agent": "bad_usage:run"})
    (root / "bad_usage.py").write_text(BAD_USAGE_AGENT)
    (root / "cmd.py").write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('calls.log').open('a').write('json\\n')\n"
        'print(\'{"output": "ok", "usage": {"cost": NaN}}\')\n'
    )
    first = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-max-cost", "1")
    first.assert_outcomes(errors=5)
    # The error reports only: the short summary's lines are cut to the terminal's width.
    out = first.stdout.str().partition("short test summary info")[0]
    assert "usage.cost\n  Input should be a finite number" in out  # the command agent's NaN
    assert out.count("Input should be a finite number") == 3
    assert out.count("Input should be greater than or equal to 0") == 2
    assert sorted(dataset.calls()) == sorted([*USAGE_CASES, "json"])
    for path in (pytester.path / ".pytest_cache").rglob("*.json*"):
        texts = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        for text in texts:
            _strict_json(text)
    again = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-max-cost", "1", "--resume-suite"
    )
    again.assert_outcomes(errors=5)
    assert "damage" not in again.stdout.str()
    assert len(dataset.calls()) == 5


SPAN_AGENT = """
import pathlib, time

LOG = pathlib.Path(__file__).with_name("spans.log")


def run(task):
    with LOG.open("a") as log:
        log.write(f"{time.time()} 1\\n")
    time.sleep(1.5)
    with LOG.open("a") as log:
        log.write(f"{time.time()} -1\\n")
    return "ok"
"""


def most_at_once(log: Path) -> int:
    """The most calls that were running at once, from their start (+1) and end (-1) lines."""
    events = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    running = most = 0
    for _, step in events:
        running += int(step)
        most = max(most, running)
    return most


@pytest.mark.slow
def test_a_call_given_up_at_its_timeout_keeps_its_limit_slot(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`max_in_flight: 2` with sync calls abandoned at a 0.3 s timeout that run on for 1.5 s:
    the agent never runs more than 2 calls at once (a slot is held until its call ends)."""
    root = dataset(
        {f"t{i}.yaml": {"input": "q", "expected": "ok", "timeout": 0.3} for i in range(4)},
        manifest={"agent": "spans:run", "limits": {"max_in_flight": 2}},
    )
    (root / "spans.py").write_text(SPAN_AGENT)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--agenteval-concurrency", "4")
    result.assert_outcomes(errors=4)
    # Calls still running when the session ended never log their end: they count as running.
    assert most_at_once(root / "spans.log") == 2


POOL_AGENT = """
import concurrent.futures, multiprocessing

POOL = None


def run(task):
    global POOL
    if POOL is None:  # its forked workers live on after this call
        fork = multiprocessing.get_context("fork")
        POOL = concurrent.futures.ProcessPoolExecutor(2, mp_context=fork)
    return "ok" if POOL.submit(pow, 3, 2).result() == 9 else "no"
"""


def test_an_agent_with_a_forked_process_pool_does_not_keep_its_slot(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under `max_in_flight: 1`, an agent whose `ProcessPoolExecutor` (fork) outlives its call
    does not hold the slot through its children: the next call gets it (no hang)."""
    root = dataset(
        {f"t{i}.yaml": {"input": "q", "expected": "ok"} for i in range(3)},
        manifest={"agent": "pool:run", "limits": {"max_in_flight": 1, "min_interval": 0.01}},
    )
    (root / "pool.py").write_text(POOL_AGENT)
    result = pytester.runpytest_subprocess("--agenteval", "ds", timeout=60)
    result.assert_outcomes(passed=3)


def test_a_huge_max_in_flight_costs_no_memory(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`max_in_flight: 10**12` runs its attempts in a process limited to 1 GiB of memory: slots
    are made as they are reached, not all up front."""
    dataset(
        {
            f"t{i}.yaml": {"input": "q", "expected": "ok", "metadata": {"answer": "ok"}}
            for i in range(2)
        },
        manifest={"limits": {"max_in_flight": 10**12}},
    )
    gib = 1 << 30
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", "-p", "no:xdist", "-q"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (gib, gib)),
    )
    assert "2 passed" in done.stdout, done.stdout + done.stderr


def test_an_attempt_s_duration_is_its_call_and_the_wait_for_a_slot_is_apart(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With `max_in_flight: 1` at concurrency 4, each record's `started_at` and `duration` are
    of its own call (calls one after another: no two overlap) and the time it waited for the
    slot is its `wait`, which `agenteval show` and the HTML report say; a record without `wait`
    still reads."""
    chat_server.reset(latency=0.2)
    dataset(
        {f"t{i}.yaml": {"input": "<<ok>>", "expected": "ok"} for i in range(4)},
        manifest={"agent": openai_agent(chat_server), "limits": {"max_in_flight": 1}},
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-concurrency", "4", "--agenteval-html", "page.html"
    )
    result.assert_outcomes(passed=4)
    records = sorted(
        (latest_record(pytester.path, f"t{i}", 0) for i in range(4)),
        key=lambda r: r["started_at"],
    )
    for before, after in itertools.pairwise(records):
        assert after["started_at"] >= before["started_at"] + before["duration"] - 0.1
    assert all(r.get("wait", 0) > 0 for r in records[1:])
    assert main(["show", latest_run(pytester.path), f"{records[-1]['task_id']}/0"]) == 0
    assert "s waiting for a slot)" in capsys.readouterr().out
    assert f'"w":{records[-1]["wait"]}' in (pytester.path / "page.html").read_text()
    old = {key: value for key, value in records[1].items() if key != "wait"}
    assert AttemptRecord.from_json(old).wait == 0.0


def test_a_cost_cap_says_at_once_when_an_attempt_reports_tokens_but_no_cost(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An agent whose usage has no cost (a model missing from `pricing:`) cannot be counted by
    --agenteval-max-cost: the terminal says so once, naming the model, while the run goes on."""
    root = dataset({f"t{i}.yaml": task("ok") for i in range(3)}, manifest={"agent": "unpriced:run"})
    (root / "unpriced.py").write_text(
        "from pytest_agenteval import AgentResult, Usage\n"
        "def run(task):\n"
        "    usage = Usage(input_tokens=10, output_tokens=5, model='served-model-1')\n"
        "    return AgentResult(output='ok', usage=usage)\n"
    )
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-max-cost", "1")
    result.assert_outcomes(passed=3)
    warned = [line for line in result.stderr.lines if "cannot count" in line]
    assert len(warned) == 1, result.stderr.str()
    assert "model 'served-model-1' has no price in the manifest's pricing:" in warned[0]


HOLDING_AGENT = """
import os, pathlib

async def run(task):
    if task.input == "hold":  # its worker is killed while this request is at the server
        pathlib.Path(os.environ["HOLDER_PID"]).write_text(str(os.getpid()))
    reply = await task.llm().achat([{"role": "user", "content": "<<ok>>"}])
    return reply.text
"""

AFTER_THE_KILL = """
import os, pathlib, time


def pytest_runtest_setup(item):
    if item.name.startswith("t1"):  # the other worker's attempt starts once t0's worker died
        killed = pathlib.Path(os.environ["HOLDER_KILLED"])
        for _ in range(3000):
            if killed.exists():
                break
            time.sleep(0.01)
"""


def test_a_killed_workers_call_keeps_its_agent_slot_until_its_timeout(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`max_in_flight: 1` for the agent, two workers: the one whose call is at the server is
    SIGKILLed; the other worker's call waits for the dead call's timeout instead of taking its
    slot at once, so the server never has more than 1 request of the agent in flight."""
    pid_file, killed = pytester.path / "holder.pid", pytester.path / "holder.killed"
    monkeypatch.setenv("HOLDER_PID", str(pid_file))
    monkeypatch.setenv("HOLDER_KILLED", str(killed))
    # The dead worker's request stays 1 s at the server; its call's timeout (3 s, from the
    # call's start) leaves room for a request sent late in the call (a loaded machine).
    chat_server.reset(latency=1.0)
    root = dataset(
        {
            "t0.yaml": {"input": "hold", "expected": "ok"},
            "t1.yaml": {"input": "ask", "expected": "ok"},
        },
        manifest={
            "providers": {
                "local": {
                    "openai": {
                        "base_url": chat_server.base_url,
                        "api_key_env": KEY_ENV,
                        "model": "m1",
                    },
                    "retries": 0,
                }
            },
            "agent": "holding:run",
            "limits": {"max_in_flight": 1},
            "defaults": {"timeout": 3.0},
        },
    )
    (root / "holding.py").write_text(HOLDING_AGENT)
    pytester.makeconftest(AFTER_THE_KILL)
    result = run_killing_holder(  # its request at the server: SIGKILL its worker
        pytester, lambda: len(chat_server.requests), 1, pid_file, killed
    )
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'ds/t0.yaml::t0*"])
    result.assert_outcomes(passed=1, errors=1)
    assert len(chat_server.requests) == 2
    assert chat_server.max_concurrent == 1


def test_a_dead_holders_agent_slot_stays_taken_for_its_calls_timeout(tmp_path: Path) -> None:
    """A process killed holding an agent's slot leaves it taken until its call's timeout has
    passed since it took it; a dead holder's slot whose call had no timeout or whose timeout
    is over, and a slot its call gave back, are free at once."""
    from pytest_agenteval.execution.limits import LimitGate, Limits, release_slot, try_slot

    gate, limits = LimitGate(tmp_path), Limits(max_in_flight=1)

    def slot_after(agent: str, timeout: float | None, die: bool = True) -> int | None:
        pid = os.fork()
        if pid == 0:
            with gate.hold(agent, limits, timeout):
                if die:
                    os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)
        os.waitpid(pid, 0)
        return try_slot(tmp_path, hashlib.sha256(agent.encode()).hexdigest()[:16], 1)

    assert slot_after("killed", 3600) is None  # its call may run on for an hour
    for free in (slot_after("untimed", None), slot_after("over", 0), slot_after("done", 60, False)):
        assert free is not None
        release_slot(free)
