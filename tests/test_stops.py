"""Suite-wide stops: spend and token caps, a deadline, `agenteval cancel` from another shell,
Ctrl-C and kill -9 with attempts in flight; each leaves complete records and a resumable run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import WORKERS, DatasetMaker, default_sigint, latest_run, stored, summary_of, task
from pytest_agenteval.core import options

# Each call costs $1 and 100 tokens.
COSTLY = """
import json, pathlib, time

LOG = pathlib.Path(__file__).with_name("calls.log")


def run(task):
    with LOG.open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")
    time.sleep(task.metadata.get("sleep", 0))
    return {"output": "ok", "usage": {"cost": 1.0, "input_tokens": 60, "output_tokens": 40}}
"""


def costly(dataset: DatasetMaker, n: int, **meta: object) -> Path:
    root = dataset(
        {f"t{i:02}.yaml": task(metadata=dict(meta)) for i in range(n)},
        manifest={"agent": "costly:run"},
    )
    (root / "costly.py").write_text(COSTLY)
    return root


def run_json(pytester: pytest.Pytester, run_id: str) -> dict[str, object]:
    path = pytester.path / ".pytest_cache/agenteval/runs" / run_id / "run.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cap", "reason"),
    [
        (["--agenteval-max-cost", "3.5"], "spend cap reached: $4.00 of $3.50"),
        (["--agenteval-max-tokens", "350"], "token cap reached: 400 of 350"),
    ],
)
def test_cap_skips_the_rest_and_a_resume_finishes(
    pytester: pytest.Pytester, dataset: DatasetMaker, cap: list[str], reason: str
) -> None:
    """At a cap no attempt starts; the rest are skipped with the reason, not recorded, the
    run is 'budget' with exit status 2; the cap counts earlier sessions; a resume finishes."""
    costly(dataset, 10)
    result = pytester.runpytest_subprocess("--agenteval", "ds", *cap, "-rs")
    result.assert_outcomes(passed=4, skipped=6)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            f"*stopped ({reason})*spent in all $4.00, 400 tokens*",
            f"*not started: {reason}*",
        ]
    )
    run_id = latest_run(pytester.path)
    assert summary_of(pytester, run_id)["status"] == "budget"
    assert run_json(pytester, run_id)["status"] == "budget"
    assert len(stored(pytester.path)) == 4
    again = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", *cap, "--agenteval-min-pass-rate", "0.5"
    )
    again.assert_outcomes(passed=4, skipped=6)  # the earlier session's spend counts
    again.stdout.fnmatch_lines(
        [
            "*The cap is the run's whole budget: --resume-suite with the same cap runs only calls"
            f" that fit in what is left of it; with a higher {cap[0]}, the rest"
        ]
    )
    assert "--resume-suite runs them" not in again.stdout.str()
    again.stdout.fnmatch_lines(["gate NOT met: the run is stopped (budget)*"])
    assert again.ret == pytest.ExitCode.INTERRUPTED
    done = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite")
    done.assert_outcomes(passed=10)
    assert done.ret == 0 and summary_of(pytester, run_id)["status"] == "complete"
    assert Counter(dataset.calls()).most_common(1)[0][1] == 1


@pytest.mark.slow
def test_cap_holds_across_xdist_workers(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Under -n 2 with attempts in flight, the controller's cap stops every worker: overshoot is
    bounded by what was in flight, nothing runs twice, every attempt is recorded or skipped."""
    costly(dataset, 30, sleep=0.05)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "2",
        "--agenteval-max-cost", "5",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert outcomes["skipped"] > 0 and outcomes["passed"] + outcomes["skipped"] == 30
    assert 5 <= outcomes["passed"] <= 5 + 2 * 2 + 2 * 2  # in flight and queued reports
    assert len(stored(pytester.path)) == outcomes["passed"]
    assert summary_of(pytester)["status"] == "budget"
    assert Counter(dataset.calls()).most_common(1)[0][1] == 1


