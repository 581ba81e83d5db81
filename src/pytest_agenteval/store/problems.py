"""Damage found in the run store: where it is, what is wrong, and what happens because of it.

Store damage is never fatal and never silent: readers skip what they cannot read and say so
here; the controller shows the list at the end of the session and in summary.json, the
`agenteval` command on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import display_path

RUNS_AGAIN = "that attempt runs again"
RUN_SKIPPED = "run skipped"
REINDEXED = "re-indexed from its intact record in records.jsonl: nothing runs again"
NOT_READ = "not read"
"""A stored artifact path that leads outside its attempt's folder (or to no regular file)."""
OUTPUT_LOST = "its output and transcript are lost; its verdict in index.jsonl still counts"


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """One piece of store damage, as users and summary.json see it."""

    where: str
    """`path:line` (or just the path) of the damage."""
    problem: str
    """What is wrong there."""
    effect: str = RUNS_AGAIN
    """What happens because of it: "that attempt runs again", "run skipped"..."""

    def render(self) -> str:
        path, sep, line = self.where.rpartition(":")
        where = (
            f"{display_path(path)}:{line}" if sep and line.isdigit() else display_path(self.where)
        )
        return f"{where}: {self.problem}; {self.effect}"

    def __str__(self) -> str:
        return self.render()

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "problem": self.problem, "effect": self.effect}
