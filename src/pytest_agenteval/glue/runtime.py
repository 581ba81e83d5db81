"""Per-process state attempt items share: settings, datasets, the plan, the attempt runner.

Built once, by `build_runtime`, from what the process learns of its run before any attempt (a
`RunContext`: the controller opens the run, an xdist worker reads the controller's shipment);
nothing is injected into it afterwards."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..core.errors import AgentUnavailable, TaskFileError, did_you_mean, display_path
from ..core.identity import AttemptId
from ..core.model import AgentLimits, AnyAgentSpec, GraderSpec, PluginAgentSpec, TaskSpec, Variant
from ..core.shards import Shard
from ..execution.agents import AgentRef, AgentResolver, spec_label
from ..execution.attempt import AttemptJob, AttemptRunner
from ..execution.concurrent import Ahead, Stopped
from ..execution.environment import Environments
from ..execution.executor import Executor, LoopExecutor, SerialExecutor
from ..execution.limits import LimitGate, Limits
from ..providers.cache import FOLDER, ModelCache, use_cache
from ..providers.gate import FileGate, use_gate
from ..providers.rates import Rates, use_rates
from ..sources.dataset import Dataset, TaskDef, load_task_file
from ..sources.speccache import CachedTask, SpecCache
from ..sources.yamlfile import field_path, line_of, parse
from ..store.plan import Decision, Plan
from ..store.running import Running
from ..store.stops import Stops
from .pluginhooks import answered_by
from .settings import Settings

if TYPE_CHECKING:
    from ..reporting.otel import Telemetry

FIXTURE_NAME = "agenteval_agent"


@dataclass(frozen=True)
class RunContext:
    """What a process knows of the run it takes part in before its first attempt."""

    fingerprint: dict[str, Any]
    """What identifies the run's agent (the controller's, on a worker)."""
    plan: Plan = field(default_factory=Plan)
    """The stored attempts the run continues, and how to treat them."""
    stops: Stops | None = None
    """The run's stops (cancel, caps, deadline); None for a dry run."""
    note_running: Callable[[AttemptId, bool], None] | None = None
    """Where the attempt whose agent call starts is noted (its process may die in it)."""
    shard: Shard | None = None
    """The shard this process collects (the settings', or what the controller shipped)."""
    alone: frozenset[AttemptId] = frozenset()
    """Attempts that must run with no other call in flight (a worker died in them)."""
    running: Running | None = None
    """This process's attempts in flight and their phases (progress.json's `running`)."""


