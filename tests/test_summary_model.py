"""The summary is one frozen model: built, written, read back and handed to plugins as it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import DatasetMaker, task
from pytest_agenteval.cli import main
from pytest_agenteval.reporting.runref import RunRefError, read_summary_file
from pytest_agenteval.reporting.summary import RegressionSummary, Summary

EXPECTED = Path(__file__).parent / "golden" / "reports" / "expected"

HOOK = """
import json

import pydantic

from pytest_agenteval.reporting.summary import Summary


def pytest_agenteval_summary(summary, config):
    try:
        summary.status = "changed"
    except pydantic.ValidationError:
        frozen = True
    else:
        frozen = False
    seen = {
        "typed": isinstance(summary, Summary),
        "frozen": frozen,
        "pass_at_1": summary.metrics.pass_at_k["1"],
        "as_dict": summary.model_dump(by_alias=True)["schema"],
    }
    with open("seen.json", "w") as f:
        json.dump(seen, f)
"""


def test_the_summary_hook_gets_the_frozen_model(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`pytest_agenteval_summary` receives the typed Summary, which cannot be changed, and
    whose `model_dump` gives summary.json's dict."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("no")})
    pytester.makeconftest(HOOK)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, failed=1)
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen == {
        "typed": True,
        "frozen": True,
        "pass_at_1": 0.5,
        "as_dict": "agenteval.summary/1",
    }


def test_a_summary_file_reads_back_into_the_model() -> None:
    """A summary.json read back is the model, regression block included, and gives back the
    file's content."""
    path = EXPECTED / "ex2" / "summary.json"
    summary = read_summary_file(path)
    assert isinstance(summary.regression, RegressionSummary)
    assert summary.regression.only_in_base[0].task_id == "coding/fix_add"
    assert summary.to_json() == json.loads(path.read_text(encoding="utf-8"))


def damaged() -> dict[str, object]:
    """The example suite's summary.json whose first task says it has "many" attempts."""
    data = json.loads((EXPECTED / "ex1" / "summary.json").read_text(encoding="utf-8"))
    data["tasks"][0]["n"] = "many"
    return dict(data)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            {"schema": "agenteval.summary/1", "tasks": [{"dataset": "d", "task_id": "t"}]},
            "at run_id: Field required (and ",
        ),
        (damaged(), "at tasks[0].n: Input should be a valid integer"),
    ],
)
def test_a_damaged_summary_file_names_its_first_wrong_field(
    tmp_path: Path, content: dict[str, object], problem: str
) -> None:
    """A summary.json that is not a whole summary is refused naming the field, not a
    KeyError or ValueError from deep inside a report."""
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(content))
    with pytest.raises(RunRefError, match=r"summary\.json: at ") as caught:
        read_summary_file(path)
    assert problem in str(caught.value)
    assert "write the summary again with `agenteval report RUN_ID`" in str(caught.value)


def test_diff_of_a_damaged_summary_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agenteval diff` naming a summary.json whose task counts are not numbers exits 1 with
    the field, not a traceback."""
    good = EXPECTED / "ex1" / "summary.json"
    (tmp_path / "bad.json").write_text(json.dumps(damaged()))
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "bad.json", str(good)]) == 1
    err = capsys.readouterr().err
    assert "bad.json: at tasks[0].n: Input should be a valid integer" in err


def test_the_summary_is_frozen() -> None:
    """Every report reads the same summary: its fields cannot be set."""
    summary = Summary.model_validate_json((EXPECTED / "ex1" / "summary.json").read_bytes())
    with pytest.raises(ValueError, match="frozen"):
        summary.tasks[0].n = 0
