"""A command agent's placeholders: filled once, and quoted for a shell with `!q`."""

from __future__ import annotations

import pytest

from helpers import DatasetMaker

HOSTILE = 'it\'s $(touch pwned) `touch pwned2`; {workspace} "q" \\ done'


def test_quoted_input_in_sh_c_is_one_word_and_never_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`{input!q}` inside `sh -c` is the input as one shell word (nothing in it runs), and a
    placeholder inside a filled value (`{workspace}` in the input) is not filled again."""
    dataset(
        {
            "shell.yaml": {"input": HOSTILE, "expected": HOSTILE},
            "argv.yaml": {
                "input": HOSTILE,
                "expected": HOSTILE,
                "agent": {
                    "command": [
                        "{python}",
                        "-c",
                        "import sys; print(sys.argv[1], end='')",
                        "{input}",
                    ]
                },
            },
        },
        manifest={"agent": {"command": ["sh", "-c", "printf '%s' {input!q}"]}},
    )
    result = pytester.runpytest("--agenteval", "ds", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    assert not list(pytester.path.rglob("pwned*"))
