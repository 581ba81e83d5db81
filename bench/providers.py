"""The `openai` agent's own cost per attempt, against plain pytest and a Python agent.

Runs N attempts against the test chat server (tests/chat_server.py, 127.0.0.1, no latency, so
what is measured is the SDK, the HTTP round trip and the plugin) and prints each wall time
beside plain pytest's for N no-op items measured in the same run, and the ratio.

    python bench/providers.py            # 500 attempts, median of 3
    python bench/providers.py --quick    # 200 attempts, one repeat
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from chat_server import ChatServer


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run failed: {args}\n{done.stdout[-2000:]}")
    return wall


def dataset(root: Path, name: str, agent: object, n: int, concurrency: int) -> str:
    folder = root / name
    folder.mkdir()
    manifest = {"name": name, "agent": agent, "defaults": {"concurrency": concurrency}}
    (folder / "agenteval.yaml").write_text(json.dumps(manifest))
    (folder / "bot.py").write_text("def run(task):\n    return 'ok'\n")
    tasks = [{"id": f"t{i}", "input": "<<ok>>", "expected": "ok"} for i in range(n)]
    (folder / "tasks.yaml").write_text(json.dumps({"tasks": tasks}))
    return name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    n, repeats = (200, 1) if quick else (500, 3)
    server = ChatServer().start()
    env = {**os.environ, "OPENAI_API_KEY": "bench-key", "PYTEST_ADDOPTS": ""}
    openai = {"openai": {"model": "m", "base_url": server.base_url}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain_test = f"@pytest.mark.parametrize('i', range({n}))\ndef test_x(i):\n    pass\n"
        (root / "test_plain.py").write_text("import pytest\n\n" + plain_test)
        runs = {
            "plain pytest, no-op items": ["test_plain.py"],
            "python agent": ["--agenteval", dataset(root, "py", "bot:run", n, 1)],
            "openai agent, concurrency 1": ["--agenteval", dataset(root, "oa1", openai, n, 1)],
            "openai agent, concurrency 16": ["--agenteval", dataset(root, "oa16", openai, n, 16)],
        }
        walls = {
            label: statistics.median(timed(args, root, env) for _ in range(repeats))
            for label, args in runs.items()
        }
    server.stop()
    plain = walls["plain pytest, no-op items"]
    print(f"{n} attempts, median of {repeats} (wall, ratio to plain pytest, ms per attempt)")
    for label, wall in walls.items():
        print(f"  {label:32} {wall:6.2f} s  {wall / plain:5.2f}x  {1000 * wall / n:6.2f} ms")


if __name__ == "__main__":
    main()
