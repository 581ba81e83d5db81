"""Loading task files: validation, file:line:field errors, ids and digests (pure, no pytest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_agenteval.core.errors import TaskFileError
from pytest_agenteval.core.model import TaskSpec, check_task_id
from pytest_agenteval.execution.graders import BUILTIN_GRADERS, make_builtin_grader, unknown_grader
from pytest_agenteval.sources.dataset import TaskDef, load_dataset, load_task_file
from pytest_agenteval.sources.taskfile import LoadFailure


def make(spec, task):  # type: ignore[no-untyped-def]
    grader = make_builtin_grader(spec, task, Path.cwd())
    if grader is None:
        raise unknown_grader(spec.type, list(BUILTIN_GRADERS))
    return grader


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "agenteval.yaml").write_text("name: demo\nversion: 2\nagent: agent:run\n")
    return tmp_path


def load(root: Path, rel: str, text: str) -> list[TaskDef | LoadFailure]:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return load_task_file(path, load_dataset(root), make)


def only_error(results: list[TaskDef | LoadFailure]) -> str:
    (failure,) = results
    assert isinstance(failure, LoadFailure), failure
    return failure.render()


def test_single_task_gets_its_path_as_id(root: Path) -> None:
    """A one-task file's id defaults to its path below the root, without extension."""
    (task,) = load(
        root, "arith/add.yaml", "input: 1+1?\nexpected: 2\nmetadata: {created: 2024-01-02}\n"
    )
    assert isinstance(task, TaskDef)
    assert task.id == "arith/add"
    assert task.spec.metadata == {"created": "2024-01-02"}
    assert [s.type for s in task.grader_specs] == ["equals"]
    assert task.dataset.manifest.version == "2"