def test_past_deadline_starts_nothing(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A deadline that has passed skips every attempt: 'deadline passed', status deadline; a
    resume with a deadline in the future finishes the run."""
    costly(dataset, 3)
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-deadline", "2000-01-01T00:00", "-rs"
    )
    result.assert_outcomes(skipped=3)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*not started: deadline passed*"])
    assert summary_of(pytester)["status"] == "deadline"
    assert dataset.calls() == []
    done = pytester.runpytest("--agenteval", "ds", "--resume-suite", "--agenteval-deadline", "1h")
    done.assert_outcomes(passed=3)
    assert done.ret == 0 and summary_of(pytester)["status"] == "complete"


def test_deadline_values() -> None:
    """Durations count from now; ISO times are absolute; anything else says what is allowed."""
    assert options.deadline_at("90", 1000.0) == 1090.0
    assert options.deadline_at("1h30m", 0.0) == 5400.0
    assert options.deadline_at("45s", 0.0) == 45.0
    assert options.deadline_at("2000-01-01T00:00+00:00", 0.0) == 946684800.0
    with pytest.raises(Exception, match="neither a duration"):
        options.deadline("soon")


def test_bad_deadline_is_a_usage_error(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A deadline that is neither a duration nor an ISO time is refused before anything runs."""
    costly(dataset, 1)
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-deadline", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'soon' is neither a duration*"])


def _start(pytester: pytest.Pytester, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", *args],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=default_sigint,
    )


def _wait_for_records(pytester: pytest.Pytester, at_least: int) -> None:
    """Wait (up to a generous bound) until the newest run has stored `at_least` records."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if len(stored(pytester.path)) >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError("the run stored too few records in 60s")


def test_a_serial_ctrl_c_says_how_to_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A real Ctrl-C of a serial run (no attempt in flight ahead of its turn) ends with the
    line a concurrent Ctrl-C, cancel and the deadline end with: why it stopped and that
    --resume-suite runs the rest."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok", metadata={"sleep": 60})})
    proc = _start(pytester, "-p", "no:xdist")
    end = time.monotonic() + 60
    while "b 0" not in dataset.calls() and time.monotonic() < end:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    text = out.decode()
    assert (
        "agenteval: stopped (interrupted (Ctrl-C)): attempts still running and those not started "
        "were not recorded; --resume-suite runs them"
    ) in text
    assert text.index("--resume-suite runs them") < text.index("KeyboardInterrupt")
    assert summary_of(pytester)["status"] == "interrupted"


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_cancel_from_another_shell(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """`agenteval cancel` stops a running run, in every process: status cancelled, exit 2, the
    rest skipped, the summary saying how many of the planned attempts it holds; a resume clears
    the request and runs only what was not recorded."""
    costly(dataset, 40, sleep=1.0)  # 20 s to run all: the cancel (a python start) comes first
    proc = _start(pytester, "--agenteval-concurrency", "2", "-rs", *workers)
    _wait_for_records(pytester, 2)
    cancel = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "cancel"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cancel.returncode == 0, cancel.stderr
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    assert b"not started: cancelled" in out
    run_id = latest_run(pytester.path)
    stopped = summary_of(pytester, run_id)
    assert stopped["status"] == "cancelled"
    recorded = len(stored(pytester.path))
    assert recorded < 40 and stopped["planned"] == 40
    assert f"{recorded} of 40 planned attempts".encode() in out
    calls_before = len(dataset.calls())
    done = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", "--agenteval-concurrency", "8"
    )
    done.assert_outcomes(passed=40)
    assert summary_of(pytester, run_id)["status"] == "complete"
    assert "planned" not in summary_of(pytester, run_id)
    assert len(dataset.calls()) - calls_before == 40 - recorded


@pytest.mark.slow
def test_ctrl_c_lets_attempts_in_flight_finish(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """The first Ctrl-C starts nothing new and records what was in flight; a resume runs only
    the rest, so every attempt ran exactly once."""
    costly(dataset, 30, sleep=0.5)
    proc = _start(pytester, "--agenteval-concurrency", "4")
    _wait_for_records(pytester, 4)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    assert b"Ctrl-C: no new attempt starts" in out
    assert b"agenteval: stopped (interrupted (Ctrl-C)): " in out  # as a serial Ctrl-C
    assert b"; --resume-suite runs them" in out
    assert summary_of(pytester)["status"] == "interrupted"
    assert all(status == "pass" for _, _, status in stored(pytester.path))
    pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", "--agenteval-concurrency", "8"
    ).assert_outcomes(passed=30)
    assert sorted(Counter(dataset.calls()).values()) == [1] * 30


# Each call waits until the test writes `release` beside it.
HELD = """
import pathlib, time

HERE = pathlib.Path(__file__).parent


