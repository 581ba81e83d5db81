"""run.json's session entries: how each session of a run ended, as one typed model written and
read back by attribute (format `agenteval.run/1`: the keys and their order as they always were;
new fields optional)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class SessionEntry(BaseModel):
    """One session's end, as `sessions[i]` of run.json holds it."""

    model_config = ConfigDict(frozen=True, extra="allow")

    finished_at: float | None = None
    """When the session ended (seconds since the epoch)."""
    exitstatus: int | None = None
    """The exit status the run recorded (before the CI gate's verdict)."""
    counts: dict[str, int] = {}
    """Attempts the session ran, regraded and reused."""
    load_errors: list[dict[str, str]] = []
    """Task files that could not be loaded (dataset, label, path, message)."""
    agent_errors: list[dict[str, Any]] = []
    """Agents that could not be built: message and how many attempts did not start."""
    regression: Any = None
    """The regression gate's verdict as stored (read back as a RegressionSummary by
    `reporting.runref`, which says where a damaged one is)."""
    variant_regressions: dict[str, Any] | None = None
    """Each variant's regression verdict; absent for a run without variants or baseline."""
    merged: bool = False
    """The entry `agenteval merge` wrote for a merged run."""

    def to_json(self) -> dict[str, Any]:
        """The entry as run.json stores it: only the fields set, in the order they were."""
        return self.model_dump(exclude_unset=True)


def read_session(entry: dict[str, Any]) -> SessionEntry:
    """A stored entry; a field of an unexpected shape (a hand-edited `null`) reads as absent,
    as readers of run.json always took it."""
    try:
        return SessionEntry.model_validate(entry)
    except ValidationError as exc:
        bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        return SessionEntry.model_validate({k: v for k, v in entry.items() if k not in bad})
