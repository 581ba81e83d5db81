"""The published JSON Schemas accept what users write and reject what the loader rejects."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_agenteval.cli import main
from pytest_agenteval.core.model import TAG_RE, TASK_ID_RE, Manifest, check_task_id
from pytest_agenteval.core.options import MAX_SECONDS
from pytest_agenteval.execution.graders import BUILTIN_GRADERS
from pytest_agenteval.reporting.schemas import TASK_ID_PATTERN
from pytest_agenteval.sources.dataset import load_dataset
from written import loader_accepts_manifest, loader_accepts_task_file, schema_problems

ROOT = Path(__file__).parent.parent
GOLDEN_RUN = Path(__file__).parent / "golden/v1/runs/golden1"


def kind_of(data: Any) -> str | None:
    """`task` (a task file), `manifest` (a typo allowed; an excerpt may leave out `name`), or
    None for other YAML (CI configurations)."""
    if not isinstance(data, dict):
        return None
    tasks = data.get("tasks")
    if "input" in data or (isinstance(tasks, list) and any(isinstance(t, dict) for t in tasks)):
        return "task"
    manifest_only = {"name", "judge", "pricing", "defaults", "agent_version", "variants"}
    known = set(Manifest.model_fields)
    if manifest_only & set(data) and len(set(data) - known) <= int("name" in data):
        return "manifest"
    return None


DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def doc_blocks() -> list[Any]:
    """Every YAML example of the README and the documentation site."""
    found = []
    for page in DOC_PAGES:
        text = page.read_text()
        fence = r"^```(?:yaml|\{code-block\} yaml)\n(?::caption:[^\n]*\n)?(.*?)^```"
        for i, block in enumerate(re.findall(fence, text, re.S | re.M)):
            data = yaml.safe_load(block)
            if kind_of(data) is None:  # not ours: a CI configuration
                continue
            where = f"{page.relative_to(ROOT).as_posix()}-{i}"
            found.append(pytest.param(kind_of(data), data, id=f"{where}-{kind_of(data)}"))
    return found


@pytest.mark.parametrize(("kind", "data"), doc_blocks())
def test_documented_yaml_matches_the_schemas(kind: str, data: Any) -> None:
    """Every task file and manifest shown in the README and the docs passes the published
    schema (a manifest excerpt without `name` is checked as if it had one)."""
    if kind == "manifest":
        data = {"name": "excerpt", **data}
    assert schema_problems(kind, data) == []


def test_docs_show_task_files_and_manifests() -> None:
    """The check above is not vacuous: it sees both kinds of file."""
    assert {p.values[0] for p in doc_blocks()} >= {"task", "manifest"}


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "example_suite").rglob("*.yaml")),
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_example_suite_loads_and_matches_the_schemas(path: Path) -> None:
    """Every file of example_suite loads and passes the published schema."""
    data = yaml.safe_load(path.read_text())
    if path.name == "agenteval.yaml":
        assert loader_accepts_manifest(data)
        assert schema_problems("manifest", data) == []
    else:
        assert loader_accepts_task_file(path, load_dataset(ROOT / "example_suite"))
        assert schema_problems("task", data) == []


def judge_task(tmp_path: Path, text: str) -> tuple[bool, list[str]]:
    """(loader accepts, schema problems) of one task file's text."""
    (tmp_path / "agenteval.yaml").write_text("name: t\n")
    (tmp_path / "t.yaml").write_text(text)
    accepted = loader_accepts_task_file(tmp_path / "t.yaml", load_dataset(tmp_path))
    return accepted, schema_problems("task", yaml.safe_load(text))


VALID_TASKS = {
    "plugin agent and grader timeout": (
        "input: q\nexpected: '1'\ngrader_timeout: 5\nagent:\n  openai: {model: m}\n"
    ),
    "bare names": "input: q\nexpected: '1'\ngraders: [equals, contains, regex, json, number]\n",
    "shorthand values": (
        "input: q\nexpected: '1'\ngraders:\n  - equals: '1'\n  - contains: Paris\n"
        "  - contains: [a, b]\n  - regex: '^a'\n  - json: [1]\n  - number: 1.5\n"
        "  - command: pytest -q\n  - command: [python, -V]\n  - python: graders:check\n"
    ),
    "option mappings": (
        "input: q\nexpected: '1'\ngraders:\n  - regex: {pattern: x, ignorecase: true}\n"
        "  - number: {tolerance: 0.01}\n  - equals:\n"
    ),
    "type spellings": (
        "input: q\nexpected: '1'\ngraders:\n  - {type: regex, pattern: x}\n"
        "  - {type: equals, options: {strip: false}}\n  - {type: command, argv: [x]}\n"
    ),
    "plugin graders": (
        "input: q\ngraders:\n  - length\n  - length: {at_least: 3}\n  - vibes: be kind\n"
        "  - {type: length, at_least: 3}\n  - {type: length, options: {at_least: 3}}\n"
    ),
    "a tasks list": "tasks:\n  - {id: a, input: q, expected: x}\n  - {id: b/c, input: {x: 1}, expected: y}\n",
    "chat input": "input:\n  - {role: user, content: hi, name: me}\nexpected: x\n",
    "agents": "input: q\nexpected: x\nagent: tools/bot.py:answer\n",
    "command agent": "input: q\nexpected: x\nagent: {command: [a, '{input}'], output: json}\n",
    "nulls": "id: null\ninput: q\nexpected: x\ngraders: null\ntimeout: null\nagent: null\n",
}