def test_list_file_needs_ids_and_reports_each_bad_task(root: Path) -> None:
    """In a `tasks:` list the good tasks load; each bad one fails alone, naming its place."""
    results = load(
        root,
        "qa.yaml",
        "tasks:\n"
        "  - id: one\n    input: a\n    expected: a\n"
        "  - input: b\n    expected: b\n"
        "  - id: three\n    input: c\n    graders:\n      - equal: c\n",
    )
    assert isinstance(results[0], TaskDef) and results[0].id == "one"
    assert "qa.yaml:5: at tasks[1]: missing required field 'id'" in results[1].render()  # type: ignore[union-attr]
    text = results[2].render()  # type: ignore[union-attr]
    assert "qa.yaml:10: at tasks[2].graders[0]: unknown grader 'equal'" in text
    assert "Hint: did you mean 'equals'?" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "input: x\nexpcted: 1\n",
            "t.yaml:2: at expcted: unknown key 'expcted'\nHint: did you mean 'expected'?",
        ),
        ("description: no input\nexpected: 1\n", "t.yaml:1: missing required field 'input'"),
        (
            "input: x\nexpected: 1\ntags: [ok, 'bad tag']\n",
            "t.yaml:3: at tags: tag 'bad tag' is not a valid marker name",
        ),
        (
            "id: 'has space'\ninput: x\nexpected: 1\n",
            "t.yaml:1: at id: task id 'has space' may only use",
        ),
        (
            "input: 5\nexpected: 1\n",
            "t.yaml:1: at input: input must be a string, a mapping, or a list of chat messages",
        ),
        ("input: x\n", "no graders: the task names none and has no `expected` answer"),
        (
            "input: x\ntimeout: -1\nexpected: 1\n",
            "t.yaml:2: at timeout: Input should be greater than 0",
        ),
        (
            "input: x\nworkspace: nope\nexpected: 1\n",
            "t.yaml:2: at workspace: workspace folder 'nope' not found",
        ),
        (
            "input: x\ngraders:\n  - regex: '('\n",
            "t.yaml:3: at graders[0].pattern: invalid regex '('",
        ),
        ("input: x\ngraders:\n  - number\n", "number needs `expected` on the task or `value`"),
        (
            "input: x\ngraders:\n  - contains: {al: [a]}\n",
            "unknown key 'al'\nHint: did you mean 'all'?",
        ),
        (
            "input: x\nagent: {command: []}\nexpected: 1\n",
            "t.yaml:2: at agent.command: List should have at least 1 item",
        ),
        ("input: [x\n", "t.yaml:2: invalid YAML"),
        ("", "t.yaml:1: the file is empty"),
        ("- a\n- b\n", "t.yaml:1: a task file holds one task (a mapping) or a `tasks:` list"),
        ("tasks: []\nother: 1\n", "t.yaml:2: at other: unknown key 'other'"),
        ("tasks: 5\n", "t.yaml:1: at tasks: `tasks` must be a list of tasks"),
        (
            "input: x\nexpected: x\ntags: math\n",
            "t.yaml:3: at tags: expected a list, found 'math'\nHint: write a list: tags: [math]",
        ),
        (
            "input: x\nexpected: x\ngraders: {exact: {}}\n",
            "t.yaml:3: at graders: expected a list, found a mapping\n"
            "Hint: write a list: `[a, b]` or one `- item` per line",
        ),
        ("tasks:\n  - just text\n", "t.yaml:2: at tasks[0]: a task must be a mapping"),
        ("input: !!python/object:os.system x\n", "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_field(root: Path, text: str, expected: str) -> None:
    """Every problem renders as `path:line: at field: problem` with a hint where one helps."""
    message = only_error(load(root, "t.yaml", text))
    assert expected in message.replace(str(root) + "/", "")


def test_manifest_errors_raise_with_location(tmp_path: Path) -> None:
    (tmp_path / "agenteval.yaml").write_text("name: demo\nagnet: x:y\n")
    with pytest.raises(
        TaskFileError,
        match=r"agenteval.yaml:2: at agnet: unknown key 'agnet'\nHint: did you mean 'agent'\?",
    ):
        load_dataset(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "id: " + "a" * 250 + "\ninput: x\n",
            "t.yaml:1: at id: task id 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'… has 250 "
            "characters; at most 200",
        ),
        (
            "tasks:\n  - id: ok\n    input: x\n    expected: x\n  - id: true\n    input: x\n",
            "t.yaml:5: at tasks[1].id: true is not text: YAML reads it as a boolean\n"
            'Hint: quote it: "true"',
        ),
    ],
    ids=["long", "boolean"],
)
def test_a_long_or_unquoted_task_id_is_a_located_error(
    root: Path, text: str, expected: str
) -> None:
    """A task id longer than 200 characters (it names folders: 255 bytes at most) and an id
    YAML reads as a boolean are errors at their line, the second saying to quote it."""
    results = load(root, "t.yaml", text)
    message = next(r for r in results if isinstance(r, LoadFailure)).render()
    assert expected in message.replace(str(root) + "/", "")


@pytest.mark.parametrize(
    ("name", "line", "expected"),
    [
        (
            "v" * 240,
            4,
            "variant name 'vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv'… has 240 characters",
        ),
        (
            "true",
            4,
            'at variants: the key true is not text: YAML reads it as a boolean\nHint: quote it: "true"',
        ),
        (
            "null",
            4,
            'at variants: the key null is not text: YAML reads it as null\nHint: quote it: "null"',
        ),
        (
            "0",
            4,
            'at variants: the key 0 is not text: YAML reads it as a number\nHint: quote it: "0"',
        ),
    ],
    ids=["long", "boolean", "null", "number"],
)
def test_a_long_or_unquoted_variant_name_is_a_located_error(
    tmp_path: Path, name: str, line: int, expected: str
) -> None:
    """A variant name longer than 200 characters is refused at its line; one YAML reads as
    a boolean, null or number (`true: agent:run`) is refused at its own line (not the first
    variant's), saying to quote it."""
    (tmp_path / "agenteval.yaml").write_text(
        f"name: demo\nvariants:\n  base: agent:run\n  {name}: agent:run\n  last: agent:run\n"
    )
    with pytest.raises(TaskFileError) as raised:
        load_dataset(tmp_path)
    message = raised.value.render().replace(str(tmp_path) + "/", "")
    assert message.startswith(f"agenteval.yaml:{line}: ")
    assert expected in message


