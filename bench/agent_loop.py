"""The `react` agent's cost against a floor: 100 tasks x 4 turns, 50 ms per model call, 16 in
flight, local environment.

Both sides talk to the same scripted model (examples/agent_loop/server.py, its own process,
not measured) and do the same repair session per task: a fresh copy of the repository, read
add.sh, write the fix, run `sh test.sh` (a subprocess), submit, then the grader's `sh
test.sh` (a subprocess). The agenteval side is `pytest --agenteval` over the example's task
100 times with `--agenteval-concurrency 16`; the floor is a bare asyncio loop (this file's
`floor`): 16 tasks at once, each over its own keep-alive HTTP/1.1 connection, sending the same
request bodies (the conversation grows turn by turn, the tools' schemas in each). Measured:
whole-process CPU (user + system, the tool and grader processes included: `os.wait4` of each
side's process) and wall, alternating the sides, medians, after one warm-up run (with
bytecode written: this machine sets PYTHONDONTWRITEBYTECODE, under which every pytest start
compiles pytest's and the plugins' modules again, a second of CPU no user pays).

Two workloads: `python` (the default; bench/agent_loop_python: the session on a repository
whose tests are Python, `python3 test_add.py`, as a "fix a failing test" repository runs
them, and as the issue's measurement of Inspect AI did: its floor was 8.2 s of CPU) and `sh`
(the example's own repository, whose tests are a shell script: its tools cost a few
milliseconds a task, so pytest's and the plugin's start alone are most of its floor; see
bench/RESULTS.md). Both sides find `python3` first in the base interpreter's folder (not a
version manager's shim).

    python bench/agent_loop.py                      # 100 tasks, median of 3
    python bench/agent_loop.py --quick              # 32 tasks, once
    python bench/agent_loop.py --workload sh        # the example's shell repository
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from measure import PYTEST, Sides, measured, medians, user_env

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent_loop"
PYTHON_WORKLOAD = Path(__file__).resolve().parent / "agent_loop_python"
LATENCY = 0.05
IN_FLIGHT = 16
GRADER = {"sh": ["sh", "test.sh"], "python": ["python3", "test_add.py"]}
"""The `command` grader's argv per workload (the floor runs the same)."""
INPUT = {
    "sh": "The tests in test.sh fail. Fix add.sh so that `sh test.sh` passes, then submit.",
    "python": "The tests in test_add.py fail. Fix add.py, then submit.",
}


def repository(workload: str) -> Path:
    """The repository each task gets a fresh copy of."""
    return (PYTHON_WORKLOAD if workload == "python" else EXAMPLE) / "repo"


def dataset(folder: Path, tasks: int, port: int, workload: str = "sh") -> Path:
    """The example with its task repeated `tasks` times in one `tasks:` file (the python
    workload: its repository, input and grader instead)."""
    root = folder / "agent_loop"
    shutil.copytree(
        EXAMPLE, root, ignore=shutil.ignore_patterns("busybox", "__pycache__", "*.yaml", "repo")
    )
    shutil.copytree(repository(workload), root / "repo")
    manifest = (EXAMPLE / "agenteval.yaml").read_text()
    (root / "agenteval.yaml").write_text(manifest.replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    import yaml

    task = yaml.safe_load((EXAMPLE / "fix.yaml").read_text())
    if workload == "python":
        task["input"] = INPUT["python"]
        task["graders"] = [{"command": GRADER["python"]}, {"contains": "tests pass"}]
    body = {"tasks": [{"id": f"fix{i}", **task} for i in range(tasks)]}
    (root / "fix.yaml").write_text(json.dumps(body))
    (folder / "pytest.ini").write_text("[pytest]\n")
    return root


# --- the floor ------------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": n, "description": d, "parameters": p}}
    for n, d, p in [
        (
            "bash",
            "Run a shell command.",
            {"type": "object", "properties": {"command": {"type": "string"}}},
        ),
        (
            "read_file",
            "Read a file.",
            {"type": "object", "properties": {"path": {"type": "string"}}},
        ),
        (
            "write_file",
            "Write a file.",
            {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        ),
        ("submit", "Submit.", {"type": "object", "properties": {"answer": {"type": "string"}}}),
    ]
]


async def post(
    streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], port: int, body: dict[str, Any]
) -> dict[str, Any]:
    reader, writer = streams
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer x\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    answer: dict[str, Any] = json.loads(await reader.readexactly(length))
    return answer


