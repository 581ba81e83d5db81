"""Safe YAML with line marks: parse task files, and point validation errors at their lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ValidationError

from ..core.errors import TaskFileError, did_you_mean
from ..core.model import UNION_TAGS

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):
    """Safe YAML loader (libyaml when present) that keeps dates as the strings they were.

    Resolving a plain scalar's tag runs Python regexes; task files repeat the same keys and
    grader names, so resolved tags are remembered (bounded).
    """

    _tags: ClassVar[dict[str, str]] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)
        tag = self._tags.get(value)
        if tag is None:
            if len(self._tags) > 50_000:
                self._tags.clear()
            tag = self._tags[value] = super().resolve(kind, value, implicit)
        return tag


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _BaseLoader.construct_yaml_str)


def parse(path: Path) -> tuple[Any, Any]:
    """Parse one YAML document safely, returning (node tree with marks, data)."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise TaskFileError(path, f"cannot read: {exc.strerror}") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
        line = mark.line + 1 if mark is not None else None
        raise TaskFileError(
            path, problem, line=line, hint="check indentation and quoting"
        ) from None
    finally:
        loader.dispose()
    if data is None:
        raise TaskFileError(path, "the file is empty", line=1)
    return node, data


def line_of(node: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc` (or of its nearest existing parent)."""
    if node is None:
        return None
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        node = child
    line: int = node.start_mark.line + 1
    return line


def _child(node: Any, part: Any) -> Any:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if key.value == part:
                return value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None


def field_path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def validation_errors(
    exc: ValidationError, path: Path, node: Any, prefix: tuple[Any, ...], model: type
) -> list[TaskFileError]:
    errors = []
    for error in exc.errors(include_url=False):
        loc = tuple(p for p in error["loc"] if p not in UNION_TAGS)
        kind = error["type"]
        hint = None
        if kind == "missing":
            problem = f"missing required field {loc[-1]!r}"
            where = (*prefix, *loc[:-1])
        elif kind == "extra_forbidden":
            problem = f"unknown field {loc[-1]!r}"
            where = (*prefix, *loc)
            hint = did_you_mean(str(loc[-1]), _fields_at(model, loc[:-1]))
        else:
            problem = error["msg"].removeprefix("Value error, ")
            where = (*prefix, *loc)
        line = line_of(node, (*prefix, *loc))
        errors.append(TaskFileError(path, problem, line=line, field=field_path(where), hint=hint))
    return errors


def _fields_at(model: type, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (nested) model at `loc`, for did-you-mean hints."""
    for part in loc:
        info = getattr(model, "model_fields", {}).get(part)
        if info is None:
            return []
        sub = info.annotation
        candidates = [sub, *getattr(sub, "__args__", ())]
        found = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if found is None:
            return []
        model = found
    return list(getattr(model, "model_fields", {}))
