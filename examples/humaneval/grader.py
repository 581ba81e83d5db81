"""HumanEval's check: the prompt, the completion and the problem's tests run in a fresh Python.

This executes code a model wrote. Run it in a container or a VM you can throw away, as
HumanEval's own evaluator asks.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TIMEOUT = 10.0


def program(prompt: str, output: str, test: str, entry_point: str) -> str:
    """The file to run: a completion continues the prompt; a whole function replaces it."""
    body = output if f"def {entry_point}" in output else prompt + output
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n"


def passes_tests(output: str, expected: dict[str, Any], task: Any) -> tuple[bool, str]:
    source = program(task.input, output, expected["test"], expected["entry_point"])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "check.py"
        path.write_text(source)
        try:
            done = subprocess.run(
                [sys.executable, "-I", str(path)],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return False, f"the tests did not finish in {TIMEOUT:g}s"
    if done.returncode == 0:
        return True, "the problem's tests pass"
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return False, f"the tests fail: {last}"
