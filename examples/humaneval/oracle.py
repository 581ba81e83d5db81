"""An agent that answers with HumanEval's canonical solutions: every task should pass.

Use it to check the harness (and your grader) before pointing the dataset at a model.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data") / "HumanEval.jsonl.gz"


@cache
def solutions() -> dict[str, str]:
    with gzip.open(DATA, "rt") as rows:
        return {row["task_id"]: row["canonical_solution"] for row in map(json.loads, rows)}


def solve(task: Any) -> str:
    return solutions()[task.id]
