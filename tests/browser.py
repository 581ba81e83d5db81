"""Headless Chromium from Debian's package, for pages the project writes (reports, docs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install -y chromium; .ci/run installs it)",
)


class Browser:
    """Headless Chromium with a fresh profile: the DOM after the page's script ran, console
    messages, screenshots."""

    FLAGS = (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    )

    def __init__(self, profile: Path) -> None:
        self.profile = profile

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert CHROMIUM is not None
        argv = [CHROMIUM, *self.FLAGS, f"--user-data-dir={self.profile}", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    def dom(self, page: Path, fragment: str = "", *wait: str) -> tuple[str, list[str]]:
        """The serialized DOM once the page loaded, and the console's messages."""
        done = self._run(*wait, "--dump-dom", page.resolve().as_uri() + fragment)
        assert done.returncode == 0, done.stderr[-2000:]
        console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
        return done.stdout, console

    def screenshot(self, page: Path, out: Path, fragment: str = "") -> Path:
        uri = page.resolve().as_uri() + fragment
        self._run(f"--screenshot={out}", "--window-size=1400,1600", uri)
        assert out.exists() and out.stat().st_size > 0
        return out
