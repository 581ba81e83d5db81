"""Parsers of option values, shared by the pytest plugin and the `agenteval` command.

Each takes the text a user typed and returns the value, or raises ArgumentTypeError quoting the
bad value and saying what is allowed (argparse and pytest both show that message as it is).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

MAX_SECONDS = 7 * 24 * 3600.0
"""A timeout, backoff or interval, at most (a week), here or in a YAML file: a longer one is a
typo, and one near 1e308 overflows every deadline computed from it."""

N = TypeVar("N", int, float)


def _number(value: str, parse: Callable[[str], N], ok: Callable[[N], bool], what: str) -> N:
    """`value` parsed, when `ok` accepts it; else the error saying it is not `what`."""
    try:
        number = parse(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
    if not ok(number):  # NaN fails every comparison, so it is refused too
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
    return number


def positive_int(value: str) -> int:
    return _number(value, int, lambda n: n >= 1, "a positive integer")


def rate(value: str) -> float:
    return _number(value, float, lambda n: 0.0 <= n <= 1.0, "a rate between 0 and 1")


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


def keep_sandboxes(value: str) -> str:
    """`--agenteval-keep-sandboxes`: whose containers are kept instead of removed."""
    if value in ("failed", "all"):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not 'failed' or 'all'")


SANDBOX_ALLOWANCES = ("network", "unbounded")
"""What `--agenteval-sandbox-allow` lets a dataset's sandboxes lift: a network other than
`none`, no memory limit."""


def sandbox_allow(value: str) -> frozenset[str]:
    """`--agenteval-sandbox-allow`: what a dataset's sandboxes may lift (comma-separated)."""
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    unknown = sorted(names.difference(SANDBOX_ALLOWANCES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of {' and '.join(SANDBOX_ALLOWANCES)}"
        )
    return names


DOCKER_HOST_SCHEMES = ("unix://", "ssh://", "tcp://", "npipe://", "fd://")
"""The forms of a Docker daemon's address (`docker --host`)."""


HOST_CAP = "?max_sandboxes="
"""What follows a daemon's address to bound its containers alive (`unix:///a.sock?max_sandboxes=4`)."""


def docker_host(value: str) -> str:
    """`--agenteval-docker-host`: a daemon's address, as `docker --host` takes it, with
    `?max_sandboxes=N` after it to bound the containers alive on it."""
    try:
        split_docker_host(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def split_docker_host(entry: str) -> tuple[str, int | None]:
    """A host entry's daemon address and its own bound of containers alive (None: none).
    Its one option is `max_sandboxes`: another (a typo) is an error, never part of the
    address Docker is given."""
    url, query, options = entry.partition("?")
    if not url.startswith(DOCKER_HOST_SCHEMES) or len(url.split("://", 1)[1]) == 0:
        raise ValueError(
            f"{entry!r} is not a Docker daemon's address "
            "(unix:///run/docker.sock, ssh://user@host, tcp://host:2376)"
        )
    if not query:
        return url, None
    given = dict(part.partition("=")[::2] for part in re.split(r"[&?]", options))
    option = HOST_CAP.strip("?=")
    unknown = [name for name in given if name != option]
    if unknown:
        from .errors import did_you_mean  # on errors only: it imports pydantic

        meant = did_you_mean(unknown[0], (option,))
        raise ValueError(
            f"{entry!r}: unknown option {unknown[0]!r} after the address"
            + (f" ({meant})" if meant else "")
            + f"; the one option is `?{option}=N` (containers alive on that daemon)"
        )
    bound = given[option]
    if not bound.isdigit() or int(bound) < 1:
        raise ValueError(f"{entry!r}: max_sandboxes must be a whole number of at least 1")
    return url, int(bound)


MODEL_CACHE_MODES = ("on", "read", "replay", "off")
"""`--agenteval-model-cache`: read and write, read only, read and a miss is an error, off."""


def model_cache(value: str) -> str:
    """`--agenteval-model-cache`: how model calls use the cache."""
    if value in MODEL_CACHE_MODES:
        return value
    from .errors import did_you_mean  # on errors only: it imports pydantic

    meant = did_you_mean(value, MODEL_CACHE_MODES)
    raise argparse.ArgumentTypeError(
        f"{value!r} is not one of {', '.join(MODEL_CACHE_MODES)}" + (f" ({meant})" if meant else "")
    )


def age(value: str) -> float:
    """Seconds from an age such as `30d`, `12h`, `90m`, `45s` (`agenteval cache prune`)."""
    units = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    text = value.strip()
    scale = units.get(text[-1:])
    number = text[:-1] if scale is not None else text
    try:
        seconds = float(number) * (scale or 86400.0)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{value!r} is not an age such as 30d, 12h, 90m or 45s")
    return seconds


def agent_ref(value: str) -> str:
    where, sep, name = value.rpartition(":")
    if not (sep and where and name.replace("_", "a").replace(".", "a").isalnum()):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not module:function or path/to/file.py:function"
        )
    return value


def variant_name(value: str) -> str:
    """A variant's name as `variants:` in the manifest spells it."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a variant name (letters, digits, _ . -, as in `variants:`)"
        )
    return value


def run_id(value: str) -> str:
    if not value or len(value) > 64 or not all(c.isalnum() or c in "_.-" for c in value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a run id (letters, digits, _ . -)")
    return value


def positive_float(value: str) -> float:
    return _number(value, float, lambda n: 0 < n < math.inf, "a positive number")


def non_negative_float(value: str) -> float:
    what = f"a number of seconds from 0 to {MAX_SECONDS:.0f} (a week)"
    return _number(value, float, lambda n: 0 <= n <= MAX_SECONDS, what)


def seconds(value: str) -> float:
    what = f"a number of seconds above 0, at most {MAX_SECONDS:.0f} (a week)"
    return _number(value, float, lambda n: 0 < n <= MAX_SECONDS, what)


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