def run(task):
    with (HERE / "calls.log").open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")
    while not (HERE / "release").exists():
        time.sleep(0.01)
    return "ok"
"""


def test_ctrl_c_with_every_attempt_left_in_flight_still_interrupts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Ctrl-C while every remaining attempt is already in flight: they finish and are
    recorded, and the session still ends `interrupted`, exit 2, with the stop line (it ended
    `complete`, exit 0, most of the time)."""
    root = dataset({f"t{i}.yaml": task() for i in range(4)}, manifest={"agent": "held:run"})
    (root / "held.py").write_text(HELD)
    proc = _start(pytester, "--agenteval-concurrency", "4", "-p", "no:xdist")
    out = _Output(proc)
    _wait_for("agent calls", lambda: len(dataset.calls()), 4)
    proc.send_signal(signal.SIGINT)
    _wait_for("Ctrl-C notes", lambda: out.text().count("Ctrl-C: no new attempt starts"), 1)
    (root / "release").write_text("")
    proc.wait(timeout=60)
    text = out.text()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text
    assert "agenteval: stopped (interrupted (Ctrl-C)): " in text
    assert summary_of(pytester)["status"] == "interrupted"
    assert sorted(status for _, _, status in stored(pytester.path)) == ["pass"] * 4


class _Output:
    """A child's output, read as it comes (a thread drains the pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.chunks: list[bytes] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(4096), b""):
            self.chunks.append(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


@pytest.mark.slow
def test_kill_9_with_attempts_in_flight(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """kill -9 with attempts in flight loses only those; what was recorded is complete, and
    the resume runs only the attempts without a record."""
    costly(dataset, 30, sleep=0.3)
    proc = _start(pytester, "--agenteval-concurrency", "4")
    _wait_for_records(pytester, 4)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    before = stored(pytester.path)
    assert before and all(status == "pass" for _, _, status in before)
    calls_before = len(dataset.calls())
    result = pytester.runpytest_subprocess("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=30)
    assert len(dataset.calls()) - calls_before == 30 - len(before)


@pytest.mark.slow
def test_progress_json_is_always_parseable_and_ends_final(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """progress.json is replaced atomically while the run goes on (every read parses) and its
    last version has the final status and counts; `agenteval status` prints it."""
    costly(dataset, 40, sleep=0.08)
    proc = _start(pytester, "--agenteval-concurrency", "4")
    seen: list[dict[str, object]] = []
    while proc.poll() is None:
        for path in (pytester.path / ".pytest_cache/agenteval/runs").glob("*/progress.json"):
            seen.append(json.loads(path.read_text()))  # never a torn file
    assert proc.returncode == 0, proc.communicate()[0].decode()
    assert any(s["status"] == "running" for s in seen)
    final = json.loads(
        next((pytester.path / ".pytest_cache/agenteval/runs").glob("*/progress.json")).read_text()
    )
    assert final["schema"] == "agenteval.progress/1"
    assert (final["status"], final["planned"], final["done"], final["pass"]) == (
        "complete",
        40,
        40,
        40,
    )
    assert final["cost"] == 40.0 and final["tokens"] == 4000
    shown = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "status", "--watch"],
        cwd=pytester.path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "complete · 40/40 done" in shown.stdout and "40 passed" in shown.stdout


def test_cancel_refuses_a_run_that_is_not_running(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`agenteval cancel` on a finished run says so and leaves it alone."""
    costly(dataset, 1)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    run_id = latest_run(pytester.path)
    cancel = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "cancel", run_id],
        cwd=pytester.path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cancel.returncode == 1
    assert f"run {run_id} is not running (complete); nothing to cancel" in cancel.stderr
    assert not (pytester.path / ".pytest_cache/agenteval/runs" / run_id / "cancel").exists()


def _start_in_group(pytester: pytest.Pytester, *args: str) -> subprocess.Popen[bytes]:
    """A run in a process group of its own, as a terminal starts it: Ctrl-C reaches every
    process of it (xdist workers too)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", *args],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=default_sigint,
    )


def _wait_for(what: str, found: Callable[[], int], at_least: int) -> None:
    """Wait (up to a generous bound) until `found()` reaches `at_least`."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if found() >= at_least:
            return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} {what} in 60s")


