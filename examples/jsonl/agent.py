"""A toy agent: it knows a few answers and gets one wrong, so the report has something to show."""

from __future__ import annotations

from typing import Any

KNOWN = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Australia": "Sydney",  # a classic mistake
    "Canada": "Ottawa",
    "17 + 25": "42",
    "1 / 8": "0.125",
    "1,000 × 3": "3,000",
}


def answer(task: Any) -> str:
    for clue, reply in KNOWN.items():
        if clue in task.input:
            return reply
    return "I don't know"
