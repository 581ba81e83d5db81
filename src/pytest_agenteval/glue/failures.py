"""How an attempt's failure reads: a crash message that says what happened (pytest's short test
summary and JUnit's message show it), where an error happened on its first line, the user's
frames only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..core.text import printable
from ..execution.attempt import own_frames
from .internals import (
    ExceptionChainRepr,
    ExceptionRepr,
    ReprEntryNative,
    ReprExceptionInfo,
    ReprFileLocation,
    ReprTracebackNative,
    TerminalRepr,
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


def at_phase(longrepr: Any, where: str, heading: str | None) -> Any:
    """An attempt's error saying where it happened (`agent call`, `grading`, `budget`, ...):
    its crash message (the short test summary's and JUnit's `message`) and its first line
    begin with it, unless they say it already (`sandbox build: ...`, `over budget: ...`).
    pytest heads the error `ERROR at setup of` (the attempt runs in its item's setup, and
    `when` stays pytest's); a traceback gets a first line of its own: `<where>: <heading>:
    <crash message>`. With no `heading` the first line stays as it is."""
    crash = getattr(longrepr, "reprcrash", None)
    if not isinstance(longrepr, ExceptionRepr) or crash is None:
        return longrepr
    said = crash.message
    crash.message = _named(said, where)
    if heading is None:
        return longrepr
    chain = longrepr.chain if isinstance(longrepr, ExceptionChainRepr) else None
    first = chain[0][0] if chain else longrepr.reprtraceback  # the part printed first
    entries = list(first.reprentries)
    if isinstance(first, ReprTracebackNative) and entries:  # our text: it says what happened
        lines = list(entries[0].lines) or [""]
        entries[0] = ReprEntryNative([_named(lines[0], where), *lines[1:]])
    else:
        first_line = said.partition("\n")[0]  # the traceback below says the rest
        entries.insert(0, ReprEntryNative([f"{where}: {heading}: {first_line}\n"]))
    first.reprentries = entries
    return longrepr


def _named(text: str, where: str) -> str:
    """`text` beginning with where it happened (as it is when it says so already:
    `over budget: ...`, `sandbox build: ...`)."""
    return text if f"{where}: " in text.partition("\n")[0] else f"{where}: {text}"