@pytest.mark.slow
def test_ctrl_c_under_xdist_lets_attempts_in_flight_finish(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Ctrl-C to the whole process group under -n 2 with attempts in flight: no new attempt
    starts, every attempt that started is recorded as it finished, the rest are skipped; the
    run is interrupted (exit 2) and a resume runs only the rest, each once."""
    costly(dataset, 30, sleep=0.5)
    proc = _start_in_group(pytester, "-n", "2", "--agenteval-concurrency", "3", "-rs")
    _wait_for("agent calls", lambda: len(dataset.calls()), 4)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    assert b"Ctrl-C: no new attempt starts" in out
    assert b"not started: interrupted (Ctrl-C)" in out
    assert summary_of(pytester)["status"] == "interrupted"
    recorded = stored(pytester.path)
    started = {(line.split()[0], int(line.split()[1])) for line in dataset.calls()}
    assert {(t, a) for t, a, _ in recorded} == started  # none lost, none half-finished
    assert all(status == "pass" for _, _, status in recorded) and len(started) < 30
    resumed = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", "-n", "2", "--agenteval-concurrency", "8"
    )
    resumed.assert_outcomes(passed=30)
    assert sorted(Counter(dataset.calls()).values()) == [1] * 30


@pytest.mark.slow
def test_a_sigint_to_the_controller_alone_stops_the_workers_too(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """SIGINT sent to the xdist controller's pid only, with no terminal (`kill -INT`, a CI
    job's timeout): the workers stop too, so no attempt starts past those recorded and one in
    flight per worker (before, they went on for seconds and their reports were dropped); a
    resume runs the rest."""
    costly(dataset, 12, sleep=0.3)
    proc = _start_in_group(pytester, "-n", "2", "--attempts", "2")
    _wait_for_records(pytester, 2)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    assert len(dataset.calls()) <= len(stored(pytester.path)) + 2, out.decode()
    resumed = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--resume-suite", "-n", "2", "--attempts", "2"
    )
    resumed.assert_outcomes(passed=24)
    assert len(dataset.calls()) <= 24 + 2


# Each call starts a child in a session of its own (a terminal's Ctrl-C does not reach it)
# and waits for it.
STUCK = """
import pathlib, subprocess, sys

HERE = pathlib.Path(__file__).parent


def run(task):
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    (HERE / f"{task.id}.pid").write_text(str(child.pid))
    child.wait()
    return "ok"
"""


@pytest.mark.parametrize("workers", WORKERS)
def test_ctrl_c_gives_up_on_attempts_after_the_grace(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Attempts still in flight when Ctrl-C's grace is over are given up on: skipped with the
    reason, not recorded, the processes they started killed; the run ends interrupted."""
    root = dataset({f"t{i}.yaml": task() for i in range(8)}, manifest={"agent": "stuck:run"})
    (root / "stuck.py").write_text(STUCK)
    proc = _start_in_group(
        pytester, "--agenteval-concurrency", "2", "--agenteval-interrupt-grace", "1", "-rs",
        *workers,
    )  # fmt: skip
    _wait_for("children", lambda: len(list(root.glob("*.pid"))), 2)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    assert b"still running after the 1s grace period" in out
    assert stored(pytester.path) == [], out.decode()
    assert summary_of(pytester)["status"] == "interrupted"
    for pid_file in root.glob("*.pid"):
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


def test_stops_are_capped_at_construction_and_reason_is_a_query(tmp_path: Path) -> None:
    """The caps are given to `Stops` when it is made (no later `cap`); asking why the run
    stops writes nothing, while a published halt tells the run's other processes once."""
    from pytest_agenteval.store.stops import STOP_FILE, Stops

    assert Stops(tmp_path).budget is None  # uncapped: nothing to check
    stops = Stops(tmp_path, max_tokens=100)
    assert stops.budget is not None and stops.reason() is None
    stops.spent(None, 150)  # answers past the cap, counted in the run folder's ledger
    other = Stops(tmp_path, max_tokens=100)  # another process of the run reads the same ledger
    assert stops.reason() == other.reason() == "token cap reached: 150 of 100"
    assert not (tmp_path / STOP_FILE).exists()
    stops.halt("budget", "token cap reached: 150 of 100", publish=True)
    written = json.loads((tmp_path / STOP_FILE).read_text())
    assert (written["kind"], written["reason"]) == ("budget", "token cap reached: 150 of 100")
    (tmp_path / STOP_FILE).unlink()
    stops.halt("budget", "again", publish=True)  # one file per kind is enough
    assert not (tmp_path / STOP_FILE).exists()