@pytest.mark.parametrize("text", VALID_TASKS.values(), ids=VALID_TASKS.keys())
def test_written_spellings_are_accepted(tmp_path: Path, text: str) -> None:
    """Each documented spelling, plugin graders included, passes both loader and schema."""
    assert judge_task(tmp_path, text) == (True, [])


INVALID_TASKS = {
    "unknown key": (
        "input: q\nexpcted: 1\n",
        "$: Additional properties are not allowed ('expcted'",
    ),
    "missing input": ("description: d\nexpected: 1\n", "$: 'input' is a required property"),
    "tags not a list": ("input: q\nexpected: 1\ntags: smoke\n", "$.tags: 'smoke' is not of type"),
    "bad tag": ("input: q\nexpected: 1\ntags: [bad tag]\n", "$.tags[0]: 'bad tag' does not match"),
    "bad id": ("id: has space\ninput: q\nexpected: 1\n", "$.id: 'has space' does not match"),
    "dot-dot id": ("id: a/../b\ninput: q\nexpected: 1\n", "$.id: 'a/../b' does not match"),
    "zero timeout": ("input: q\nexpected: 1\ntimeout: 0\n", "$.timeout: 0 is less than or equal"),
    "number input": ("input: 5\nexpected: 1\n", "$.input: 5 is not of type"),
    "message without role": (
        "input: [{content: hi}]\nexpected: 1\n",
        "$.input[0]: 'role' is a required property",
    ),
    "unknown option": (
        "input: q\nexpected: 1\ngraders:\n  - equals: {strp: true}\n",
        "$.graders[0].equals: Additional properties are not allowed ('strp'",
    ),
    "unknown flat option": (
        "input: q\ngraders:\n  - {type: regex, patern: x}\n",
        "$.graders[0]: Additional properties are not allowed ('patern'",
    ),
    "option of wrong type": (
        "input: q\nexpected: 1\ngraders:\n  - number: {tolerance: x}\n",
        "$.graders[0].number.tolerance: 'x' is not of type 'number'",
    ),
    "shorthand of wrong type": ("input: q\ngraders:\n  - number: abc\n", "$.graders[0].number: "),
    "bare grader needing options": (
        "input: q\nexpected: 1\ngraders: [command]\n",
        "$.graders[0]: 'command' should not be valid",
    ),
    "two grader names": (
        "input: q\nexpected: 1\ngraders:\n  - {equals: null, contains: x}\n",
        "$.graders[0]: {'equals': None, 'contains': 'x'} has too many properties",
    ),
    "task in a list without id": (
        "tasks:\n  - {input: q, expected: 1}\n",
        "$.tasks[0]: 'id' is a required property",
    ),
    "extra key beside tasks": (
        "tasks: []\nother: 1\n",
        "$: Additional properties are not allowed ('other'",
    ),
    "agent without function": ("input: q\nexpected: 1\nagent: bot\n", "$.agent: 'bot' does not"),
    "empty command": (
        "input: q\nexpected: 1\nagent: {command: []}\n",
        "$.agent.command: [] should be non-empty",
    ),
    "bad stdin": (
        "input: q\nexpected: 1\nagent: {command: [a], stdin: file}\n",
        "$.agent.stdin: 'file' is not one of ['json', 'none']",
    ),
}


@pytest.mark.parametrize(("text", "problem"), INVALID_TASKS.values(), ids=INVALID_TASKS.keys())
def test_invalid_task_files_fail_the_schema(tmp_path: Path, text: str, problem: str) -> None:
    """What the loader rejects for its shape, the schema rejects too, naming the place."""
    accepted, problems = judge_task(tmp_path, text)
    assert not accepted
    assert problems and problems[0].startswith(problem), problems


