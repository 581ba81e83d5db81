"""The `agenteval` command: version, runs, report, validate, schema."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import DatasetMaker, summary_of, task
from pytest_agenteval.cli import main


def agenteval(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed console script's entry point in a fresh interpreter."""
    code = "import sys; from pytest_agenteval.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_version() -> None:
    result = agenteval("--version")
    assert result.returncode == 0 and result.stdout.startswith("pytest-agenteval ")


def test_runs_and_report(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agenteval runs` lists runs; `agenteval report RUN` re-renders the same summary."""
    dataset({"a.yaml": task("ok"), "b.yaml": task(metadata={"answers": ["no"]})})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--agenteval-run-id", "first")
    original = summary_of(pytester)
    monkeypatch.chdir(pytester.path)
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "first" in out and "ds" in out and "4/4" in out and "complete" in out
    assert main(["report", "first", "--out", "again"]) == 0
    rerendered = json.loads((pytester.path / "again/summary.json").read_text())
    assert rerendered["metrics"] == original["metrics"] and rerendered["tasks"] == original["tasks"]
    assert (pytester.path / "again/junit.xml").exists()
    assert main(["report", "nope"]) == 1
    assert "no run 'nope'" in capsys.readouterr().err


def test_runs_without_store(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main(["runs", "--cache-dir", str(tmp_path)]) == 1
    assert "no runs stored in" in capsys.readouterr().err


def test_validate(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    root = dataset(
        {
            "a.yaml": task("ok"),
            "b.yaml": "input: x\ngraders: [equal]\n",
            "c.yaml": {"id": "a", **task("ok")},
        }
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "b.yaml:2: at graders[0]: unknown grader 'equal'" in out and "duplicate task id 'a'" in out
    )
    assert "1 tasks valid, 2 problems" in out


@pytest.mark.parametrize("kind", ["task", "manifest", "record", "summary"])
def test_schema(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", kind]) == 0
    assert "$schema" in json.loads(capsys.readouterr().out)
