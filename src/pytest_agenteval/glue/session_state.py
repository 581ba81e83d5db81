"""The session's state: what the controller's session did, held by one object.

The controller makes it when the run opens; the recorder is its one writer (each report it
handles adds to it), the reporter and the session's end only read it. What outlives the session
(records, spend, progress) is in the store layer: this holds the session's counts and verdicts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..core.errors import ReportError, StoreError
from ..core.identity import AttemptId
from ..store.lifecycle import OpenRun
from ..store.stops import Budget, Stops


@dataclass
class SessionState:
    """What this session did so far, for its end to judge."""

    budget: Budget
    """The run's caps and spend, every session of it (the run's ledger)."""
    planned_keys: set[AttemptId] = field(default_factory=set)
    """The attempts the run plans (its earlier sessions' and this selection's)."""
    actions: Counter[str] = field(default_factory=Counter)
    """Attempts handled by action: `run`, `regrade`, `reuse`."""
    reused: set[AttemptId] = field(default_factory=set)
    """Attempts whose stored verdict this session replayed (the HTML report flags them)."""
    reported: set[AttemptId] = field(default_factory=set)
    """Attempts whose report this session handled (committed or replayed): a crash xdist
    reports for one afterwards leaves its record alone."""
    load_errors: list[dict[str, str]] = field(default_factory=list)
    """Task files that could not be loaded, once each."""
    agent_errors: Counter[str] = field(default_factory=Counter)
    """Agents that could not be built (their problem, rendered) and how many attempts did
    not start because of each."""
    other_failures: int = 0
    """Failed or erroring tests of the session that are not attempts (the gate counts them)."""
    failures: list[str] = field(default_factory=list)
    """Store or report writes that failed: each stops the session; the run is interrupted."""

    @classmethod
    def of(
        cls, run: OpenRun, stops: Stops | None, max_cost: float | None, max_tokens: int | None
    ) -> SessionState:
        """The state a session starts from: the run's plan, and its spend so far (a resumed
        run's earlier sessions spent too: the run's ledger, which no session resets, holds
        every call they paid for), counted against the run's caps."""
        ledger = stops.ledger if stops is not None else None
        state = cls((stops.budget if stops else None) or Budget(max_cost, max_tokens, ledger))
        state.planned_keys.update(row.key for row in run.plan.rows.values())
        for row in run.plan.rows.values():
            state.budget.add(row.spend, row.input_tokens, row.output_tokens)
        if ledger is not None:  # calls of an earlier session's processes killed mid-call
            ledger.sweep()
        return state

    def fail(self, exc: StoreError | ReportError) -> str:
        """A store or report write failed: noted once; the first failure is the one that
        stops the session."""
        message = f"agenteval: {exc}"
        if message not in self.failures:
            self.failures.append(message)
        return self.failures[0]

    def began(self) -> bool:
        """Whether the session did anything: an attempt, an agent or a task that failed."""
        return bool(self.actions or self.agent_errors or self.load_errors)

    def counts(self) -> dict[str, int]:
        """run.json's and the summary's session counts."""
        actions = self.actions
        return {"reused": actions["reuse"], "regraded": actions["regrade"], "run": actions["run"]}
