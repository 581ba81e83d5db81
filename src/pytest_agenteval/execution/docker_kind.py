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
from ..core.model import DockerImage, SandboxSpec
from ..core.options import split_docker_host
from .docker import DockerEnvironment, DockerSession, known_hosts, remove_orphans
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
        policy = SandboxPolicy(session.keep, session.max_alive, hosts=session.hosts)
        docker = DockerSession(session.label, policy)
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

    def reserve(self, spec: SandboxSpec, name: str) -> bool:
        """Take every slot the container `name` of the task will hold (the machine's, its
        daemon's) now, all or none, for an attempt admitted ahead of its turn; False: not
        now."""
        assert self.session is not None, "start comes first"
        return self.session.reserve(name, self.session.hosts_for(spec))

    def unreserve(self, name: str) -> None:
        """Give back what `reserve` took for the container `name` if it was never made."""
        if self.session is not None:
            self.session.unreserve(name)

    @staticmethod
    def bounded(spec: SandboxSpec, hosts: tuple[str, ...]) -> bool:
        """Whether the task's containers hold a daemon's slot before they are made, when the
        run names `hosts` (`--agenteval-docker-host`): a daemon with its own bound."""
        entries = hosts or (spec.docker.hosts if spec.docker is not None else [])
        return any(split_docker_host(entry)[1] is not None for entry in entries)

    def describe(self, environment: Environment) -> Mapping[str, Any] | None:
        if not isinstance(environment, DockerEnvironment) or environment.image_id is None:
            return None
        host = environment.sandbox_host  # when the run or task names its daemons
        return {"image": environment.image_id, **({"host": host} if host else {})}

    def sweep(self, run_id: str | None) -> list[str]:
        named = self.session.policy.hosts if self.session is not None else ()
        swept = remove_orphans(run_id, hosts=[*known_hosts(), *named])  # every daemon used
        return [swept.line()] if swept.names else []

    def end(self) -> None:
        if self.session is not None:
            self.session.close()
