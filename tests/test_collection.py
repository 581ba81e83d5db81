"""Collection: --agenteval without positional args, item names, -k, -m, bad files, strictness."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from helpers import WORKERS, DatasetMaker, task


def test_collects_one_item_per_task_and_attempt(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`pytest --agenteval ds --attempts 2` collects <file>::<task_id>[attempt-<i>] items only."""
    dataset({"arith/add.yaml": task("ok"), "list.yaml": {"tasks": [{"id": "x", **task("ok")}]}})
    pytester.makepyfile(test_unrelated="def test_other(): pass")
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--co", "-q")
    result.stdout.fnmatch_lines(
        [
            "ds/arith/add.yaml::arith/add[[]attempt-0[]]",
            "ds/arith/add.yaml::arith/add[[]attempt-1[]]",
            "ds/list.yaml::x[[]attempt-0[]]",
            "ds/list.yaml::x[[]attempt-1[]]",
            "4 tests collected*",
        ]
    )
    assert "test_other" not in result.stdout.str()


def test_an_attempts_location_is_pytests_own(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt's `location` (worked out once per task file) is what pytest's own gives, for
    a dataset below the rootdir and one outside it."""
    dataset({"arith/add.yaml": task("ok"), "list.yaml": {"tasks": [{"id": "x", **task("ok")}]}})
    outside = pytester.mkdir("elsewhere")
    (pytester.path / "ds").rename(outside / "ds")
    inner = pytester.mkdir("inner")
    compared: list[int] = []

    class Compare:
        def pytest_collection_finish(self, session: pytest.Session) -> None:
            items = session.items
            pytests = vars(pytest.Item)["location"].func
            assert [i.location for i in items] == [pytests(i) for i in items]
            compared.append(len(items))

    for where, path in ((outside, "ds"), (inner, "../elsewhere/ds")):
        monkeypatch.chdir(where)
        args = ("--agenteval", path, "--rootdir", str(where), "--attempts", "2", "--co")
        pytester.inline_run(*args, plugins=[Compare()])
    assert compared == [4, 4]


def test_positional_node_ids_are_kept(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A node id the user names is run alone, not swallowed by the dataset folder."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "ds/a.yaml::a[attempt-1]", "--attempts", "3")
    result.assert_outcomes(passed=1)


def test_other_tests_run_beside_the_dataset(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Positional test paths outside the dataset still run, and the dataset is added."""
    dataset({"a.yaml": task("ok")})
    pytester.makepyfile(test_unrelated="def test_other(): pass")
    pytester.runpytest("--agenteval", "ds", "test_unrelated.py").assert_outcomes(passed=2)


def test_plugin_is_inert_without_agenteval(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Without --agenteval no YAML is collected, nothing is stored."""
    dataset({"a.yaml": task("ok")})
    pytester.makepyfile(test_unrelated="def test_other(): pass")
    pytester.runpytest().assert_outcomes(passed=1)
    assert not (pytester.path / ".pytest_cache/agenteval").exists()


def test_ini_settings(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """agenteval_datasets and agenteval_attempts work from pyproject.toml; options override."""
    dataset({"a.yaml": task("ok")})
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nagenteval_datasets = ["ds"]\nagenteval_attempts = "2"\n'
    )
    pytester.runpytest().assert_outcomes(passed=2)
    pytester.runpytest("--attempts", "3").assert_outcomes(passed=3)


def test_manifest_default_attempts(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset({"a.yaml": task("ok")}, manifest={"defaults": {"attempts": 4}})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=4)


def test_k_selects_tasks_and_attempts(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """-k by task id selects its attempts; -k attempt-0 selects first attempts."""
    dataset({"add.yaml": task("ok"), "sub.yaml": task("ok"), "geo/capital.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-k", "add").assert_outcomes(
        passed=3
    )
    pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-k", "attempt-0").assert_outcomes(
        passed=3
    )
    pytester.runpytest(
        "--agenteval", "ds", "--attempts", "3", "-k", "geo/capital and attempt-2"
    ).assert_outcomes(passed=1)


def test_tags_are_registered_markers(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Tags become markers; -m selects them and --strict-markers does not complain."""
    dataset({"a.yaml": task("ok", tags=["smoke"]), "b.yaml": task("ok", tags=["slow"])})
    result = pytester.runpytest("--agenteval", "ds", "-m", "smoke", "--strict-markers")
    result.assert_outcomes(passed=1)


def test_malformed_file_is_one_erroring_item_and_the_rest_runs(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A broken task file errors with file, line, field and a hint; no plugin traceback."""
    dataset(
        {
            "good.yaml": task("ok"),
            "bad.yaml": "input: question\nexpected: ok\ngraders:\n  - equal\n",
            "broken.yaml": "input: [unclosed\n",
        }
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "ds/bad.yaml:4: at graders[[]0]: unknown grader 'equal'",
            "Hint: did you mean 'equals'?",
            "ds/broken.yaml:2: invalid YAML*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "pytest_agenteval" not in result.stdout.str()


def test_strict_makes_bad_files_collection_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    dataset({"good.yaml": task("ok"), "bad.yaml": "input: q\nexpected: ok\nbogus: 1\n"})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-strict")
    result.stdout.fnmatch_lines(
        ["*ERROR collecting*", "*bad.yaml:3: at bogus: unknown key 'bogus'*"]
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_duplicate_ids_name_both_files(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset({"a.yaml": {"id": "same", **task("ok")}, "b.yaml": {"id": "same", **task("ok")}})
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*b.yaml:1: at id: duplicate task id 'same', first defined in *a.yaml"]
    )


def test_non_task_files_and_workspace_templates_are_not_collected(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Python files and a workspace's own tests/conftest/YAML inside the dataset are ignored."""
    dataset(
        {
            "coding.yaml": {**task("ok"), "workspace": "ws"},
            "ws/test_inside.py": "def test_never(): raise AssertionError",
            "ws/conftest.py": "raise RuntimeError('workspace conftest must not load')",
            "ws/settings.yaml": "not: a task",
            "test_helper.py": "def test_never(): raise AssertionError",
        }
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)


def test_manifest_task_globs(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    dataset(
        {"tasks/a.yaml": task("ok"), "other/b.yaml": task("ok")},
        manifest={"tasks": ["tasks/*.yaml"]},
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attempts", "0"], "*--attempts: '0' is not a positive integer*"),
        (
            ["--pass-k", "1,x"],
            "*--pass-k: '1,x' is not a comma-separated list of positive integers*",
        ),
        (["--agenteval-task-rule", "most"], "*'most' is not 'any', 'all' or a pass rate*"),
        (["--agenteval-agent", "nocolon"], "*'nocolon' is not module:function*"),
    ],
)
def test_bad_options_are_usage_errors(
    pytester: pytest.Pytester, dataset: DatasetMaker, args: list[str], message: str
) -> None:
    dataset({"a.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", *args)
    result.stderr.fnmatch_lines([message])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_bad_manifest_is_a_usage_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "ds").mkdir()
    (pytester.path / "ds/agenteval.yaml").write_text(
        "name: x\nversion: 1\ndefaults: {attemps: 2}\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.stderr.fnmatch_lines(
        [
            "*agenteval.yaml:3: at defaults.attemps: unknown key 'attemps'",
            "Hint: did you mean 'attempts'?",
        ]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_unchanged_files_are_not_parsed_again(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """The second run reuses validated specs; an edited file is parsed (and checked) afresh."""
    root = dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=2)
    assert (pytester.path / ".pytest_cache/agenteval/specs.json").exists()
    (root / "b.yaml").write_text("input: q\nexpected: ok\nbogus: 1\n")
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["ds/b.yaml:3: at bogus: unknown key 'bogus'"])
    (root / "ws").mkdir()
    (root / "a.yaml").write_text(
        '{"input": "q", "expected": "ok", "workspace": "ws", "metadata": {"answer": "ok"}}'
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1, errors=1)
    (root / "ws").rmdir()
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(["ds/a.yaml:1: at workspace: workspace folder 'ws' not found*"])


def test_collected_tree_is_kept_from_the_gc_for_the_session_only(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Collection freezes what it built, so the GC stops rescanning it; all is given back after."""
    root = dataset({"a.yaml": task(expected="frozen")})
    (root / "gc_agent.py").write_text(
        "import gc\n\n"
        "def run(task):\n"
        "    return 'frozen' if gc.isenabled() and gc.get_freeze_count() else 'not frozen'\n"
    )
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-agent", "gc_agent:run")
    result.assert_outcomes(passed=1)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_process_that_exits_freezes_what_is_left_first(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """The tree is given back to the GC at the session's end, and everything is frozen again
    at exit, before the interpreter's final collections: scanning the dead tree would only
    make the exit slow (seconds at tens of thousands of attempts)."""
    dataset({"a.yaml": task("ok")})
    pytester.makeconftest(
        """
        import atexit, gc

        def pytest_configure(config):
            atexit.register(lambda: print("FROZEN-AT-EXIT", gc.get_freeze_count() > 0))
            config.add_cleanup(lambda: print("FROZEN-AFTER", gc.get_freeze_count() > 0))
        """
    )
    result = pytester.runpytest_subprocess("--agenteval", "ds")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["FROZEN-AFTER False", "FROZEN-AT-EXIT True"])


ONE_PASS_DATASET: dict[str, str | dict[str, Any]] = {
    "top.yaml": task("ok"),
    "b/nested/deep.yml": task("ok"),
    "b/list.yaml": {"tasks": [{"id": "l1", **task("ok")}, {"id": "l2", **task("ok")}]},
    "a/coding.yaml": {**task("ok"), "workspace": "ws"},
    "a/ws/conftest.py": "raise RuntimeError('workspace conftest must not load')",
    "a/ws/inner.yaml": task("ok"),
    "a/broken.yaml": "input: [unclosed\n",
    "c/conftest.py": "collect_ignore = ['skipped.yaml']\n",
    "c/skipped.yaml": task("ok"),
    "c/kept.yaml": task("ok"),
    "d/gone.yaml": task("ok"),
    "e/glob_gone.yaml": task("ok"),
}


def test_one_pass_collection_matches_per_file_collection(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A dataset root is collected in one pass unless an argument points below it (or strict):
    the same items in the same order, with folder conftests, collect_ignore and --ignore."""
    dataset(ONE_PASS_DATASET)

    def ids(*args: str) -> list[str]:
        options = ["--ignore=ds/d", "--ignore-glob=*/e/*", "--attempts", "2", "--co", "-q"]
        result = pytester.runpytest("--agenteval", "ds", *args, *options)
        return [line for line in result.stdout.lines if "::" in line]

    def tree(*args: str) -> str:
        return pytester.runpytest("--agenteval", "ds", *args, "--co").stdout.str()

    expected = [
        "ds/a/broken.yaml::a/broken[load-error]",
        "ds/a/coding.yaml::a/coding[attempt-0]",
        "ds/a/coding.yaml::a/coding[attempt-1]",
        "ds/b/list.yaml::l1[attempt-0]",
        "ds/b/list.yaml::l1[attempt-1]",
        "ds/b/list.yaml::l2[attempt-0]",
        "ds/b/list.yaml::l2[attempt-1]",
        "ds/b/nested/deep.yml::b/nested/deep[attempt-0]",
        "ds/b/nested/deep.yml::b/nested/deep[attempt-1]",
        "ds/c/kept.yaml::c/kept[attempt-0]",
        "ds/c/kept.yaml::c/kept[attempt-1]",
        "ds/top.yaml::top[attempt-0]",
        "ds/top.yaml::top[attempt-1]",
    ]
    assert "<DatasetDir ds>" in tree()
    assert ids() == expected
    per_file = ["ds/a", "ds/b", "ds/c", "ds/top.yaml"]
    assert "<DatasetDir" not in tree(*per_file)
    assert ids(*per_file) == expected
    assert "<DatasetDir" not in tree("--agenteval-strict")
    # Strict: the bad file is a collection error of its own collector, the rest is collected.
    assert ids("--agenteval-strict") == [i for i in expected if "broken" not in i]


@pytest.mark.parametrize("workers", WORKERS)
def test_last_failed_reruns_only_the_failed_attempts(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """pytest's --lf knows attempts by node id: only the attempt that failed runs again."""
    dataset({"good.yaml": task("ok"), "flaky.yaml": task(metadata={"answers": ["ok", "no"]})})
    args = ["--agenteval", "ds", "--attempts", "2", *workers]
    pytester.runpytest(*args).assert_outcomes(passed=3, failed=1)
    result = pytester.runpytest(*args, "--lf")
    # Under xdist the workers deselect, so the controller reports no deselected count.
    result.assert_outcomes(failed=1, deselected=0 if workers else 3)
    result.stdout.fnmatch_lines(["0 passed, 1 failed, 0 errors; 1 run now"])


def test_files_are_asked_about_one_by_one_only_when_something_could_ignore_them(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A dataset folder asks pytest_ignore_collect about each of its files only when something
    could ignore one (--ignore, --ignore-glob, collect_ignore(_glob), another hook): the same
    files are collected either way, and a folder of many small task files is collected fast."""
    dataset(
        {
            "a.yaml": task("ok"),
            "b.yaml": task("ok"),
            "notes.txt": "not a task",
            "c/one.yaml": task("ok"),
            "c/two.yaml": task("ok"),
            "d/conftest.py": "collect_ignore_glob = ['*three*']\n",
            "d/three.yaml": task("ok"),
            "d/four.yaml": task("ok"),
        }
    )
    base = ["--agenteval", "ds", "--co", "-q", "-p", "no:hypothesispytest"]

    def files(*args: str) -> list[str]:
        reprec = pytester.inline_run(*base, *args)
        collected = reprec.getcalls("pytest_itemcollected")
        return sorted({call.item.nodeid.split("::")[0] for call in collected})

    reprec = pytester.inline_run(*base)
    asked = {call.collection_path.name for call in reprec.getcalls("pytest_ignore_collect")}
    assert {"c", "d", "three.yaml", "four.yaml"} <= asked  # folders, and where a conftest ignores
    assert not {"a.yaml", "b.yaml", "one.yaml"} & asked
    everything = ["ds/a.yaml", "ds/b.yaml", "ds/c/one.yaml", "ds/c/two.yaml", "ds/d/four.yaml"]
    assert files() == everything
    assert files("--ignore=ds/a.yaml") == everything[1:]
    assert files("--ignore-glob=*/c/two.yaml") == [f for f in everything if "two" not in f]
    pytester.makeconftest(
        "def pytest_ignore_collect(collection_path):\n"
        "    return collection_path.name == 'b.yaml' or None\n"
    )
    assert files() == [f for f in everything if f != "ds/b.yaml"]
