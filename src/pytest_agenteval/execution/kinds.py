"""The registry of sandbox kinds: Docker built in, then the kinds installed packages name in the
entry point group `pytest_agenteval.environment_kinds`, then those plugins and conftests return
from `pytest_agenteval_environment_kinds` (a later kind of the same name replaces an earlier
one, so a plugin can replace Docker)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from ..core.errors import AgentError
from ..core.kinds import ENTRY_POINTS, EnvironmentKind


class KindError(AgentError):
    """A kind a plugin gave is not an `EnvironmentKind` (a usage error naming where from)."""


def builtin_kinds() -> dict[str, EnvironmentKind]:
    """The kinds every run knows: `docker`."""
    from .docker_kind import DockerKind

    return {"docker": DockerKind()}


def installed_kinds() -> list[tuple[str, Any]]:
    """What each entry point of the group names, with where it came from."""
    found = []
    for point in entry_points(group=ENTRY_POINTS):
        try:
            loaded = point.load()
        except Exception as exc:  # a broken package must say which it is
            raise KindError(
                f"the sandbox kind entry point {point.name!r} ({point.value}) cannot be "
                f"loaded: {type(exc).__name__}: {exc}"
            ) from None
        found.append((f"entry point {point.name!r} ({point.value})", loaded))
    return found


def registry(answers: Iterable[tuple[str, Any]]) -> dict[str, EnvironmentKind]:
    """The built-in kinds, then each answer's (an `EnvironmentKind`, a list of them, or a
    callable returning either, as an entry point may name a class), by name."""
    kinds = builtin_kinds()
    for source, answer in answers:
        for kind in _kinds_in(answer, source):
            kinds[kind.name] = kind
    return kinds


def _kinds_in(answer: Any, source: str) -> list[EnvironmentKind]:
    if answer is None:
        return []
    if isinstance(answer, type) or (callable(answer) and not isinstance(answer, EnvironmentKind)):
        answer = answer()
    many = list(answer) if isinstance(answer, (list, tuple)) else [answer]
    for kind in many:
        wrong = isinstance(kind, type) or not isinstance(kind, EnvironmentKind)
        if wrong or not isinstance(kind.name, str):
            raise KindError(
                f"{source} gave {type(kind).__name__}, not a pytest_agenteval.EnvironmentKind",
                detail="a kind has `name`, `options` (a pydantic model), `on_host`, "
                "`default_alive`, `max_alive`, and `start`, `create`, `describe`, `sweep`, "
                "`end` (see docs/guides/sandbox-kinds.md)",
            )
    return many
