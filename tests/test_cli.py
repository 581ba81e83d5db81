"""The `agenteval` command: version, runs, report, validate, schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import DatasetMaker, summary_of, task
from pytest_agenteval.cli import SIGPIPE_EXIT, main
from pytest_agenteval.store.runs import Store
from test_store import record


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
    # a re-render keeps when the run finished (its last session), not when it was re-rendered
    run = json.loads((pytester.path / ".pytest_cache/agenteval/runs/first/run.json").read_text())
    assert rerendered["finished_at"] == run["sessions"][-1]["finished_at"]
    assert (pytester.path / "again/junit.xml").exists()
    # `latest` names the most recently used run for every command taking a run, as for show
    assert main(["report", "latest", "--out", "newest"]) == 0
    assert (pytester.path / "newest/summary.json").exists()
    capsys.readouterr()
    assert main(["status", "latest"]) == 0
    assert main(["repair", "latest"]) == 0
    assert "run first:" in capsys.readouterr().out
    assert main(["cancel", "latest"]) == 1
    assert "run first is not running (complete)" in capsys.readouterr().err
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
    assert "1 task valid, 2 problems" in out


@pytest.mark.parametrize("kind", ["task", "manifest", "record", "summary"])
def test_schema(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", kind]) == 0
    assert "$schema" in json.loads(capsys.readouterr().out)


def test_runs_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """`agenteval runs | head`: a reader that went away ends the command without a traceback."""
    store = Store(tmp_path / "agenteval")
    for number in range(3):
        store.create_run(f"run{number}", [{"name": "ds", "version": "1"}], {})
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    code = "import sys; from pytest_agenteval.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "runs", "--cache-dir", str(tmp_path)],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    assert done.returncode == SIGPIPE_EXIT and done.stderr == ""


def project_with_runs(root: Path, config: dict[str, str], cache: str) -> None:
    """A project folder with pytest config files, and one stored run in `cache`."""
    root.mkdir(parents=True)
    for name, text in config.items():
        (root / name).write_text(text)
    store = Store(root / cache / "agenteval")
    store.create_run("abc12345", [{"name": "ds", "version": "1"}], {})
    store.close()


@pytest.mark.parametrize(
    ("config", "cache"),
    [
        (
            {"pyproject.toml": '[tool.pytest.ini_options]\ncache_dir = "build/cache"\n'},
            "build/cache",
        ),
        ({"pyproject.toml": '[tool.pytest]\ncache_dir = "native"\n'}, "native"),
        ({"pytest.ini": "[pytest]\ncache_dir = .c\n", "pyproject.toml": ""}, ".c"),
        ({"tox.ini": "[pytest]\ncache_dir = tox\n"}, "tox"),
        ({"setup.cfg": "[tool:pytest]\ncache_dir = cfg\n"}, "cfg"),
        ({"pytest.ini": "[pytest]\n"}, ".pytest_cache"),
        ({"pyproject.toml": "[project]\nname = 'x'\n"}, ".pytest_cache"),
    ],
)
def test_runs_finds_the_cache_dir_as_pytest_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: dict[str, str],
    cache: str,
) -> None:
    """From a subfolder, or with --rootdir: the rootdir's pytest config and its cache_dir."""
    project = tmp_path / "project"
    project_with_runs(project, config, cache)
    (project / "sub/deeper").mkdir(parents=True)
    monkeypatch.chdir(project / "sub/deeper")
    assert main(["runs"]) == 0
    assert "abc12345" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "--rootdir", "project"]) == 0
    assert "abc12345" in capsys.readouterr().out


def test_run_ids_can_be_shortened_as_git_commits_can(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A unique prefix names a run; an ambiguous one lists the candidates; an exact id wins."""
    store = Store(tmp_path / "agenteval")
    for run_id in ("ab", "ab12cd34", "ab98ef76", "ff001122"):
        store.create_run(run_id, [{"name": "ds", "version": "1"}], {})
        store.commit(run_id, record("t", 0))
        store.finish_run(run_id, "complete", {})
    report = ["report", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    assert main([*report, "ff"]) == 0
    assert json.loads((tmp_path / "out/summary.json").read_text())["run_id"] == "ff001122"
    assert main([*report, "ab"]) == 0, "an exact id is never ambiguous"
    capsys.readouterr()
    assert main([*report, "ab1"]) == 0
    assert main([*report, "a"]) == 1
    assert (
        "run id 'a' is ambiguous; it starts 3 runs: ab, ab12cd34, ab98ef76"
        in capsys.readouterr().err
    )
    assert main([*report, "zz"]) == 1
    assert "no run 'zz'" in capsys.readouterr().err
    assert main(["repair", "ab9", "--cache-dir", str(tmp_path)]) == 0
    assert "run ab98ef76: run.json is readable, kept as it is" in capsys.readouterr().out


def test_status_and_cancel_of_a_run_before_its_first_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a run, `status` and `cancel` say there is none; a run whose session holds it
    but has not planned yet is "starting", and `cancel` asks it to stop; once that session
    is gone without planning, `status` says no session got to planning and what the run
    holds (or why that cannot be counted). No command at all prints the help."""
    cache = ["--cache-dir", str(tmp_path)]
    (tmp_path / "agenteval/runs").mkdir(parents=True)
    assert main(["status", *cache]) == main(["cancel", *cache]) == 1
    err = capsys.readouterr().err
    assert "agenteval: no run stored yet" in err and "agenteval: no run is running" in err
    store = Store(tmp_path / "agenteval")
    store.create_run("r1", [{"name": "ds", "version": "1"}], {"override": None})
    assert main(["status", *cache]) == 0
    assert capsys.readouterr().out == "run r1: a session is starting (no progress.json yet)\n"
    assert main(["cancel", "r1", *cache]) == 0
    assert "run r1: cancel requested" in capsys.readouterr().out
    assert (tmp_path / "agenteval/runs/r1/cancel").exists()
    store.close()
    assert main(["status", "r1", *cache]) == 1
    err = capsys.readouterr().err
    assert "run r1 has no progress.json: no session of it got to planning" in err
    assert "the run holds 0 of 0 planned attempts (interrupted)" in err
    (tmp_path / "agenteval/runs/r1/run.json").write_text("{")
    assert main(["status", "r1", *cache]) == 1
    err = capsys.readouterr().err
    assert "its records cannot be counted: " in err and "`agenteval repair r1` rebuilds" in err
    assert main([]) == 2
    assert "usage: agenteval" in capsys.readouterr().out
