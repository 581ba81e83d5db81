"""Every `provider: NAME` a dataset writes, checked against its manifest's `providers:` when
it is read: a typo is a located error with a did-you-mean before any attempt (and in
`agenteval validate`), not a recorded error of each attempt that makes a call."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import TaskFileError, did_you_mean
from ..core.model import AnyAgentSpec, GraderSpec, Manifest, PluginAgentSpec, TaskSpec
from .yamlfile import field_path, line_of

PROVIDER_KINDS = frozenset({"openai", "react"})
"""The built-in agent kinds whose `provider:` option names one of `providers:`."""

Ref = tuple[tuple[Any, ...], Any]
"""Where a `provider:` is written (its YAML path) and the name it gives."""


def manifest_provider_problems(manifest: Manifest, path: Path, node: Any) -> list[TaskFileError]:
    """The manifest's unknown provider names: its agent's, each variant's, `judge:`'s and
    its default graders' (a `judge:` block counts even with no judge grader in use)."""
    refs: list[Ref] = list(_agent_refs(manifest.agent, ("agent",)))
    for name, variant in (manifest.variants or {}).items():
        shorthand = _child_keys(node, ("variants", name))
        base = ("variants", name) if "agent" not in shorthand else ("variants", name, "agent")
        refs += _agent_refs(variant.agent, base)
    if manifest.judge is not None and manifest.judge.provider is not None:
        refs.append((("judge", "provider"), manifest.judge.provider))
    refs += _grader_refs(manifest.defaults.graders, ("defaults", "graders"))
    return _unknown(refs, manifest.providers, path, node)


def task_provider_problems(
    spec: TaskSpec, providers: Mapping[str, Any] | None, path: Path, node: Any, loc: tuple[Any, ...]
) -> list[TaskFileError]:
    """A task's own unknown provider names: its agent's and its judge graders'."""
    refs = [
        *_agent_refs(spec.agent, (*loc, "agent")),
        *_grader_refs(spec.graders, (*loc, "graders")),
    ]
    return _unknown(refs, providers, path, node)


def _agent_refs(spec: AnyAgentSpec | None, base: tuple[Any, ...]) -> Iterator[Ref]:
    if isinstance(spec, PluginAgentSpec) and spec.type in PROVIDER_KINDS:
        name = spec.options.get("provider")
        if name is not None:
            yield (*base, spec.type, "provider"), name


def _grader_refs(specs: list[GraderSpec] | None, base: tuple[Any, ...]) -> Iterator[Ref]:
    for index, grader in enumerate(specs or ()):
        name = grader.options.get("provider") if grader.type == "judge" else None
        if name is not None:
            yield (*base, index, "judge", "provider"), name


def _unknown(
    refs: list[Ref], providers: Mapping[str, Any] | None, path: Path, node: Any
) -> list[TaskFileError]:
    table = sorted(providers or {})
    errors = []
    for where, name in refs:
        if not isinstance(name, str) or name in table:
            continue  # not a string: the kind's own options check says so
        has = f" (it has: {', '.join(table)})" if table else " (it has none)"
        hint = did_you_mean(name, table) or (
            "name one of them, or add it under `providers:`"
            if table
            else "declare it under `providers:` in agenteval.yaml (see docs/guides/providers.md)"
        )
        errors.append(
            TaskFileError(
                path,
                f"no provider {name!r} in the manifest's `providers:`{has}",
                line=line_of(node, where),
                field=field_path(where),
                hint=hint,
            )
        )
    return errors


def _child_keys(node: Any, loc: tuple[Any, ...]) -> set[str]:
    """The keys of the YAML mapping at `loc` (empty when there is none)."""
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            return set()
        node = next((v for k, v in node.value if k.value == part), None)
    if not isinstance(node, yaml.MappingNode):
        return set()
    return {str(key.value) for key, _ in node.value}
