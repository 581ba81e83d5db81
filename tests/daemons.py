"""A Docker daemon of a test's own: started on its own socket, data root, exec root and pid
file (never the shared default daemon), killed and started again as the test says, and
removed with everything it made."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

START_SECONDS = 60.0
"""How long a daemon may take to answer after it starts (a hang guard, not a timing)."""
DRIVERS = ("overlay2", "vfs")
"""Storage drivers tried in turn: overlay2 (Docker's default, faster), vfs (works anywhere)."""


class Daemon:
    """One dockerd of the test's: `host` is its `DOCKER_HOST`."""

    def __init__(self) -> None:
        # a short path: a unix socket's path is at most 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="ae-dd-", dir="/tmp"))
        self.host = f"unix://{self.root}/docker.sock"
        self.process: subprocess.Popen[bytes] | None = None
        self.driver: str | None = None
        """The storage driver it answered with (kept across a restart)."""

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The docker CLI against this daemon."""
        return subprocess.run(
            ["docker", *args], env=self.env(), capture_output=True, text=True, check=check
        )

    def start(self) -> Daemon:
        """Start (or start again) the daemon: with overlay2 where this kernel allows it (as
        `.ci/dockerd` does), else vfs; a restart keeps the driver its data was made with."""
        for driver in [self.driver] if self.driver else list(DRIVERS):
            if self._started(driver):
                self.driver = driver
                return self
        said = (self.root / "dockerd.log").read_text().splitlines()[-8:]
        raise RuntimeError("dockerd did not start:\n" + "\n".join(said))

    def _started(self, driver: str) -> bool:
        """Whether dockerd with `driver` answers (one that exits has refused the driver)."""
        root = self.root
        log = (root / "dockerd.log").open("ab")
        self.process = subprocess.Popen(
            [
                *("dockerd", "--iptables=false", "--bridge=none", f"--storage-driver={driver}"),
                *("--host", self.host, "--data-root", str(root / "data")),
                *("--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid")),
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_SECONDS
        while self.docker("info", check=False).returncode != 0:
            if self.process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait(30)
                return False
            time.sleep(0.2)
        return True

    def kill(self) -> None:
        """kill -9 of the daemon, as a crash would (its containers' shims live on)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)
        deadline = time.monotonic() + START_SECONDS  # its containerd follows it: wait for that
        while any(b"containerd.toml" in cmd for cmd in self._left_behind().values()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        # what the dead containerd left would make the next start wait for it, in vain
        for stale in (self.root / "exec/containerd").glob("containerd*"):
            if stale.suffix != ".toml":
                stale.unlink(missing_ok=True)

    def close(self) -> None:
        """Remove every container (a killed daemon is started again for it: it stops the
        containers it finds), stop the daemon, then what is left of it: its mounts, its
        folder, any process still naming its folders."""
        if self.process is not None and self.process.poll() is not None:
            with contextlib.suppress(RuntimeError):
                self.start()
        if self.process is not None and self.process.poll() is None:
            listed = self.docker("ps", "-aq", check=False).stdout.split()
            if listed:
                self.docker("rm", "-f", *listed, check=False)
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(30)
        for pid in self._left_behind():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mounts = Path("/proc/mounts").read_text().splitlines()
        for point in sorted((m.split()[1] for m in mounts if str(self.root) in m), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _left_behind(self) -> dict[int, bytes]:
        """The processes (its containerd, shims) whose command line names this daemon's
        folders, by pid: ours to end."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                command = (entry / "cmdline").read_bytes()
                if str(self.root).encode() in command:
                    found[int(entry.name)] = command
        return found


def own_daemon() -> Daemon:
    """A started daemon of the test's own; skipped (failed under `CI=true`) when this
    process cannot start one (it must be root, with dockerd installed)."""
    why = None
    if os.geteuid() != 0:
        why = "starting a second Docker daemon needs root"
    elif shutil.which("dockerd") is None:
        why = "dockerd is not installed"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: under CI=true the daemon tests must run")
        pytest.skip(why)
    return Daemon().start()


def build_busybox(daemon: Daemon, folder: Path, tag: str) -> str:
    """The busybox test image (`FROM scratch`, Debian's busybox-static) built in `daemon`."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox-static is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(busybox, folder / "busybox")
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    daemon.docker("build", "-q", "-t", tag, str(folder))
    return tag