async def sh(command: str, cwd: Path) -> tuple[int, bytes]:
    child = await asyncio.create_subprocess_exec(
        "sh", "-c", command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await child.communicate()
    return child.returncode or 0, out + err


async def run(argv: list[str], cwd: Path) -> int:
    child = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await child.communicate()
    return child.returncode or 0


async def one_task(i: int, port: int, base: Path, streams: Any, workload: str) -> bool:
    work = base / f"t{i}"
    await asyncio.to_thread(shutil.copytree, repository(workload), work)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are fixing a repository."},
        {"role": "user", "content": INPUT[workload]},
    ]
    for _ in range(4):
        reply = await post(
            streams, port, {"model": "scripted", "messages": messages, "tools": TOOLS}
        )
        message = reply["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or []:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            if name == "submit":
                status = await run(GRADER[workload], work)  # the grader
                return status == 0 and "tests pass" in args["answer"]
            if name == "read_file":
                text = (work / args["path"]).read_text()
            elif name == "write_file":
                (work / args["path"]).write_text(args["content"])
                text = "wrote"
            else:
                status, out = await sh(args["command"], work)
                text = f"exit status: {status}\nstdout:\n{out.decode()}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    return False


async def floor(tasks: int, port: int, workload: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="floor-"))
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(tasks):
        queue.put_nowait(i)
    passed: list[bool] = []

    async def worker() -> None:
        streams = await asyncio.open_connection("127.0.0.1", port)
        while not queue.empty():
            passed.append(await one_task(queue.get_nowait(), port, base, streams, workload))
        streams[1].close()

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    shutil.rmtree(base)
    assert all(passed) and len(passed) == tasks, passed


# --- the comparison -------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--workload", choices=sorted(GRADER), default="python")
    options = parser.parse_args()
    workload = options.workload
    tasks = options.tasks or (32 if options.quick else 100)
    repeats = options.repeats or (1 if options.quick else 3)
    folder = Path(tempfile.mkdtemp(prefix="bench-agent-loop-"))
    steps = ["--steps", str(PYTHON_WORKLOAD / "steps.json")] if workload == "python" else []
    server = subprocess.Popen(
        [sys.executable, EXAMPLE / "server.py", "--port", "0", "--latency", str(LATENCY), *steps],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().rsplit(":", 1)[1].split("/")[0])
        root = dataset(folder, tasks, port, workload)
        python_bin = str(Path(getattr(sys, "_base_executable", sys.executable)).parent)
        path = os.pathsep.join([python_bin, os.environ.get("PATH", "")])
        env = user_env(LOCAL_MODEL_KEY="x", PYTHONHASHSEED="0", PATH=path)
        ours_argv = [*PYTEST, "--agenteval", str(root), "--agenteval-concurrency", str(IN_FLIGHT)]
        floor_argv = [sys.executable, __file__, "--floor", str(tasks), str(port), workload]
        (folder / "plain").mkdir()
        (folder / "plain" / "test_one.py").write_text("def test_one():\n    pass\n")
        plain_argv = [*PYTEST, "plain"]
        sides: Sides = {"agenteval": [], "floor": [], "pytest": []}
        measured(ours_argv, folder, env)  # warm-up: bytecode and pytest's rewritten modules
        for _ in range(repeats):
            sides["floor"].append(measured(floor_argv, folder, env))
            sides["agenteval"].append(measured(ours_argv, folder, env))
            sides["pytest"].append(measured(plain_argv, folder, env))
        report(tasks, sides, workload)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def report(tasks: int, sides: Sides, workload: str) -> None:
    cpu, wall = medians(sides)
    ideal = tasks * 4 * LATENCY / IN_FLIGHT
    print(f"{tasks} tasks x 4 turns, {LATENCY * 1000:.0f} ms per model call, {IN_FLIGHT} in flight")
    print(f"workload {workload}, load {os.getloadavg()[0]:.1f}")
    print(f"(ideal wall: {ideal:.2f} s of model latency)")
    print("| side | CPU s | wall s |")
    print("|---|---|---|")
    for side, said in (
        ("floor", "floor"),
        ("agenteval", "agenteval"),
        ("pytest", "plain pytest, one test"),
    ):
        print(f"| {said} | {cpu[side]:.2f} | {wall[side]:.2f} |")
    ratio_cpu = cpu["agenteval"] / cpu["floor"]
    ratio_wall = wall["agenteval"] / wall["floor"]
    print(f"CPU ratio {ratio_cpu:.2f} (target <= 1.5), wall ratio {ratio_wall:.2f} (target <= 1.5)")
    loop = (cpu["agenteval"] - cpu["pytest"]) / cpu["floor"]
    print(f"CPU ratio without pytest's own start-up (plain pytest, same run): {loop:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--floor":
        asyncio.run(floor(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
    else:
        main()
