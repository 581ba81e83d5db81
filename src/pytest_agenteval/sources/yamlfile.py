"""Safe YAML with line marks: parse task files, and point validation errors at their lines."""

from __future__ import annotations

import difflib
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from ..core.errors import TaskFileError, did_you_mean
from ..core.model import UNION_TAGS

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_KEYS_LISTED = 12
"""An unknown key's hint lists the keys allowed there when there are at most this many."""

MAX_EXPANDED_NODES = 1_000_000
"""How many YAML nodes a file may hold once its aliases (`*name`) are expanded.

PyYAML shares one object per anchor, so a "billion laughs" file parses small; what blows up
is everything that walks the data afterwards (validation, digests)."""


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping key written twice."""


class _Loader(_BaseLoader):  # type: ignore[misc]  # PyYAML picks its loader at runtime
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

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping; a key written twice is an error (YAML would keep the last one silently:
        a variant or a field defined twice must not lose its first definition unsaid)."""
        first: dict[str, int] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value != "<<":
                line = first.setdefault(key.value, key.start_mark.line)
                if line != key.start_mark.line:
                    raise _DuplicateKey(
                        None, None, f"key {key.value!r} given twice (first at line {line + 1})",
                        key.start_mark,
                    )  # fmt: skip
        return super().construct_mapping(node, deep)


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
        if node is not None and b"*" in text:  # no asterisk, no alias
            _check_expansion(path, node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
        line = mark.line + 1 if mark is not None else None
        hint = (
            "keep one of them"
            if isinstance(exc, _DuplicateKey)
            else "check indentation and quoting"
        )
        raise TaskFileError(path, problem, line=line, hint=hint) from None
    finally:
        loader.dispose()
    if data is None:
        raise TaskFileError(path, "the file is empty", line=1)
    return node, data


def _check_expansion(path: Path, root: Any) -> None:
    """Refuse alias bombs and recursive aliases before anything walks the data.

    Counts each node's expanded size once (aliases share nodes), depth first without recursion.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = size = 1 + sum(sizes[id(child)] for _, child in _children(node))
            if size > MAX_EXPANDED_NODES:
                problem = f"aliases expand this value to more than {MAX_EXPANDED_NODES:,} nodes"
                hint = (
                    f"a file may hold at most {MAX_EXPANDED_NODES:,} nodes once its aliases "
                    "(*name) are expanded; write the repeated data out, or split the file"
                )
                raise _alias_error(path, root, node, problem, hint)
        elif key in open_nodes:
            problem = "a recursive alias: this value contains itself"
            hint = "an alias (*name) cannot stand inside the value its anchor (&name) marks"
            raise _alias_error(path, root, node, problem, hint)
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for _, child in _children(node))


def _children(node: Any) -> list[tuple[Any, Any]]:
    """(step, child) pairs: a mapping's keys (step None) and values, a sequence's items."""
    if isinstance(node, yaml.MappingNode):
        return [
            pair for key, value in node.value for pair in ((None, key), (_key_text(key), value))
        ]
    if isinstance(node, yaml.SequenceNode):
        return list(enumerate(node.value))
    return []


def _key_text(key: Any) -> str | None:
    return key.value if isinstance(key, yaml.ScalarNode) else None


def _alias_error(path: Path, root: Any, node: Any, problem: str, hint: str) -> TaskFileError:
    loc = _loc_of(root, node)
    field = field_path(loc) if loc and None not in loc else None
    return TaskFileError(path, problem, line=node.start_mark.line + 1, field=field, hint=hint)


def _loc_of(root: Any, target: Any) -> tuple[Any, ...]:
    """The first place `target` appears below `root`, visiting each shared node once."""
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if node is target:
            return loc
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend((child, (*loc, step)) for step, child in reversed(_children(node)))
    return ()


def line_of(node: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc` (or of its nearest existing parent)."""
    if node is None:
        return None
    line: int = _node_at(node, loc).start_mark.line + 1
    return line


def _node_at(node: Any, loc: tuple[Any, ...]) -> Any:
    """The YAML node at `loc` below `node`, or its nearest existing parent."""
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        node = child
    return node


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
    """Every problem pydantic found, in line order. A missing field that an unknown key nearby
    misspells (`rubrik` for `rubric`) is not reported apart: the unknown key says it all."""
    found = [
        (tuple(p for p in e["loc"] if p not in UNION_TAGS), e)
        for e in exc.errors(include_url=False)
    ]
    meant = {
        (loc[:-1], close)
        for loc, e in found
        if e["type"] == "extra_forbidden"
        for close in [closest(str(loc[-1]), _fields_at(model, loc[:-1]))]
        if close
    }
    errors = []
    for loc, error in found:
        kind = error["type"]
        hint = None
        line = line_of(node, (*prefix, *loc))
        if kind == "missing":
            if (loc[:-1], loc[-1]) in meant:
                continue
            problem = f"missing required field {loc[-1]!r}"
            where = (*prefix, *loc[:-1])
        elif kind == "extra_forbidden":
            problem = f"unknown key {loc[-1]!r}"
            where = (*prefix, *loc)
            hint = _key_hint(model, loc[:-1], str(loc[-1]))
        elif kind == "string_type" and _unquoted(error["input"]):
            key = loc[-1:] == ("[key]",)
            where = (*prefix, *loc[:-2]) if key else (*prefix, *loc)
            problem, hint, line = _quote_it(node, where, error["input"], key)
        elif kind == "list_type":
            problem, hint = _list_wanted(loc[-1], error["input"])
            where = (*prefix, *loc)
        else:
            problem = error["msg"].removeprefix("Value error, ")
            where = (*prefix, *loc)
        errors.append(TaskFileError(path, problem, line=line, field=field_path(where), hint=hint))
    return sorted(errors, key=lambda e: e.line or 0)


def _list_wanted(name: Any, value: Any) -> tuple[str, str]:
    """A single value where a list belongs (`tags: math`): the problem, and the list to write."""
    found = "a mapping" if isinstance(value, dict) else f"{value!r}"
    if isinstance(value, str | int | float | bool):
        written = f"{name}: [{value}]" if isinstance(name, str) else f"[{value}]"
        return f"expected a list, found {found}", f"write a list: {written}"
    return f"expected a list, found {found}", "write a list: `[a, b]` or one `- item` per line"


def _unquoted(value: Any) -> bool:
    """Whether a value YAML read from an unquoted word (`true`, `null`, `0`) is not text."""
    return value is None or isinstance(value, bool | int | float)


def _quote_it(
    node: Any, where: tuple[Any, ...], value: Any, key: bool
) -> tuple[str, str, int | None]:
    """A name or text written unquoted that YAML read as a boolean, null or number: the
    problem, the hint to quote it, and its line (a key's own line: pydantic's location of a
    key holds its value, and `true` is `1` there)."""
    kind = "null" if value is None else type(value).__name__
    kind = {"bool": "a boolean", "int": "a number", "float": "a number"}.get(kind, kind)
    found = _key_node(_node_at(node, where), value) if key and node is not None else None
    written = found.value if found is not None else str(value).lower()
    problem = f"{'the key ' if key else ''}{written} is not text: YAML reads it as {kind}"
    line = found.start_mark.line + 1 if found is not None else line_of(node, where)
    return problem, f'quote it: "{written}"', line


def _key_node(mapping: Any, value: Any) -> Any:
    """The key of YAML `mapping` that reads as `value` (of the same type), if any."""
    if not isinstance(mapping, yaml.MappingNode):
        return None
    for key, _ in mapping.value:
        if isinstance(key, yaml.ScalarNode) and not key.style:  # plain: not quoted
            read = yaml.safe_load(key.value)
            if type(read) is type(value) and read == value:
                return key
    return None


def closest(word: str, choices: list[str]) -> str | None:
    """The choice `word` most likely misspells (as `did_you_mean` picks it), or None."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def _fields_at(model: type, loc: tuple[Any, ...]) -> list[str]:
    """Keys of the (nested) model at `loc`, for did-you-mean hints: steps through optional
    and union types, a dict's values (`providers: {NAME: ...}`) and a list's items."""
    found = _model_at(model, loc)
    if found is None:
        return []
    return [info.alias or name for name, info in found.model_fields.items()]


def _model_at(tp: Any, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model at `loc` below type `tp`, the first one that fits, or None."""
    for arm in _arms(tp):
        if not loc:
            if isinstance(arm, type) and issubclass(arm, BaseModel):
                return arm
            continue
        part, rest = loc[0], loc[1:]
        if isinstance(arm, type) and issubclass(arm, BaseModel):
            info = arm.model_fields.get(part) if isinstance(part, str) else None
            info = info or next((i for i in arm.model_fields.values() if i.alias == part), None)
            nxt = info.annotation if info is not None else None
        elif get_origin(arm) is dict:
            nxt = get_args(arm)[1] if get_args(arm) else None
        elif get_origin(arm) in (list, tuple) and isinstance(part, int):
            nxt = get_args(arm)[0] if get_args(arm) else None
        else:
            nxt = None
        found = _model_at(nxt, rest) if nxt is not None else None
        if found is not None:
            return found
    return None


def _arms(tp: Any) -> list[Any]:
    """The types `tp` may be: itself, or each arm of a union (Annotated unwrapped)."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, UnionType):
        return [arm for sub in get_args(tp) for arm in _arms(sub)]
    return [tp]


def _key_hint(model: type, loc: tuple[Any, ...], key: str) -> str | None:
    """An unknown key's hint: the key it likely misspells, else what the model says of its keys
    (`UNKNOWN_KEY_HINT`), else the keys allowed there (when few)."""
    fields = _fields_at(model, loc)
    said: str | None = getattr(_model_at(model, loc), "UNKNOWN_KEY_HINT", None)
    if hint := did_you_mean(key, fields) or said:
        return hint
    return "keys here: " + ", ".join(fields) if 0 < len(fields) <= MAX_KEYS_LISTED else None
