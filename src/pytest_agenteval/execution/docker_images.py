"""The images Docker sandboxes start from, made sure of once per process and daemon: present,
pulled, or built from a `build:` folder and tagged by that folder's content digest, so later
runs and other workers find it built (one process of the machine builds a digest on a daemon
at a time, under a lock file of that daemon's; each daemon builds its own). A failure is
every attempt's of that image, its whole story (what to do, the build's log) told at the
first of them only."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path

from ..core.model import DockerImage
from ..sources.dataset import BuildFolder
from ..store.locks import locked
from .docker_cli import cli, docker_env, image_id, unreachable
from .sandboxes import BuildFailed, machine_folder

PULL_TIMEOUT = 300.0
BUILD_TIMEOUT = 1800.0
BUILD_LOG_LINES = 20
"""Lines of a failed build's log an attempt's error shows."""
BUILT = "agenteval-build"
"""Repository of images built from `build:` folders, tagged by the folder's content digest."""


class DockerImages:
    """The images one process's sandboxes start from on one daemon (`host`; None: the
    default), each made sure of once."""

    def __init__(self, host: str | None = None) -> None:
        self.host = host
        self._known: dict[str, tuple[str, str] | BuildFailed] = {}
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, docker: DockerImage, build: BuildFolder | None = None) -> tuple[str, str]:
        """The name and id of the image to start from, pulled or built first when needed;
        raises BuildFailed: its whole story (what to do, the build's log) the first time,
        a reference to it afterwards."""
        key = docker.image if build is None else f"{BUILT}:{build.digest or build.folder}"
        assert key is not None
        with self._lock:
            if key not in self._known:
                host = self.host
                self._known[key] = _find(key, host) if build is None else _build(key, build, host)
            found = self._known[key]
            said = key in self._said
            self._said.add(key)
        if isinstance(found, BuildFailed):
            raise found.again() if said else found
        return found


def _find(image: str, host: str | None) -> tuple[str, str] | BuildFailed:
    """A named image: present, else pulled."""
    present = image_id(image, host)
    if present is not None:
        return image, present
    try:
        pulled = subprocess.run(
            [*cli(host), "pull", "--quiet", image],
            capture_output=True,
            timeout=PULL_TIMEOUT,
            env=docker_env(),
        )
    except subprocess.TimeoutExpired:
        why = f"the pull gave no answer in {PULL_TIMEOUT:g}s"
    else:
        pulled_id = image_id(image, host) if pulled.returncode == 0 else None
        if pulled_id is not None:
            return image, pulled_id
        why = pulled.stderr.decode(errors="replace").strip()
        unreachable(why)  # the daemon, not the image: a sandbox error
    return BuildFailed(
        f"sandbox build: the image {image!r} is not present and cannot be pulled",
        detail=f"build or load it (`docker build -t {image} DIR`, `docker load`), "
        f"or name one `docker images` lists: {why}",
    )


def _build(tag: str, build: BuildFolder, host: str | None) -> tuple[str, str] | BuildFailed:
    """Build the folder as `tag` unless an image of that tag (that content) exists; one
    process of the machine builds a tag at a time, the others then find it built. A folder
    that cannot be read has no tag: it is never built, nor any image of a tag used."""
    folder = build.folder
    if build.digest is None:
        return BuildFailed(
            f"sandbox build: the build folder {folder} cannot be read: {build.problem}",
            detail="make it a folder of plain files (a Dockerfile and what it copies)",
        )
    daemon = "" if host is None else "-" + hashlib.sha256(host.encode()).hexdigest()[:12]
    with locked(machine_folder() / f"build-{build.digest}{daemon}.lock"):
        present = image_id(tag, host)
        if present is not None:
            return tag, present
        failed = _run_build(tag, folder, host)
        built = image_id(tag, host) if failed is None else None
    if built is None:
        return failed or BuildFailed(f"sandbox build: {folder} built no image {tag}")
    return tag, built


def _run_build(tag: str, folder: Path, host: str | None) -> BuildFailed | None:
    """`docker build` of `folder`; the failure, or None. A failed build leaves no container."""
    if not (folder / "Dockerfile").is_file():
        return BuildFailed(
            f"sandbox build: no Dockerfile in {folder}",
            detail="`build:` names a folder holding a Dockerfile, relative to the dataset root",
        )
    try:
        done = subprocess.run(
            [*cli(host), "build", "--force-rm", "--tag", tag, str(folder)],
            capture_output=True,
            timeout=BUILD_TIMEOUT,
            env=docker_env(),
        )
    except subprocess.TimeoutExpired:
        return BuildFailed(f"sandbox build: {folder} took over {BUILD_TIMEOUT:g}s")
    if done.returncode == 0:
        return None
    unreachable(done.stderr.decode(errors="replace"))  # the daemon, not the Dockerfile
    log = (done.stdout + done.stderr).decode(errors="replace").strip().splitlines()
    return BuildFailed(
        f"sandbox build: building the image of {folder} failed (exit status {done.returncode})",
        detail="\n".join(log[-BUILD_LOG_LINES:]),
    )
