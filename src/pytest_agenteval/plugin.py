"""pytest entry point: options, ini settings, hook registration and collection of task files.

Inactive unless `--agenteval PATH` (or ini `agenteval_datasets`) names a dataset, so the plugin
never touches unrelated YAML files or runs.

Settings precedence: command-line option, then the ini setting, then the dataset manifest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import hookspecs
from .core import options

if TYPE_CHECKING:
    from .glue.runtime import Settings
    from .sources.dataset import Dataset
    from .sources.speccache import SpecCache


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agenteval", "agent evaluations (pytest-agenteval)")

    def option(*names: str, ini: tuple[str, str] | None = None, **kwargs: Any) -> None:
        group.addoption(*names, **kwargs)
        if ini:
            parser.addini(ini[0], help=kwargs["help"], type=ini[1])  # type: ignore[arg-type]

    option(
        "--agenteval",
        action="append",
        dest="agenteval_datasets",
        metavar="PATH",
        default=[],
        ini=("agenteval_datasets", "paths"),
        help="collect the tasks of the dataset folder at PATH (repeatable).",
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
        help="continue the most recent run of these datasets: reuse finished attempts.",
    )
    option(
        "--agenteval-run-id",
        dest="agenteval_run_id",
        type=options.run_id,
        metavar="ID",
        help="name this run (or, with --resume-suite, the run to continue).",
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
        "--agenteval-allow-errors",
        dest="agenteval_allow_errors",
        action="store_true",
        default=None,
        ini=("agenteval_allow_errors", "bool"),
        help="errored attempts do not fail the run by themselves.",
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _setting(config: pytest.Config, name: str, parse: Any = None) -> Any:
    """The option `name`, else its ini twin parsed like the option, else None."""
    value = config.getoption(name)
    if value is not None and value != []:
        return value
    raw = config.getini(name)
    if raw in ("", [], None):
        return None
    if parse is None or not isinstance(raw, str):
        return raw
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini setting {name}: {exc}") from None


def read_settings(config: pytest.Config) -> Settings:
    from .core.model import CallableAgentSpec
    from .glue.runtime import Settings

    agent = _setting(config, "agenteval_agent", options.agent_ref)
    report = _setting(config, "agenteval_report")
    base = config.invocation_params.dir
    return Settings(
        dataset_paths=[base / p for p in config.getoption("agenteval_datasets")]
        or list(config.getini("agenteval_datasets")),
        attempts=_setting(config, "agenteval_attempts", options.positive_int),
        agent_override=CallableAgentSpec(callable=agent) if agent else None,
        agent_version=_setting(config, "agenteval_agent_version"),
        strict=bool(_setting(config, "agenteval_strict")),
        resume=config.getoption("agenteval_resume") or config.getoption("agenteval_plan"),
        rerun_errors=config.getoption("agenteval_rerun_errors"),
        rerun_all=config.getoption("agenteval_rerun"),
        allow_drift=config.getoption("agenteval_allow_drift"),
        run_id=config.getoption("agenteval_run_id"),
        report_dir=base / report if report else None,
        pass_k=_setting(config, "agenteval_pass_k", options.pass_ks),
        task_rule=_setting(config, "agenteval_task_rule", options.task_rule) or "any",
        min_pass_rate=_setting(config, "agenteval_min_pass_rate", options.rate),
        allow_errors=bool(_setting(config, "agenteval_allow_errors")),
        show_plan=config.getoption("agenteval_plan"),
        invocation_dir=base,
    )


def pytest_configure(config: pytest.Config) -> None:
    if not (config.getoption("agenteval_datasets") or config.getini("agenteval_datasets")):
        return
    # Imported only when active: unrelated pytest runs pay nothing for pydantic and friends.
    from .execution.workspaces import Workspaces
    from .glue.collect import CollectHooks
    from .glue.controller import Controller, XdistHooks, agenteval_dir, worker_setup
    from .glue.items import TaskHooks
    from .glue.runtime import RUNTIME, Runtime, agent_fingerprint
    from .sources.speccache import CACHE_NAME, SpecCache

    settings = read_settings(config)
    folder = agenteval_dir(config)
    specs = SpecCache(folder / CACHE_NAME if folder else None)
    datasets = _load_datasets(settings.dataset_paths, specs)
    for dataset in datasets:
        if str(dataset.root) not in sys.path:
            sys.path.append(str(dataset.root))
    whole_roots = _point_collection_at(config, datasets)
    if settings.show_plan:
        config.option.collectonly = True
    runtime = Runtime(
        settings,
        datasets,
        make_grader=TaskHooks.grader_maker(config),
        workspaces=Workspaces(lambda: _basetemp(config)),
        agenteval_dir=folder,
        specs=specs,
        fingerprint=agent_fingerprint(settings, datasets),
    )
    if not settings.strict:  # a bad file must fail alone, as its own collector
        runtime.whole_roots = whole_roots
    config.stash[RUNTIME] = runtime
    config.pluginmanager.register(TaskHooks(), "agenteval-tasks")
    hooks = CollectHooks()
    config.pluginmanager.register(hooks, "agenteval-collect")
    # Cleanups run last-in first-out and pytest's builtin plugins register theirs after this
    # configure hook, so the thaw follows pytest's end-of-session GC pass, which need not scan
    # the collected tree.
    config.add_cleanup(hooks.thaw)
    if hasattr(config, "workerinput"):
        worker_setup(config)
        return
    controller = Controller(config, runtime)
    config.pluginmanager.register(controller, "agenteval-controller")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(controller), "agenteval-xdist")


def _basetemp(config: pytest.Config) -> Path | None:
    """pytest's basetemp for this session (made on first use; its retention policy applies).

    None with `-p no:tmpdir`. Looked up late: pytest's tmpdir plugin is configured after us."""
    factory = getattr(config, "_tmp_path_factory", None)
    return factory.getbasetemp() if factory is not None else None


def _load_datasets(paths: list[Path], specs: SpecCache) -> list[Dataset]:
    from .core.errors import TaskFileError
    from .sources.dataset import load_dataset

    datasets: dict[str, Dataset] = {}
    for path in paths:
        try:
            dataset = load_dataset(path, specs)
        except TaskFileError as exc:
            raise pytest.UsageError(f"--agenteval {path}: {exc}") from None
        other = datasets.setdefault(dataset.name, dataset)
        if other.root != dataset.root:
            raise pytest.UsageError(
                f"two datasets are named {dataset.name!r}: {other.root} and {dataset.root}; "
                "give them different `name:`s in agenteval.yaml"
            )
    return list(datasets.values())


def _point_collection_at(config: pytest.Config, datasets: list[Dataset]) -> set[Path]:
    """Collect the datasets without naming them as arguments; keep node ids the user named.

    Returns the roots no argument points below: those can be collected in one pass.
    """
    roots = [str(d.root) for d in datasets]
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = roots
        return {d.root for d in datasets}
    base = config.invocation_params.dir
    given = [(base / arg.split("::")[0]).resolve() for arg in config.args]
    for dataset in datasets:
        if not any(g.is_relative_to(dataset.root) or dataset.root.is_relative_to(g) for g in given):
            config.args.append(str(dataset.root))
    return {
        d.root for d in datasets if not any(g.is_relative_to(d.root) and g != d.root for g in given)
    }
