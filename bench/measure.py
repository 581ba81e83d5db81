"""What the process benchmarks share: one command's CPU and wall time, and their medians.

A side is measured as a separate process: user + system CPU of its whole tree (`os.wait4`),
with bytecode written, as on a user's machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
"""pytest as every side runs it: quiet, in file order, no cache written between repeats."""

Sides = dict[str, list[tuple[float, float]]]
"""Each side's (CPU seconds, wall seconds), one pair per repeat."""


def user_env(**extra: str) -> dict[str, str]:
    """This environment with `extra`, bytecode written (a user's machine caches it)."""
    env = {**os.environ, **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measured(argv: list[str], cwd: Path, env: Mapping[str, str]) -> tuple[float, float]:
    """CPU seconds (the process and all it waited for) and wall seconds of one command."""
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{argv[:6]} exited with status {status}")
    return usage.ru_utime + usage.ru_stime, wall


def medians(sides: Sides) -> tuple[dict[str, float], dict[str, float]]:
    """Each side's median CPU seconds and median wall seconds."""
    cpu = {k: statistics.median(c for c, _ in v) for k, v in sides.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in sides.items()}
    return cpu, wall