VALID_MANIFESTS = {
    "yaml numbers": "name: ds\nversion: 1.0\nagent_version: 2024\n",
    "string agent and default graders": (
        "name: ds\nagent: agent:solve\ndefaults: {timeout: 30, attempts: 3, graders: [equals]}\n"
    ),
    "command agent and globs": "name: ds\nagent: {command: [bot]}\ntasks: ['**/*.yaml']\n",
}
INVALID_MANIFESTS = {
    "missing name": "version: '1'\n",
    "bad name": "name: my dataset\n",
    "unknown key": "name: ds\nagnet: a:b\n",
    "boolean version": "name: ds\nversion: yes\n",
    "zero attempts": "name: ds\ndefaults: {attempts: 0}\n",
    "unknown grader option": "name: ds\ndefaults: {graders: [{contains: {al: [x]}}]}\n",
}


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        *((t, True) for t in VALID_MANIFESTS.values()),
        *((t, False) for t in INVALID_MANIFESTS.values()),
    ],
    ids=[*VALID_MANIFESTS, *INVALID_MANIFESTS],
)
def test_manifests(text: str, valid: bool) -> None:
    """The manifest schema accepts exactly the manifests the loader accepts, here."""
    data = yaml.safe_load(text)
    assert loader_accepts_manifest(data) is valid
    assert (schema_problems("manifest", data) == []) is valid


# -- generated files: the loader's view of "valid" must pass the schema --------------------

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
ids = st.from_regex(TASK_ID_RE, fullmatch=True).filter(
    lambda s: (
        "\n" not in s
        and len(s) <= 200  # ids name folders: the loader refuses longer ones
        and all(p not in (".", "..") for p in s.split("/"))
    )
)
OPTIONS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "equals": st.fixed_dictionaries(
        {}, optional={"value": texts, "strip": st.booleans(), "case_insensitive": st.booleans()}
    ),
    "contains": st.fixed_dictionaries(
        {}, optional={"all": st.lists(texts), "any": st.lists(texts, min_size=1)}
    ),
    "regex": st.fixed_dictionaries(
        {}, optional={"pattern": st.sampled_from(["a+", "^x$", r"\d"]), "dotall": st.booleans()}
    ),
    "json": st.fixed_dictionaries({}, optional={"subset": json_values, "extract": st.booleans()}),
    "number": st.fixed_dictionaries(
        {},
        optional={
            "value": st.floats(allow_nan=False, allow_infinity=False),
            "tolerance": st.floats(0, 10),
        },
    ),
    "command": st.fixed_dictionaries(
        {"argv": st.lists(texts, min_size=1) | st.just("pytest -q")},
        optional={"timeout": st.floats(0.1, 100), "env": st.dictionaries(texts, texts)},
    ),
    "python": st.fixed_dictionaries(
        {"function": st.sampled_from(["graders:check", "tools/g.py:score"])},
        optional={"threshold": st.floats(0, 1), "args": st.dictionaries(texts, json_values)},
    ),
}


@st.composite
def graders(draw: st.DrawFn) -> Any:
    """A built-in grader in a random one of its spellings, or a plugin grader."""
    name = draw(st.sampled_from([*OPTIONS, "plugin"]))
    if name == "plugin":
        name = draw(
            st.from_regex(r"[a-z_]{1,10}", fullmatch=True).filter(lambda n: n not in OPTIONS)
        )
        options: dict[str, Any] = draw(
            st.dictionaries(
                texts.filter(lambda k: k not in ("type", "options")), json_values, max_size=2
            )
        )
    else:
        options = draw(OPTIONS[name])
    primary = getattr(BUILTIN_GRADERS.get(name), "primary", None)
    spellings: list[str | dict[str, Any]] = [
        {name: options},
        {"type": name, **options},
        {"type": name, "options": options},
    ]
    if not options:
        spellings.append(name)
    if (
        primary is not None
        and list(options) == [primary]
        and not isinstance(options[primary], dict)
    ):
        spellings.append({name: options[primary]})
    return draw(st.sampled_from(spellings))