def test_manifest_is_optional(tmp_path: Path) -> None:
    """Without agenteval.yaml the dataset is named after its folder."""
    assert load_dataset(tmp_path).name == tmp_path.name


def test_digest_tracks_grading_apart_from_what_the_agent_sees(root: Path) -> None:
    """Changing graders changes the digest only; changing the input changes both digests."""
    (a,) = load(root, "t.yaml", "input: x\nexpected: '1'\n")
    (b,) = load(root, "t.yaml", "input: x\nexpected: '1'\ngraders: [contains]\n")
    (c,) = load(root, "t.yaml", "input: y\nexpected: '1'\n")
    (d,) = load(root, "t.yaml", "input: x\nexpected: '1'\n")
    assert (
        isinstance(a, TaskDef)
        and isinstance(b, TaskDef)
        and isinstance(c, TaskDef)
        and isinstance(d, TaskDef)
    )
    assert a.digest == d.digest and a.run_digest == d.run_digest
    assert a.digest != b.digest and a.run_digest == b.run_digest
    assert a.run_digest != c.run_digest


NOT_IN_DIGESTS = {"artifacts", "retry"}
"""Fields that say what is kept of an attempt or how often it is tried in a session, not what
it is judged on: changing them neither runs nor regrades a stored attempt."""


def test_what_is_kept_of_an_attempt_is_not_in_the_digests(root: Path) -> None:
    """A changed `artifacts:` cap or `retry:` applies to new attempts; stored ones are
    neither run nor regraded for it (a regrade would drop their artifacts)."""
    base = {"id": "t", "input": "x", "expected": "1"}
    (a,) = load(root, "t.yaml", json.dumps(base))
    for kept in ({"artifacts": {"max_bytes": 10}}, {"retry": {"on": ["timeout"]}}):
        (b,) = load(root, "t.yaml", json.dumps({**base, **kept}))
        assert isinstance(a, TaskDef) and isinstance(b, TaskDef)
        assert (a.digest, a.run_digest) == (b.digest, b.run_digest)


@pytest.mark.parametrize(
    ("field", "value", "agent_sees"),
    [
        ("id", "other", True),
        ("input", "y", True),
        ("metadata", {"k": 1}, True),
        ("agent", {"callable": "m:f"}, True),
        ("expected", "2", False),
        ("graders", [{"type": "contains"}], False),
        ("timeout", 3.0, False),
        ("grader_timeout", 5.0, False),
        ("tags", ["t"], False),
        ("description", "d", False),
        ("budget", {"max_tokens": 100}, False),
        ("sandbox", {"docker": {"image": "img:1"}}, True),
    ],
)
def test_every_field_is_in_the_digest(
    root: Path, field: str, value: object, agent_sees: bool
) -> None:
    """Each TaskSpec field changes the digest; only what the agent sees changes run_digest."""
    assert field in TaskSpec.model_fields
    covered = {
        "id",
        "input",
        "metadata",
        "agent",
        "expected",
        "graders",
        "timeout",
        "grader_timeout",
        "tags",
        "description",
        "workspace",
        "budget",
        "sandbox",
    }
    assert covered | NOT_IN_DIGESTS == set(TaskSpec.model_fields), (
        "a new TaskSpec field must join the digests"
    )
    base = {"id": "t", "input": "x", "expected": "1"}
    (a,) = load(root, "t.yaml", json.dumps(base))
    (b,) = load(root, "t.yaml", json.dumps({**base, field: value}))
    assert isinstance(a, TaskDef) and isinstance(b, TaskDef)
    assert a.digest != b.digest
    assert (a.run_digest != b.run_digest) is agent_sees


