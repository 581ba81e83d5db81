"""Datasets from JSONL and CSV: a task file with `source:` makes one task per row."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import DatasetMaker, stored, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.sources.dataset import TaskDef, load_dataset, load_task_file
from pytest_agenteval.sources.taskfile import LoadFailure
from written import schema_problems

TEMPLATE = """\
source: data/rows.jsonl
id: "q/{key}"
description: "row {key}"
input: "Solve: {question} {{literal}}"
expected: "{answer}"
metadata: {answer: "{say}", level: "{meta.level}"}
graders: [equals]
tags: [rows]
"""


def jsonl(*rows: dict[str, Any]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def row(key: str, say: str = "4", answer: Any = "4", **more: Any) -> dict[str, Any]:
    return {"key": key, "question": f"2+2 ({key})", "answer": answer, "say": say,
            "meta": {"level": 3}, **more}  # fmt: skip


def test_rows_become_tasks_filled_from_templates(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Each row is a task: id, description, input (with literal braces), expected and metadata
    come from its fields, a whole-field template keeps the JSON type, the rest is shared."""
    dataset({"p.yaml": TEMPLATE, "data/rows.jsonl": jsonl(row("a"), row("b", say="5"))})
    result = pytester.runpytest("--agenteval", "ds", "-m", "rows")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*q/b*failed: equals: expected '4', got '5'"])
    first = loaded(pytester.path / "ds", "p.yaml")[0]
    assert isinstance(first, TaskDef)
    spec = first.spec
    assert (spec.id, spec.description, spec.input) == ("q/a", "row a", "Solve: 2+2 (a) {literal}")
    assert (spec.expected, spec.metadata, spec.tags) == ("4", {"answer": "4", "level": 3}, ["rows"])
    assert first.row == (pytester.path / "ds/data/rows.jsonl", 1)


def loaded(root: Path, name: str) -> list[TaskDef | LoadFailure]:
    """The tasks of one task file, as collection loads them (graders not built)."""
    return load_task_file(root / name, load_dataset(root))


def test_default_ids_and_typed_expected(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Without an `id:` template a row's id is `<file id>/<row index>`; `expected: "{answer}"`
    keeps a JSON object for the `json` grader."""
    template = 'source: rows.jsonl\ninput: "{question}"\nexpected: "{answer}"\ngraders: [json]\n'
    rows = jsonl(row("a", say='{"x": 1, "y": 2}', answer={"x": 1}), row("b", answer={"x": 2}))
    dataset({"sub/p.yaml": template, "sub/rows.jsonl": rows})
    pytester.makeconftest(
        "import pytest\n@pytest.fixture\ndef agenteval_agent():\n"
        '    return lambda task: \'{"x": 1, "y": 2}\'\n'
    )
    result = pytester.runpytest("--agenteval", "ds", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*sub/p/0[[]attempt-0[]] PASSED*", "*sub/p/1[[]attempt-0[]] FAILED*"]
    )


def test_a_bad_row_is_one_error_and_the_others_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A row missing a field, one that is not JSON and one with a bad id are each one error item
    naming `file:line` and the field; the good rows run; the run fails."""
    rows = jsonl(row("a")) + '{"key": "b", "answer": "4", "say": "4", "meta": {}}\n'
    rows += "\nnot json\n" + jsonl(row("bad id!"), row("e"))
    dataset({"p.yaml": TEMPLATE, "data/rows.jsonl": rows})
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=2, errors=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*ds/data/rows.jsonl:2: at input: the row has no field 'question'*",
            "*ds/data/rows.jsonl:4: not valid JSON*",
            "*ds/data/rows.jsonl:5: at id: task id 'q/bad id!' may only use*",
        ]
    )
    assert summary_of(pytester)["counts"]["load_error"] == 3


