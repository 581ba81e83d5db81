"""The docker CLI as the Docker sandbox calls it: argv lists, never a command string, with
an explicit environment, and a daemon that cannot be reached said as such.

Why the CLI and not the `docker` package: the CLI is what every Docker install has, speaks
to whatever daemon the user configured (contexts, `DOCKER_HOST`, rootless) with no extra
dependency, and its `exec` streams stdin/stdout exactly like a local program, so the timeout
and output handling of `run_program` apply unchanged.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from .sandboxes import EnvironmentUnavailable

DOCKER_TIMEOUT = 120.0
"""Seconds a docker command other than an attempt's program may take."""
DAEMON_GONE = ("Cannot connect to the Docker daemon", "error during connect")
"""What the docker CLI says when its daemon does not answer (not running, died mid-call)."""


class SandboxUnavailable(EnvironmentUnavailable):
    """The Docker sandbox could not be had or failed under its attempt: no docker command, a
    daemon that does not answer or died, a container docker refused or lost."""


def cli(host: str | None = None) -> list[str]:
    """The docker command speaking to `host` (`unix:///run/a.sock`, `ssh://ci@build-2`;
    None: the daemon the user configured, by `DOCKER_HOST` or the current context)."""
    return ["docker"] if host is None else ["docker", "--host", host]


def docker(
    args: Sequence[str], *, input: bytes | None = None, host: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the docker CLI (`args` after `docker`) against `host`; a missing CLI or a daemon
    that cannot be reached raises SandboxUnavailable, any other failure is the caller's."""
    try:
        done = subprocess.run(
            [*cli(host), *args],
            input=input,
            capture_output=True,
            timeout=DOCKER_TIMEOUT,
            env=docker_env(),
        )
    except FileNotFoundError:
        raise SandboxUnavailable(
            "sandbox: the docker command is not installed",
            detail="install Docker (Debian: apt-get install docker.io) or remove `sandbox:`",
        ) from None
    if done.returncode != 0:
        unreachable(done.stderr.decode(errors="replace"))
    return done


def checked(
    args: Sequence[str], what: str, *, input: bytes | None = None, host: str | None = None
) -> bytes:
    """The stdout of a docker command that must succeed; its failure is SandboxUnavailable
    saying `what` failed."""
    done = docker(args, input=input, host=host)
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"sandbox: {what} failed", detail=done.stderr.decode(errors="replace").strip()
        )
    return done.stdout


class DaemonGone(SandboxUnavailable):
    """The daemon does not answer (not running, died, its socket gone): placement passes it
    over for a while (`DockerSession.mark_down`)."""


def unreachable(said: str) -> None:
    """Raise DaemonGone when a failed docker command says its daemon is gone."""
    if any(words in said for words in DAEMON_GONE):
        raise DaemonGone(
            "sandbox: the Docker daemon is not running",
            detail="start it (`sudo systemctl start docker`, or as root `dockerd &`), "
            "then run again: " + said.strip(),
        )


def docker_env() -> dict[str, str]:
    """An explicit copy of the variables: attempts in flight start docker from pool threads
    while pytest's main thread rewrites the C environment (see `run_program`)."""
    return os.environ.copy()


def remove_now(names: list[str], host: str | None = None) -> None:
    """`docker rm -f` of `names`; with its daemon gone they are left to the orphan sweep."""
    removed(names, host)


def removed(names: list[str], host: str | None = None) -> bool:
    """Whether `docker rm -f` of `names` left none of them (a daemon that does not answer,
    or refuses: False)."""
    try:
        done = docker(["rm", "-f", *names], host=host)
    except (SandboxUnavailable, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 or b"No such container" in done.stderr


def image_id(image: str, host: str | None = None) -> str | None:
    """The id of the image `image` names, when the daemon has it."""
    done = docker(["image", "inspect", "--format", "{{.Id}}", image], host=host)
    return done.stdout.decode().strip() if done.returncode == 0 else None
