"""Reference pages generated from the plugin itself, so they cannot drift from the code.

Each directive renders Markdown from one source of truth and parses it in place:
`agenteval-options` from the plugin's own `pytest_addoption`, `agenteval-commands` from the
`agenteval` command's parser, `agenteval-schema KIND` from the JSON Schemas the plugin
publishes (`agenteval schema KIND`). `missing_docs()` lists what has no documentation; a test
fails on it, and so does the build.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

# -- pytest options and ini settings -------------------------------------------------------


@dataclass
class Option:
    names: tuple[str, ...]
    help: str
    metavar: str | None
    ini: str | None = None


@dataclass
class _Recorder:
    """Stands in for pytest's parser: records what `pytest_addoption` declares."""

    options: list[Option] = field(default_factory=list)
    inis: dict[str, str] = field(default_factory=dict)

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.append(Option(names, kwargs.get("help", ""), kwargs.get("metavar")))

    def addini(self, name: str, help: str, **kwargs: Any) -> None:
        self.inis[name] = help


def plugin_options() -> list[Option]:
    """Every option of the plugin, each with the ini setting that shares its help text."""
    from pytest_agenteval import plugin

    recorder = _Recorder()
    plugin.pytest_addoption(recorder)  # type: ignore[arg-type]
    by_help = {help_: name for name, help_ in recorder.inis.items()}
    for option in recorder.options:
        option.ini = by_help.get(option.help)
    return recorder.options


def _plain(help_: str) -> str:
    """argparse help text as a reader sees it (argparse turns `%%` into `%`)."""
    return " ".join(help_.replace("%%", "%").split())


def options_markdown() -> str:
    rows = ["| option | ini setting | what it does |", "| --- | --- | --- |"]
    for option in plugin_options():
        names = ", ".join(
            f"`{name} {option.metavar}`" if option.metavar else f"`{name}`" for name in option.names
        )
        ini = f"`{option.ini}`" if option.ini else ""
        rows.append(f"| {names} | {ini} | {_cell(_plain(option.help))} |")
    return "\n".join(rows)


# -- the agenteval command ------------------------------------------------------------------


def commands() -> list[tuple[str, argparse.ArgumentParser, str]]:
    """Each subcommand of `agenteval`: name, parser and its one-line help."""
    from pytest_agenteval import cli

    return _subcommands(cli._parser(), "")


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> list[Any]:
    """The subcommands of `parser`, a command with actions of its own (`cache stats`) as
    each of them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    found: list[tuple[str, argparse.ArgumentParser, str]] = []
    for name, p in sub.choices.items():
        if any(isinstance(a, argparse._SubParsersAction) for a in p._actions):
            found += _subcommands(p, f"{prefix}{name} ")
        else:
            found.append((f"{prefix}{name}", p, helps.get(name, "")))
    return found


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def commands_markdown() -> str:
    out: list[str] = []
    for name, parser, help_ in commands():
        parser.prog = f"agenteval {name}"
        out += [f"## `agenteval {name}`", "", help_[:1].upper() + help_[1:] + ".", ""]
        out += ["```text", parser.format_usage().strip(), "```", ""]
        for action in _arguments(parser):
            shown = ", ".join(action.option_strings) or (action.metavar or action.dest)
            out.append(f"- `{shown}`: {_plain(action.help or '')}")
        out.append("")
    return "\n".join(out)


# -- file formats from their JSON Schemas -------------------------------------------------


def schema_of(kind: str) -> dict[str, Any]:
    """The JSON Schema `agenteval schema KIND` prints."""
    import contextlib
    import io
    import json

    from pytest_agenteval import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["schema", kind])
    schema: dict[str, Any] = json.loads(out.getvalue())
    return schema


FIRST = ("Task", "TaskList", "SourceTask", "Defaults", "Agent")
"""Definitions users look for first; the rest follow alphabetically."""


def _objects(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The schema's root and every definition that has fields, the ones users write first."""
    found = [("", schema)] if "properties" in schema else []
    defs = schema.get("$defs", {})
    names = [n for n in FIRST if n in defs] + sorted(n for n in defs if n not in FIRST)
    return found + [(n, defs[n]) for n in names if "properties" in defs[n]]


