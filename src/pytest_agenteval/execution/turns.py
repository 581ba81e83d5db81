"""Between an agent's turns: how the attempt runner watches the trace its agent writes.

Each model call the agent records is counted at once in the run's spend (so a cap stops the
next turn, in every process), moves the attempt's live turn on, and is summed into the
attempt's usage when the agent reports none of its own. `task.check()` asks the run's stops,
the task's timeout and its budget (see `core.trace.Trace.check`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from functools import partial

from ..core.identity import AttemptId
from ..core.llm import ModelPrice
from ..core.model import AgentResult, Usage
from ..core.trace import AnyEvent, ModelCall, Price, Trace, event_cost
from ..providers.pricing import priced
from ..sources.dataset import TaskDef

NotePhase = Callable[[AttemptId, str | None, int], None]
"""Told an attempt's phase (None: it ended) and its model turns so far."""
Spent = Callable[[float | None, int, int], None]
"""Told what answers cost that held no reservation: cost, tokens, model calls."""


class Watch:
    """The runner's side of one attempt's trace: limits for `check`, spend and turns as they
    come."""

    def __init__(
        self,
        trace: Trace,
        task: TaskDef,
        spent: Spent | None,
        run_stop: Callable[[], str | None] | None,
        phase: Callable[[str], None],
        traceparent: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """`timeout`: seconds the call may take, when less than the task's (a retry's
        share of it)."""
        self.spent = spent
        self.phase = phase
        self.turns = 0
        """Model calls so far."""
        self.counted = (0.0, 0)
        """Cost and tokens of the model calls already counted in the run's spend."""
        self._lock = threading.Lock()
        trace.run_stop = run_stop
        timeout = timeout or task.timeout
        trace.deadline = time.monotonic() + timeout if timeout else None
        pricing = task.dataset.manifest.pricing
        self.price: Price | None = partial(price_call, pricing) if pricing else None
        trace.price = self.price
        trace.on_event = self._seen  # the watch keeps no link back: no cycle for the GC
        trace.on_phase = phase
        trace.traceparent = traceparent

    def _seen(self, event: AnyEvent, counted: bool) -> None:
        """A new event: a model call is a turn, and its spend counts now (unless its caller
        counted it in the run's ledger already); either way the answer's usage at the end
        is counted less what the calls counted."""
        if not isinstance(event, ModelCall):
            return
        with self._lock:
            self.turns += 1
        self.phase("agent")  # a new turn
        if self.spent is None:
            return
        cost = event_cost(event, self.price)
        tokens = (event.input_tokens or 0) + (event.output_tokens or 0)
        if cost or tokens:
            if not counted:
                self.spent(cost, tokens, 1)
            with self._lock:
                self.counted = (self.counted[0] + (cost or 0.0), self.counted[1] + tokens)


def price_call(pricing: Mapping[str, ModelPrice], event: ModelCall) -> float | None:
    """A model call's cost from the manifest's `pricing:`: at the price of the model that
    answered, else of the model asked for (a reply naming an unpriced model costs money
    too); None when neither has a price."""
    usage = {
        "input_tokens": event.input_tokens,
        "output_tokens": event.output_tokens,
        "cached_input_tokens": event.cached_input_tokens,
        "cost": None,
    }
    for model in dict.fromkeys((event.model, event.request_model)):
        found = priced({**usage, "model": model}, pricing).get("cost")
        if isinstance(found, float | int):
            return found
    return None


def with_trace(result: AgentResult, trace: Trace) -> AgentResult:
    """The agent's answer with its trace: the events first in its transcript (then whatever
    transcript it returned), and the model calls' usage summed when it reported none."""
    if not len(trace):
        return result
    events = trace.to_json()
    usage = result.usage or summed_usage(trace)
    transcript = [*events, *(result.transcript or [])]
    return result.model_copy(update={"transcript": transcript, "usage": usage})


def summed_usage(trace: Trace) -> Usage | None:
    """The usage of the trace's model calls together; None when it has none."""
    calls = [e for e in trace.events if isinstance(e, ModelCall)]
    if not calls:
        return None
    costs = [trace.cost_of(e) for e in calls]
    known = [c for c in costs if c is not None]
    cached = [e.cached_input_tokens for e in calls if e.cached_input_tokens is not None]
    models = {e.model or e.request_model for e in calls} - {None}
    hits = [e for e in calls if e.cached]
    firsts = [e.cached_cost for e in hits if e.cached_cost is not None]
    misses = sum(1 for e in calls if e.cache_missed)
    return Usage(
        input_tokens=sum(e.input_tokens or 0 for e in calls),
        output_tokens=sum(e.output_tokens or 0 for e in calls),
        cost=sum(known) if known else None,
        cached_input_tokens=sum(cached) if cached else None,
        model=models.pop() if len(models) == 1 else None,
        cached_calls=len(hits) or None,
        cached_cost=sum(firsts) if firsts else None,
        cache_misses=misses or None,
    )


def grader_phase(grader: str) -> str:
    """The live phase of a grader: `judge` for an LLM judge, else `grading`."""
    return "judge" if grader == "judge" else "grading"
