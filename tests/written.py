"""What users write, judged twice: by the loader and by the published JSON Schemas.

Every dataset the test suite writes goes through `check_dataset`: a file the loader accepts
must be accepted by `agenteval schema task|manifest` too.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import ValidationError

from pytest_agenteval.core.errors import GraderSpecError, TaskFileError
from pytest_agenteval.core.model import GraderSpec, Manifest, TaskSpec
from pytest_agenteval.execution.graders import BUILTIN_GRADERS, BuiltinGrader, Python
from pytest_agenteval.reporting.schemas import manifest_schema, task_file_schema
from pytest_agenteval.sources.dataset import (
    Dataset,
    TaskDef,
    load_dataset,
    load_task_file,
)
from pytest_agenteval.sources.discovery import MANIFEST_NAME
from pytest_agenteval.sources.yamlfile import parse


class _UnresolvedPython(Python):
    """The `python` grader with its options checked but its function never imported.

    Importing would put modules of one test's dataset into this process for all later tests.
    """

    def __init__(self, options: Any, expected: Any, base: Path) -> None:
        BuiltinGrader.__init__(self, options, expected, base)


def make_grader(root: Path) -> Any:
    """A grader factory checking built-in graders' options offline; plugin graders pass."""

    def make(spec: GraderSpec, task: TaskSpec) -> object:
        cls = BUILTIN_GRADERS.get(spec.type)
        if cls is Python:
            cls = _UnresolvedPython
        return object() if cls is None else cls.build(spec.options, task, root)

    return make


@cache
def validators() -> dict[str, jsonschema.Draft202012Validator]:
    """Validators of the published schemas, by kind (`task`, `manifest`)."""
    schemas = {"task": task_file_schema(), "manifest": manifest_schema()}
    for schema in schemas.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    return {kind: jsonschema.Draft202012Validator(s) for kind, s in schemas.items()}


def schema_problems(kind: str, data: Any) -> list[str]:
    """How `data` breaks the published schema of `kind`, one line per problem."""
    errors = sorted(validators()[kind].iter_errors(data), key=jsonschema.exceptions.relevance)
    return [f"{e.json_path}: {e.message}" for e in map(best_match_in, errors)]


def best_match_in(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The most specific cause of one error, as check-jsonschema shows it."""
    return jsonschema.exceptions.best_match([error]) or error


def loader_accepts_manifest(data: Any) -> bool:
    """Whether the loader takes this manifest, its default graders' options included."""
    try:
        manifest = Manifest.model_validate(data)
        make = make_grader(Path("."))
        for spec in manifest.defaults.graders or []:
            make(spec, TaskSpec(input="x", expected="1"))
    except (ValidationError, GraderSpecError):
        return False
    return True


def loader_accepts_task_file(path: Path, dataset: Dataset) -> bool:
    """Whether every task of the file loads, with built-in graders' options checked."""
    results = load_task_file(path, dataset, make_grader(dataset.root))
    return all(isinstance(r, TaskDef) for r in results)


def check_dataset(root: Path) -> None:
    """Assert that the schemas accept every file of the dataset at `root` the loader accepts."""
    manifest = root / MANIFEST_NAME
    if manifest.is_file():
        _, data = parse(manifest)
        if loader_accepts_manifest(data):
            assert not schema_problems("manifest", data), (
                manifest,
                schema_problems("manifest", data),
            )
    try:
        dataset = load_dataset(root)
    except TaskFileError:
        return
    for path in dataset.task_files():
        if loader_accepts_task_file(path, dataset):
            _, data = parse(path)
            assert not schema_problems("task", data), (path, schema_problems("task", data))
