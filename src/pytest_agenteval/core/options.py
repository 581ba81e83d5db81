"""Parsers of option values, shared by the pytest plugin and the `agenteval` command.

Each takes the text a user typed and returns the value, or raises ArgumentTypeError quoting the
bad value and saying what is allowed (argparse and pytest both show that message as it is).
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive integer")
    return number


def rate(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a rate between 0 and 1")
    return number


def pass_ks(value: str) -> list[int]:
    try:
        return sorted({positive_int(part.strip()) for part in value.split(",") if part.strip()})
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of positive integers, e.g. 1,5,10"
        ) from None


def task_rule(value: str) -> str:
    if value in ("any", "all"):
        return value
    try:
        if 0.0 < float(value) <= 1.0:
            return value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{value!r} is not 'any', 'all' or a pass rate in (0, 1]")


def agent_ref(value: str) -> str:
    where, sep, name = value.rpartition(":")
    if not (sep and where and name.replace("_", "a").replace(".", "a").isalnum()):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not module:function or path/to/file.py:function"
        )
    return value


def run_id(value: str) -> str:
    if not value or len(value) > 64 or not all(c.isalnum() or c in "_.-" for c in value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a run id (letters, digits, _ . -)")
    return value


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number")
    return number


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds >= 0")
    return number


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def deadline_at(value: str, now: float) -> float:
    """An absolute time (epoch seconds) from a duration counted from `now` (`90`, `45s`,
    `30m`, `1h30m`) or an ISO time (`2026-12-01T18:00`, local time unless it names a zone)."""
    text = value.strip()
    match = _DURATION.fullmatch(text)
    if text and match and any(match.groups()):
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        return now + hours * 3600 + minutes * 60 + seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a duration (90, 45s, 30m, 1h30m) nor an ISO time "
            "(2026-12-01T18:00, 2026-12-01T18:00+01:00)"
        ) from None


def deadline(value: str) -> str:
    """A valid `--agenteval-deadline` value, kept as written (each session measures from its
    own start)."""
    deadline_at(value, 0.0)
    return value
