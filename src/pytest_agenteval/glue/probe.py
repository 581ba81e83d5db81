"""The probe's pytest side: which models a session reaches, checked before its first attempt.

Registered in the controller only (or the lone process), so under xdist the probe runs once.
It runs first thing in `pytest_collection`, before any item is collected or any agent call
scheduled; a failure stops the session there (status `probe_failed`, exit 2) and nothing is
recorded as an attempt. `--agenteval-probe-only` ends the session after it; `--agenteval-no-probe`
does not register it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from ..core.llm import ModelSettings, ProviderSpec
from ..core.model import AnyAgentSpec, Manifest, PluginAgentSpec
from ..providers.probe import ProbeProblem, Role, Use, probe, unpriced
from ..providers.seam import ProviderUnknown, route_of, run_sync
from ..sources.dataset import Dataset, with_judge_defaults
from ..sources.speccache import CachedTask
from .runtime import Runtime


class ProbeHooks:
    """Checks every provider and model the session reaches before anything is spent."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.checked: list[Use] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        settings = self.runtime.settings
        uses: list[Use] = []
        problems: list[ProbeProblem] = []
        for dataset in self.runtime.datasets:
            found = list(uses_of(dataset, settings.variants))
            if settings.agent_override is not None:  # the manifest's agents are not called
                found = [u for u in found if u.role != "agent"]
            pricing = dataset.manifest.pricing or {}
            problems += unpriced(found, pricing, settings.max_cost is not None)
            uses += found
        if uses:  # a one-token probe request counts against the caps and in the spend
            pricing = {
                m: p for d in self.runtime.datasets for m, p in (d.manifest.pricing or {}).items()
            }
            problems += run_sync(probe(uses, self.runtime.stops, pricing))
        self.checked = uses
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if problems:
            message = failure_message(problems)
            if self.runtime.stops is not None:
                self.runtime.stops.halt("probe_failed", message)
            if terminal is not None:
                terminal.write_line(message, red=True, bold=True)
            pytest.exit("agenteval: the probe failed", returncode=pytest.ExitCode.INTERRUPTED)
        if settings.probe_only:
            pytest.exit(passed_message(uses), returncode=pytest.ExitCode.OK)


def failure_message(problems: list[ProbeProblem]) -> str:
    """What the terminal, the summary and run.json say of a failed probe."""
    lines = [f"agenteval: the probe failed ({len(problems)} problem(s)), no attempt started:"]
    return "\n".join([*lines, *(f"  {p.line()}" for p in problems)])


def passed_message(uses: list[Use]) -> str:
    routes = {(u.route.name, u.route.base_url) for u in uses}
    models = {(u.route.name, u.model) for u in uses if u.model}
    return f"agenteval: probe passed: {len(routes)} provider(s), {len(models)} model(s)"


def uses_of(dataset: Dataset, variants: tuple[str, ...] = ()) -> Iterator[Use]:
    """Every model `dataset` reaches: its agents (of the selected variants), the judges of
    its tasks, and each provider `task.llm()` may use. Specs that do not validate are left
    to the errors they raise where they are built."""
    manifest = dataset.manifest
    at = f"[{dataset.name}]"
    for name, variant in (manifest.variants or {}).items():
        if not variants or name in variants:
            yield from _agent_uses(manifest, variant.agent, f"agent of variant {name} {at}")
    if manifest.agent is not None and not manifest.variants:
        yield from _agent_uses(manifest, manifest.agent, f"agent {at}")
    for task in _tasks(dataset):
        where = f"{task.spec.id} {at}"
        if task.spec.agent is not None:
            yield from _agent_uses(manifest, task.spec.agent, f"agent of {where}")
        graders = task.spec.graders or manifest.defaults.graders or []
        for grader in with_judge_defaults(list(graders), manifest):
            if grader.type == "judge":
                yield from _settings_use(manifest, grader.options, f"judge of {where}", "judge")
    for name, spec in (manifest.providers or {}).items():
        yield from _provider_use(manifest, name, spec, f"task.llm({name!r}) {at}")


def _tasks(dataset: Dataset) -> Iterator[CachedTask]:
    for path in dataset.task_files():
        for task in dataset.read(path).tasks:
            if isinstance(task, CachedTask):
                yield task


def _agent_uses(manifest: Manifest, spec: AnyAgentSpec, who: str) -> Iterator[Use]:
    if not isinstance(spec, PluginAgentSpec):
        return
    if spec.type == "openai":
        yield from _settings_use(manifest, spec.options, who)
    elif spec.type == "react":
        name = spec.options.get("provider")
        try:
            route = route_of(manifest.providers, name if isinstance(name, str) else None)
        except ProviderUnknown:
            return
        model = spec.options.get("model")
        yield Use(route, model if isinstance(model, str) else route.default_model, who)


def _settings_use(
    manifest: Manifest, options: dict[str, Any], who: str, role: Role = "agent"
) -> Iterator[Use]:
    known = {k: v for k, v in options.items() if k in ModelSettings.model_fields}
    try:
        settings = ModelSettings.model_validate(known)
        route = route_of(manifest.providers, settings=settings)
    except (ValidationError, ProviderUnknown):
        return
    yield Use(route, settings.model or route.default_model, who, role)


def _provider_use(manifest: Manifest, name: str, spec: ProviderSpec, who: str) -> Iterator[Use]:
    yield Use(route_of(manifest.providers, name), spec.endpoint.model, who, "llm")
