"""The probe's pytest side: which models the attempts that run now reach, checked before the
first of them starts.

Registered in the controller only (or the lone process), so under xdist the probe runs once.
It runs once the session's selection is known (after `-k`, `-m`, a shard's deselection) and
before any agent call is scheduled: alone as collection finishes, under xdist when the first
worker's collection arrives (the controller collects nothing; nothing is scheduled before
every worker's has). Only what runs now is probed: an attempt the plan reuses reaches no model,
a regraded one only its judges. A failure stops the session (exit 2) and is no run's status: a
new run is not kept, a resumed one is left as it was. `--agenteval-probe-only` ends the session
after it; `--agenteval-no-probe` does not register it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from ..core.identity import AttemptId
from ..core.llm import ModelSettings, ProviderSpec
from ..core.model import Action, AnyAgentSpec, Manifest, PluginAgentSpec, TaskSpec
from ..providers.probe import ProbeProblem, Role, Use, probe, unpriced
from ..providers.seam import ProviderUnknown, route_of, run_sync
from ..sources.dataset import Dataset, TaskDef, with_judge_defaults
from .internals import drop_exit_banner
from .items import AttemptItem
from .runtime import Runtime

Reach = tuple[Dataset, TaskSpec, str | None, Action]
"""An attempt selected now: its dataset, task spec, variant and what the plan does with it."""
KeysOf = Callable[[list[str]], tuple[list[AttemptId], Any]]


class ProbeHooks:
    """Checks the providers and models the attempts that run now reach, before anything is
    spent. Registered after the recorder: among `tryfirst` implementations it runs before the
    recorder plans the run, so a failed probe leaves the run's plan and status as they were."""

    def __init__(self, runtime: Runtime, keys_of: KeysOf) -> None:
        """`keys_of`: the attempts a worker's collected node ids name (the recorder's)."""
        self.runtime = runtime
        self.keys_of = keys_of
        self.checked: list[Use] | None = None
        """What the probe checked (None before it ran)."""
        self.passed_only = False
        """`--agenteval-probe-only` passed: the session ended here, its line already printed."""
        self.failed: pytest.Config | None = None
        """The probe failed (the session's config): the session ended here, its lines
        already printed."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        decide = self.runtime.decide
        reached = (
            (item.task.dataset, item.task.spec, item.variant, decide(item.key, item.task).action)
            for item in session.items
            if isinstance(item, AttemptItem)
        )
        self.run_probe(session.config, reached)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under xdist: the first worker's collection is the session's selection."""
        if self.checked is None:
            keys, _ = self.keys_of(list(ids))
            self.run_probe(node.config, self._reached(keys))

    def _reached(self, keys: list[AttemptId]) -> Iterator[Reach]:
        """The controller's view of `keys`: their specs, read and not built, and the plan's
        decision (tasks are built only when the run has stored attempts to decide on)."""
        runtime = self.runtime
        specs = {(d.name, task_id): (d, spec) for d, task_id, spec in runtime.task_specs()}
        built: dict[tuple[str, str], TaskDef] | None = None
        for key in keys:
            found = specs.get((key.dataset, key.task_id))
            if found is None:
                continue
            action: Action = "run"
            if runtime.plan.stored(key) is not None:
                if built is None:
                    built = {(t.dataset.name, t.id): t for t in runtime.all_tasks()}
                task = built.get((key.dataset, key.task_id))
                action = runtime.decide(key, task).action if task is not None else "run"
            yield (*found, key.variant, action)

    def run_probe(self, config: pytest.Config, reached: Iterable[Reach]) -> None:
        """Probe what `reached` calls; a problem stops the session (exit 2)."""
        runtime, settings = self.runtime, self.runtime.settings
        selected: dict[str, list[Reach]] = defaultdict(list)
        for one in reached:
            selected[one[0].name].append(one)
        uses: list[Use] = []
        problems: list[ProbeProblem] = []
        override = settings.agent_override is not None
        for dataset in runtime.datasets:
            found = list(uses_of(dataset, selected.get(dataset.name, ()), override))
            pricing = dataset.manifest.pricing or {}
            problems += unpriced(found, pricing, settings.max_cost is not None)
            uses += found
        if uses:  # a one-token probe request counts against the caps and in the spend
            pricing = {
                m: p for d in runtime.datasets for m, p in (d.manifest.pricing or {}).items()
            }
            problems += run_sync(probe(uses, runtime.stops, pricing))
        self.checked = uses
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if problems:
            message = failure_message(problems)
            if runtime.stops is not None:
                runtime.stops.halt("probe_failed", message)
            if terminal is not None:
                terminal.write_line(message, red=True, bold=True)
            self.failed = config
            pytest.exit("agenteval: the probe failed", returncode=pytest.ExitCode.INTERRUPTED)
        if settings.probe_only:
            if terminal is not None:
                terminal.write_line(passed_message(uses), green=True, bold=True)
            self.passed_only = True
            pytest.exit(passed_message(uses), returncode=pytest.ExitCode.OK)

    @pytest.hookimpl(trylast=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """A failed probe's exit (status 2) would print pytest's banner at session finish."""
        if self.failed is not None:
            drop_exit_banner(self.failed)

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """A passed `--agenteval-probe-only` is its plain line, not pytest's `!!! Exit: … !!!`
        banner (it is a success, not an interruption); a failed probe is its own lines, which
        say why (the banner would read as an internal error); its exit status stays 2."""
        if self.passed_only or self.failed is not None:
            drop_exit_banner(config)


def failure_message(problems: list[ProbeProblem]) -> str:
    """What the terminal, the summary and run.json say of a failed probe."""
    lines = [f"agenteval: the probe failed ({len(problems)} problem(s)), no attempt started:"]
    return "\n".join([*lines, *(f"  {p.line()}" for p in problems)])


def passed_message(uses: list[Use]) -> str:
    routes = {(u.route.name, u.route.base_url) for u in uses}
    models = {(u.route.name, u.model) for u in uses if u.model}
    return f"agenteval: probe passed: {len(routes)} provider(s), {len(models)} model(s)"


def uses_of(dataset: Dataset, reached: Iterable[Reach], override: bool = False) -> Iterator[Use]:
    """Every model the attempts `reached` of `dataset` call now: the agent of each that runs
    (its variant's, its task's own, the manifest's; none under `--agenteval-agent`, whose
    agent is the user's code), each provider of `providers:` `task.llm()` may use once any
    agent runs, and the judges of each task run or regraded; a reused attempt calls
    nothing. Specs that do not validate are left to the errors they raise where built."""
    manifest = dataset.manifest
    at = f"[{dataset.name}]"
    agents: dict[str, AnyAgentSpec] = {}
    judged: dict[str | None, TaskSpec] = {}
    runs = False
    for _, spec, variant, action in reached:
        if action == "reuse":
            continue
        judged.setdefault(spec.id, spec)
        if action != "run":
            continue
        runs = True
        if variant is not None and manifest.variants and variant in manifest.variants:
            agents.setdefault(f"agent of variant {variant} {at}", manifest.variants[variant].agent)
        elif variant is not None or override:
            continue
        elif spec.agent is not None:
            agents.setdefault(f"agent of {spec.id} {at}", spec.agent)
        elif manifest.agent is not None:
            agents.setdefault(f"agent {at}", manifest.agent)
    for who, agent in agents.items():
        yield from _agent_uses(manifest, agent, who)
    for spec in judged.values():
        graders = spec.graders or manifest.defaults.graders or []
        for grader in with_judge_defaults(list(graders), manifest):
            if grader.type == "judge":
                yield from _settings_use(
                    manifest, grader.options, f"judge of {spec.id} {at}", "judge"
                )
    if runs:
        for name, provider_spec in (manifest.providers or {}).items():
            yield from _provider_use(manifest, name, provider_spec, f"task.llm({name!r}) {at}")


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