def _type(node: Any, linked: set[str]) -> str:
    """A field's type in a few words; definitions with a table of their own are links."""
    if not isinstance(node, dict):
        return ""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})" if name in linked else f"`{name}` (see description)"
    if "const" in node:
        return f"`{node['const']!r}`"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    for union in ("anyOf", "oneOf"):
        if union in node:
            return " \\| ".join(t for t in (_type(n, linked) for n in node[union]) if t)
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    shown = []
    for k in kinds:
        if k == "array" and "items" in node:
            shown.append(f"list of {_type(node['items'], linked) or 'values'}")
        else:
            shown.append(str(k))
    return " \\| ".join(shown) or "see description"


def schema_markdown(kind: str) -> str:
    schema = schema_of(kind)
    out: list[str] = [_plain(schema.get("description", "")), ""]
    objects = _objects(schema)
    linked = {name for name, _ in objects if name}
    for name, obj in objects:
        if name:
            out += [f"### {name}", ""]
        if obj.get("description") and name:
            out += [_plain(obj["description"]), ""]
        out += ["| field | type | what it is |", "| --- | --- | --- |"]
        required = set(obj.get("required", []))
        for field_name, prop in obj["properties"].items():
            mark = " (required)" if field_name in required else ""
            description = _cell(_plain(prop.get("description", "")))
            out.append(f"| `{field_name}`{mark} | {_cell(_type(prop, linked))} | {description} |")
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- what has no documentation --------------------------------------------------------------

SCHEMA_KINDS = ("task", "manifest", "record", "summary", "progress")


def missing_docs() -> list[str]:
    """Options, commands, arguments and fields without documentation."""
    missing = [f"option {o.names[0]}" for o in plugin_options() if not o.help.strip()]
    for name, parser, help_ in commands():
        if not help_.strip():
            missing.append(f"command agenteval {name}")
        for action in _arguments(parser):
            if not (action.help or "").strip():
                missing.append(f"agenteval {name} argument {action.dest}")
    for kind in SCHEMA_KINDS:
        for obj_name, obj in _objects(schema_of(kind)):
            for field_name, prop in obj["properties"].items():
                if not prop.get("description", "").strip():
                    missing.append(f"{kind} schema: {obj_name or 'root'}.{field_name}")
    return missing


# -- Sphinx glue ----------------------------------------------------------------------------


class _Generated(SphinxDirective):
    optional_arguments = 1

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.markdown().splitlines()), 0, container)
        children: list[nodes.Node] = container.children
        return children


class OptionsDirective(_Generated):
    """The options table, in a container of class `agenteval-options`: the site's CSS keeps
    each option name (with its value) on one line there, never broken mid-name."""

    def markdown(self) -> str:
        return options_markdown()

    def run(self) -> list[nodes.Node]:
        return [nodes.container("", *super().run(), classes=[OPTIONS_CLASS])]


OPTIONS_CLASS = "agenteval-options"


class CommandsDirective(_Generated):
    def markdown(self) -> str:
        return commands_markdown()


class SchemaDirective(_Generated):
    required_arguments = 1
    optional_arguments = 0

    def markdown(self) -> str:
        return schema_markdown(self.arguments[0])


def _check(app: Sphinx) -> None:
    from sphinx.util import logging

    for what in missing_docs():
        logging.getLogger(__name__).warning("no documentation: %s", what)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("agenteval-options", OptionsDirective)
    app.add_directive("agenteval-commands", CommandsDirective)
    app.add_directive("agenteval-schema", SchemaDirective)
    app.connect("builder-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