def test_duplicate_ids_across_rows_and_yaml(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A row id used twice in the source, or already used by a YAML task, is a duplicate."""
    rows = jsonl(row("a"), row("a"), row("b"))
    dataset({"a.yaml": {"id": "q/b", **task("ok")}, "p.yaml": TEMPLATE, "data/rows.jsonl": rows})
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ds/data/rows.jsonl:2: at id: duplicate task id 'q/a', first defined in ds/data/rows.jsonl:1",
            "*ds/data/rows.jsonl:3: at id: duplicate task id 'q/b', first defined in ds/a.yaml",
        ]
    )


def test_a_changed_row_runs_again_on_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """On --resume-suite a row whose input changed runs again, one whose `expected` changed is
    regraded, and the unchanged row is reused: the agent is called for the first only."""
    rows = [row("a"), row("b"), row("c")]
    root = dataset({"p.yaml": TEMPLATE, "data/rows.jsonl": jsonl(*rows)})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2").assert_outcomes(passed=6)
    assert len(dataset.calls()) == 6
    rows[1]["question"] = "3+1"
    rows[2]["answer"] = "5"
    (root / "data/rows.jsonl").write_text(jsonl(*rows))
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--resume-suite")
    result.assert_outcomes(passed=4, failed=2)
    assert dataset.calls()[6:] == ["q/b 0", "q/b 1"]
    counts = summary_of(pytester)["counts"]
    assert (counts["reused"], counts["regraded"], counts["run"]) == (2, 2, 2)


def test_gzipped_csv_with_quoting(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A .csv.gz source: quoted commas, doubled quotes and line breaks inside a field survive;
    a bad record is reported at the line where it starts."""
    text = 'id,question,answer\na,"x, ""quoted""",ok\nb,"two\nlines",ok\nc,short\nd,"é",ok\n'
    root = dataset(
        {"p.yaml": 'source: rows.csv.gz\nid: "{id}"\ninput: "{question}"\nexpected: "{answer}"\n'}
    )
    (root / "rows.csv.gz").write_bytes(gzip.compress(text.encode()))
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(failed=3, errors=1)
    result.stdout.fnmatch_lines(["*ds/rows.csv.gz:5: the record has 2 fields, the header 3*"])
    tasks = [t for t in loaded(root, "p.yaml") if isinstance(t, TaskDef)]
    assert [(t.id, t.spec.input, t.row) for t in tasks] == [
        ("a", 'x, "quoted"', (root / "rows.csv.gz", 2)),
        ("b", "two\nlines", (root / "rows.csv.gz", 3)),
        ("d", "é", (root / "rows.csv.gz", 6)),
    ]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("../../outside.jsonl", "source '../../outside.jsonl' is outside the dataset"),
        ("link.jsonl", "source 'link.jsonl' is outside the dataset"),
        ("missing.jsonl", "source file 'missing.jsonl' not found"),
        ("plain.jsonl.gz", "plain.jsonl.gz is not a gzip file"),
        ("rows.txt", "cannot tell the format of 'rows.txt' from its name"),
    ],
    ids=["outside", "symlink-out", "missing", "not-gzip", "unknown-format"],
)
def test_unusable_source_is_one_error_at_the_source_line(
    pytester: pytest.Pytester, dataset: DatasetMaker, source: str, problem: str
) -> None:
    """A source outside the dataset (through `..` or a symlink), missing, not gzip or of an
    unknown format is one error item at the task file's `source:` line; other tasks run."""
    template = f'input: "{{question}}"\nsource: {source}\n'
    root = dataset({"good.yaml": task("ok"), "sub/p.yaml": template})
    (pytester.path / "outside.jsonl").write_text(jsonl(row("a")))
    (root / "sub/link.jsonl").symlink_to(pytester.path / "outside.jsonl")
    (root / "sub/plain.jsonl.gz").write_text(jsonl(row("a")))
    (root / "sub/rows.txt").write_text(jsonl(row("a")))
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*ds/sub/p.yaml:2: at source: {problem}*"])


def test_empty_source_and_bad_templates(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """An empty source says it holds no rows; a malformed template is an error at its line."""
    dataset(
        {
            "empty.yaml": 'source: empty.jsonl\ninput: "{q}"\n',
            "empty.jsonl": "\n",
            "brace.yaml": 'source: rows.jsonl\ninput: "a {q"\n',
            "conv.yaml": 'source: rows.jsonl\ninput: "x"\nmetadata:\n  a: "{q!r}"\n',
            "rows.jsonl": jsonl({"q": 1}),
        }
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*ds/empty.yaml:1: at source: empty.jsonl holds no rows*",
            "*ds/brace.yaml:2: at input: bad template 'a {q': *literal brace*",
            "*ds/conv.yaml:4: at metadata.a: bad template '{q!r}'*",
        ]
    )


