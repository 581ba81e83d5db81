"""The `EnvironmentKind` protocol: a kind of sandbox a task names as `sandbox: {KIND: {options}}`
(Docker is the built-in one; a plugin or conftest registers others through the hook
`pytest_agenteval_environment_kinds` or the entry point group
`pytest_agenteval.environment_kinds`), and what the dispatch hands a kind.

It lives in core, below every package that names it, so a kind needs no edit of the plugin:
it validates its options, makes one attempt's `Environment`, says whether programs run on
this machine, describes an environment for the record, has a session start and end, a
default and maximum number alive, and an orphan sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

if TYPE_CHECKING:
    from .environment import Environment
    from .identity import AttemptId
    from .model import SandboxSpec

ENTRY_POINTS = "pytest_agenteval.environment_kinds"
"""The entry point group of installed kinds: each names an `EnvironmentKind` (or a callable
returning one, or a list of them)."""

Keep = Literal["failed", "all"]


@dataclass(frozen=True)
class KindSession:
    """What a kind is told when one process's session starts using it."""

    label: str
    """The session, `host/pid/start time`: label your sandboxes with it, so an orphan sweep
    can tell a gone session's (see `sweep`)."""
    run_id: str | None
    """The run the session's attempts belong to (None: not known yet)."""
    max_alive: int | None
    """Sandboxes of this kind alive at once on this machine (`--agenteval-max-sandboxes`, else
    the kind's `default_alive`; never above its `max_alive`); None: no bound. The dispatch
    holds a slot per environment of a plugin kind from `create` until after its `teardown`."""
    keep: Keep | None = None
    """`--agenteval-keep-sandboxes`: keep the sandboxes of failed attempts, or of all."""
    hosts: tuple[str, ...] = ()
    """The machines the run sends sandboxes to (`--agenteval-docker-host`, for Docker); empty:
    the kind's own choice. A kind with one place only may ignore it."""


@dataclass(frozen=True)
class SandboxRequest:
    """One attempt's sandbox, as `EnvironmentKind.create` is asked for it."""

    key: AttemptId
    """The attempt (dataset, task id, variant, attempt)."""
    name: str
    """A name only this attempt of this session gets on any machine (for a container, pod)."""
    options: BaseModel
    """The kind's options from the task file, validated by its `options` model."""
    spec: SandboxSpec
    """The task's whole `sandbox:`: the common options (`workdir`, `env`, `network`,
    `memory`, `cpus`, `pids_limit`, `user`, `environment`) beside the kind's."""
    template: Path | None
    """The task's workspace folder on this machine, to copy in (None: start empty)."""
    dataset_root: Path
    """The dataset's folder, which relative paths in the options are read against."""
    max_bytes: int
    """Bytes of changed files `changed_files` may hold (the task's `artifacts: max_bytes`)."""
    prepared: Any = field(default=None, compare=False)
    """What the dataset made ahead for a built-in kind (Docker's `build:` folder and digest)."""
    slot: int | None = None
    """The slot of the kind's bound of alive sandboxes taken for this attempt ahead of its
    turn, for a built-in kind that frees it itself (Docker: once its container is gone)."""


@runtime_checkable
class EnvironmentKind(Protocol):
    """A kind of sandbox: one object per process, asked for every attempt of the tasks whose
    `sandbox:` names it. Failures of its own (no daemon, a build that failed) raise
    `EnvironmentUnavailable` with its phase: infrastructure errors a resume runs again."""

    name: str
    """The key a task writes: `sandbox: {NAME: {options}}`."""
    options: type[BaseModel]
    """Validates the options under `NAME:` (errors point at the task file's line and field)."""
    on_host: bool
    """Whether its programs run on this machine: a command agent's program is then looked up
    on this machine's PATH before any attempt (a container's is the image's)."""
    default_alive: int | None
    """Sandboxes alive at once when `--agenteval-max-sandboxes` is not set (None: no bound)."""
    max_alive: int | None
    """Never more alive at once than this, whatever the run asks (None: no bound)."""

    def start(self, session: KindSession) -> list[str]:
        """The session starts using this kind (before its first `create` in the process):
        sweep the orphans of sessions that are gone and say what went, a line each."""
        ...

    def create(self, request: SandboxRequest) -> Environment:
        """A fresh, started environment for one attempt holding a copy of its template."""
        ...

    def describe(self, environment: Environment) -> Mapping[str, Any] | None:
        """What the attempt's record keeps of its environment, as JSON (its `sandbox` field,
        with `kind` added): the image, the host, ... None: nothing."""
        ...

    def sweep(self, run_id: str | None) -> list[str]:
        """Remove the sandboxes of sessions that are gone (of the run `run_id` only, when
        given) and say what went, a line each: `agenteval repair` and a session whose xdist
        worker died call it."""
        ...

    def end(self) -> None:
        """The session is over: remove whatever of its sandboxes no teardown removed."""
        ...