@dataclass
class Runtime:
    """Shared by every item of one process (controller, lone process, or xdist worker)."""

    settings: Settings
    datasets: list[Dataset]
    make_grader: Callable[[GraderSpec, TaskSpec, Path], Any]
    runner: AttemptRunner
    agents: AgentResolver
    agenteval_dir: Path | None
    """<cache_dir>/agenteval, or None without the cache provider."""
    specs: SpecCache
    plan: Plan = field(default_factory=Plan)
    stops: Stops | None = None
    """The run's stops (cancel, caps, deadline); None for a dry run."""
    shard: Shard | None = None
    """The shard this process collects (the settings', or what the controller shipped)."""
    alone: frozenset[AttemptId] = frozenset()
    """Attempts whose agent call was in flight when a worker of the run died: each runs with
    no other call in flight, so a crash is provably its own (shipped to xdist workers)."""
    running: Running | None = None
    """This process's attempts in flight and their phases (progress.json's `running`)."""
    fixture_folders: dict[Any, bool] = field(default_factory=dict)
    """Whether the `agenteval_agent` fixture is visible from a task file (by its node)."""
    _roots: list[tuple[str, Dataset]] = field(default_factory=list)
    _declared: dict[tuple[int, bool], AgentRef] = field(default_factory=dict)
    """References of the declared agents built, by spec and whether it runs on this machine
    (specs live as long as the run); the resolver keeps the agents."""
    _unavailable: dict[Any, AgentUnavailable] = field(default_factory=dict)
    """Declared agents that cannot be built (by spec), located at their spec."""

    def __post_init__(self) -> None:
        # Innermost roots first, as "root/" prefixes, so nested datasets match correctly.
        ordered = sorted(self.datasets, key=lambda d: len(d.root.parts), reverse=True)
        self._roots = [(str(d.root) + os.sep, d) for d in ordered]

    def dataset_for(self, path: Path) -> Dataset | None:
        """The dataset whose root contains `path` (the innermost one); called for every file."""
        text = str(path)
        for prefix, dataset in self._roots:
            if text.startswith(prefix) or text == prefix[:-1]:
                return dataset
        return None

    def attempts_for(self, dataset: Dataset) -> int:
        """`--attempts`, else ini `agenteval_attempts`, else the manifest default, else 1."""
        return self.settings.attempts or dataset.manifest.defaults.attempts or 1

    def all_tasks(self) -> Iterator[TaskDef]:
        """Every task the manifests define (their `tasks:` globs) that loads, graders included,
        whatever this session selects: a task with a bad grader is not one a run must cover."""
        for dataset, path in self._task_files():
            make_grader = self.grader_factory(dataset)
            for loaded in load_task_file(path, dataset, make_grader, self.specs):
                if isinstance(loaded, TaskDef):
                    yield loaded

    def _task_files(self) -> Iterator[tuple[Dataset, Path]]:
        for dataset in self.datasets:
            for path in dataset.task_files():
                if self.dataset_for(path) is dataset:  # not a nested dataset's file
                    yield dataset, path

    def _task_ids(self, built: bool) -> Iterator[tuple[Dataset, str, TaskSpec]]:
        if built:
            for task in self.all_tasks():
                yield task.dataset, task.id, task.spec
            return
        for dataset, path in self._task_files():
            for read in dataset.read(path, self.specs).tasks:
                if isinstance(read, CachedTask) and read.spec.id is not None:  # set as read
                    yield dataset, read.spec.id, read.spec

    def task_specs(self) -> Iterator[tuple[Dataset, str, TaskSpec]]:
        """Each task whose spec is valid, read and not built: its dataset, id and spec."""
        return self._task_ids(built=False)

    def task_tags(self) -> set[str]:
        """The tags of every task whose spec is valid, read and not built (cheap: what an
        xdist controller, which collects nothing, knows of the tasks' markers)."""
        return {tag for _, _, spec in self._task_ids(built=False) for tag in spec.tags}

    def whole_keys(self, *, built: bool = True) -> set[AttemptId]:
        """Every attempt a session must select to be a run of its datasets whole (of its
        shard's part of them, when sharded), of every variant, selected or not. `built=False`:
        of every task whose spec is valid, without building its graders: cheap, and a
        superset (graders only take tasks away)."""
        shard = self.shard
        return {
            AttemptId(dataset=dataset.name, task_id=task_id, variant=variant, attempt=attempt)
            for dataset, task_id, spec in self._task_ids(built)
            if shard is None or shard.holds(dataset.name, task_id)
            for attempt in range(self.attempts_for(dataset))
            for variant in task_variants(dataset, spec)
        }

    def variants_of(self, task: TaskDef) -> tuple[str | None, ...]:
        """The variants this session runs `task` with, in the manifest's order; `(None,)`
        for a task of a dataset without variants, or one that names its own agent."""
        return task_variants(task.dataset, task.spec, self.settings.variants)

    def grader_factory(self, dataset: Dataset) -> Callable[[GraderSpec, TaskSpec], Any]:
        def make(spec: GraderSpec, task: TaskSpec) -> Any:
            return self.make_grader(spec, task, dataset.root)

        return make

    def decide(self, key: AttemptId, task: TaskDef) -> Decision:
        """The one decision for attempt `key` of `task`: reuse, regrade or run (the plan's)."""
        return self.plan.decide(key, task.digest, task.run_digest, task.regradable)

    def agent_spec(self, task: TaskDef, variant: str | None = None) -> AnyAgentSpec | None:
        """Which declared agent runs `task` (of `variant`): the variant's, else
        --agenteval-agent, task `agent:`, manifest `agent:`."""
        return agent_spec(self.settings, task, variant)

    def declared_agent(self, task: TaskDef, variant: str | None = None) -> AgentRef:
        """The agent the task's declared spec names (of `variant`: the variant's; built once
        per spec, by the resolver), as the agent call names it (its spec, folder and label).

        Raises AgentUnavailable, located at the spec's line, when there is no agent or it
        cannot be built; the located problem is made once per spec.
        """
        spec = self.agent_spec(task, variant)
        on_host = self.runner.environments.on_host(task)  # a container's are the image's
        made = self._declared.get((id(spec), on_host))
        if made is not None:
            return made
        key = (id(spec), on_host) if spec is not None else task.dataset.name
        problem = self._unavailable.get(key)
        if problem is None:
            try:
                if spec is None:
                    raise AgentUnavailable("no agent for the tasks of this dataset", hint=NO_AGENT)
                override = spec is self.settings.agent_override
                base = self.settings.invocation_dir if override else task.dataset.root
                ref = AgentRef.declared(spec, base, on_host)
                self.agents.resolve(ref)  # built now: a bad reference is known before a call
                made = self._declared[(id(spec), on_host)] = ref
                return made
            except AgentUnavailable as exc:
                where = self._spec_location(spec, task, variant, exc.option)
                problem = self._unavailable[key] = exc.located(where)
        raise problem.with_traceback(None)

    def _spec_location(
        self,
        spec: AnyAgentSpec | None,
        task: TaskDef,
        variant: str | None = None,
        option: tuple[str | int, ...] = (),
    ) -> str:
        """Where `spec` is written: `path:line: at field` (of its kind's `option` when one
        is at fault), or the option that gave it."""
        if spec is not None and spec is self.settings.agent_override:
            return self.settings.agent_override_source
        below = (spec.type, *option) if isinstance(spec, PluginAgentSpec) and option else ()
        if spec is not None and spec is task.spec.agent:
            return yaml_location(task.path, (*task.loc, "agent", *below))
        manifest = task.dataset.manifest_path
        if variant is not None and manifest is not None:
            return yaml_location(manifest, ("variants", variant, "agent", *below))
        if manifest is None:
            return display_path(task.dataset.root)
        return yaml_location(manifest, ("agent", *below))


