"""Finding datasets as pytest finds rootdir and conftests: parts of a dataset keep its manifest
and ids, positional paths inside a dataset collect it, and the ini setting only joins pytest's
default arguments."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, stored, task
from pytest_agenteval.core.errors import TaskFileError
from pytest_agenteval.sources.dataset import load_dataset
from pytest_agenteval.sources.discovery import (
    add_dataset_args,
    dataset_args,
    find_dataset_root,
)

EXAMPLE_SUITE = Path(__file__).parent.parent / "example_suite"

TASKS = {
    "top.yaml": task("ok"),
    "math/add.yaml": task("ok"),
    "math/sub.yaml": task("ok"),
    "math/lists.yaml": {"tasks": [{"id": "sum", **task("ok")}, {"id": "max", **task("ok")}]},
    "geo/capital.yaml": task("ok"),
}


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    """The node ids `pytest --co -q` lists for `args`."""
    result = pytester.runpytest(*args, "--co", "-q")
    return [line for line in result.stdout.lines if "::" in line]


# --- finding the manifest -------------------------------------------------------------------


def test_manifest_is_found_at_or_above_a_path(tmp_path: Path) -> None:
    """The nearest agenteval.yaml at or above a folder or file wins, as for pytest's rootdir."""
    (tmp_path / "ds/math/inner").mkdir(parents=True)
    (tmp_path / "ds/agenteval.yaml").write_text("name: ds\n")
    (tmp_path / "ds/math/inner/agenteval.yaml").write_text("name: inner\n")
    (tmp_path / "ds/math/add.yaml").write_text("input: q\n")
    assert find_dataset_root(tmp_path / "ds") == tmp_path / "ds"
    assert find_dataset_root(tmp_path / "ds/math") == tmp_path / "ds"
    assert find_dataset_root(tmp_path / "ds/math/add.yaml") == tmp_path / "ds"
    assert find_dataset_root(tmp_path / "ds/math/inner") == tmp_path / "ds/math/inner"
    assert find_dataset_root(tmp_path) is None


def test_a_part_of_a_dataset_loads_the_whole_dataset(tmp_path: Path) -> None:
    """load_dataset on a subfolder or task file gives the dataset with its manifest."""
    (tmp_path / "ds/math").mkdir(parents=True)
    (tmp_path / "ds/agenteval.yaml").write_text("name: real\nagent: agent:run\n")
    (tmp_path / "ds/math/add.yaml").write_text("input: q\n")
    for path in (tmp_path / "ds/math", tmp_path / "ds/math/add.yaml"):
        dataset = load_dataset(path)
        assert (dataset.root, dataset.name) == (tmp_path / "ds", "real")
        assert dataset.id_for(tmp_path / "ds/math/add.yaml") == "math/add"


def test_without_a_manifest_the_folder_is_the_dataset(tmp_path: Path) -> None:
    """No agenteval.yaml at or above: a folder (or a file's folder) is a dataset of its own."""
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose/a.yaml").write_text("input: q\n")
    assert load_dataset(tmp_path / "loose").root == tmp_path / "loose"
    assert load_dataset(tmp_path / "loose/a.yaml").name == "loose"
    with pytest.raises(TaskFileError, match="nothere: not found"):
        load_dataset(tmp_path / "nothere")


def test_only_folders_and_task_files_in_a_dataset_name_it(tmp_path: Path) -> None:
    """Python files, the manifest and paths outside any dataset never activate the plugin."""
    (tmp_path / "ds/ws").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    for name in ("ds/agenteval.yaml", "ds/a.yaml", "ds/ws/test_x.py", "tests/test_unit.py"):
        (tmp_path / name).write_text("")
    args = ["ds", "ds/a.yaml::a[attempt-0]", "ds/ws/test_x.py", "ds/agenteval.yaml", "tests"]
    assert dataset_args(args, tmp_path) == [tmp_path / "ds", tmp_path / "ds/a.yaml"]


