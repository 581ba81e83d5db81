"""A third variant, as a program: the step-by-step answer checked once more before replying.

A command agent reads the task as JSON on stdin and prints an AgentResult as JSON."""

import json
import random
import sys

from agent import ANSWERS, PRICE_PER_TOKEN, STEPS

task = json.load(sys.stdin)
rng = random.Random(f"{task['id']}/{task['seed']}/checked")
answer = ANSWERS[task["id"]]
if any(rng.random() < 0.05 for _ in range(STEPS.get(task["id"], 3) - 1)):
    answer += 1
tokens_in, tokens_out = 60, 160
cost = (tokens_in + tokens_out) * PRICE_PER_TOKEN
usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost": cost}
print(json.dumps({"output": str(answer), "usage": usage}))
