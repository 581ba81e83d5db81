"""pytest entry point: options, ini settings, hook registration and collection of task files.

Inactive unless a dataset is named: by `--agenteval PATH`, by ini `agenteval_datasets` when
pytest runs its default arguments, or by a positional argument inside a dataset. So the plugin
never touches unrelated YAML files or runs, and they pay nothing for it.

Settings precedence: command-line option, then the ini setting, then the dataset manifest.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import hookspecs
from .core import options
from .core.gcpause import gc_paused
from .core.shards import parse_shard
from .sources.discovery import TemplateFolders, dataset_args

if TYPE_CHECKING:
    from .execution.agents import AgentResolver


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agenteval", "agent evaluations (pytest-agenteval)")

    def option(*names: str, ini: tuple[str, str] | None = None, **kwargs: Any) -> None:
        group.addoption(*names, **kwargs)
        if ini:  # an ini option's help is printed as it is, not %-formatted as argparse's
            ini_help = kwargs["help"].replace("%%", "%")
            parser.addini(ini[0], help=ini_help, type=ini[1])  # type: ignore[arg-type]

    option(
        "--agenteval",
        action="append",
        dest="agenteval_datasets",
        metavar="PATH",
        default=[],
        ini=("agenteval_datasets", "paths"),
        help="collect the dataset at PATH, or the part of it PATH is (repeatable); "
        "the ini setting joins pytest's default arguments only.",
    )
    option(
        "--attempts",
        dest="agenteval_attempts",
        type=options.positive_int,
        metavar="K",
        ini=("agenteval_attempts", "string"),
        help="attempts per task (default: the manifest's defaults.attempts, else 1).",
    )
    option(
        "--agenteval-agent",
        dest="agenteval_agent",
        type=options.agent_ref,
        metavar="REF",
        ini=("agenteval_agent", "string"),
        help="agent under test, module:function or file.py:function; overrides the manifest.",
    )
    option(
        "--agenteval-variant",
        action="append",
        dest="agenteval_variants",
        type=options.variant_name,
        metavar="NAME",
        default=[],
        ini=("agenteval_variants", "args"),
        help="run only variant NAME of the manifest's `variants:` (repeatable; default: all).",
    )
    option(
        "--agenteval-reference",
        dest="agenteval_reference",
        type=options.variant_name,
        metavar="NAME",
        ini=("agenteval_reference", "string"),
        help="the variant the others are compared with (default: the first selected).",
    )
    option(
        "--agenteval-agent-version",
        dest="agenteval_agent_version",
        metavar="VERSION",
        ini=("agenteval_agent_version", "string"),
        help="a version you declare for the agent; a resume with another version is refused.",
    )
    option(
        "--agenteval-strict",
        dest="agenteval_strict",
        action="store_true",
        default=None,
        ini=("agenteval_strict", "bool"),
        help="make task files that fail to load collection errors instead of erroring items.",
    )
    option(
        "--resume-suite",
        dest="agenteval_resume",
        action="store_true",
        help="continue the most recent run started on these whole datasets (not narrowed by "
        "-k, -m or paths): reuse finished attempts.",
    )
    option(
        "--agenteval-run-id",
        dest="agenteval_run_id",
        type=options.run_id,
        metavar="ID",
        help="name this run (or, with --resume-suite, the run to continue, started if missing).",
    )
    option(
        "--rerun-errors",
        dest="agenteval_rerun_errors",
        action="store_true",
        help="with --resume-suite: run attempts that errored again.",
    )
    option(
        "--agenteval-rerun",
        dest="agenteval_rerun",
        action="store_true",
        help="continue the run but re-execute the selected (-k, -m) finished attempts.",
    )
    option(
        "--agenteval-allow-drift",
        dest="agenteval_allow_drift",
        action="store_true",
        help="resume even though the agent differs from the one the run started with.",
    )
    option(
        "--agenteval-plan",
        dest="agenteval_plan",
        action="store_true",
        help="print what a resume would reuse, regrade and run; start nothing.",
    )
    option(
        "--agenteval-report",
        dest="agenteval_report",
        metavar="DIR",
        ini=("agenteval_report", "string"),
        help="write summary.json, summary.md and junit.xml to DIR "
        "(default: the run's folder in the pytest cache).",
    )
    option(
        "--agenteval-html",
        dest="agenteval_html",
        metavar="FILE",
        ini=("agenteval_html", "string"),
        help="write a self-contained HTML report (plots, task table, every attempt) to FILE "
        "at the end of the session, also when it was stopped or interrupted.",
    )
    option(
        "--pass-k",
        dest="agenteval_pass_k",
        type=options.pass_ks,
        metavar="K,K,...",
        ini=("agenteval_pass_k", "string"),
        help="the k values for pass@k and pass^k (default: 1 to the number of attempts).",
    )
    option(
        "--agenteval-task-rule",
        dest="agenteval_task_rule",
        type=options.task_rule,
        metavar="RULE",
        ini=("agenteval_task_rule", "string"),
        help="when a task passes in junit.xml: any (default), all, or a pass rate like 0.6.",
    )
    option(
        "--agenteval-min-pass-rate",
        dest="agenteval_min_pass_rate",
        type=options.rate,
        metavar="X",
        ini=("agenteval_min_pass_rate", "string"),
        help="CI gate: exit 0 when the suite's pass@1 >= X (even if attempts failed), else 1.",
    )
    option(
        "--agenteval-baseline",
        dest="agenteval_baseline",
        metavar="BASE",
        ini=("agenteval_baseline", "string"),
        help="regression gate: compare with BASE (a run id, `latest`, a run folder or a "
        "summary.json) and exit 1 when pass@1 fell significantly (95%%) by more than "
        "--agenteval-max-regression.",
    )
    option(
        "--agenteval-max-regression",
        dest="agenteval_max_regression",
        type=options.rate,
        metavar="X",
        ini=("agenteval_max_regression", "string"),
        help="the fall of pass@1 against --agenteval-baseline that is tolerated (default 0: "
        "any significant fall fails).",
    )
    option(
        "--agenteval-isolate",
        dest="agenteval_isolate",
        action="store_true",
        default=None,
        ini=("agenteval_isolate", "bool"),
        help="run each Python agent call in a child process: a crash or a hang in C code "
        "errors that attempt only, and its timeout kills everything it started.",
    )
    option(
        "--agenteval-otel",
        dest="agenteval_otel",
        action="store_true",
        default=None,
        ini=("agenteval_otel", "bool"),
        help="send each attempt's trace to an OpenTelemetry collector over OTLP/HTTP "
        "(OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318; on whenever that is "
        "set); needs pip install 'pytest-agenteval[otel]'.",
    )
    option(
        "--agenteval-model-cache",
        dest="agenteval_model_cache",
        type=options.model_cache,
        metavar="MODE",
        ini=("agenteval_model_cache", "string"),
        help="answer model calls from a cache under pytest's cache dir, keyed by endpoint, "
        "whole request and attempt index: on (read and write), read (no writes), replay (a "
        "miss is an error), off (default). A cached answer costs $0 against caps.",
    )
    option(
        "--agenteval-concurrency",
        dest="agenteval_concurrency",
        type=options.positive_int,
        metavar="N",
        ini=("agenteval_concurrency", "string"),
        help="attempts in flight at once per process (default: the manifest's "
        "defaults.concurrency, else 1); items are still reported one by one, in order.",
    )
    option(
        "--agenteval-max-in-flight",
        dest="agenteval_max_in_flight",
        type=options.positive_int,
        metavar="N",
        ini=("agenteval_max_in_flight", "string"),
        help="calls of one agent running at once, across all processes of the run on this "
        "machine (overrides the manifest's limits.max_in_flight).",
    )
    option(
        "--agenteval-min-interval",
        dest="agenteval_min_interval",
        type=options.non_negative_float,
        metavar="SECONDS",
        ini=("agenteval_min_interval", "string"),
        help="seconds between the starts of two calls of one agent, across all processes of "
        "the run on this machine (overrides the manifest's limits.min_interval).",
    )
    option(
        "--agenteval-keep-sandboxes",
        dest="agenteval_keep_sandboxes",
        type=options.keep_sandboxes,
        metavar="failed|all",
        ini=("agenteval_keep_sandboxes", "string"),
        help="keep the Docker sandboxes of attempts that did not pass (failed) or of all "
        "attempts, stopped, instead of removing them; the failure report names each.",
    )
    option(
        "--agenteval-max-sandboxes",
        dest="agenteval_max_sandboxes",
        type=options.positive_int,
        metavar="N",
        ini=("agenteval_max_sandboxes", "string"),
        help="Docker sandboxes alive at once on this machine, across every process and "
        "session of this user (default: unbounded).",
    )
    option(
        "--agenteval-docker-host",
        action="append",
        dest="agenteval_docker_hosts",
        type=options.docker_host,
        metavar="URL",
        default=[],
        ini=("agenteval_docker_hosts", "args"),
        help="a Docker daemon sandboxes may go to (unix:///run/a.sock, ssh://ci@build-2; "
        "repeatable), with ?max_sandboxes=N after it to bound its containers alive on this "
        "machine: each attempt's goes to the one with the most free room; overrides the "
        "datasets' docker: hosts: (default: the daemon DOCKER_HOST or the current context "
        "names).",
    )
    option(
        "--agenteval-sandbox-allow",
        dest="agenteval_sandbox_allow",
        type=options.sandbox_allow,
        metavar="network,unbounded",
        ini=("agenteval_sandbox_allow", "string"),
        help="let the datasets' sandboxes lift this isolation: network (other than none), "
        "unbounded (no memory limit); without it a task or manifest asking for one is an "
        "error at its line.",
    )
    option(
        "--agenteval-max-cost",
        dest="agenteval_max_cost",
        type=options.positive_float,
        metavar="USD",
        ini=("agenteval_max_cost", "string"),
        help="spend cap of the run (all its sessions): once reached, no new attempt starts; "
        "the rest are skipped and the run's status is 'budget'.",
    )
    option(
        "--agenteval-max-tokens",
        dest="agenteval_max_tokens",
        type=options.positive_int,
        metavar="N",
        ini=("agenteval_max_tokens", "string"),
        help="token cap of the run (input + output, all its sessions), like --agenteval-max-cost.",
    )
    option(
        "--agenteval-probe-only",
        dest="agenteval_probe_only",
        action="store_true",
        default=False,
        help="check every provider and model the selected attempts reach (models list, key, "
        "prices under a cost cap), then stop: exit 0 when all answer, 2 when one does not.",
    )
    option(
        "--agenteval-no-probe",
        dest="agenteval_no_probe",
        action="store_true",
        default=False,
        help="start attempts without checking the providers and models first (the probe "
        "otherwise stops the session, exit 2, before anything is spent).",
    )
    option(
        "--agenteval-deadline",
        dest="agenteval_deadline",
        type=options.deadline,
        metavar="WHEN",
        help="start no attempt after WHEN: a duration from now (90s, 30m, 1h30m) or an ISO "
        "time (2026-12-01T18:00); the rest are skipped and the run's status is 'deadline'.",
    )
    option(
        "--agenteval-interrupt-grace",
        dest="agenteval_interrupt_grace",
        type=options.seconds,
        metavar="SECONDS",
        ini=("agenteval_interrupt_grace", "string"),
        help="with attempts in flight, seconds they get to finish after the first Ctrl-C "
        "(default 30); then they are given up on, skipped and not recorded.",
    )
    option(
        "--agenteval-shard",
        dest="agenteval_shard",
        type=parse_shard,
        metavar="I/N",
        ini=("agenteval_shard", "string"),
        help="run shard I of N (1 <= I <= N): every attempt of a task lands in the same shard, "
        "the rest are deselected; auto reads the parallel-job variables of GitLab, CircleCI, "
        "Buildkite or a Kubernetes Indexed Job.",
    )
    option(
        "--agenteval-allow-errors",
        dest="agenteval_allow_errors",
        action="store_true",
        default=None,
        ini=("agenteval_allow_errors", "bool"),
        help="errored attempts do not fail the run by themselves.",
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


DATASETS = "agenteval_datasets"


def named_datasets(config: pytest.Config) -> dict[Path, str]:
    """The paths naming datasets this session, each with the option naming it (for messages).

    `--agenteval` always counts. The ini setting joins pytest's default arguments (testpaths or
    the invocation folder) only, so `pytest tests/test_unit.py` never starts an evaluation.
    A positional argument that is, or lies in, a dataset (a folder with `agenteval.yaml` at or
    above it) counts as well: plain `pytest` never evaluates a dataset just because it exists.
    """
    base = config.invocation_params.dir
    named = {(base / p).resolve(): "--agenteval" for p in config.getoption(DATASETS)}
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return named or {p.resolve(): f"ini {DATASETS}" for p in config.getini(DATASETS)}
    return {**{p: "" for p in dataset_args(config.args, base)}, **named}


class TemplateGuard:
    """Registered in every session: workspace templates of any dataset are never collected."""

    ignores_folders_only = True
    """It never ignores a file: a dataset folder need not ask it about each one."""

    def __init__(self) -> None:
        self.folders = TemplateFolders()

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        return self.folders.is_template(collection_path) or None


def pytest_configure(config: pytest.Config) -> None:
    guard = TemplateGuard()
    config.pluginmanager.register(guard, "agenteval-templates")
    named = named_datasets(config)
    if not named:
        return
    config.add_cleanup(forget_caches)  # the first cleanup registered: it runs last
    # Imported only when active: unrelated pytest runs pay nothing for pydantic and friends.
    # Importing makes long-lived objects only: the cyclic GC would rescan them for nothing.
    with gc_paused():
        from .core.importing import on_path
        from .execution.agents import AgentResolver
        from .execution.environment import Environments
        from .execution.workspaces import Workspaces
        from .glue.collect import CollectHooks, CollectState, load_datasets, point_collection_at
        from .glue.concurrency import (
            AheadHooks,
            check_combination,
            declared_concurrency,
            say_now,
        )
        from .glue.controller import agenteval_dir, open_controller_run, start_controller
        from .glue.items import TaskHooks
        from .glue.runtime import (
            RUNTIME,
            Parts,
            agent_fingerprint,
            build_runtime,
            check_variants,
            make_executor,
        )
        from .glue.sandboxes import SandboxNotes, environment_kinds
        from .glue.settings import read_settings
        from .glue.xdist import worker_context
        from .sources.speccache import CACHE_NAME, SpecCache

    settings = read_settings(config, list(named))
    folder = agenteval_dir(config)
    if folder is None and settings.model_cache != "off":  # replay must never reach a model
        raise pytest.UsageError(
            f"--agenteval-model-cache {settings.model_cache} keeps answers in pytest's cache "
            "dir: it needs the cache provider (drop -p no:cacheprovider)"
        )
    specs = SpecCache(folder / CACHE_NAME if folder else None)
    kinds = environment_kinds(config)
    options = {name: kind.options for name, kind in kinds.items()}
    parts = load_datasets(named, specs, settings.sandboxes.allow, options)
    datasets = [dataset for dataset, _ in parts.values()]
    check_variants(settings, datasets)
    guard.folders.adopt(datasets)
    for dataset in datasets:
        on_path(dataset.root)
    whole_roots = point_collection_at(config, parts, specs)
    if settings.show_plan:
        if not (config.option.collectonly or config.option.verbose > 0):
            from .glue.reporter import PlanAlone

            config.pluginmanager.register(PlanAlone(), "agenteval-plan-alone")
        config.option.collectonly = True
    size = declared_concurrency(settings, datasets)
    check_combination(config, size, bool(settings.isolate))
    agents = AgentResolver(TaskHooks.agent_maker(config))
    made = Parts(
        settings,
        datasets,
        make_grader=TaskHooks.grader_maker(config),
        agents=agents,
        agenteval_dir=folder,
        specs=specs,
        executor=make_executor(config, bool(settings.isolate), size, agents),
        environments=Environments(
            Workspaces(lambda: _basetemp(config)),
            TaskHooks.environment_maker(config),
            settings.sandboxes,
            kinds,
        ),
        concurrency=size,
        telemetry=_telemetry(config, settings.otel),
        say=partial(say_now, config),
    )
    fingerprint = agent_fingerprint(settings, datasets)
    if hasattr(config, "workerinput"):
        opened, context = None, worker_context(config, made, fingerprint)
    else:
        opened = open_controller_run(config, made, fingerprint)
        context = opened.context
    runtime = config.stash[RUNTIME] = build_runtime(made, context)
    # A bad file must fail alone, as its own collector, under --agenteval-strict.
    config.stash[CollectState.KEY] = CollectState(set() if settings.strict else whole_roots)
    config.pluginmanager.register(TaskHooks(config), "agenteval-tasks")
    config.pluginmanager.register(SandboxNotes(runtime), "agenteval-sandboxes")
    hooks = CollectHooks({root: p for root, (_, p) in parts.items() if p is not None})
    config.pluginmanager.register(hooks, "agenteval-collect")
    # Cleanups run last-in first-out and pytest's builtin plugins register theirs after this
    # configure hook, so the thaw follows pytest's end-of-session GC pass, which need not scan
    # the collected tree.
    config.add_cleanup(hooks.thaw)
    if runtime.runner.ahead is not None:
        config.pluginmanager.register(AheadHooks(runtime, runtime.runner.ahead), "agenteval-ahead")
    if opened is not None:
        start_controller(config, runtime, opened)


CACHES = (
    "pytest_agenteval.core.importing",
    "pytest_agenteval.glue.pluginhooks",
    "pytest_agenteval.providers.seam",
)
"""The modules that keep what a session made (a reference's callable, a folder looked up, a
provider.s connections), each with its one `forget()`."""


def forget_caches() -> None:
    """At the session's end: every module cache forgets the session (those of modules it
    imported), so another session in this process (pytester's in-process runs, an IDE) sees
    none of its state; the sys.path entries it added go too (`core.importing.forget`)."""
    for name in CACHES:
        module = sys.modules.get(name)
        if module is not None:
            module.forget()


@pytest.hookimpl(trylast=True)
def pytest_agenteval_make_executor(
    config: pytest.Config, isolate: bool, concurrency: int, agents: AgentResolver
) -> Any:
    """The built-in executors: agent calls in this process, or each in a forked child."""
    from .execution.executor import SerialExecutor
    from .execution.isolation import IsolatingExecutor

    if isolate:
        return IsolatingExecutor(agents)
    return SerialExecutor(agents, concurrent=concurrency > 1)


def _telemetry(config: pytest.Config, flag: bool) -> Any:
    """The OpenTelemetry exporter, when asked for (`--agenteval-otel`, or an OTLP endpoint in
    the environment); None when off, so nothing of OpenTelemetry is imported."""
    from .reporting import otel

    if not otel.wanted(flag, os.environ):
        return None
    if not otel.available():
        if flag:
            raise pytest.UsageError(
                f"--agenteval-otel needs OpenTelemetry's SDK and OTLP exporter: {otel.INSTALL}"
            )
        return None  # the endpoint is set for other programs: no extra, no export
    content = os.environ.get(otel.CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")
    telemetry = otel.Telemetry(content=content)
    from .glue.telemetry import TelemetryEnd

    end = TelemetryEnd(telemetry)
    config.pluginmanager.register(end, "agenteval-otel")
    config.add_cleanup(end.close)  # a session that never finished
    return telemetry


def _basetemp(config: pytest.Config) -> Path | None:
    """pytest's basetemp for this session (made on first use; its retention policy applies).

    None with `-p no:tmpdir`. Looked up late: pytest's tmpdir plugin is configured after us."""
    from .glue.internals import basetemp

    return basetemp(config)
