"""The names a `-m` expression mentions that no task tag nor marker answers to, with a hint.

pytest's `-m` takes any name and quietly selects nothing for a misspelt one; a task tag is a
marker only where the tasks are collected (never in an xdist controller), so the hint is made
from the tags of the task files as read, the same in every process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..core.errors import did_you_mean

_ARGUMENTS = re.compile(r"(?<=[\w\]])\([^()]*\)")
"""`mark(key=value)`: the arguments right after a marker's name, which name no marker (a
parenthesis after a space or an operator groups)."""
_NAME = re.compile(r"[\w:+\-.\[\]\\/]+")
"""A name as pytest's expression scanner reads one."""
_WORDS = frozenset({"and", "or", "not"})


def expression_names(markexpr: str) -> list[str]:
    """The marker names `markexpr` mentions, in order, each once."""
    names = _NAME.findall(_ARGUMENTS.sub(" ", markexpr))
    return list(dict.fromkeys(n for n in names if n not in _WORDS))


def marker_name(line: str) -> str:
    """The name of a `markers` ini line (`slow(reason): takes long` is `slow`)."""
    return line.split(":", 1)[0].split("(", 1)[0].strip()


def unknown_tag_lines(markexpr: str, tags: Iterable[str], markers: Iterable[str]) -> list[str]:
    """One line per name of `markexpr` that is neither a task tag nor a marker, with the
    closest tag (or the dataset's tags when none is close)."""
    tags = sorted(set(tags))
    known = set(tags) | set(markers)
    lines = []
    for name in expression_names(markexpr):
        if name in known:
            continue
        hint = did_you_mean(name, tags) or (
            f"the tasks' tags: {', '.join(tags)}" if tags else "no task has tags"
        )
        lines.append(f"agenteval: -m names {name!r}, which is no task's tag nor a marker; {hint}")
    return lines
