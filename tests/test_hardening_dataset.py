"""Hostile datasets: spec cache, workspace escapes, alias bombs, workspace names and places."""

from __future__ import annotations

import json
import os
import pickle
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import DatasetMaker, aid, task
from pytest_agenteval.core.errors import TaskFileError, TemplateError
from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import TaskSpec
from pytest_agenteval.execution.workspaces import Workspaces, folder_name
from pytest_agenteval.sources.dataset import load_dataset, load_task_file
from pytest_agenteval.sources.speccache import CACHE_SCHEMA, CachedTask, SpecCache
from pytest_agenteval.sources.taskfile import LoadFailure
from pytest_agenteval.sources.yamlfile import MAX_EXPANDED_NODES, parse

SECRET = "agenteval-secret-7Q9xZ"


def all_bytes_below(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


# 1. The spec cache


class Exploit:
    """Unpickling this creates a marker file: what a crafted cache could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_an_old_pickle_cache_is_never_loaded_and_is_removed(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A crafted specs.pickle left in the cache dir runs no code and is deleted."""
    dataset({"a.yaml": task("ok")})
    folder = pytester.path / ".pytest_cache/agenteval"
    folder.mkdir(parents=True)
    marker = pytester.path / "exploited"
    (folder / "specs.pickle").write_bytes(pickle.dumps(Exploit(marker)))
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    assert not marker.exists()
    assert not (folder / "specs.pickle").exists()
    data = json.loads((folder / "specs.json").read_text())
    assert data["schema"] == CACHE_SCHEMA


def test_env_values_never_reach_any_cache_file(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Tasks whose agent or grader has `env:` values are not cached; other tasks still are."""
    program = "import os; print('ok' if os.environ['TOKEN'] else 'no')"
    dataset(
        {
            "plain.yaml": task("ok"),
            "agent_env.yaml": {
                "input": "q",
                "expected": "ok",
                "agent": {"command": ["{python}", "-c", program], "env": {"TOKEN": SECRET}},
            },
            "grader_env.yaml": {
                "input": "q",
                "metadata": {"answer": "ok"},
                "graders": [
                    {"command": {"argv": ["{python}", "-c", "pass"], "env": {"KEY": SECRET}}}
                ],
            },
        }
    )
    for _ in range(2):  # the second run reads the cache the first one wrote
        pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=3)
    cache = pytester.path / ".pytest_cache"
    assert SECRET.encode() not in all_bytes_below(cache)
    stored = json.loads((cache / "agenteval/specs.json").read_text())["files"]
    assert [Path(p).name for p in stored] == ["plain.yaml"]


def cache_with_one_file(tmp_path: Path) -> tuple[Path, Path]:
    """A specs.json holding the validated spec of one real task file."""
    task_file = tmp_path / "t.yaml"
    task_file.write_text("id: t\ninput: q\nexpected: ok\n")
    cache = SpecCache(tmp_path / "specs.json")
    spec = TaskSpec.model_validate({"id": "t", "input": "q", "expected": "ok"})
    cache.put(task_file, [CachedTask(spec, 1, ())])
    cache.save()
    return tmp_path / "specs.json", task_file


def test_a_saved_cache_gives_back_equal_specs(tmp_path: Path) -> None:
    """What was stored is read back as the same validated spec, line and place."""
    path, task_file = cache_with_one_file(tmp_path)
    (found,) = SpecCache(path).get(task_file) or []
    assert found == CachedTask(TaskSpec(id="t", input="q", expected="ok"), 1, ())


def damage_entry(data: dict[str, Any], change: str) -> None:
    ((_, entry),) = data["files"].items()
    if change == "spec":
        entry[2][0][0]["input"] = 5
    elif change == "line":
        entry[2][0][1] = "one"
    elif change == "loc":
        entry[2][0][2] = ["tasks", "x"]
    elif change == "tasks":
        entry[2] = {"not": "a list"}
    elif change == "version":
        data["versions"]["pydantic"] = "0.0"
    elif change == "schema":
        data["schema"] = "agenteval.specs/99"


@pytest.mark.parametrize("change", ["spec", "line", "loc", "tasks", "version", "schema"])
def test_a_mistyped_or_foreign_cache_entry_is_a_miss(tmp_path: Path, change: str) -> None:
    """Valid JSON with a wrong type anywhere, or from another version, is not used."""
    path, task_file = cache_with_one_file(tmp_path)
    data = json.loads(path.read_text())
    damage_entry(data, change)
    path.write_text(json.dumps(data))
    assert SpecCache(path).get(task_file) is None


@pytest.mark.parametrize(
    "content",
    [b"", b'{"schema": "agenteval.specs/1", "files": {', b"\xff\xfe garbage", b"[1, 2]", b"nul"],
)
def test_a_damaged_cache_file_is_a_miss(tmp_path: Path, content: bytes) -> None:
    """Truncated, binary or wrongly shaped cache files are a cache miss, never an error."""
    path, task_file = cache_with_one_file(tmp_path)
    path.write_bytes(content)
    assert SpecCache(path).get(task_file) is None


def test_a_damaged_cache_does_not_disturb_a_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A run over a truncated cache loads every task from its file, and rewrites the cache."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=2)
    path = pytester.path / ".pytest_cache/agenteval/specs.json"
    path.write_bytes(path.read_bytes()[:-20])
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=2)
    assert len(json.loads(path.read_text())["files"]) == 2


# 2. Workspaces stay inside the dataset


def make_outside(pytester: pytest.Pytester) -> Path:
    outside = pytester.path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET)
    return outside


ESCAPES = {
    "parent": ("../outside", None, "workspace folder '../outside' is outside the dataset"),
    "absolute": ("{outside}", None, "is outside the dataset"),
    "template_is_link": ("ws", "ws -> {outside}", "is outside the dataset"),
    "link_to_outside_file": (
        "ws",
        "ws/data.txt -> {outside}/secret.txt",
        "the symlink data.txt in the workspace folder points outside it",
    ),
    "link_to_outside_folder": (
        "ws",
        "ws/deep/sub -> {outside}/sub",
        "the symlink deep/sub in the workspace folder points outside it",
    ),
    "link_to_own_folder": ("ws", "ws/loop -> ..", "the symlink loop in the workspace folder"),
    "link_to_folder_inside": (
        "ws",
        "ws/again -> {ds}/ws/deep",
        "the symlink again in the workspace folder points to a folder",
    ),
    "dangling_link": ("ws", "ws/gone -> {ds}/ws/nothing", "points to nothing"),
    "holds_its_task_file": (".", None, "workspace folder '.' holds this task file"),
}


@pytest.mark.parametrize("case", ESCAPES)
def test_workspaces_cannot_reach_outside_the_dataset(
    pytester: pytest.Pytester, dataset: DatasetMaker, case: str
) -> None:
    """Workspace folders and the links in them resolve inside the dataset, else the task fails
    to load at its `workspace:` line with a hint; the agent never runs, other tasks do."""
    outside = make_outside(pytester)
    workspace, link, message = ESCAPES[case]
    root = dataset({"ok.yaml": task("ok")})
    (root / "ws" / "deep").mkdir(parents=True)
    (root / "ws" / "deep" / "f.txt").write_text("inside")
    names = {"outside": str(outside), "ds": str(root)}
    if link:
        source, target = (part.format(**names) for part in link.split(" -> "))
        if case == "template_is_link":
            (root / "ws" / "deep" / "f.txt").unlink()
            (root / "ws" / "deep").rmdir()
            (root / "ws").rmdir()
        (pytester.path / "ds" / source).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / "ds" / source).symlink_to(target)
    (root / "escape.yaml").write_text(
        f"input: q\nexpected: ok\nworkspace: '{workspace.format(**names)}'\n"
        "metadata: {answer: ok}\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"ds/escape.yaml:3: at workspace: *{message}*", "Hint: *"])
    assert dataset.calls() == ["ok 0"]


@pytest.mark.parametrize(
    ("workspace", "reason"),
    [
        ('"a\\0b"', "embedded null byte"),
        ("x" * 5000, "File name too long"),
        ("loop", "Symlink loop"),
    ],
)
def test_unusable_workspace_paths_are_load_errors(
    tmp_path: Path, workspace: str, reason: str
) -> None:
    """A workspace path the OS cannot use is a load error at its line, not a crash."""
    (tmp_path / "loop").symlink_to("loop")
    path = tmp_path / "t.yaml"
    path.write_text(f"input: q\nexpected: ok\nworkspace: {workspace}\n")
    (failure,) = load_task_file(path, load_dataset(tmp_path))
    assert isinstance(failure, LoadFailure)
    assert "t.yaml:3: at workspace: workspace " in failure.render()
    assert f"is not a usable path: {reason}" in failure.render()


def test_a_fifo_in_a_template_is_refused(tmp_path: Path) -> None:
    """Only files, folders and links go into workspaces: a FIFO would hang the copy."""
    (tmp_path / "ws").mkdir()
    os.mkfifo(tmp_path / "ws" / "pipe")
    path = tmp_path / "t.yaml"
    path.write_text("input: q\nexpected: ok\nworkspace: ws\n")
    (failure,) = load_task_file(path, load_dataset(tmp_path))
    assert isinstance(failure, LoadFailure)
    assert "t.yaml:3: at workspace: pipe in the workspace folder is not a file" in failure.render()


def test_a_template_is_copied_as_plain_files(tmp_path: Path) -> None:
    """Links inside a template reach the workspace as copies of their files, never as links."""
    template = tmp_path / "ws"
    (template / "src").mkdir(parents=True)
    (template / "empty").mkdir()
    (template / "src" / "real.py").write_text("x = 1\n")
    (template / "alias.py").symlink_to("src/real.py")
    (template / "absolute.py").symlink_to(template / "src" / "real.py")
    made = Workspaces(tmp_path / "base").create(aid("ds", "t", 0), template).root
    assert sorted(p.relative_to(made).as_posix() for p in made.rglob("*")) == [
        "absolute.py",
        "alias.py",
        "empty",
        "src",
        "src/real.py",
    ]
    assert not any(p.is_symlink() for p in made.rglob("*"))
    assert (made / "alias.py").read_text() == "x = 1\n"


def test_a_link_added_to_a_template_later_is_refused_when_copying(tmp_path: Path) -> None:
    """The copy checks the template again: a link made after loading cannot leak a file."""
    (tmp_path / "secret.txt").write_text(SECRET)
    template = tmp_path / "ws"
    template.mkdir()
    (template / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(TemplateError, match="points outside it"):
        Workspaces(tmp_path / "base").create(aid("ds", "t", 0), template)


# 3. Alias bombs

BOMB = textwrap.dedent(
    """\
    id: bomb
    expected: lol
    metadata:
      a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
      a1: &a1 [*a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0, *a0]
      a2: &a2 [*a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1, *a1]
      a3: &a3 [*a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2, *a2]
      a4: &a4 [*a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3, *a3]
      a5: &a5 [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]
      a6: &a6 [*a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5, *a5]
      a7: &a7 [*a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6, *a6]
      a8: &a8 [*a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7, *a7]
    input: {q: *a8}
    """
)

LIMITED_PYTEST = """
import resource, sys
import pytest
limit = 1 << 30  # 1 GiB of address space: pytest needs ~70 MiB, the bomb many GiB
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_an_alias_bomb_is_one_load_error_under_a_memory_limit(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A billion-laughs task file fails alone, at its line, before anything expands it."""
    dataset({"bomb.yaml": BOMB, "ok.yaml": task("ok")})
    wrapper = pytester.path / "limited_pytest.py"
    wrapper.write_text(LIMITED_PYTEST)
    result = pytester.run(sys.executable, wrapper, "--agenteval", "ds", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            f"ds/bomb.yaml:10: at metadata.a6: aliases expand this value to more than "
            f"{MAX_EXPANDED_NODES:,} nodes",
            "Hint: a file may hold at most * nodes once its aliases (*name) are expanded;*",
        ]
    )


def test_a_recursive_alias_is_a_load_error(tmp_path: Path) -> None:
    """A value that contains itself is refused (it would loop whatever walks it)."""
    path = tmp_path / "t.yaml"
    path.write_text("input: q\nmetadata: &m\n  self: *m\n")
    with pytest.raises(TaskFileError, match=r"t\.yaml:2: at metadata: a recursive alias"):
        parse(path)


def test_ordinary_aliases_and_asterisks_still_load(tmp_path: Path) -> None:
    """Aliases within the limit, and text with asterisks, parse as before."""
    path = tmp_path / "t.yaml"
    path.write_text("a: &g [equals]\nb: *g\nc: '**bold** and *'\n")
    assert parse(path)[1] == {"a": ["equals"], "b": ["equals"], "c": "**bold** and *"}


# 4. Workspace folder names


def test_workspace_names_are_distinct_and_bounded(tmp_path: Path) -> None:
    """Ids that read alike get their own folders; a 500-character id gets a short name."""
    workspaces = Workspaces(tmp_path)
    first = workspaces.create(aid("ds", "x/y", 0), None).root
    (first / "kept.txt").write_text("failed attempt's files")
    second = workspaces.create(aid("ds", "x_y", 0), None).root
    assert first != second and (first / "kept.txt").exists()
    assert folder_name(AttemptId(dataset="ds", task_id="x/y", variant=None, attempt=0)).startswith(
        "ds--x_y--0-"
    )
    long = folder_name(AttemptId(dataset="ds", task_id="a" * 500, variant=None, attempt=12))
    assert len(long) < 100 and long != folder_name(
        AttemptId(dataset="ds", task_id="a" * 499, variant=None, attempt=12)
    )


def test_a_very_long_task_id_gets_a_workspace(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A command agent (run in its workspace) works for a task id of the longest length
    allowed (200 characters; a longer one is a load error)."""
    agent = {"command": ["{python}", "-c", "print('ok')"]}
    dataset({"long.yaml": {"id": "t" * 200, "input": "q", "expected": "ok", "agent": agent}})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)


# 5. Workspace templates are the folders tasks name


def test_template_detection_reads_tasks_not_text(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A `workspace: docs` line inside a task's text hides nothing; real templates (named by a
    valid task, an invalid one, or from another folder) are never collected nor conftest-loaded."""
    never = "raise RuntimeError('a template conftest must not load')"
    dataset(
        {
            "intro.yaml": """
                input: |
                  Notes for the agent:
                  workspace: docs
                expected: ok
                metadata: {answer: ok}
            """,
            "docs/guide.yaml": task("ok"),
            "a/t.yaml": {**task("ok"), "workspace": "ws"},
            "a/ws/conftest.py": never,
            "a/ws/inner.yaml": task("ok"),
            "b/bad.yaml": {**task("ok"), "workspace": "ws", "unknown": 1},
            "b/ws/conftest.py": never,
            "c/from_elsewhere.yaml": {**task("ok"), "workspace": "../b_shared"},
            "b_shared/conftest.py": never,
            "b_shared/inner.yaml": task("ok"),
        }
    )
    result = pytester.runpytest("--agenteval", "ds", "-v")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*docs/guide.yaml::docs/guide*PASSED*"])
    cli = pytester.run(sys.executable, "-m", "pytest_agenteval.cli", "validate", "ds")
    cli.stdout.fnmatch_lines(["*unknown key 'unknown'", "4 tasks valid, 1 problem"])


# 6. Where workspaces live


@pytest.mark.slow
def test_workspaces_live_in_pytest_basetemp(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --basetemp, workspaces go to pytest's own numbered temp folder (with its
    retention policy), never loose in the system temp folder; failed ones are kept."""
    root = dataset(
        {
            "pass.yaml": {**task("ok"), "workspace": "ws"},
            "fail.yaml": {**task("wrong"), "workspace": "ws"},
        }
    )
    (root / "ws").mkdir()
    (root / "ws" / "f.txt").write_text("template")
    system_temp = pytester.mkdir("system_temp")
    pytest_temp = pytester.mkdir("pytest_temp")
    monkeypatch.setenv("TMPDIR", str(system_temp))
    monkeypatch.setenv("PYTEST_DEBUG_TEMPROOT", str(pytest_temp))
    for workers in ([], ["-n", "2"]):
        result = pytester.run(sys.executable, "-m", "pytest", "--agenteval", "ds", *workers)
        result.assert_outcomes(passed=1, failed=1)
        kept = [line for line in result.stdout.lines if line.startswith("workspace kept: ")]
        (path,) = (Path(line.removeprefix("workspace kept: ")) for line in kept)
        assert path.is_relative_to(pytest_temp.resolve()) and path.name.startswith("ds--fail--0-")
        assert path.parent.name == "agenteval" and (path / "f.txt").exists()
        assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert not [p for p in system_temp.iterdir() if p.name.startswith("agenteval")]


def test_without_pytest_tmpdir_plugin_nothing_is_left_behind(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pytest's tmpdir plugin off, workspaces fall back to the system temp folder, and a
    session whose attempts all pass leaves nothing there."""
    root = dataset({"pass.yaml": {**task("ok"), "workspace": "ws"}})
    (root / "ws").mkdir()
    system_temp = pytester.mkdir("system_temp")
    monkeypatch.setenv("TMPDIR", str(system_temp))
    result = pytester.run(sys.executable, "-m", "pytest", "--agenteval", "ds", "-p", "no:tmpdir")
    result.assert_outcomes(passed=1)
    assert os.listdir(system_temp) == []


def test_a_build_folder_link_inside_is_digested_and_one_outside_says_why(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A `build:` folder's symlink to a file inside it is digested as that file (changing the
    file changes the tag); one to a file outside gives no digest and a problem naming the
    link, which the attempt's `build_failed` says (test_sandbox_hardening.py)."""
    outside = make_outside(pytester)
    root = dataset({"t.yaml": {"input": "x", "sandbox": {"docker": {"build": "img"}}}})
    img = root / "img"
    img.mkdir()
    (img / "Dockerfile").write_text("FROM scratch\n")
    (img / "real.txt").write_text("one")
    (img / "copy.txt").symlink_to(img / "real.txt")

    def build() -> Any:
        return load_dataset(root).build_folder(img.resolve())  # read afresh each time

    first = build()
    assert first.digest is not None and first.problem is None
    (img / "real.txt").write_text("two")
    assert build().digest not in (None, first.digest)
    (img / "leak.txt").symlink_to(outside / "secret.txt")
    failed = build()
    assert failed.digest is None
    assert "the symlink leak.txt in the build folder points outside it" in failed.problem
