"""JSON Schemas of the files users write (task files, manifests) and of the files we write.

pydantic describes the *normalized* models; users write shorthands (`- equals`,
`- contains: Paris`, `agent: module:function`, `tasks:` lists). The written-form schemas are
composed from the pydantic schemas with those spellings put back, so editors and
check-jsonschema accept what the loader accepts, with field docstrings as descriptions.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

from ..core.docstrings import describe
from ..core.llm import OpenAIAgentOptions
from ..core.model import (
    MAX_NAME_LENGTH,
    TAG_RE,
    VARIANT_NAME_PATTERN,
    Manifest,
    SourceTaskSpec,
    TaskSpec,
)
from ..execution.graders import BUILTIN_GRADERS, BuiltinGrader, Contains
from ..execution.react import ReactOptions

Schema = dict[str, Any]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
TASK_ID_PATTERN = r"^(?!(?:.*/)?\.\.?(?:/|$))[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*$"
"""`check_task_id` as an ECMA-262 regex (editors run JavaScript): no `.` or `..` segment."""
SHORTHAND_EXTRA: dict[str, list[Schema]] = {Contains.name: [{"type": "string"}]}
"""Shorthand values a grader accepts beyond its primary option's type (`- contains: Paris`)."""


def ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def task_file_schema() -> Schema:
    """A task file as written: one task, or `{tasks: [...]}` whose tasks each need an `id`."""
    defs = _user_defs()
    defs["Task"] = _task_schema(defs.pop("TaskSpec"))
    defs["SourceTask"] = _source_task_schema(defs.pop("SourceTaskSpec"))
    defs["TaskList"] = {
        "type": "object",
        "description": "Several tasks in one file.",
        "properties": {
            "tasks": {
                "type": "array",
                "description": "The tasks of this file; each needs an `id`.",
                "items": {"allOf": [ref("Task"), {"required": ["id"]}]},
            }
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }
    root = {
        "title": "pytest-agenteval task file",
        "description": "One task, a `tasks:` list of tasks, or a `source:` of rows that each "
        "become a task (unknown keys are errors).",
        "if": {"type": "object", "required": ["tasks"]},
        "then": ref("TaskList"),
        "else": {
            "if": {"type": "object", "required": ["source"]},
            "then": ref("SourceTask"),
            "else": ref("Task"),
        },
    }
    return finish(root, defs)


def manifest_schema() -> Schema:
    """`agenteval.yaml` as written: versions may be YAML numbers, `agent` a reference string."""
    defs = _user_defs()
    root = defs.pop("Manifest")
    props = root["properties"]
    props["version"] = _keep_docs(props["version"], {"type": ["string", "number"]})
    props["agent_version"] = _keep_docs(
        props["agent_version"], {"type": ["string", "number", "null"]}
    )
    props["agent"] = _keep_docs(props["agent"], {"anyOf": [ref("Agent"), {"type": "null"}]})
    props["defaults"] = _keep_docs(props["defaults"], ref("Defaults"))
    props["name"] |= _pattern(props["name"]["pattern"], "letters, digits and _ . -")
    _variants(props, defs)
    root["title"] = "pytest-agenteval manifest (agenteval.yaml)"
    return finish(root, defs)


def _variants(props: Schema, defs: dict[str, Schema]) -> None:
    """`variants:` as written: each an agent spec alone, or `{agent, limits, agent_version}`."""
    variant = defs["Variant"]["properties"]
    variant["agent"] = _keep_docs(variant["agent"], ref("Agent"))
    variant["agent_version"] = _keep_docs(
        variant["agent_version"], {"type": ["string", "number", "null"]}
    )
    pattern = VARIANT_NAME_PATTERN
    named = {
        "type": "object",
        "patternProperties": {pattern: {"anyOf": [ref("Variant"), ref("Agent")]}},
        "additionalProperties": False,
        "propertyNames": {
            **_pattern(pattern, "letters, digits and _ . -"),
            "maxLength": MAX_NAME_LENGTH,
        },
    }
    props["variants"] = _keep_docs(props["variants"], {"anyOf": [named, {"type": "null"}]})


def model_schema(model: type[BaseModel], title: str) -> Schema:
    """The pydantic schema of a file we write (record, summary), with field docstrings."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})
    describe(schema, defs, model)
    schema["title"] = title
    return finish(schema, defs)


def finish(root: Schema, defs: dict[str, Schema]) -> Schema:
    """Add the dialect, keep only the definitions in use, and order keys deterministically."""
    used = _referenced({**root, "$defs": {}}, defs)
    schema = {"$schema": DIALECT, **root}
    if used:
        schema["$defs"] = {name: defs[name] for name in sorted(used)}
    ordered: Schema = _ordered(_flat_unions(schema))
    return ordered


# -- the user-facing models, with their written spellings ----------------------------------


def _user_defs() -> dict[str, Schema]:
    """Definitions shared by both user schemas: models, agents, graders and their options."""
    defs: dict[str, Schema] = {}
    for model in (TaskSpec, SourceTaskSpec, Manifest):
        schema = model.model_json_schema()
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
        describe(schema, defs, model)
    defs.pop("GraderSpec", None)
    openai = OpenAIAgentOptions.model_json_schema()
    describe(openai, defs, OpenAIAgentOptions)
    defs["OpenAIAgentOptions"] = openai
    react = ReactOptions.model_json_schema()
    describe(react, defs, ReactOptions)
    defs["ReactAgentOptions"] = react
    defs["Agent"] = _agent_schema(defs["CallableAgentSpec"]["properties"]["callable"])
    defs["Defaults"]["properties"]["graders"] = _keep_docs(
        defs["Defaults"]["properties"]["graders"], _graders_or_null()
    )
    _grader_defs(defs)
    _docker_image(defs)
    _sandbox_kinds(defs)
    return defs


def _sandbox_kinds(defs: dict[str, Schema]) -> None:
    """A sandbox names its kind by a key: `docker: {...}`, or any other key a plugin's kind
    (its options, which the kind checks), beside the common options."""
    sandbox = defs["SandboxSpec"]
    sandbox["properties"].pop("plugin", None)
    props = sandbox["properties"]
    props["docker"] = _keep_docs(props["docker"], ref("DockerImage"))
    defs.pop("PluginSandbox", None)
    sandbox["additionalProperties"] = {
        "type": ["object", "null"],
        "description": "A sandbox kind a plugin registers (`pytest_agenteval_environment_kinds`)"
        ": `KIND: {options}`, its options checked by the kind.",
    }
    sandbox["minProperties"] = 1


def _docker_image(defs: dict[str, Schema]) -> None:
    """A sandbox's image: exactly one of `image: NAME` and `build: DIR`, each a string; the
    daemons it may go to (`hosts:`), a list of addresses."""
    image = defs["DockerImage"]
    for name, prop in image["properties"].items():
        prop.pop("default", None)
        if name != "hosts":
            prop["type"] = "string"
    image["oneOf"] = [{"required": ["image"]}, {"required": ["build"]}]


def _task_schema(task: Schema) -> Schema:
    props = task["properties"]
    props["id"] = _keep_docs(
        props["id"],
        {
            "type": ["string", "null"],
            **_pattern(TASK_ID_PATTERN, "letters, digits and _ . - / (no empty, . or .. segment)"),
            "maxLength": MAX_NAME_LENGTH,
        },
    )
    props["tags"]["items"] = {
        "type": "string",
        **_pattern(f"^{TAG_RE.pattern}$", "a marker name: letters, digits and _"),
    }
    props["input"] = _keep_docs(props["input"], _input_schema())
    props["graders"] = _keep_docs(props["graders"], _graders_or_null())
    props["agent"] = _keep_docs(props["agent"], {"anyOf": [ref("Agent"), {"type": "null"}]})
    task.pop("title", None)
    return task


def _source_task_schema(task: Schema) -> Schema:
    """A task file with `source:`: templates where a task has values, shared fields as a task's."""
    props = task["properties"]
    shared = _task_schema({"properties": dict(props)})["properties"]
    for name in ("tags", "graders", "agent"):
        props[name] = shared[name]
    props["id"] = _keep_docs(props["id"], {"type": ["string", "null"]})
    props["input"] = _keep_docs(props["input"], {"type": ["string", "object", "array"]})
    task.pop("title", None)
    return task


def _input_schema() -> Schema:
    message = {
        "type": "object",
        "description": "A chat message.",
        "properties": {
            "role": {"type": "string", "examples": ["system", "user", "assistant"]},
            "content": {"description": "The message text (or structured content)."},
        },
        "required": ["role", "content"],
    }
    return {"type": ["string", "object", "array"], "items": message}


def _agent_schema(callable_ref: Schema) -> Schema:
    """The spellings of an agent; a string is short for `{callable: ...}`."""
    return {
        "description": "The agent under test: `module:function`, `path/to/file.py:function`, "
        "`{callable: ...}`, `{command: [argv...], ...}`, or `{kind: {...}}` of a plugin.",
        "anyOf": [
            {
                "type": "string",
                **_pattern(
                    callable_ref["pattern"], "`module:function` or `path/to/file.py:function`"
                ),
                "description": "A Python function: `module:function` or "
                "`path/to/file.py:function` (the dataset root is importable).",
            },
            {
                "type": "object",
                "if": {"required": ["command"]},
                "then": ref("CommandAgentSpec"),
                "else": {
                    "if": {"required": ["callable"]},
                    "then": ref("CallableAgentSpec"),
                    "else": {
                        "if": {"required": ["openai"]},
                        "then": _openai_agent(),
                        "else": {
                            "if": {"required": ["react"]},
                            "then": _react_agent(),
                            "else": {
                                "description": "An agent kind a plugin provides "
                                "(`pytest_agenteval_make_agent`), written `{kind: {options}}`, "
                                "e.g. `openai: {model: ...}`.",
                                "minProperties": 1,
                                "maxProperties": 1,
                                "additionalProperties": {"type": "object"},
                            },
                        },
                    },
                },
            },
        ],
    }


def _openai_agent() -> Schema:
    return {
        "description": "A model behind an OpenAI-compatible API "
        "(extra `pytest-agenteval[openai]`).",
        "properties": {"openai": ref("OpenAIAgentOptions"), "limits": ref("AgentLimits")},
        "additionalProperties": False,
    }


def _react_agent() -> Schema:
    return {
        "description": "The built-in tool-using loop: a model calling tools in the attempt's "
        "environment until it submits.",
        "properties": {"react": ref("ReactAgentOptions"), "limits": ref("AgentLimits")},
        "additionalProperties": False,
    }


def _graders_or_null() -> Schema:
    return {"type": ["array", "null"], "items": ref("Grader")}


def _pattern(regex: str, allowed: str) -> Schema:
    """A pattern, with the message editors show instead of the regex (VS Code's keyword)."""
    return {"pattern": regex, "patternErrorMessage": f"Use {allowed}."}


def _keep_docs(old: Schema, new: Schema) -> Schema:
    """`new` in place of a generated property schema, keeping its description and default."""
    kept: Schema = {k: old[k] for k in ("description", "default") if k in old}
    return {**new, **kept}


# -- graders ---------------------------------------------------------------------------------
#
# A grader is told apart by its shape first (`if`/`then`, not `anyOf`), so validators report
# the real problem (`'strp' was unexpected` at graders[0].equals) instead of "not valid under
# any of the given schemas", and editors complete the names and options of built-ins.


def _grader_defs(defs: dict[str, Schema]) -> None:
    """Add `Grader` and its parts: `name`, `{name: value-or-options}`, `{type: name, ...}`."""
    for grader in BUILTIN_GRADERS.values():
        options = grader.options_model.model_json_schema()
        describe(options, defs, grader.options_model)
        defs[grader.options_model.__name__] = options
        defs[f"{grader.__name__}Typed"] = _typed_builtin(grader, options)
    defs["GraderName"] = _grader_names()
    defs["NamedGrader"] = _named_grader(defs)
    defs["TypedGrader"] = _typed_grader()
    defs["Grader"] = {
        "description": "A grader: `name`, `{name: value}`, `{name: {options}}` or "
        "`{type: name, ...options}`. Built-in graders check their options; graders "
        "registered by plugins check their own.",
        "if": {"type": "string"},
        "then": ref("GraderName"),
        "else": {
            "if": {"type": "object", "required": ["type"]},
            "then": ref("TypedGrader"),
            "else": ref("NamedGrader"),
        },
    }


def _summary(grader: type[BuiltinGrader]) -> str:
    return inspect.cleandoc(grader.__doc__ or grader.name).split("\n\n")[0].replace("\n", " ")


def _required(schema: Schema) -> list[str]:
    return list(schema.get("required", []))


def _closed(properties: Schema, required: list[str]) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _grader_names() -> Schema:
    """Bare names: built-ins that need no option (offered for completion), or plugin names."""
    needs_options = [g for g in BUILTIN_GRADERS.values() if _required(_options_schema(g))]
    return {
        "type": "string",
        "not": {"enum": [g.name for g in needs_options]},
        "anyOf": [
            *(
                {"const": g.name, "description": _summary(g)}
                for g in BUILTIN_GRADERS.values()
                if g not in needs_options
            ),
            {"description": "A grader registered by a plugin (`pytest_agenteval_make_grader`)."},
        ],
    }


def _options_schema(grader: type[BuiltinGrader]) -> Schema:
    return grader.options_model.model_json_schema()


def _named_grader(defs: dict[str, Schema]) -> Schema:
    """`{name: value}`: a built-in's value is its options or its primary option's value."""
    properties = {}
    for grader in BUILTIN_GRADERS.values():
        options = grader.options_model.__name__
        value = _shorthand_value(grader, defs[options])
        branches = ref(options) if value is None else _if_object(ref(options), value)
        properties[grader.name] = {"description": _summary(grader), **branches}
    return {
        "type": "object",
        "description": "`- name: value` or `- name: {options}`; other names are plugin graders.",
        "properties": properties,
        "minProperties": 1,
        "maxProperties": 1,
    }


def _if_object(then: Schema, otherwise: Schema) -> Schema:
    return {"if": {"type": "object"}, "then": then, "else": otherwise}


def _shorthand_value(grader: type[BuiltinGrader], options: Schema) -> Schema | None:
    """`- name: value` sets the primary option (a mapping is read as options instead)."""
    if grader.primary is None:
        return None
    primary = dict(options["properties"][grader.primary])
    about = primary.pop("description", "")
    for key in ("default", "title"):
        primary.pop(key, None)
    extra = SHORTHAND_EXTRA.get(grader.name)
    value = {"anyOf": [primary, *extra]} if extra else primary
    if about:
        value["description"] = f"Shorthand for the `{grader.primary}` option: {about}"
    return value


def _typed_grader() -> Schema:
    """`{type: name, ...options}` or `{type: name, options: {...}}`."""
    names = [{"const": g.name, "description": _summary(g)} for g in BUILTIN_GRADERS.values()]
    return {
        "type": "object",
        "description": "A grader named by `type`, with its options beside it or under `options`.",
        "properties": {
            "type": {
                "description": "The grader's name: a built-in, or one a plugin registers.",
                "anyOf": [*names, {"type": "string"}],
            },
            "options": {
                "type": "object",
                "description": "The grader's options (instead of writing them beside `type`).",
            },
        },
        "required": ["type"],
        "allOf": [
            {
                "if": {"properties": {"type": {"const": g.name}}, "required": ["type"]},
                "then": ref(f"{g.__name__}Typed"),
            }
            for g in BUILTIN_GRADERS.values()
        ],
        "if": {"required": ["options"]},
        "then": {"propertyNames": {"enum": ["type", "options"]}},
    }


def _typed_builtin(grader: type[BuiltinGrader], options: Schema) -> Schema:
    """A built-in named by `type`: exactly its options, beside `type` or under `options`."""
    name = {"const": grader.name}
    return {
        "description": f"`{grader.name}`: {_summary(grader)}",
        "if": {"required": ["options"]},
        "then": _closed(
            {"type": name, "options": ref(grader.options_model.__name__)}, ["type", "options"]
        ),
        "else": _closed({"type": name, **options["properties"]}, ["type", *_required(options)]),
    }


# -- output ----------------------------------------------------------------------------------

TYPE_KEYWORDS = frozenset(
    {
        *("items", "prefixItems", "minItems", "maxItems", "uniqueItems"),
        *("pattern", "minLength", "maxLength", "format"),
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
        *("properties", "additionalProperties", "required", "propertyNames"),
    }
)
"""Keywords that only constrain instances of their own type, so alternatives can share a node."""


def _flat_unions(node: Any) -> Any:
    """`anyOf` of alternatives with distinct types as one type list, recursively.

    pydantic writes `X | None` as `anyOf: [X, {type: null}]`; validators then report
    "not valid under any of the given schemas" instead of what is wrong with the X.
    """
    if isinstance(node, list):
        return [_flat_unions(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _flat_unions(value) for key, value in node.items()}
    merged = _merged(node["anyOf"]) if isinstance(node.get("anyOf"), list) else None
    if merged is None or set(merged) & (set(node) - {"anyOf"}):
        return node
    rest = {key: value for key, value in node.items() if key != "anyOf"}
    return {**rest, **merged}


def _merged(alternatives: list[Any]) -> Schema | None:
    """One schema equal to `anyOf: alternatives`, or None when they overlap."""
    types: list[str] = []
    merged: Schema = {}
    for alt in alternatives:
        kind = alt.get("type") if isinstance(alt, dict) else None
        kinds = [kind] if isinstance(kind, str) else kind
        if not kinds or not set(alt) - {"type"} <= TYPE_KEYWORDS or set(alt) & set(merged):
            return None
        if {"number", "integer"} <= {*types, *kinds} or set(types) & set(kinds):
            return None
        types += kinds
        merged.update({key: value for key, value in alt.items() if key != "type"})
    return {"type": types, **merged}


def _referenced(schema: Any, defs: dict[str, Schema]) -> set[str]:
    """Names of the definitions `schema` uses, directly or through other definitions."""
    used: set[str] = set()
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str) and target.startswith("#/$defs/"):
                name = target.removeprefix("#/$defs/")
                if name not in used:
                    used.add(name)
                    todo.append(defs[name])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return used


_VALUES = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are data, not schemas: their mappings keep the user's order."""


def _ordered(node: Any, properties: bool = False) -> Any:
    """Sort schema keywords; keep the order of properties (the order users read fields in)."""
    if isinstance(node, list):
        return [_ordered(item) for item in node]
    if not isinstance(node, dict):
        return node
    if properties:
        return {name: _ordered(value) for name, value in node.items()}
    return {
        key: node[key] if key in _VALUES else _ordered(node[key], key == "properties")
        for key in sorted(node)
    }
