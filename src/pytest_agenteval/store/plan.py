"""Pure resume decisions: is a planned attempt reused, regraded, or run (again)?

The controller snapshots the store's index once and ships it to xdist workers as one versioned
JSON object, so every process decides the same way without reading the store. Regrades need the
recorded output: the lone process fetches it from the store; under xdist the controller ships
the records that will be regraded (without their history).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.errors import StoreError
from ..core.identity import AttemptId
from ..core.model import Action
from ..core.records import AttemptRecord
from .index import IndexRow

PLAN_SCHEMA = "agenteval.plan/1"
CRASH_LIMIT = 2
"""After this many crashes in a row an attempt is kept as an error, so a deterministic crasher
cannot make every resume crash again."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What happens to one planned attempt, with what it needs."""

    action: Action
    stored: IndexRow | None = None
    """reuse: the stored attempt whose verdict is replayed."""
    record: AttemptRecord | None = None
    """regrade: the stored record whose output is judged again."""
    why: str = ""
    """Why an attempt with a stored record runs again (for the plan printout)."""


RUN = Decision("run")


@dataclass
class Plan:
    """Stored attempts of the run being continued, and how to treat them."""

    rows: dict[str, IndexRow] = field(default_factory=dict)
    """plan_key -> the newest readable stored attempt."""
    rerun_errors: bool = False
    rerun_all: bool = False
    regrade_records: dict[str, AttemptRecord] = field(default_factory=dict)
    """Full records for regrades, shipped to xdist workers."""
    fetch: Callable[[AttemptId], AttemptRecord | None] | None = None
    """Reads a full record from the store (lone process only)."""

    def decide(
        self, key: AttemptId, digest: str, run_digest: str, regradable: bool = True
    ) -> Decision:
        """The decision for one attempt of the task as collected now.

        reuse: a finished record with the same task digest (an agent error is reused while the
        agent's input is unchanged). regrade: only grading changed and the output can be judged
        again. run: no record, the task changed otherwise, `--rerun-errors` on an error, the
        attempt's process crashed (fewer than CRASH_LIMIT times), a run-wide stop ended its
        agent's loop (`stopped`), or `--agenteval-rerun`.
        """
        row = self.rows.get(key.plan_key)
        if row is None:
            return RUN
        if self.rerun_all:
            return Decision("run", why="rerun")
        # an error of grading or of the budget judged the answer: a change of either regrades
        agent_error = row.status == "error" and row.phase not in ("grading", "budget")
        if agent_error and self.rerun_errors:
            return Decision("run", why="errored")
        if row.phase == "crash" and row.crashes < CRASH_LIMIT:
            return Decision("run", why="crashed")
        if row.phase == "build":  # its image may be there now (fixed, loaded, reachable)
            return Decision("run", why="build failed")
        if row.phase == "sandbox":  # its daemon may answer now
            return Decision("run", why="sandbox failed")
        if row.phase == "stopped":  # a run-wide stop ended its loop: never a verdict
            return Decision("run", why="stopped")
        if row.digest == digest or (agent_error and row.run_digest == run_digest):
            return Decision("reuse", stored=row)
        if row.run_digest == run_digest and regradable:
            record = self._record(key)
            if record is not None:
                return Decision("regrade", record=record)
        return Decision("run", why="changed")

    def stored(self, key: AttemptId) -> IndexRow | None:
        """The stored attempt a new record of `key` replaces (and keeps as history)."""
        return self.rows.get(key.plan_key)

    def _record(self, key: AttemptId) -> AttemptRecord | None:
        record = self.regrade_records.get(key.plan_key)
        if record is None and self.fetch is not None:
            record = self.fetch(key)
        return record

    def to_json(self) -> dict[str, Any]:
        """Plain types for xdist's workerinput: rows as value lists, records without history."""
        return {
            "schema": PLAN_SCHEMA,
            "rows": [
                [row.key.to_json(), *(getattr(row, name) for name in _ROW_FIELDS[1:])]
                for row in self.rows.values()
            ],
            "rerun_errors": self.rerun_errors,
            "rerun_all": self.rerun_all,
            "regrade_records": {k: r.to_json() for k, r in self.regrade_records.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        if data.get("schema") != PLAN_SCHEMA:
            raise StoreError(
                f"the controller sent a plan of another format ({data.get('schema')!r}); "
                "the controller and its workers must run the same pytest-agenteval"
            )
        rows = (IndexRow(*_row_values(values)) for values in data["rows"])
        return cls(
            {row.key.plan_key: row for row in rows},
            data["rerun_errors"],
            data["rerun_all"],
            {k: AttemptRecord.from_json(r) for k, r in data["regrade_records"].items()},
        )


_ROW_FIELDS = tuple(f.name for f in fields(IndexRow))


def _row_values(values: list[Any]) -> list[Any]:
    """The key and the tags back from their JSON lists."""
    key, *rest = values
    tags = _ROW_FIELDS.index("tags")
    rest[tags - 1] = tuple(rest[tags - 1])
    return [AttemptId.from_json(key), *rest]


def make_plan(
    rows: Iterable[IndexRow],
    *,
    rerun_errors: bool,
    rerun_all: bool,
    fetch: Callable[[AttemptId], AttemptRecord | None] | None = None,
) -> Plan:
    """Snapshot the readable stored attempts of a run; `fetch` reads one's full record (the
    record source is given to the plan when it is made)."""
    return Plan({r.key.plan_key: r for r in rows}, rerun_errors, rerun_all, fetch=fetch)


def changed_parts(
    stored: Mapping[str, str] | None, now: Mapping[str, str]
) -> tuple[str, ...] | None:
    """The parts of a task (`TaskDef.part_digests`) whose digests differ between a stored
    record's and the task's now, in the task's order; None when the record kept none."""
    if stored is None:
        return None
    names = [*now, *(name for name in stored if name not in now)]
    return tuple(name for name in names if stored.get(name) != now.get(name))
