"""Pure resume decisions: is a planned attempt reused, regraded, or run (again)?

The controller snapshots the store's index once and hands it to xdist workers as plain JSON
types, so every process decides the same way without reading the store. Regrades need the
recorded output: the lone process fetches it from the store; under xdist the controller ships
the records that will be regraded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.model import Key
from .index import IndexRow

Action = Literal["reuse", "regrade", "run"]


@dataclass
class Plan:
    """Stored attempts of the run being continued, and how to treat them."""

    entries: dict[str, list[Any]] = field(default_factory=dict)
    """plan_key -> [digest, run_digest, status, phase, replay JSON, score, duration, tokens..]."""
    rerun_errors: bool = False
    rerun_all: bool = False
    regrade_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Full records for regrades, shipped to xdist workers."""
    fetch: Callable[[Key], dict[str, Any] | None] | None = None
    """Reads a full record from the store (lone process only)."""

    def decide(
        self, key: Key, digest: str, run_digest: str, regradable: bool = True
    ) -> tuple[Action, Any]:
        """The action for one attempt of the task as collected now, and its data.

        reuse: a finished record with the same task digest (an agent error is reused while the
        agent's input is unchanged). regrade: only grading changed and the output can be judged
        again. run: no record, the task changed otherwise, `--rerun-errors` on an error, or
        `--agenteval-rerun`.
        """
        entry = self.entries.get(plan_key(key))
        if entry is None or self.rerun_all:
            return "run", None
        held, held_run, status, phase = entry[:4]
        agent_error = status == "error" and phase != "grading"
        if agent_error and self.rerun_errors:
            return "run", None
        if held == digest or (agent_error and held_run == run_digest):
            return "reuse", _replay(entry)
        if held_run == run_digest and regradable:
            record = self._record(key)
            if record is not None:
                return "regrade", record
        return "run", None

    def existing(self, key: Key) -> bool:
        """Whether a stored record exists that a new one replaces (and keeps as history)."""
        return plan_key(key) in self.entries

    def _record(self, key: Key) -> dict[str, Any] | None:
        record = self.regrade_records.get(plan_key(key))
        if record is None and self.fetch is not None:
            found = self.fetch(key)
            record = found if isinstance(found, dict) else None
        return record

    def to_json(self) -> dict[str, Any]:
        """Plain types for xdist's workerinput."""
        return {
            "entries": self.entries,
            "rerun_errors": self.rerun_errors,
            "rerun_all": self.rerun_all,
            "regrade_records": self.regrade_records,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(
            data["entries"], data["rerun_errors"], data["rerun_all"], data["regrade_records"]
        )


def plan_key(key: Key) -> str:
    """A key as one string (dataset names and task ids never contain NUL)."""
    return f"{key[0]}\0{key[1]}\0{key[2]}"


def make_plan(rows: Iterable[IndexRow], *, rerun_errors: bool, rerun_all: bool) -> Plan:
    """Snapshot the readable stored attempts of a run (flat lists: cheap for 100,000 rows)."""
    entries = {
        plan_key(r.key): [
            r.digest,
            r.run_digest,
            r.status,
            r.phase,
            r.replay,
            r.score,
            r.duration,
            r.input_tokens,
            r.output_tokens,
            r.cost,
        ]
        for r in rows
    }
    return Plan(entries, rerun_errors, rerun_all)


def _replay(entry: list[Any]) -> dict[str, Any]:
    """What a replayed item reports: the stored verdict's scalars, verdicts and excerpts."""
    status, _, replay, score, duration, input_tokens, output_tokens, cost = entry[2:]
    return {
        "status": status,
        "score": score,
        "duration": duration,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost": cost,
        **(_replay_details(replay) if replay else {}),
    }


UNREADABLE_DETAILS = "(the stored details of this verdict are unreadable)"


def _replay_details(text: str) -> dict[str, Any]:
    """The stored verdicts and excerpts; damaged ones become a note, never an exception."""
    try:
        details = json.loads(text)
    except (ValueError, RecursionError):
        details = None
    if _readable_details(details):
        return details
    return {"verdicts": [], "output_excerpt": None, "error": UNREADABLE_DETAILS}


def _readable_details(details: Any) -> bool:
    return (
        isinstance(details, dict)
        and isinstance(details.get("verdicts", []), list)
        and all(
            isinstance(v, dict)
            and isinstance(v.get("grader"), str)
            and isinstance(v.get("passed"), bool)
            and isinstance(v.get("reason"), str)
            for v in details.get("verdicts", [])
        )
        and all(isinstance(details.get(k), str | None) for k in ("output_excerpt", "error"))
    )


def count_actions(actions: Iterable[Action]) -> dict[str, int]:
    """How many attempts of each action, for the plan printout and the summary."""
    result = {"reuse": 0, "regrade": 0, "run": 0}
    for action in actions:
        result[action] += 1
    return result
