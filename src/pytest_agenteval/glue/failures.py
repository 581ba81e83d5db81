"""How an attempt's failure reads: a crash message that says what happened (pytest's short test
summary and JUnit show it), the user's frames only, and JUnit error messages without pytest's
`failed on setup with` wrapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..core.text import clean_text, printable, xml_safe
from ..execution.attempt import own_frames
from .internals import (
    ExceptionRepr,
    ReprExceptionInfo,
    ReprFileLocation,
    ReprTracebackNative,
    TerminalRepr,
    junit_error_element,
    shorten_message,
)


def text_repr(text: str, message: str, path: Path, line: int) -> ReprExceptionInfo:
    """A failure that prints `text` as it is and whose crash message is `message`.

    Made of pytest's own parts, so it keeps its message on the way from an xdist worker (a
    plain string would arrive without one, and pytest would show its first line instead).
    """
    lines = [f"{row}\n" for row in printable(text).splitlines()]
    crash = ReprFileLocation(str(path), line, printable(message))
    return ReprExceptionInfo(reprtraceback=ReprTracebackNative(lines), reprcrash=crash)


def as_crash_repr(longrepr: Any, path: Path, line: int) -> Any:
    """A failure report's longrepr with a crash message: text becomes a `text_repr` whose
    message is its first line."""
    if isinstance(longrepr, str):
        return text_repr(longrepr, longrepr.partition("\n")[0], path, line)
    return longrepr


def encodable(longrepr: Any, excinfo: pytest.ExceptionInfo[BaseException] | None) -> Any:
    """The failure with control characters and lone surrogates escaped (`printable`), when
    the exception (an agent's, a grader's reason) holds some: a terminal would obey the
    escape sequences an agent wrote, and neither it nor xdist's channel to the controller can
    carry a lone surrogate."""
    if excinfo is None or printable(str(excinfo.value)) == str(excinfo.value):
        return longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if not isinstance(longrepr, ExceptionRepr) or crash is None:
        return printable(str(longrepr))
    return text_repr(str(longrepr), crash.message, Path(crash.path), crash.lineno)


def user_traceback(excinfo: pytest.ExceptionInfo[BaseException]) -> TerminalRepr:
    """The exception with the user's frames only (all of them when none is the user's)."""
    return excinfo.getrepr(
        style="long", funcargs=False, tbfilter=_user_frames, truncate_locals=True
    )


def _user_frames(excinfo: pytest.ExceptionInfo[BaseException]) -> Any:
    kept = {id(entry) for entry in own_frames(list(excinfo.traceback), lambda e: str(e.path))}
    return excinfo.traceback.filter(lambda entry: id(entry) in kept)


def junit_error_message(config: pytest.Config, report: pytest.TestReport) -> None:
    """pytest's --junitxml writes a setup error's message as `failed on setup with "..."`;
    an attempt's error says what happened instead (its crash message, e.g. `RuntimeError: x`,
    or the first line of a worker crash's report).

    Called right after the junitxml plugin saw the report: it sets the message of the
    `<error>` element it just added."""
    element = junit_error_element(config, report) if report.longrepr is not None else None
    if element is None:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr).partition("\n")[0]
    element.set("message", xml_safe(shorten_message(clean_text(message))))
