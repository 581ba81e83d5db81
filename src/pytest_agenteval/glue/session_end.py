"""The end of the session: one pure function from what the session did to its exit status, the
lines that say why, and the files it wrote; the reporter applies its answer once.

Nothing here reads the store or touches pytest's session: the reporter gathers the facts
(`SessionFacts`), `end_session` decides, and `Ending` is what the terminal and pytest get.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ..core.text import dollars
from ..reporting.gate import GateResult
from ..store.stops import CTRL_C, Budget, Stop

RESUME = "--resume-suite runs them"
PROBE_FAILED = (
    "agenteval: stopped (the probe failed): no attempt started; fix what it named above and "
    "run again (--agenteval-no-probe skips it)"
)


@dataclass(frozen=True)
class SessionFacts:
    """The session's state at its end, as the controller holds it."""

    exitstatus: int
    """pytest's exit status as the session ended."""
    status: str
    """The run's status in its summary: complete, interrupted, or the kind of the stop."""
    stop: Stop | None = None
    """The stop the run came to (cancel, a cap, the deadline, a failed probe), or None."""
    empty_shard: bool = False
    """A shard that holds no task of a small suite (it did its part)."""
    gate: GateResult | None = None
    """The CI gate's verdict on the run (None before it is judged)."""
    failures: tuple[str, ...] = ()
    """Store or report writes that failed, said as they were."""
    written: tuple[Path, ...] = ()
    """The report files written."""
    ctrl_c: bool = False
    """A KeyboardInterrupt ended the session."""
    budget: Budget | None = None
    """The run's spend and caps (for the line a budget stop says)."""
    midway: int = 0
    """Attempts a run-wide stop ended mid-way (recorded `stopped`: a resume runs them)."""


@dataclass(frozen=True)
class Ending:
    """How the session ends: its exit status, what it says and what it wrote."""

    exitstatus: int
    stop_line: str | None
    """Why the run stopped early and how it goes on, or None."""
    gate_message: str | None
    failures: tuple[str, ...]
    written: tuple[Path, ...]

    @property
    def message(self) -> list[str]:
        """The lines that end the terminal section, in order."""
        lines = [self.stop_line, self.gate_message, *self.failures]
        return [line for line in lines if line]


def run_status(unfinished: bool, stop: Stop | None, midway: int) -> str:
    """The run's status: `complete`, else `interrupted` or the kind of the stop that came.
    A stop makes the run unfinished also when every planned attempt has a record: Ctrl-C
    (even with every attempt left already in flight), and any stop that ended an attempt
    mid-way (`midway`: a cap that refused a call or stopped a loop between turns)."""
    if stop is not None and (unfinished or midway or stop.kind == "interrupted"):
        return stop.kind
    return "interrupted" if unfinished else "complete"


def run_exitstatus(facts: SessionFacts) -> int:
    """The exit status the run records (run.json) and the gate judges: pytest's, except an
    empty shard succeeds and a stop that skipped attempts interrupts (CI must not mistake
    the run for a finished one)."""
    exitstatus = facts.exitstatus
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and facts.empty_shard:
        exitstatus = pytest.ExitCode.OK
    if facts.stop is not None and facts.status == facts.stop.kind:
        exitstatus = pytest.ExitCode.INTERRUPTED
    return int(exitstatus)


def end_session(facts: SessionFacts) -> Ending:
    """The session's end: the run's exit status, then the gate's verdict over it, then any
    failed write, which interrupts whatever came before."""
    exitstatus = run_exitstatus(facts)
    gate = facts.gate
    if gate is not None and gate.exitstatus is not None:
        exitstatus = int(gate.exitstatus)
    if facts.failures:
        exitstatus = int(pytest.ExitCode.INTERRUPTED)
    return Ending(
        exitstatus,
        stop_line(facts),
        gate.message if gate is not None else None,
        facts.failures,
        facts.written,
    )


def stop_line(facts: SessionFacts) -> str | None:
    """Why the run stopped early and how it goes on, the same for every stop: cancel, a cap,
    the deadline, and Ctrl-C (with attempts in flight or not)."""
    stop, status = facts.stop, facts.status
    if stop is not None and stop.kind == "probe_failed" == status:
        return PROBE_FAILED
    if stop is not None and status == stop.kind:
        then = (
            RESUME if stop.kind != "budget" or facts.budget is None else budget_line(facts.budget)
        )
        midway = (
            f", the {facts.midway} it ended mid-way are recorded as stopped" if facts.midway else ""
        )
        return (
            f"agenteval: stopped ({stop.reason}): attempts not started were skipped{midway}; {then}"
        )
    if facts.ctrl_c and status == "interrupted":
        return (
            f"agenteval: stopped ({CTRL_C}): attempts still running and those not started "
            f"were not recorded; {RESUME}"
        )
    return None


def budget_line(budget: Budget) -> str:
    """What the run spent, and how to go on: a cap is the run's whole budget, every session
    of it counted, so a resume with the same cap runs only the calls that fit in what is left
    (a provider's call stops the run when its worst case does not fit, with room left)."""
    cost, tokens = budget.totals()
    raise_it = " or ".join(
        flag
        for flag, cap in (
            ("--agenteval-max-cost", budget.max_cost),
            ("--agenteval-max-tokens", budget.max_tokens),
        )
        if cap is not None
    )
    return (
        f"spent in all {dollars(cost)}, {tokens} tokens (every call the run paid for, its "
        "earlier sessions included). The cap is the run's whole budget: --resume-suite with "
        f"the same cap runs only calls that fit in what is left of it; with a higher {raise_it}, "
        "the rest"
    )
