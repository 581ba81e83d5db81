"""A Python agent: it runs on this machine and reaches the attempt's container only
through `task.environment` (`task.workspace` has no folder to give: the files are in the
container)."""

from __future__ import annotations

from pytest_agenteval import AgentResult, Task


def total(task: Task) -> AgentResult:
    env = task.environment
    assert env is not None  # a sandboxed attempt always has one
    numbers = env.read_file("numbers.txt").decode().split()  # bytes, from the container
    env.write_file("total.txt", f"{sum(int(n) for n in numbers)}\n")  # a str or bytes
    check = env.exec(["sh", "test.sh"], timeout=30)  # an ExecResult
    return AgentResult(
        output=f"wrote {env.workdir}/total.txt; sh test.sh exited {check.returncode}",
        transcript=[{"role": "tool", "content": check.stdout}],
    )
