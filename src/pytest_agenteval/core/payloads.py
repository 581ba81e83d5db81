"""What an item's report carries to the controller (`report.agenteval`): one closed union of
typed payloads, each with one wire form.

In the process that made it a payload stays typed; across xdist's boundary it travels as its
wire form (`to_wire`) and is read back once (`from_wire`), so the recorder handles each kind in
a method of its own (as xdist's `DSession` dispatches worker events by name) instead of asking
which keys a dict has. A new record's wire form is one string: execnet ships one value far
more cheaply than a dict of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .identity import AttemptId
from .records import AttemptRecord, index_entry, to_json_text
from .values import value_class


@value_class
class NewRecord:
    """A new record, typed, in the process that made it: a lone process's recorder commits it
    without parsing anything."""

    action: str
    """What the plan decided for the attempt (`run`, `regrade`)."""
    record: AttemptRecord
    """The attempt's new record."""
    crashed: bool = False
    """Made by the controller for an attempt whose worker died (no index entry comes with it:
    the store writes one)."""

    def ship(self) -> str:
        """The one string that crosses to another process: action, index entry, record."""
        return ship(self.action, to_json_text(index_entry(self.record)), self.record.to_text())


@dataclass(frozen=True, slots=True)
class ShippedRecord:
    """A new record as a worker shipped it: the texts are stored as they came (the record is
    parsed only where it must be: replacing a stored one, a hook that reads it)."""

    action: str
    key: AttemptId
    entry: str
    """The index entry's JSON text."""
    text: str
    """The record's JSON text."""
    fields: dict[str, Any]
    """The index entry, parsed (once, here)."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """No new record: the stored verdict was replayed (`reuse`), or the attempt stopped before
    it began (its planned action)."""

    action: str
    key: AttemptId


@dataclass(frozen=True, slots=True)
class NeverStarted:
    """The attempt could not start (its agent cannot be built): nothing is recorded."""

    key: AttemptId
    problem: str
    """The agent's problem, rendered (said once per problem at the end)."""


@dataclass(frozen=True, slots=True)
class LoadError:
    """A task file (or a task of it) that did not load."""

    dataset: str
    label: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {
            "dataset": self.dataset,
            "label": self.label,
            "path": self.path,
            "message": self.message,
        }


Payload = NewRecord | ShippedRecord | Replayed | NeverStarted | LoadError
"""Every kind a report carries; `from_wire` makes one of them or raises ValueError."""
PAYLOADS = (NewRecord, ShippedRecord, Replayed, NeverStarted, LoadError)


def ship(action: str, entry: str, text: str) -> str:
    """A new record's wire form: the action, the index entry's JSON and the record's, a line
    each (JSON text holds no raw newline)."""
    return f"{action}\n{entry}\n{text}"


def to_wire(payload: Payload) -> str | dict[str, Any]:
    """The payload as it crosses to xdist's controller (execnet-serialisable plain values)."""
    if isinstance(payload, NewRecord):
        return payload.ship()
    if isinstance(payload, Replayed):
        return {"action": payload.action, "key": payload.key.to_json()}
    if isinstance(payload, NeverStarted):
        return {"action": "run", "key": payload.key.to_json(), "agent_error": payload.problem}
    if isinstance(payload, LoadError):
        return {"load_error": payload.as_dict()}
    return ship(payload.action, payload.entry, payload.text)


def from_wire(value: Any) -> Payload:
    """The payload a wire form names; ValueError (or TypeError, KeyError) when it is none."""
    if isinstance(value, str):
        action, entry, text = value.split("\n", 2)
        fields = json.loads(entry)
        key = AttemptId.of_fields(fields)
        if key is None:
            raise ValueError(f"a shipped record names no attempt: {entry[:200]!r}")
        return ShippedRecord(action, key, entry, text, fields)
    if "load_error" in value:
        error = value["load_error"]
        return LoadError(error["dataset"], error["label"], error["path"], error["message"])
    key = AttemptId.from_json(value["key"])
    if "agent_error" in value:
        return NeverStarted(key, str(value["agent_error"]))
    return Replayed(str(value["action"]), key)
