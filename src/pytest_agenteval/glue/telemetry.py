"""The end of a session's OpenTelemetry export: each process flushes its spans when its
session finishes (for a bounded time, `reporting/otel.py`), an xdist worker hands what it could
not send to the controller, and the controller says it in one line before the summary, so
nothing of the exporter is printed after it."""

from __future__ import annotations

from typing import Any

import pytest

from ..reporting.otel import Telemetry, unsent_line

UNSENT = "agenteval_otel"
"""workeroutput key: what a worker's export could not send (`Telemetry.close`'s note)."""


class TelemetryEnd:
    """In every process: closes the exporter at the session's end; the controller (or the
    lone process) says what its processes could not send."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.notes: list[dict[str, Any]] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        note = getattr(node, "workeroutput", {}).get(UNSENT)
        if note:
            self.notes.append(note)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        note = self.telemetry.close()
        config = session.config
        if hasattr(config, "workerinput"):
            config.workeroutput[UNSENT] = note  # type: ignore[attr-defined]
        else:
            self.notes.append(note)

    def close(self) -> None:
        """Close the exporter (for a session that never finished; a second close is free)."""
        self.telemetry.close()

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        line = unsent_line(self.notes)
        if line is not None:
            terminalreporter.write_line(line, yellow=True)