def test_workspace_contents_are_part_of_the_digest(root: Path) -> None:
    (root / "ws").mkdir()
    (root / "ws" / "f.py").write_text("x = 1\n")
    (a,) = load(root, "t.yaml", "input: x\nexpected: '1'\nworkspace: ws\n")
    assert isinstance(a, TaskDef) and a.run_digest
    (root / "ws" / "f.py").write_text("x = 2\n")
    (b,) = load(root, "t.yaml", "input: x\nexpected: '1'\nworkspace: ws\n")
    assert isinstance(a, TaskDef) and isinstance(b, TaskDef)
    assert a.run_digest != b.run_digest
    assert not a.regradable


def test_workspace_templates_are_found_by_their_tasks(root: Path) -> None:
    (root / "coding" / "ws" / "sub").mkdir(parents=True)
    (root / "coding" / "task.yaml").write_text("input: x\nexpected: 1\nworkspace: ws\n")
    (root / "coding" / "ws" / "config.yaml").write_text("not: a task\n")
    dataset = load_dataset(root)
    assert dataset.is_workspace_dir(root / "coding" / "ws")
    assert not dataset.is_workspace_dir(root / "coding")
    assert [p.name for p in dataset.task_files()] == ["task.yaml"]


@given(st.text(alphabet="ab/._- \n:#[]", max_size=12))
def test_task_id_rule(candidate: str) -> None:
    """An id is accepted exactly when it is made of path segments of [A-Za-z0-9_.-]."""
    segments = candidate.split("/")
    ok = all(
        s and s not in (".", "..") and all(c.isalnum() or c in "_.-" for c in s) for s in segments
    )
    if ok:
        check_task_id(candidate)
    else:
        with pytest.raises(ValueError):
            check_task_id(candidate)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(json_values)
def test_any_yaml_shape_loads_or_fails_cleanly(root: Path, value: object) -> None:
    """Whatever YAML a file holds, loading returns tasks or LoadFailures; it never raises."""
    path = root / "fuzz.yaml"
    path.write_text(yaml.safe_dump(value))
    for result in load_task_file(path, load_dataset(root), make):
        assert isinstance(result, TaskDef | LoadFailure)
        if isinstance(result, LoadFailure):
            assert result.render().startswith(str(path))
        else:
            json.dumps(result.spec.model_dump(mode="json"))


def test_a_sandbox_build_folder_is_in_the_run_digest(root: Path) -> None:
    """A changed file in a sandbox's `build:` folder changes what the agent sees (run_digest),
    so a resume runs those attempts again; a task without a sandbox keeps its digests."""
    (root / "img").mkdir()
    (root / "img/Dockerfile").write_text("FROM scratch\n")
    text = "input: x\nexpected: x\nsandbox: {docker: {build: img}}\n"
    (before,) = load(root, "t.yaml", text)
    assert isinstance(before, TaskDef)
    digest = before.run_digest  # computed now, before the change
    (root / "img/Dockerfile").write_text("FROM scratch\nENV A=1\n")
    (after,) = load(root, "t.yaml", text)
    (plain,) = load(root, "t.yaml", "input: x\nexpected: x\n")
    (image,) = load(root, "t.yaml", "input: x\nexpected: x\nsandbox: {docker: {image: a}}\n")
    assert isinstance(before, TaskDef) and isinstance(after, TaskDef)
    assert isinstance(plain, TaskDef) and isinstance(image, TaskDef)
    assert digest != after.run_digest
    assert before.sandbox_build is not None and before.sandbox_build.folder == root / "img"
    assert plain.sandbox_build is None and image.sandbox_build is None
    assert len({plain.run_digest, image.run_digest, before.run_digest}) == 3