def agent_spec(
    settings: Settings, task: TaskDef, variant: str | None = None
) -> AnyAgentSpec | None:
    """Which declared agent runs `task` (of `variant`: the variant's): --agenteval-agent,
    task `agent:`, manifest `agent:`."""
    if variant is not None:
        return _variant(task.dataset, variant).agent
    return settings.agent_override or task.spec.agent or task.dataset.manifest.agent


def _variant(dataset: Dataset, name: str) -> Variant:
    variants = dataset.manifest.variants
    assert variants is not None, "a variant's attempt of a dataset without variants"
    return variants[name]


NO_VARIANT: tuple[str | None, ...] = (None,)


def task_variants(
    dataset: Dataset, spec: TaskSpec, selected: tuple[str, ...] = ()
) -> tuple[str | None, ...]:
    """The variants a task runs with, in the manifest's order (those `selected`, when some
    are); `(None,)` without `variants:` or for a task naming its own agent (not compared)."""
    variants = dataset.manifest.variants
    if not variants or spec.agent is not None:
        return NO_VARIANT
    if selected:
        return tuple(name for name in variants if name in selected)
    return tuple(variants)


def check_variants(settings: Settings, datasets: list[Dataset]) -> None:
    """Refuse what cannot run: --agenteval-agent on a dataset with variants, a variant or a
    reference no dataset has (naming the ones it has), a reference not selected."""
    varied = [d for d in datasets if d.manifest.variants]
    if varied and settings.agent_override is not None:
        raise pytest.UsageError(
            f"{settings.agent_override_source}: dataset {varied[0].name!r} compares "
            f"variants ({', '.join(varied[0].manifest.variants or ())}); choose them with "
            "--agenteval-variant NAME, or edit `variants:` in its agenteval.yaml"
        )
    asked = [("variant", name) for name in settings.variants]
    if settings.reference:
        asked.append(("reference", settings.reference))
    if asked and not varied:
        raise pytest.UsageError(
            "--agenteval-variant/--agenteval-reference: no dataset of this session has "
            "`variants:` in its agenteval.yaml"
        )
    for dataset in varied:
        known = list(dataset.manifest.variants or ())
        unknown = [(option, name) for option, name in asked if name not in known]
        if unknown:
            which, name = unknown[0]
            meant = did_you_mean(name, known)
            raise pytest.UsageError(
                f"--agenteval-{which} {name} (or ini agenteval_{which}"
                f"{'s' if which == 'variant' else ''}): dataset {dataset.name!r} has no such "
                f"variant{f' ({meant})' if meant else ''}; its variants: {', '.join(known)}"
            )
    if settings.variants and settings.reference and settings.reference not in settings.variants:
        raise pytest.UsageError(
            f"--agenteval-reference {settings.reference}: not selected; add "
            f"--agenteval-variant {settings.reference} (selected: {', '.join(settings.variants)})"
        )


