"""The whole pytest process's CPU for N `openai` attempts against the floor (issue 32).

One local asyncio keep-alive server (bench/provider_call.py's, its own process, not
measured) answers every chat call after LATENCY. Measured, each a separate process (user +
system CPU of its whole tree, `os.wait4`), sides alternated, medians:

- *floor*: a bare asyncio client making the same N requests with C in flight
  (provider_call.py's `bare`), plus plain pytest running N trivial items with the plugin off;
- *agenteval*: `pytest --agenteval` over N tasks of the built-in `openai` agent,
  `--agenteval-concurrency C`.

Bytecode is written (a warm-up run first), as on a user's machine.

    python bench/openai_process.py                 # 2,000 x 50 ms, 64 in flight, median of 3
    python bench/openai_process.py --n 4000 --latency 0.5 --in-flight 512 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from measure import PYTEST, Sides, measured, medians, user_env
from provider_call import serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--floor", nargs=2, type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.floor:  # the bare client's side, in its own process
        import asyncio

        from provider_call import bare

        port, n = options.floor
        asyncio.run(bare(port, n, options.in_flight))
        return
    n, c = options.n, options.in_flight
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(queue, options.latency), daemon=True)
    server.start()
    port = queue.get()
    folder = Path(tempfile.mkdtemp(prefix="bench-openai-process-"))
    try:
        (folder / "pytest.ini").write_text("[pytest]\n")
        data = folder / "bench"
        data.mkdir()
        agent = {"openai": {"model": "m", "base_url": f"http://127.0.0.1:{port}/v1"}}
        (data / "agenteval.yaml").write_text(json.dumps({"name": "bench", "agent": agent}))
        tasks = [{"id": f"t{i}", "input": "hi", "expected": "ok"} for i in range(n)]
        (data / "tasks.yaml").write_text(json.dumps({"tasks": tasks}))
        plain = folder / "plain"
        plain.mkdir()
        (plain / "test_x.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({n}))\n"
            "def test_x(i):\n    pass\n"
        )
        env = user_env(OPENAI_API_KEY="bench-key", PYTEST_ADDOPTS="")
        ours = [*PYTEST, "--agenteval", "bench", "--agenteval-concurrency", str(c)]
        client = [sys.executable, __file__, "--in-flight", str(c), "--floor", str(port), str(n)]
        items = [*PYTEST, "-p", "no:agenteval", "plain"]
        measured(ours, folder, env)  # warm-up: bytecode and pytest's rewritten modules
        measured(items, folder, env)
        sides: Sides = {"client": [], "items": [], "ours": []}
        for _ in range(options.repeats):
            sides["client"].append(measured(client, folder, env))
            sides["ours"].append(measured(ours, folder, env))
            sides["items"].append(measured(items, folder, env))
            shutil.rmtree(folder / ".agenteval", ignore_errors=True)
    finally:
        server.kill()
        shutil.rmtree(folder, ignore_errors=True)
    cpu, wall = medians(sides)
    ideal = n * options.latency / c
    floor = cpu["client"] + cpu["items"]
    print(f"{n} attempts x {options.latency * 1000:g} ms, {c} in flight (ideal wall {ideal:.2f} s)")
    print("| side | CPU s | wall s | CPU per attempt |")
    print("|---|---|---|---|")
    for side, said in (("client", "bare asyncio client"), ("items", "plain pytest, N items")):
        print(f"| {said} | {cpu[side]:.2f} | {wall[side]:.2f} | {cpu[side] / n * 1000:.2f} ms |")
    print(f"| floor (sum) | {floor:.2f} | | {floor / n * 1000:.2f} ms |")
    spent = cpu["ours"]
    print(f"| agenteval | {spent:.2f} | {wall['ours']:.2f} | {spent / n * 1000:.2f} ms |")
    print(f"CPU ratio {spent / floor:.2f} (target <= 2.0); wall {wall['ours'] / ideal:.2f}x ideal")


if __name__ == "__main__":
    main()
