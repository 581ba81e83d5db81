"""The Docker sandbox's cost per attempt: a command agent in a fresh container (create, copy the
workspace in, exec, collect its artifacts, remove) against the same agent on the host, at
concurrency 1 and 8, measured in the same run.

It builds a busybox image `FROM scratch` (Debian's busybox-static; no registry is needed), runs
the same dataset both ways in one pytest process each (alternating the two sides), and prints
the wall time of each, the seconds the sandbox adds per attempt and the ratio. The aim: under
0.5 s added per attempt at concurrency 8 on the project's 2-core machine.

    python bench/sandbox.py                   # 200 attempts, concurrency 1 and 8
    python bench/sandbox.py --attempts 20     # a quick run
    python bench/sandbox.py --concurrency 4   # other concurrencies (repeatable)
    python bench/sandbox.py --cap 4           # 16 attempts of 1 s under --agenteval-max-sandboxes 4
    python bench/sandbox.py --cap 4 --calls   # and each docker call of the capped run, timed

`--cap N` measures attempts started ahead under the cap instead: 16 attempts of an agent that
sleeps 1 s, at concurrency 8 under `--agenteval-max-sandboxes N`, against the floor of the same
agent on the host at concurrency N (N at a time, no container), in the same run. The aim for
N = 4: under 10 s (each process made its sandboxed attempts one at a time before: 29 s).

`--calls` also times every docker CLI call of one more capped run (a logging `docker` shim
first on PATH, about 5 ms a call of its own): the latency of each kind of call, how long a
container exists, the plugin's own time between one attempt's calls, and when the first
call starts (the session's start: pytest, the plugin, the orphan sweep, the image check).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

IMAGE = "agenteval-bench-busybox:1"
AGENT = ["sh", "-c", "cd {workspace} && echo ok > answer.txt && echo -n ok"]
"""Writes one file into the workspace (the sandbox keeps it as an artifact) and answers."""


def build_image(root: Path) -> None:
    folder = root / "image"
    folder.mkdir()
    busybox = shutil.which("busybox")
    if busybox is None:
        sys.exit("busybox-static is not installed (apt-get install busybox-static)")
    shutil.copy(busybox, folder / "busybox")
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
    )
    subprocess.run(["docker", "build", "-q", "-t", IMAGE, str(folder)], check=True)


NOISE = """Hypothesis (the project's test extra, no dependency of the plugin) registers a pytest
plugin that imports all of hypothesis at the terminal summary: 0.2 s quiet, 1-1.8 s at load
average 4-8, in both sides' walls. The runs here leave it out, as a user's install has it not."""

SLEEPER = ["sh", "-c", "sleep 1; echo -n ok"]
"""The `--cap` agent: one second of waiting, as a model call would."""


def make_dataset(
    root: Path, attempts: int, sandboxed: bool, agent: list[str] = AGENT, name: str = ""
) -> Path:
    ds = root / (name + ("boxed" if sandboxed else "host")) / "ds"
    (ds / "ws").mkdir(parents=True)
    (ds / "ws/README").write_text("a small workspace\n")
    (ds / "ws/src.txt").write_text("1 + 1\n")
    manifest: dict[str, object] = {"name": "bench", "agent": {"command": agent, "stdin": "none"}}
    if sandboxed:
        manifest["defaults"] = {"sandbox": {"docker": {"image": IMAGE}}}
    (ds / "agenteval.yaml").write_text(json.dumps(manifest))
    tasks = [
        {"id": f"t{i}", "input": "x", "expected": "ok", "workspace": "ws"} for i in range(attempts)
    ]
    (ds / "tasks.yaml").write_text(json.dumps({"tasks": tasks}))
    return ds.parent


def run(folder: Path, concurrency: int, *extra: str, env: dict[str, str] | None = None) -> float:
    shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)
    argv = [sys.executable, "-m", "pytest", "--agenteval", "ds", "-q", "-p", "no:randomly"]
    argv += ["-p", "no:hypothesispytest"]  # the project's test extra, not the plugin's (see NOISE)
    argv += ["--agenteval-concurrency", str(concurrency), *extra]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the run failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--attempts", type=int, default=200, help="attempts per run (200)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per side, median kept (1)")
    parser.add_argument("--concurrency", type=int, action="append", help="default: 1 and 8")
    parser.add_argument("--cap", type=int, help="measure 16 attempts under this sandbox cap")
    parser.add_argument("--calls", action="store_true", help="with --cap: time each docker call")
    args = parser.parse_args()
    if args.cap is not None:
        return under_cap(args.cap, args.repeats, args.calls)
    attempts = args.attempts
    with tempfile.TemporaryDirectory(prefix="agenteval-bench-sandbox-") as tmp:
        root = Path(tmp)
        build_image(root)
        host, boxed = make_dataset(root, attempts, False), make_dataset(root, attempts, True)
        print(f"{attempts} attempts of a command agent (median of {args.repeats})")
        print("| concurrency | host s | sandbox s | added s/attempt | ratio |")
        print("|---|---|---|---|---|")
        for concurrency in args.concurrency or [1, 8]:
            walls: dict[Path, list[float]] = {host: [], boxed: []}
            for _ in range(args.repeats):
                for folder in (host, boxed):
                    walls[folder].append(run(folder, concurrency))
            plain, sandboxed = (statistics.median(walls[f]) for f in (host, boxed))
            added = (sandboxed - plain) / attempts
            print(
                f"| {concurrency} | {plain:.2f} | {sandboxed:.2f} | {added:.3f} "
                f"| {sandboxed / plain:.1f}x |",
                flush=True,
            )


def under_cap(cap: int, repeats: int, calls: bool = False) -> None:
    """16 attempts of 1 s at concurrency 8 under `--agenteval-max-sandboxes cap`, against the
    host at concurrency `cap` (the floor: `cap` at a time, no container)."""
    with tempfile.TemporaryDirectory(prefix="agenteval-bench-sandbox-") as tmp:
        root = Path(tmp)
        build_image(root)
        host = make_dataset(root, 16, False, SLEEPER, "cap")
        boxed = make_dataset(root, 16, True, SLEEPER, "cap")
        floors, capped = [], []
        for _ in range(repeats):
            floors.append(run(host, cap))
            capped.append(run(boxed, 8, "--agenteval-max-sandboxes", str(cap)))
        bare = [docker_floor(cap, _bare) for _ in range(repeats)]
        steps = [docker_floor(cap, _steps) for _ in range(repeats)]
        floor, wall = statistics.median(floors), statistics.median(capped)
        print(f"16 attempts of 1 s, concurrency 8, --agenteval-max-sandboxes {cap}; ", end="")
        print(f"the daemon's storage driver: {storage_driver()}; load {load()} at the end")
        print(f"(median of {repeats}) host at concurrency {cap}: {floor:.2f} s; ", end="")
        print(f"sandboxed under the cap: {wall:.2f} s ({wall / floor:.2f}x the floor)")
        bare_wall, steps_wall = statistics.median(bare), statistics.median(steps)
        print(f"docker alone, {cap} at a time: 16 `docker run --rm ... sleep 1`: {bare_wall:.2f} s")
        print(f"  16 x (run -d, exec sleep 1, cp out, rm -f): {steps_wall:.2f} s")
        print(f"sandboxed under the cap / docker's own steps: {wall / steps_wall:.2f}x")
        if calls:
            timed_calls(root, boxed, cap)


SHIM = """#!/bin/sh
s=$(date +%s.%N)
{docker} "$@"
rc=$?
echo "$s $(date +%s.%N) $*" >> {log}
exit $rc
"""
"""A `docker` that logs each call's start, end and arguments, then answers as docker does."""
CONTAINER = re.compile(r"agenteval-\d+-[0-9a-f]{8}-\S+?-[0-9a-f]{12}")


def timed_calls(root: Path, boxed: Path, cap: int) -> None:
    """One more capped run with every docker call logged: each kind's latency, a container's
    life, the plugin's gaps between one attempt's calls, and the session's start."""
    shim, log = root / "shim", root / "docker.log"
    shim.mkdir()
    (shim / "docker").write_text(SHIM.format(docker=shutil.which("docker"), log=log))
    (shim / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    started = time.time()
    wall = run(boxed, 8, "--agenteval-max-sandboxes", str(cap), env=env)
    kinds: dict[str, list[float]] = {}
    attempts: dict[str, list[tuple[float, float]]] = {}
    for line in log.read_text().splitlines():
        begin, end, verb, *rest = line.split()
        kind = verb if verb != "cp" else ("cp in" if "--archive" in rest else "cp out")
        kinds.setdefault(kind, []).append(float(end) - float(begin))
        if (name := CONTAINER.search(line)) is not None:
            attempts.setdefault(name.group(), []).append((float(begin), float(end)))
    print(f"\nthe capped run again, each docker call timed: {wall:.2f} s")
    print("| call | n | median s | max s |\n|---|---|---|---|")
    for kind, took in kinds.items():
        print(f"| {kind} | {len(took)} | {statistics.median(took):.2f} | {max(took):.2f} |")
    lives = [spans[-1][1] - spans[0][0] for spans in attempts.values()]
    gaps = [
        later[0] - earlier[1]
        for spans in attempts.values()
        for earlier, later in itertools.pairwise(sorted(spans))
    ]
    first = min(float(line.split()[0]) for line in log.read_text().splitlines())
    print(f"a container exists (run to rm) {statistics.median(lives):.2f} s (median); ", end="")
    print(f"the plugin's time between an attempt's calls: {statistics.median(gaps) * 1000:.0f} ms")
    print(
        f"(median), {sum(gaps) / len(attempts):.2f} s per attempt; the first docker call ", end=""
    )
    print(f"{first - started:.2f} s after the run started")


def storage_driver() -> str:
    """The storage driver of the daemon `docker` talks to (`DOCKER_HOST`): vfs copies an
    image per container, overlay2 (Docker's default) mounts it (faster here under four at once)."""
    said = subprocess.run(["docker", "info", "--format", "{{.Driver}}"], capture_output=True)
    return said.stdout.decode().strip() or "unknown"


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def docker_floor(cap: int, one: Callable[[int], None]) -> float:
    """Wall seconds of 16 containers of 1 s by the docker CLI alone, `cap` at a time: what
    the daemon (vfs storage, this machine's cores) costs without the plugin."""
    started = time.perf_counter()
    with ThreadPoolExecutor(cap) as pool:
        list(pool.map(one, range(16)))
    return time.perf_counter() - started


def _bare(i: int) -> None:
    name = f"agenteval-bench-floor-{os.getpid()}-{i}"
    subprocess.run(
        ["docker", "run", "--rm", "--name", name, "--network", "none", IMAGE, "sleep", "1"],
        check=True,
        capture_output=True,
    )


def _steps(i: int) -> None:
    """The calls a sandboxed attempt makes: start a waiting container, exec, copy out, rm."""
    name = f"agenteval-bench-floor-{os.getpid()}-{i}"
    docker = ["docker"]
    subprocess.run(
        [
            *(*docker, "run", "--detach", "--name", name, "--network", "none", "--init"),
            *("--workdir", "/workspace", "--entrypoint", "sleep", IMAGE, "infinity"),
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run([*docker, "exec", name, "sleep", "1"], check=True, capture_output=True)
        subprocess.run([*docker, "cp", f"{name}:/workspace/.", "-"], capture_output=True)
    finally:
        subprocess.run([*docker, "rm", "-f", name], capture_output=True)


if __name__ == "__main__":
    main()