def selected_variants(settings: Settings, datasets: list[Dataset]) -> tuple[list[str], str] | None:
    """The variants this session runs (manifest order, the reference first) and the
    reference; None when no dataset has variants."""
    names: dict[str, None] = {}
    for dataset in datasets:
        for name in dataset.manifest.variants or ():
            if not settings.variants or name in settings.variants:
                names[name] = None
    if not names:
        return None
    reference = settings.reference or next(iter(names))
    return [reference, *(name for name in names if name != reference)], reference


@dataclass
class AgentLimitTable:
    """The limits of each task's agent, held at the run's gate around its calls."""

    settings: Settings
    gate: LimitGate
    _found: dict[tuple[int, int, str | None], tuple[str, Limits]] = field(default_factory=dict)

    def held(self, job: AttemptJob) -> AbstractContextManager[None] | None:
        """Wait for the limits of the attempt's agent; None when it has none."""
        agent, limits = self.limits_for(job.task, job.variant)
        return self.gate.hold(agent, limits, job.task.timeout) if limits else None

    def limits_for(self, task: TaskDef, variant: str | None = None) -> tuple[str, Limits]:
        """The task's agent (its label; a variant's names the variant, so each variant has
        its own) and its limits: the command line's, else those of the task's own agent (of
        the variant's agent, then the variant's), else the manifest's (worked out once per
        agent spec and variant)."""
        spec = agent_spec(self.settings, task, variant)
        manifest = task.dataset.manifest
        cache_key = (id(spec), id(manifest), variant)  # both live as long as the run
        found = self._found.get(cache_key)
        if found is None:
            own = _variant(task.dataset, variant).limits if variant is not None else None
            declared = (spec.limits if spec else None) or own or manifest.limits or AgentLimits()
            settings = self.settings
            interval = settings.min_interval
            label = spec_label(spec) if spec else FIXTURE_NAME
            found = self._found[cache_key] = (
                label if variant is None else f"{label} (variant {variant})",
                Limits(
                    settings.max_in_flight or declared.max_in_flight,
                    interval if interval is not None else declared.min_interval,
                ),
            )
        return found


NO_AGENT = (
    "set `agent:` in agenteval.yaml, pass --agenteval-agent module:function, "
    f"or define an `{FIXTURE_NAME}` fixture in conftest.py"
)


def yaml_location(path: Path, loc: tuple[Any, ...]) -> str:
    """`path:line: at field` for the value at `loc` of a YAML file (only read on errors)."""
    try:
        node, _ = parse(path)
    except TaskFileError:
        node = None
    line = line_of(node, loc)
    return f"{display_path(path)}{f':{line}' if line else ''}: at {field_path(loc)}"


def agent_fingerprint(settings: Settings, datasets: list[Dataset]) -> dict[str, Any]:
    """What identifies the agent of a run: the override, each manifest's agent, the version;
    and, only for datasets with variants, each variant's agent by name (`variants`)."""
    manifest = {}
    variants = {}
    for ds in datasets:
        spec = ds.manifest.agent
        manifest[ds.name] = _versioned(
            spec_label(spec) if spec else None, ds.manifest.agent_version
        )
        if ds.manifest.variants:
            variants[ds.name] = {
                name: _versioned(spec_label(v.agent), v.agent_version)
                for name, v in ds.manifest.variants.items()
            }
    override = settings.agent_override
    fingerprint = {
        "override": spec_label(override) if override else None,
        "manifest": manifest,
        "version": settings.agent_version,
    }
    return fingerprint | {"variants": variants} if variants else fingerprint


def _versioned(label: str | None, version: str | None) -> str | None:
    return f"{label} (version {version})" if version else label


