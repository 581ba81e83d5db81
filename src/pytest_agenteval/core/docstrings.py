"""Field docstrings as JSON Schema descriptions, read from the source when a schema is built.

pydantic's `use_attribute_docstrings` would do this at import time, for every pytest run and
worker (about 9 ms); schemas are printed rarely, so the source is parsed only then.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import typing
from functools import cache
from typing import Any, TypeGuard, get_args

from pydantic import BaseModel

Schema = dict[str, Any]


def describe(schema: Schema, defs: dict[str, Schema], model: type) -> None:
    """Give the properties of `model` (a pydantic model or a dataclass) and of the models it
    nests their docstrings."""
    for cls in _models_in(model):
        target = schema if cls is model else defs.get(cls.__name__)
        if target is None:
            continue
        for name, doc in field_docs(cls).items():
            info = cls.model_fields.get(name) if _is_model(cls) else None
            prop = target.get("properties", {}).get(info.alias or name if info else name)
            if prop is not None:
                prop.setdefault("description", doc)
                prop.pop("title", None)


def _is_model(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _models_in(model: type) -> list[type]:
    """`model` and every pydantic model or dataclass its fields mention, each once."""
    found: list[type] = []
    todo: list[Any] = [model]
    while todo:
        tp = todo.pop()
        if _is_model(tp) or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            if tp not in found:
                found.append(tp)
                todo.extend(_field_types(tp))
        else:
            todo.extend(get_args(tp))
    return found


def _field_types(cls: type) -> list[Any]:
    if _is_model(cls):
        return [f.annotation for f in cls.model_fields.values()]
    return list(typing.get_type_hints(cls).values())


def field_docs(model: type) -> dict[str, str]:
    """The docstrings written under the fields of `model` and its bases, by field name."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls is BaseModel or not (_is_model(cls) or dataclasses.is_dataclass(cls)):
            continue
        node = _class_nodes(cls.__module__).get(cls.__qualname__)
        if node is None:
            continue
        for field, text in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(text, ast.Expr)
                and isinstance(text.value, ast.Constant)
                and isinstance(text.value.value, str)
            ):
                docs[field.target.id] = _one_paragraph(text.value.value)
    return docs


@cache
def _class_nodes(module_name: str) -> dict[str, ast.ClassDef]:
    """Top-level class definitions of a module, parsed once."""
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _one_paragraph(text: str) -> str:
    return re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(text))
