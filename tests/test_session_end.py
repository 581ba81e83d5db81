"""The session's end as one pure function (no pytester): from what the session did to its exit
status, the lines that say why, and the files written; and run.json's session entry as a model
that writes the keys it always wrote and reads back by attribute."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_agenteval.glue.session_end import SessionFacts, end_session, run_exitstatus, run_status
from pytest_agenteval.reporting.gate import GateResult
from pytest_agenteval.store.sessions import SessionEntry, read_session
from pytest_agenteval.store.stops import Budget, Stop

OK, FAILED = int(pytest.ExitCode.OK), int(pytest.ExitCode.TESTS_FAILED)
INTERRUPTED = int(pytest.ExitCode.INTERRUPTED)
NO_TESTS = int(pytest.ExitCode.NO_TESTS_COLLECTED)


def test_a_complete_run_keeps_pytests_exit_status_and_says_nothing() -> None:
    """Nothing stopped, no gate, no failed write: pytest's status, no line."""
    ending = end_session(SessionFacts(FAILED, "complete", written=(Path("s.json"),)))
    assert (ending.exitstatus, ending.message, ending.written) == (FAILED, [], (Path("s.json"),))


def test_an_empty_shard_succeeds_but_an_empty_selection_does_not() -> None:
    """A shard with no task of a small suite did its part; nothing selected stays status 5."""
    assert end_session(SessionFacts(NO_TESTS, "complete", empty_shard=True)).exitstatus == OK
    assert end_session(SessionFacts(NO_TESTS, "complete")).exitstatus == NO_TESTS


def test_a_stop_that_skipped_attempts_interrupts_and_says_how_to_go_on() -> None:
    """A cap reached: interrupted (recorded so in run.json too), and the line names the spend
    and the flag to raise; a stop the run finished before does not interrupt."""
    budget = Budget(1.0, None)
    budget.add(1.5, 10, 5)
    facts = SessionFacts(OK, "budget", Stop("budget", "cost cap $1.00"), budget=budget)
    ending = end_session(facts)
    assert run_exitstatus(facts) == ending.exitstatus == INTERRUPTED
    assert ending.stop_line is not None
    assert ending.stop_line.startswith("agenteval: stopped (cost cap $1.00): attempts not")
    assert "spent in all $1.50, 15 tokens" in ending.stop_line
    assert "--agenteval-max-cost" in ending.stop_line
    finished = SessionFacts(OK, "complete", Stop("deadline", "the deadline passed"))
    assert end_session(finished) == end_session(SessionFacts(OK, "complete"))


def test_a_stop_that_ended_an_attempt_mid_way_or_a_ctrl_c_interrupts_a_recorded_run() -> None:
    """Every planned attempt recorded: a cap that ended one mid-way (phase `stopped`) makes
    the run `budget` and Ctrl-C `interrupted`, exit 2 either way; a stop that ended none
    leaves it complete."""
    cap = Stop("budget", "token cap reached")
    assert run_status(False, cap, 1) == "budget"
    assert run_status(False, cap, 0) == "complete"
    assert run_status(False, Stop("interrupted", "interrupted (Ctrl-C)"), 0) == "interrupted"
    assert run_status(True, None, 0) == "interrupted"
    facts = SessionFacts(FAILED, "budget", cap, midway=2)
    ending = end_session(facts)
    assert ending.exitstatus == INTERRUPTED
    assert "skipped, the 2 it ended mid-way are recorded as stopped; " in (ending.stop_line or "")


def test_ctrl_c_and_a_failed_probe_say_their_own_line() -> None:
    """Ctrl-C with attempts unrecorded, and a probe that failed, each say what to do."""
    ctrl_c = end_session(SessionFacts(INTERRUPTED, "interrupted", ctrl_c=True))
    assert ctrl_c.stop_line is not None and "--resume-suite runs them" in ctrl_c.stop_line
    probe = SessionFacts(OK, "probe_failed", Stop("probe_failed", "probe"))
    assert "--agenteval-no-probe" in (end_session(probe).stop_line or "")


def test_the_gate_decides_over_the_run_and_a_failed_write_over_the_gate() -> None:
    """The gate's verdict replaces the run's status and its line is said; any store or report
    write that failed interrupts whatever the gate said, its message last."""
    met = GateResult(OK, "gate met: pass@1 1.000")
    ending = end_session(SessionFacts(FAILED, "complete", gate=met))
    assert (ending.exitstatus, ending.message) == (OK, ["gate met: pass@1 1.000"])
    kept = end_session(SessionFacts(FAILED, "complete", gate=GateResult(None)))
    assert kept.exitstatus == FAILED
    broken = SessionFacts(OK, "complete", gate=met, failures=("agenteval: disk full",))
    ending = end_session(broken)
    assert ending.exitstatus == INTERRUPTED
    assert ending.message == ["gate met: pass@1 1.000", "agenteval: disk full"]


def test_the_session_entry_writes_its_keys_as_before_and_reads_back_by_attribute() -> None:
    """The keys a session wrote, in their order, only those set; a damaged field reads as
    absent, an unknown one is kept."""
    entry = SessionEntry(
        finished_at=1.5,
        exitstatus=0,
        counts={"reused": 0, "regraded": 0, "run": 3},
        load_errors=[],
        agent_errors=[],
        regression=None,
    )
    written = entry.to_json()
    assert list(written) == [
        "finished_at",
        "exitstatus",
        "counts",
        "load_errors",
        "agent_errors",
        "regression",
    ]
    read = read_session(written)
    assert (read.counts["run"], read.finished_at, read.merged) == (3, 1.5, False)
    damaged = read_session({"counts": None, "finished_at": "soon", "later": 1})
    assert (damaged.counts, damaged.finished_at) == ({}, None)
    assert damaged.to_json() == {"later": 1}