def make_executor(
    config: pytest.Config, isolate: bool, concurrency: int, agents: AgentResolver
) -> Executor:
    """The executor `pytest_agenteval_make_executor` gives (pluggy calls it: the first answer
    wins, wrappers wrap it), checked: anything else is a usage error naming who gave it."""
    hook = config.hook.pytest_agenteval_make_executor
    asked = {"config": config, "isolate": isolate, "concurrency": concurrency, "agents": agents}
    made = hook(**asked)
    if not isinstance(made, Executor):
        source = answered_by(config, hook, asked, _is_executor)
        raise pytest.UsageError(
            f"{source}: pytest_agenteval_make_executor returned {type(made).__name__}, not an "
            "Executor; return an object with call_agent(call), kill_running() and close() "
            "(pytest_agenteval.Executor), or None"
        )
    return made


def _is_executor(made: object) -> bool:
    return isinstance(made, Executor)


@dataclass(frozen=True)
class Parts:
    """What a process's runtime is made of before it joins its run."""

    settings: Settings
    datasets: list[Dataset]
    make_grader: Callable[[GraderSpec, TaskSpec, Path], Any]
    agents: AgentResolver
    agenteval_dir: Path | None
    specs: SpecCache
    executor: Executor
    environments: Environments
    concurrency: int
    """Attempts in flight at once in this process."""
    telemetry: Telemetry | None = None
    """Exports each attempt's trace to OpenTelemetry (`--agenteval-otel`); None: off."""
    say: Callable[[str], None] | None = None
    """Says a line on the terminal now, past an item's capture (a bad model-cache entry)."""


def build_runtime(parts: Parts, context: RunContext) -> Runtime:
    """The process's runtime, whole and once: its parts joined to its run (plan, stops,
    limits, fingerprint), with the attempt runner built for them."""
    settings, stops = parts.settings, context.stops
    stopped = spent = limits = None
    environments = parts.environments
    if stops is not None:
        stopped = stops.reason
        spent = stops.spent  # the run's ledger counts every call, capped or not
        if stops.run_dir is not None:
            limits = AgentLimitTable(settings, LimitGate(stops.run_dir / "limits")).held
            use_gate(FileGate(stops.run_dir / "providers"))  # shared by every worker
            use_rates(Rates(stops.run_dir / "providers"))
            environments = environments.for_run(stops.run_dir.name)  # the folder is named by its id
    if parts.agenteval_dir is not None:  # beside the store, in pytest's cache dir
        folder = parts.agenteval_dir.parent / FOLDER
        use_cache(ModelCache(folder, settings.model_cache, parts.say))
    size = parts.concurrency
    runner = AttemptRunner(
        parts.executor,
        environments,
        context.fingerprint,
        passthrough=(pytest.exit.Exception, pytest.skip.Exception),
        note_running=context.note_running,
        stopped=stopped,
        ahead=_ahead(size, stopped or _never, parts.executor) if size > 1 else None,
        limits=limits,
        spent=spent,
        reserve=stops,
        note_phase=context.running.note if context.running is not None else None,
        finished=parts.telemetry.export if parts.telemetry is not None else None,
        traceparent=parts.telemetry.traceparent if parts.telemetry is not None else None,
    )
    return Runtime(
        settings,
        parts.datasets,
        make_grader=parts.make_grader,
        runner=runner,
        agents=parts.agents,
        agenteval_dir=parts.agenteval_dir,
        specs=parts.specs,
        plan=context.plan,
        stops=stops,
        shard=context.shard or settings.shard,
        alone=context.alone,
        running=context.running,
    )


def _ahead(size: int, stopped: Stopped, executor: Executor) -> Ahead[Any, Any]:
    """The pool of calls ahead; an executor with an event loop awaits async agents on it
    (this package's own executor lets the main thread run it while it may)."""
    if isinstance(executor, SerialExecutor):
        driver = executor.driver
        return Ahead(size, stopped, lambda: driver.loop, driver)
    loop = executor.event_loop if isinstance(executor, LoopExecutor) else None
    return Ahead(size, stopped, loop)


def _never() -> None:
    """No stop: a dry run never starts an attempt."""


RUNTIME = pytest.StashKey[Runtime]()
