"""A toy model behind two prompts: offline and deterministic, so the comparison is reproducible.

The "model" knows every answer but slips on problems with more steps, and how often depends on
the prompt: the terse prompt rushes, the step-by-step one slips less and spends more tokens.
Replace these with your real agents (an `openai:` spec per variant, say); the manifest and the
comparison stay the same.
"""

from __future__ import annotations

import random
import re

from pytest_agenteval import AgentResult, Task, Usage

ANSWERS = {
    "apples": 12,
    "pencils": 65,
    "train": 260,
    "shirts": 54,
    "tickets": 44,
    "pages": 150,
    "boxes": 130,
    "coins": 28,
}
STEPS = {"apples": 1, "shirts": 1, "coins": 1, "pencils": 2, "train": 2, "tickets": 2}
PRICE_PER_TOKEN = 0.000002


def terse(task: Task) -> AgentResult:
    """Answer with the number only: cheap, and it slips on a third of the steps past the first."""
    return _answer(task, slip=0.35, tokens_out=4)


def step_by_step(task: Task) -> AgentResult:
    """Reason step by step first: more output tokens, fewer slips."""
    return _answer(task, slip=0.12, tokens_out=90)


def _answer(task: Task, *, slip: float, tokens_out: int) -> AgentResult:
    rng = random.Random(f"{task.id}/{task.seed}")
    answer = ANSWERS[task.id]
    extra_steps = STEPS.get(task.id, 3) - 1
    if any(rng.random() < slip for _ in range(extra_steps)):
        answer += rng.choice((-10, -1, 1, 10))
    tokens_in = len(re.findall(r"\w+", str(task.input))) + 20
    usage = Usage(
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=(tokens_in + tokens_out) * PRICE_PER_TOKEN,
    )
    return AgentResult(output=str(answer), usage=usage)