agents = st.one_of(
    st.sampled_from(["agent:run", "tools/bot.py:answer", "pkg.mod:Class.method"]),
    st.builds(lambda c: {"callable": c}, st.just("agent:run")),
    st.fixed_dictionaries(
        {"command": st.lists(texts, min_size=1)},
        optional={
            "stdin": st.sampled_from(["json", "none"]),
            "output": st.sampled_from(["text", "json"]),
            "env": st.dictionaries(texts, texts, max_size=2),
        },
    ),
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": texts}),
    min_size=1,
)
tasks = st.fixed_dictionaries(
    {"input": texts | st.dictionaries(texts, json_values) | messages, "expected": st.just("1")},
    optional={
        "id": ids,
        "description": texts,
        "tags": st.lists(st.from_regex(TAG_RE, fullmatch=True).filter(lambda t: "\n" not in t)),
        "graders": st.lists(graders(), max_size=3),
        "timeout": st.floats(0.001, MAX_SECONDS),
        "agent": agents,
        "metadata": st.dictionaries(texts, json_values, max_size=3),
    },
)
task_files = tasks | st.builds(
    lambda ts, names: {"tasks": [{**t, "id": n} for t, n in zip(ts, names, strict=False)]},
    st.lists(tasks, max_size=3),
    st.lists(ids, min_size=3, max_size=3),
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generated")
    (root / "agenteval.yaml").write_text("name: generated\n")
    return root


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(task_files)
def test_generated_task_files_pass_loader_and_schema(scratch: Path, data: Any) -> None:
    """Task files built from the models' valid values, in every spelling, pass both."""
    path = scratch / "t.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    assert loader_accepts_task_file(path, load_dataset(scratch))
    assert schema_problems("task", yaml.safe_load(path.read_text())) == []


manifests = st.fixed_dictionaries(
    {"name": st.from_regex(r"[A-Za-z0-9_.\-]+", fullmatch=True).filter(lambda n: "\n" not in n)},
    optional={
        "version": texts | st.integers() | st.floats(allow_nan=False, allow_infinity=False),
        "agent_version": texts | st.integers(),
        "description": texts,
        "agent": agents,
        "defaults": st.fixed_dictionaries(
            {},
            optional={
                "timeout": st.floats(0.001, MAX_SECONDS),
                "attempts": st.integers(1, 100),
                "graders": st.lists(graders(), max_size=3),
            },
        ),
        "tasks": st.lists(texts),
    },
)


@settings(max_examples=100, deadline=None)
@given(manifests)
def test_generated_manifests_pass_loader_and_schema(data: Any) -> None:
    """Manifests built from the models' valid values pass both."""
    assert loader_accepts_manifest(data)
    assert schema_problems("manifest", data) == []


@given(st.text("ab./_-é \t", max_size=10))
def test_task_id_pattern_is_check_task_id(value: str) -> None:
    """The schema's id pattern (JavaScript-compatible) accepts exactly the ids the loader does."""
    try:
        check_task_id(value)
        valid = True
    except ValueError:
        valid = False
    assert (re.search(TASK_ID_PATTERN, value) is not None) is valid


# -- the command -----------------------------------------------------------------------------


def printed_schema(kind: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    assert main(["schema", kind]) == 0
    out = capsys.readouterr().out
    return out, json.loads(out)


@pytest.mark.parametrize("kind", ["task", "manifest", "record", "summary"])
def test_schema_command_is_deterministic_and_well_formed(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each schema is valid draft 2020-12 with a title, printed byte-identical every time."""
    out, schema = printed_schema(kind, capsys)
    assert printed_schema(kind, capsys)[0] == out
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"].startswith("pytest-agenteval")
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("kind", ["task", "manifest"])
def test_user_schemas_describe_every_field(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Editors can show a description for every field a user writes, options included."""
    schema = printed_schema(kind, capsys)[1]
    undescribed = [
        f"{name}.{field}"
        for name, definition in schema["$defs"].items()
        for field, prop in definition.get("properties", {}).items()
        if "description" not in prop and field != "type"
    ]
    assert undescribed == []


def test_grader_names_are_offered_with_their_options(capsys: pytest.CaptureFixture[str]) -> None:
    """Bare built-in names are listed for completion, and each built-in has its options."""
    defs = printed_schema("task", capsys)[1]["$defs"]
    offered = {b["const"] for b in defs["GraderName"]["anyOf"] if "const" in b}
    assert offered == {"equals", "contains", "regex", "json", "number", "tool_called"}
    for grader in BUILTIN_GRADERS.values():
        assert grader.options_model.__name__ in defs


def test_stored_records_and_summaries_match_their_schemas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The golden run's records and summary.json pass `agenteval schema record|summary`."""
    record = jsonschema.Draft202012Validator(printed_schema("record", capsys)[1])
    for line in (GOLDEN_RUN / "records.jsonl").read_text().splitlines():
        record.validate(json.loads(line))
    summary = jsonschema.Draft202012Validator(printed_schema("summary", capsys)[1])
    summary.validate(json.loads((GOLDEN_RUN / "summary.json").read_text()))
