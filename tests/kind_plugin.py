"""A sandbox kind written against the public protocol only, as a team's plugin would be: each
attempt's programs run in a subprocess in a private folder of its own (under the kind's
`root`), and no local path is given to agents (`local_path` is None, so a Python agent works
through `task.environment`). Every call of the protocol is logged to `root/kind.log`, one
JSON line each, for the tests to read.

Registered from a conftest.py by `pytest_agenteval_environment_kinds`; nothing in the
plugin's source knows it.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pytest_agenteval import (
    ChangedFile,
    Environment,
    EnvironmentUnavailable,
    ExecResult,
    KindSession,
    SandboxRequest,
)


class FolderOptions(BaseModel):
    """`sandbox: {folder: {label: NAME, fail: build|start}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = "private"
    """Said in the record's description."""
    fail: Literal["build", "start"] | None = None
    """Make no environment: raise EnvironmentUnavailable of this phase."""


class FolderKind:
    """Private folders on this machine, one per attempt."""

    name = "folder"
    options = FolderOptions
    on_host = True
    default_alive: int | None = None

    def __init__(self, root: Path, max_alive: int | None = None) -> None:
        self.root = root
        self.max_alive = max_alive
        self.session: KindSession | None = None

    def log(self, *entry: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "kind.log").open("a") as f:
            f.write(json.dumps([*entry, os.getpid()]) + "\n")

    def start(self, session: KindSession) -> list[str]:
        self.session = session
        self.log("start", session.label, session.run_id, session.max_alive)
        return self.sweep(None)

    def create(self, request: SandboxRequest) -> Environment:
        assert self.session is not None
        options = request.options
        assert isinstance(options, FolderOptions)
        self.log("create", request.key.to_json(), request.name, options.label)
        if options.fail is not None:
            raise EnvironmentUnavailable(
                f"folder: asked to fail at {options.fail}",
                detail="as the task says",
                phase=options.fail,
            )
        home = Path(tempfile.mkdtemp(prefix=f"{request.name}-", dir=self._box()))
        (home / "session").write_text(self.session.label)
        return FolderEnvironment(home, request, self)

    def describe(self, environment: Environment) -> Mapping[str, Any] | None:
        assert isinstance(environment, FolderEnvironment)
        return {"label": environment.label, "folder": environment.home.name}

    def sweep(self, run_id: str | None) -> list[str]:
        gone = []
        for home in sorted(self._box().iterdir()):
            label = (home / "session").read_text() if (home / "session").exists() else ""
            if label and not _alive(label):
                shutil.rmtree(home, ignore_errors=True)
                gone.append(home.name)
        self.log("sweep", run_id, gone)
        return [f"removed {len(gone)} private folders of gone sessions"] if gone else []

    def end(self) -> None:
        self.log("end")

    def _box(self) -> Path:
        box = self.root / "box"
        box.mkdir(parents=True, exist_ok=True)
        return box


def _alive(label: str) -> bool:
    host, pid, _ = label.split("/", 2)
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    return True


class FolderEnvironment:
    """One attempt's private folder: `work/` holds the files, programs run there."""

    def __init__(self, home: Path, request: SandboxRequest, kind: FolderKind) -> None:
        self.home = home
        self.work = home / "work"
        self.template = request.template
        self.env = dict(request.spec.env)
        self.label = request.options.label  # type: ignore[attr-defined]
        self.kind = kind
        self.key = request.key.to_json()
        if self.template is not None:
            shutil.copytree(self.template, self.work, symlinks=True)
        else:
            self.work.mkdir()

    @property
    def workdir(self) -> str:
        return str(self.work)

    @property
    def python(self) -> str:
        return sys.executable

    @property
    def local_path(self) -> None:
        return None

    @property
    def where(self) -> str:
        return ""

    def exec(
        self,
        argv: Sequence[str],
        input: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        self.kind.log("exec", self.key, list(argv))
        variables = {**os.environ, **self.env, **(env or {})}
        try:
            done = subprocess.run(
                list(argv),
                cwd=self.work,
                input=input,
                capture_output=True,
                timeout=timeout,
                env=variables,
            )
        except subprocess.TimeoutExpired as exc:
            return ExecResult(-9, (exc.stdout or b"").decode(), (exc.stderr or b"").decode(), True)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        return ExecResult(done.returncode, out, err, False)

    def read_file(self, path: str) -> bytes:
        return self._inside(path).read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def changed_files(self) -> list[ChangedFile]:
        before = _files(self.template) if self.template is not None else {}
        now = _files(self.work)
        found = [ChangedFile(rel, "deleted", 0) for rel in before.keys() - now.keys()]
        for rel, path in now.items():
            if rel not in before:
                found.append(ChangedFile(rel, "added", path.stat().st_size))
            elif not filecmp.cmp(before[rel], path, shallow=False):
                found.append(ChangedFile(rel, "modified", path.stat().st_size))
        return sorted(found, key=lambda c: c.path)

    def teardown(self, keep: bool) -> None:
        self.kind.log("teardown", self.key, keep)
        shutil.rmtree(self.home, ignore_errors=True)

    def _inside(self, path: str) -> Path:
        rel = PurePosixPath(path)
        if rel.is_absolute():
            rel = PurePosixPath(os.path.relpath(rel, self.work))
        if ".." in rel.parts:
            raise PermissionError(f"{path!r} is outside the attempt's workspace")
        return self.work / rel


def _files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


def entry_kind() -> FolderKind:
    """What the entry point of the group names: the kind, rooted at `$KIND_ROOT`."""
    return FolderKind(Path(os.environ["KIND_ROOT"]))


CONFTEST = """
from pathlib import Path

from kind_plugin import FolderKind

MAX_ALIVE = None


def pytest_agenteval_environment_kinds():
    return [FolderKind(Path(__file__).parent / "private", MAX_ALIVE)]
"""
"""The conftest.py a pytester run registers the kind with."""