def test_k_selects_rows_by_id(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Row ids work in -k like any task id."""
    dataset({"p.yaml": TEMPLATE, "data/rows.jsonl": jsonl(row("alpha"), row("beta"))})
    result = pytester.runpytest("--agenteval", "ds", "-k", "beta")
    result.assert_outcomes(passed=1)
    assert dataset.calls() == ["q/beta 0"]


@pytest.mark.slow
def test_rows_under_xdist(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Two xdist workers collect the same rows and run each attempt once."""
    dataset({"p.yaml": TEMPLATE, "data/rows.jsonl": jsonl(*(row(str(i)) for i in range(6)))})
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-n", "2", "--attempts", "2")
    result.assert_outcomes(passed=12)
    assert sorted(dataset.calls()) == sorted(f"q/{i} {a}" for i in range(6) for a in range(2))
    assert len(stored(pytester.path)) == 12


def test_validate_knows_sources_and_new_grader_options(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval validate` loads source rows, `none:` and `schema:`, and reports a bad row and
    an invalid schema where they are."""
    graders = (
        "graders:\n  - contains: {none: [error]}\n"
        "  - json: {schema: {type: object, required: [x]}}\n"
    )
    root = dataset(
        {
            "p.yaml": 'source: rows.csv\nid: "{id}"\ninput: "{q}"\n' + graders,
            "rows.csv": "id,q\na,1\nb\n",
            "bad.yaml": "input: q\ngraders:\n  - json: {schema: {type: 12}}\n",
        }
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "rows.csv:3: the record has 1 fields, the header 2" in out
    assert "bad.yaml:3: at graders[0].schema: not a valid JSON Schema: at schema.type" in out
    assert "1 task valid, 2 problems" in out


def test_schema_command_knows_source_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval schema task` accepts a source file with templates and the new grader options,
    and rejects unknown keys and formats in it."""
    import jsonschema

    assert main(["schema", "task"]) == 0
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    good = {
        "source": "rows.csv.gz",
        "format": "csv",
        "id": "{id}",
        "input": "Solve: {q}",
        "expected": "{a}",
        "metadata": {"level": "{level}"},
        "graders": [{"contains": {"none": ["x"]}}, {"json": {"schema": {"type": "object"}}}],
        "tags": ["t"],
    }
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({**good, "colums": 1}))
    assert list(validator.iter_errors({**good, "format": "xml"}))
    assert list(validator.iter_errors({**good, "source": 3}))


EXAMPLES = Path(__file__).parent.parent / "examples"


def test_jsonl_example_runs_offline(pytester: pytest.Pytester) -> None:
    """examples/jsonl runs as its README says: every row loads, only the toy agent's wrong
    answer fails."""
    shutil.copytree(EXAMPLES / "jsonl", pytester.path / "ex")
    result = pytester.runpytest("--agenteval", "ex")
    result.assert_outcomes(passed=12, failed=2)
    result.stdout.fnmatch_lines(["*capitals/Australia*missing 'Canberra'*"])


@pytest.mark.parametrize("name", ["jsonl", "humaneval"])
def test_example_files_match_the_schemas(name: str) -> None:
    """The examples' task files and manifests pass the published schemas (HumanEval's data
    file is fetched by the user, so only its YAML is checked)."""
    for path in sorted((EXAMPLES / name).glob("*.yaml")):
        kind = "manifest" if path.name == "agenteval.yaml" else "task"
        assert schema_problems(kind, yaml.safe_load(path.read_text())) == [], path


def test_shared_grader_that_does_not_suit_a_row(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A shared grader refusing one row's values (`number` with a non-numeric expected) is an
    error at the grader's line that names the row; the other rows run."""
    template = 'source: rows.csv\nid: "{id}"\ninput: "{q}"\nexpected: "{a}"\ngraders:\n  - number\n'
    dataset({"p.yaml": template, "rows.csv": "id,q,a\nx,1,1\ny,2,two\n"})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-agent", "agent:run")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*ds/p.yaml:6: at graders[[]0[]]: number needs a numeric expected value, not 'two'"
         " (for the row at ds/rows.csv:3)"]
    )  # fmt: skip
