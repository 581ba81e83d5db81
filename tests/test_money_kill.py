"""The money kill trial (bench/money_kill_trial.py): killed xdist workers and process groups
lose no attempt, pay for none twice, and leave a spend ledger equal to the server's bill."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_agenteval.reporting.summary import Summary

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import money_kill_trial as trial

SPEND_WRITTEN = "spend" in Summary.model_fields
"""Whether summary.json has `spend` (everything the run paid for) in this version."""


@pytest.mark.slow
def test_a_killed_worker_or_group_loses_nothing_pays_nothing_twice_and_spends_the_bill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two repetitions of the trial (a worker killed, then the whole group, each at a random
    request, then resumed to the end) break none of its invariants."""
    monkeypatch.setenv(trial.KEY_ENV, "trial-key")
    results = trial.repetitions(2, seed=3, folder=tmp_path)
    assert [r["kind"] for r in results] == ["worker", "group"]
    others = [v for r in results for v in r["violations"] if v != trial.NO_SPEND]
    assert not others
    if not SPEND_WRITTEN and any(trial.NO_SPEND in r["violations"] for r in results):
        pytest.xfail("summary.json has no `spend` yet: the exact ledger is not in this version")
    assert all(not r["violations"] for r in results)


def test_the_trial_holds_the_ledger_between_the_bill_and_the_calls_held_at_a_kill() -> None:
    """The trial's ledger check refuses a ledger under the bill or over it by more than the
    calls in flight at their worst case, and a ledger off the bill when nothing was killed."""
    bill = trial.Bill(calls=10, cost=0.5, tokens=1000, worst_cost=0.1, worst_tokens=300)
    exact = {"calls": 10, "cost": 0.5 + 1e-12, "tokens": 1000}
    held = {"calls": 12, "cost": 0.7, "tokens": 1600}
    assert trial.ledger_violations(exact, bill, flight=0) == []
    assert trial.ledger_violations(held, bill, flight=2) == []
    assert trial.ledger_violations(held, bill, flight=0) == [
        "spend.cost 0.7 over the bill 0.5 by more than 0.0",
        "spend.tokens 1600 over the bill 1000 by more than 0",
        "spend.calls 12 over the bill 10 by more than 0",
    ]
    under = {"calls": 9, "cost": 0.49, "tokens": None}
    assert trial.ledger_violations(under, bill, flight=2) == [
        "spend.cost 0.49 under the bill 0.5",
        "spend.tokens is None",
        "spend.calls 9 under the bill 10",
    ]
