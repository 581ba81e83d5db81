"""Docker as an `EnvironmentKind`: the built-in kind a task names as `sandbox: {docker: {image:
NAME} | {build: DIR}}`, dispatched like any plugin's (`environment.py`'s `Environments`).

What a container is and how the session owns them stays in `docker.py`; this module only
answers the protocol with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..core.environment import Environment
from ..core.kinds import KindSession, SandboxRequest
from ..core.model import DockerImage
from .docker import DockerEnvironment, DockerSession, remove_orphans
from .environment import SandboxPolicy


class DockerKind:
    """A Docker container per attempt, on the daemon the `docker` CLI reaches."""

    name: str = "docker"
    options: type[BaseModel] = DockerImage
    on_host: bool = False
    default_alive: int | None = None
    max_alive: int | None = None

    def __init__(self) -> None:
        self.session: DockerSession | None = None

    def start(self, session: KindSession) -> list[str]:
        docker = DockerSession(session.label, SandboxPolicy(session.keep, session.max_alive))
        docker.run_id = session.run_id
        self.session = docker
        return [swept.line() for swept in docker.start()]

    def create(self, request: SandboxRequest) -> Environment:
        assert self.session is not None, "start comes first"
        return DockerEnvironment(
            request.spec,
            request.name,
            request.template,
            self.session,
            request.prepared,
            request.max_bytes,
        )

    def describe(self, environment: Environment) -> Mapping[str, Any] | None:
        image = environment.image_id if isinstance(environment, DockerEnvironment) else None
        return {"image": image} if image is not None else None

    def sweep(self, run_id: str | None) -> list[str]:
        swept = remove_orphans(run_id)
        return [swept.line()] if swept.names else []

    def end(self) -> None:
        if self.session is not None:
            self.session.close()
