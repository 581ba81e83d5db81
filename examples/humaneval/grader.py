"""HumanEval's check: the prompt, the completion and the problem's tests run in a fresh Python.

This executes code a model wrote. It runs in the attempt's environment: a throwaway folder on
this machine, or, with the manifest's `sandbox:` block, a fresh container with no network
(HumanEval's own evaluator asks for such isolation).
"""

from __future__ import annotations

from typing import Any

TIMEOUT = 10.0


def program(prompt: str, output: str, test: str, entry_point: str) -> str:
    """The file to run: a completion continues the prompt; a whole function replaces it."""
    body = output if f"def {entry_point}" in output else prompt + output
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n"


def passes_tests(
    output: str, expected: dict[str, Any], task: Any, environment: Any
) -> tuple[bool, str]:
    source = program(task.input, output, expected["test"], expected["entry_point"])
    environment.write_file("check.py", source.encode())
    done = environment.exec([environment.python, "-I", "check.py"], timeout=TIMEOUT)
    if done.timed_out:
        return False, f"the tests did not finish in {TIMEOUT:g}s"
    if done.returncode == 0:
        return True, "the problem's tests pass"
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return False, f"the tests fail: {last}"
