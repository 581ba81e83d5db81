"""An attempt's identity, `AttemptId`, and the one function for each form derived from it.

Records are keyed by (dataset, task id, variant, attempt), never by node id. Every other face of
the identity (the pytest item name, the plan's string key, the JSON list of an in-flight note or
a shipment, the fields of a stored record) is made here, from or into an `AttemptId`, so no code
builds or indexes a tuple by hand and a key cannot be made without its variant.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

ITEM_NAME_RE = re.compile(
    r"^(?P<task_id>.+)\[(?:(?P<variant>[A-Za-z0-9_.\-]+)-)?attempt-(?P<attempt>\d+)\](?:@.*)?$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptId:
    """One attempt of one task of one dataset, of one variant (None: a dataset without
    variants, whose ids, files and index lines name none)."""

    dataset: str
    task_id: str
    variant: str | None
    attempt: int

    @property
    def item_name(self) -> str:
        """The pytest item name: `<task>[attempt-<i>]`, a variant's `<task>[<variant>-attempt-<i>]`
        (so `-k VARIANT` selects it)."""
        return item_name(self.task_id, self.attempt, self.variant)

    @property
    def plan_key(self) -> str:
        """The identity as one string (dataset names, task ids and variants never hold NUL)."""
        if self.variant is None:
            return f"{self.dataset}\0{self.task_id}\0{self.attempt}"
        return f"{self.dataset}\0{self.task_id}\0{self.attempt}\0{self.variant}"

    def to_json(self) -> list[Any]:
        """The JSON list stored in in-flight notes and shipped to workers:
        `[dataset, task, attempt]`, a variant's with the variant last (format `/1`)."""
        if self.variant is None:
            return [self.dataset, self.task_id, self.attempt]
        return [self.dataset, self.task_id, self.attempt, self.variant]

    @classmethod
    def from_json(cls, values: Any) -> AttemptId:
        """Read back `to_json`'s list; TypeError or ValueError when it is none."""
        dataset, task_id, attempt, *variant = values
        if len(variant) > 1:
            raise ValueError(f"not an attempt's key: {values!r}")
        return cls(
            dataset=str(dataset),
            task_id=str(task_id),
            variant=str(variant[0]) if variant else None,
            attempt=int(attempt),
        )

    @classmethod
    def of_fields(cls, data: dict[str, Any]) -> AttemptId | None:
        """The identity a record's (or index line's) JSON names; None when its fields are not
        one (so a record checked against the key it was stored under does not match)."""
        dataset, task_id, attempt = data.get("dataset"), data.get("task_id"), data.get("attempt")
        variant = data.get("variant")
        if not (isinstance(dataset, str) and isinstance(task_id, str)):
            return None
        if type(attempt) is not int or not (variant is None or isinstance(variant, str)):
            return None
        return cls(dataset=dataset, task_id=task_id, variant=variant, attempt=attempt)

    @property
    def label(self) -> str:
        """How messages name it: `t1 [attempt 0]`, a variant's `t1 [cand attempt 0]`."""
        variant = f"{self.variant} " if self.variant else ""
        return f"{self.task_id} [{variant}attempt {self.attempt}]"

    @property
    def seed(self) -> int:
        """A deterministic 32-bit seed of the attempt."""
        return int.from_bytes(hashlib.sha256(self.plan_key.encode()).digest()[:4], "big")


def item_name(task_id: str, attempt: int, variant: str | None = None) -> str:
    """An attempt item's name from its parts (`AttemptId.item_name`; also for names that are
    not an attempt's own, such as a shortened artifacts folder)."""
    if variant is None:
        return f"{task_id}[attempt-{attempt}]"
    return f"{task_id}[{variant}-attempt-{attempt}]"


def parse_item_name(nodeid: str, dataset: str) -> AttemptId | None:
    """The attempt a node id or item name of `dataset` names (None: not an attempt's);
    tolerates xdist's `@group` suffix."""
    match = ITEM_NAME_RE.match(nodeid.rpartition("::")[2])
    if match is None:
        return None
    return AttemptId(
        dataset=dataset,
        task_id=match["task_id"],
        variant=match["variant"],
        attempt=int(match["attempt"]),
    )