def test_dataset_paths_join_arguments_that_do_not_cover_or_narrow_them(tmp_path: Path) -> None:
    """A dataset path is added unless an argument lies above it (collects it) or inside it."""
    ds = tmp_path / "ds"
    assert add_dataset_args(["tests"], [ds], tmp_path) == ["tests", str(ds)]
    assert add_dataset_args([str(tmp_path)], [ds], tmp_path) == [str(tmp_path)]
    assert add_dataset_args(["ds/a.yaml::a"], [ds], tmp_path) == ["ds/a.yaml::a"]


# --- the ini setting ------------------------------------------------------------------------


INI = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\nagenteval_datasets = ["{}"]\n'


def unit_tests_project(pytester: pytest.Pytester, dataset: DatasetMaker, ini_path: str) -> None:
    """A project with its own unit tests (testpaths) and a dataset named in pyproject.toml."""
    dataset(TASKS)
    pytester.makepyprojecttoml(INI.format(ini_path))
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests/test_unit.py").write_text("def test_unit(): pass\n")


def test_ini_dataset_joins_the_default_arguments(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain `pytest` runs testpaths *and* the ini dataset, also from a subfolder."""
    unit_tests_project(pytester, dataset, "ds")
    pytester.runpytest().assert_outcomes(passed=1 + 6)
    monkeypatch.chdir(pytester.path / "tests")
    pytester.runpytest().assert_outcomes(passed=1 + 6)


@pytest.mark.parametrize("workers", WORKERS)
def test_explicit_arguments_never_start_the_ini_dataset(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """`pytest tests/test_unit.py` (an IDE running one test) runs that test only: no run, no
    reports, nothing stored."""
    unit_tests_project(pytester, dataset, "ds")
    result = pytester.runpytest_subprocess("tests/test_unit.py", *workers)
    result.assert_outcomes(passed=1)
    assert "agenteval: run" not in result.stdout.str()
    assert not (pytester.path / ".pytest_cache/agenteval").exists()
    assert dataset.calls() == []


def test_ini_dataset_part_collects_only_that_part(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """An ini path inside a dataset selects that part, with the dataset's ids, even when a
    default argument above the dataset walks into it."""
    dataset(TASKS)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nagenteval_datasets = ["ds/math"]\n')
    pytester.makepyfile(test_unit="def test_unit(): pass")
    assert collected(pytester) == [
        "ds/math/add.yaml::math/add[attempt-0]",
        "ds/math/lists.yaml::sum[attempt-0]",
        "ds/math/lists.yaml::max[attempt-0]",
        "ds/math/sub.yaml::math/sub[attempt-0]",
        "test_unit.py::test_unit",
    ]


# --- parts of a dataset ---------------------------------------------------------------------


def test_agenteval_part_keeps_the_datasets_ids_and_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`--agenteval ds/math` and `--agenteval ds/math/add.yaml` select tasks of the dataset
    `ds`: same node ids, same task ids in the store, the manifest's agent runs them."""
    dataset(TASKS)
    whole = collected(pytester, "--agenteval", "ds")
    assert collected(pytester, "--agenteval", "ds/math") == [i for i in whole if "/math/" in i]
    assert collected(pytester, "--agenteval", "ds/math/add.yaml") == [
        "ds/math/add.yaml::math/add[attempt-0]"
    ]
    pytester.runpytest("--agenteval", "ds/math/lists.yaml").assert_outcomes(passed=2)
    assert stored(pytester.path) == [("max", 0, "pass"), ("sum", 0, "pass")]


def test_positional_paths_inside_a_dataset_collect_it(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`pytest ds`, `pytest ds/math`, `pytest ds/math/add.yaml` and a node id need no
    --agenteval and give the ids of the whole run."""
    dataset(TASKS)
    whole = collected(pytester, "--agenteval", "ds", "--attempts", "2")
    assert collected(pytester, "ds", "--attempts", "2") == whole
    assert collected(pytester, "ds/math", "--attempts", "2") == [i for i in whole if "/math/" in i]
    assert collected(pytester, "ds/math/add.yaml", "ds/top.yaml", "--attempts", "2") == [
        "ds/math/add.yaml::math/add[attempt-0]",
        "ds/math/add.yaml::math/add[attempt-1]",
        "ds/top.yaml::top[attempt-0]",
        "ds/top.yaml::top[attempt-1]",
    ]
    node_id = "ds/math/add.yaml::math/add[attempt-1]"
    assert collected(pytester, node_id, "--attempts", "2") == [node_id]


@pytest.mark.parametrize("workers", WORKERS)
def test_a_part_runs_and_stores_like_the_whole_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Running a folder of a dataset stores its attempts under the dataset's name and ids,
    also under xdist, where every worker finds the same dataset."""
    dataset(TASKS)
    result = pytester.runpytest_subprocess("ds/math", "--attempts", "2", *workers)
    result.assert_outcomes(passed=8)
    assert stored(pytester.path) == [
        (task_id, attempt, "pass")
        for task_id in ("math/add", "math/sub", "max", "sum")
        for attempt in (0, 1)
    ]
    assert sorted(dataset.calls()) == sorted(f"{t} {a}" for t, a, _ in stored(pytester.path))


def test_task_ids_name_tasks_after_a_dataset_folder(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`ds::<task id>[attempt-<i>]` runs that task wherever its file is; an unknown id is a
    usage error naming it."""
    dataset(TASKS)
    assert collected(pytester, "ds::math/add[attempt-1]", "--attempts", "2") == [
        "ds/math/add.yaml::math/add[attempt-1]"
    ]
    assert collected(pytester, "ds/math::max", "--agenteval", "ds", "--attempts", "2") == [
        "ds/math/lists.yaml::max[attempt-0]",
        "ds/math/lists.yaml::max[attempt-1]",
    ]
    result = pytester.runpytest("ds::math/ad")
    result.stderr.fnmatch_lines(["*not found: ds::math/ad", "*no task 'math/ad' in dataset 'ds'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_workspace_template_tests_are_never_collected(pytester: pytest.Pytester) -> None:
    """`pytest example_suite` collects the tasks only, not the workspace template's own test
    file; naming that test file runs it as a plain test, without starting an evaluation."""
    shutil.copytree(EXAMPLE_SUITE, pytester.path / "example_suite")
    ids = collected(pytester, "example_suite")
    assert len(ids) == 39
    assert not [i for i in ids if ".py" in i]
    template_test = "example_suite/coding/fix_add_ws/test_calc.py"
    result = pytester.runpytest(template_test, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)  # the template's bug is what the agent must fix
    assert "agenteval: run" not in result.stdout.str()


def test_unrelated_runs_do_not_load_the_plugin(pytester: pytest.Pytester) -> None:
    """A run whose arguments name no dataset imports none of the plugin's heavy modules."""
    pytester.makepyfile(
        test_lean="""
        import sys

        def test_lean():
            heavy = [m for m in sys.modules if m.startswith(("pydantic", "pytest_agenteval.glue"))]
            assert heavy == []
        """
    )
    pytester.runpytest_subprocess("test_lean.py").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("ini", "args", "message"),
    [
        ("", ["--agenteval", "nothere"], "--agenteval: nothere: not found"),
        ('agenteval_datasets = ["gone"]', [], "ini agenteval_datasets: gone: not found"),
    ],
)
def test_a_missing_dataset_path_is_a_usage_error(
    pytester: pytest.Pytester, ini: str, args: list[str], message: str
) -> None:
    """A dataset path that does not exist names the option (or ini setting) and the path."""
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{ini}\n")
    result = pytester.runpytest(*args)
    result.stderr.fnmatch_lines([f"ERROR: {message}", "Hint: pass a dataset folder*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize("info", ["--markers", "--fixtures", "--fixtures-per-test"])
def test_options_that_run_nothing_start_no_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, info: str
) -> None:
    """Listing markers or fixtures of an ini-configured project creates no run (a run that
    never finishes would stay "running" in `agenteval runs`)."""
    unit_tests_project(pytester, dataset, "ds")
    assert pytester.runpytest(info).ret == pytest.ExitCode.OK
    assert not list(pytester.path.glob(".pytest_cache/agenteval/runs/*"))
