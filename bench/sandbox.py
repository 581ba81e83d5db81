"""The Docker sandbox's cost per attempt: a command agent and a command grader run in a fresh
container (create, copy the workspace in, start, exec, exec, remove) against the same agent and
grader on the host, at concurrency 1 and 4.

It builds a busybox image `FROM scratch` (Debian's busybox-static; no registry is needed), runs
the same dataset both ways in one pytest process each, alternating the two sides, and prints
the median wall time and the added seconds per attempt.

    python bench/sandbox.py              # 40 attempts, concurrency 1 and 4, median of 3
    python bench/sandbox.py --quick      # 10 attempts, one repeat
    python bench/sandbox.py --attempts 200 --concurrency 8 --repeats 1   # the issue's size
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMAGE = "agenteval-bench-busybox:1"
AGENT = ["sh", "-c", "cd {workspace} && echo ok > answer.txt && echo ok"]
GRADER = ["sh", "-c", 'test "$(cat answer.txt)" = ok']


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


def make_dataset(root: Path, attempts: int, sandboxed: bool) -> Path:
    ds = root / ("boxed" if sandboxed else "host") / "ds"
    (ds / "ws").mkdir(parents=True)
    (ds / "ws/README").write_text("a small workspace\n")
    (ds / "ws/src.txt").write_text("1 + 1\n")
    manifest: dict[str, object] = {"name": "bench", "agent": {"command": AGENT, "stdin": "none"}}
    if sandboxed:
        manifest["defaults"] = {"sandbox": {"docker": {"image": IMAGE}}}
    (ds / "agenteval.yaml").write_text(json.dumps(manifest))
    tasks = [
        {"id": f"t{i}", "input": "x", "workspace": "ws", "graders": [{"command": GRADER}]}
        for i in range(attempts)
    ]
    (ds / "tasks.yaml").write_text(json.dumps({"tasks": tasks}))
    return ds.parent


def run(folder: Path, concurrency: int) -> float:
    shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)
    argv = [sys.executable, "-m", "pytest", "--agenteval", "ds", "-q", "-p", "no:randomly"]
    argv += ["--agenteval-concurrency", str(concurrency), "-p", "no:cacheprovider"]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the run failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--attempts", type=int, help="attempts per run (default 40)")
    parser.add_argument("--repeats", type=int, help="runs per side, the median kept (default 3)")
    parser.add_argument("--concurrency", type=int, action="append", help="default: 1 and 4")
    args = parser.parse_args()
    attempts, repeats = (10, 1) if args.quick else (40, 3)
    attempts, repeats = args.attempts or attempts, args.repeats or repeats
    with tempfile.TemporaryDirectory(prefix="agenteval-bench-sandbox-") as tmp:
        root = Path(tmp)
        build_image(root)
        host, boxed = make_dataset(root, attempts, False), make_dataset(root, attempts, True)
        print(f"{attempts} attempts (command agent + command grader), median of {repeats}")
        print("| concurrency | host s | sandbox s | added s/attempt |")
        print("|---|---|---|---|")
        for concurrency in args.concurrency or [1, 4]:
            walls: dict[Path, list[float]] = {host: [], boxed: []}
            for _ in range(repeats):
                for folder in (host, boxed):
                    walls[folder].append(run(folder, concurrency))
            plain, sandboxed = (statistics.median(walls[f]) for f in (host, boxed))
            added = (sandboxed - plain) / attempts
            print(f"| {concurrency} | {plain:.2f} | {sandboxed:.2f} | {added:.3f} |")


if __name__ == "__main__":
    main()
