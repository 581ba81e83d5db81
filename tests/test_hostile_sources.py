"""Hostile JSONL and CSV sources: each bad row or file is its own error, collection goes on."""

from __future__ import annotations

import json

import pytest

from helpers import DatasetMaker
from pytest_agenteval.cli import main
from pytest_agenteval.sources.rows import MAX_NESTING

ROWS = 'source: rows.jsonl\nid: "j{k}"\ninput: "{q}"\nexpected: "4"\ngraders: [equals]\n'
CSV = 'source: rows.csv\nid: "c{k}"\ninput: "{q}"\nexpected: "4"\ngraders: [equals]\n'


def agent_says_4(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\n@pytest.fixture\ndef agenteval_agent():\n    return lambda task: '4'\n"
    )


def test_a_lone_surrogate_is_one_rows_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSONL row with a lone surrogate escape, and a CSV record with bytes that are not UTF-8,
    are each one load error at `file:line`; the other rows (a surrogate pair too) run, and
    `agenteval validate` reports both."""
    jsonl = '{"k": 1, "q": "ok"}\n{"k": 2, "q": "bad \\ud800"}\n{"k": 3, "q": "\\ud83d\\ude00"}\n'
    root = dataset({"j.yaml": ROWS, "rows.jsonl": jsonl, "c.yaml": CSV})
    (root / "rows.csv").write_bytes(b"k,q\n1,ok\n2,bad \xed\xa0\x80\n3,fine\n")
    agent_says_4(pytester)
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*ds/rows.jsonl:2: the row holds a lone surrogate*",
            "*ds/rows.csv:3: the record is not UTF-8 text*",
        ]
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "rows.jsonl:2: the row holds a lone surrogate" in out
    assert "4 tasks valid, 2 problems" in out


def test_raw_cesu8_bytes_in_a_jsonl_row_are_one_rows_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raw CESU-8 bytes of a surrogate (`\\xed\\xa0\\x80`, not the `\\ud800` escape) in a
    JSONL row are one load error at `file:line` naming the bytes; the other rows run, a
    resume runs too, and `agenteval validate` reports it."""
    root = dataset({"j.yaml": ROWS})
    good = b'{"k": 1, "q": "ok"}\n'
    (root / "rows.jsonl").write_bytes(
        good + b'{"k": 2, "q": "bad \xed\xa0\x80"}\n{"k": 3, "q": "fine"}\n'
    )
    agent_says_4(pytester)
    for args in ([], ["--resume-suite"]):
        result = pytester.runpytest("--agenteval", "ds", *args)
        result.assert_outcomes(passed=2, errors=1)
        result.stdout.fnmatch_lines(
            ["*ds/rows.jsonl:2: the row is not UTF-8 text: bytes ed a0 80 at column 20*"]
        )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "rows.jsonl:2: the row is not UTF-8 text" in out
    assert "2 tasks valid, 1 problem" in out


def test_a_template_typo_is_one_error_at_the_template(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A field no row has, and a grader no row's task can build, are one error each at the
    task file's line with the count of rows, named after the task file; a field one row
    lacks stays that row's error."""
    rows = "".join(f'{{"k": {i}, "question": "q{i}"}}\n' for i in range(5)) + '{"k": 5}\n'
    dataset(
        {
            "typo.yaml": ROWS.replace("{q}", "{qestion}"),
            "grader.yaml": ROWS.replace("{q}", "{question}").replace("equals", "equls"),
            "rows.jsonl": rows,
        }
    )
    result = pytester.runpytest("--agenteval", "ds", "-p", "no:randomly")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "ds/typo.yaml:3: at input: all 6 rows of ds/rows.jsonl have no field 'qestion'",
            "ds/grader.yaml:5: at graders[0]: unknown grader 'equls'"
            " (for 5 rows of ds/rows.jsonl: lines 1-5)",
            "ds/rows.jsonl:6: at input: the row has no field 'question' *",
            "ERROR ds/typo.yaml::typo[[]load-error[]] *",
        ]
    )


def test_pathological_rows_and_templates_are_their_own_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A JSONL row nested 200,000 deep (or past the nesting bound) is that row's error, a
    template asking for a width of 3,000,000,000 is its file's error, and a CSV header of
    200,000 columns is read in linear time; the other rows run."""
    deep = "[" * 200_000 + "]" * 200_000
    past_bound = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    rows = [{"k": 1, "q": "ok"}, {"k": 2, "q": "x"}, {"k": 3, "q": "x"}, {"k": 4, "q": "ok"}]
    lines = [json.dumps(row) for row in rows]
    lines[1] = lines[1][:-1] + f', "deep": {deep}}}'
    lines[2] = lines[2][:-1] + f', "deep": {past_bound}}}'
    root = dataset(
        {
            "j.yaml": ROWS,
            "rows.jsonl": "\n".join(lines) + "\n",
            "w.yaml": ROWS.replace("j{k}", "w{k}").replace("{q}", "{q:>3000000000}"),
            "c.yaml": CSV,
        }
    )
    wide = ["k", "q", *(f"c{i}" for i in range(200_000))]
    (root / "rows.csv").write_text(",".join(wide) + "\n1,ok" + "," * 200_000 + "\n")
    agent_says_4(pytester)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-p", "no:randomly", timeout=120)
    result.assert_outcomes(passed=3, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            f"ds/rows.jsonl:2: the row nests lists or objects more than {MAX_NESTING} levels deep",
            "ds/rows.jsonl:3: the row nests lists or objects more than*",
            "ds/w.yaml:3: at input: bad template '{q:>3000000000}': a width or precision above*",
        ]
    )
