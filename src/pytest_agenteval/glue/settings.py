"""The run's settings: what the command line and ini say, read once at configure time.

Precedence: a command-line option, then its ini twin (parsed by the same parser), then the
dataset manifest (applied where the manifest's value is used).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..core import options
from ..core.model import CallableAgentSpec
from ..core.shards import Shard, parse_shard, resolve_shard
from ..execution.environment import SandboxPolicy


@dataclass(frozen=True)
class Settings:
    """What the command line and ini say; the same in every process, never changed."""

    dataset_paths: list[Path]
    attempts: int | None
    agent_override: CallableAgentSpec | None
    agent_override_source: str
    """Where the override comes from, for messages: the option, or the ini setting."""
    agent_version: str | None
    strict: bool
    resume: bool
    rerun_errors: bool
    rerun_all: bool
    allow_drift: bool
    run_id: str | None
    report_dir: Path | None
    html_file: Path | None
    """Where `--agenteval-html` writes the HTML report; None: no HTML report."""
    pass_k: list[int] | None
    task_rule: str
    min_pass_rate: float | None
    baseline: str | None
    """The regression gate's baseline as the user named it (`--agenteval-baseline`)."""
    max_regression: float | None
    allow_errors: bool
    isolate: bool
    concurrency: int | None
    """Attempts in flight per process (`--agenteval-concurrency`); None: the manifest's."""
    max_in_flight: int | None
    min_interval: float | None
    max_cost: float | None
    max_tokens: int | None
    deadline: str | None
    interrupt_grace: float | None
    """Seconds attempts in flight get after the first Ctrl-C (`--agenteval-interrupt-grace`)."""
    show_plan: bool
    invocation_dir: Path
    shard: Shard | None = None
    """The shard this session runs (`--agenteval-shard`, `auto` resolved); None: all tasks."""
    sandboxes: SandboxPolicy = field(default_factory=SandboxPolicy)
    """`--agenteval-keep-sandboxes` and `--agenteval-max-sandboxes`."""
    variants: tuple[str, ...] = ()
    """The variants this session runs (`--agenteval-variant`); empty: all of them."""
    reference: str | None = None
    """The variant the others are compared with (`--agenteval-reference`); None: the first."""
    otel: bool = False
    """`--agenteval-otel` (or ini `agenteval_otel`): export each attempt's trace."""
    probe: bool = True
    """Check every provider and model before the first attempt (`--agenteval-no-probe`: not)."""
    probe_only: bool = False
    """`--agenteval-probe-only`: the probe alone, then the session ends (exit 0 or 2)."""
    model_cache: str = "off"
    """`--agenteval-model-cache` (or ini `agenteval_model_cache`): on, read, replay, off."""


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


def read_settings(config: pytest.Config, dataset_paths: list[Path]) -> Settings:
    agent = _setting(config, "agenteval_agent", options.agent_ref)
    report = _setting(config, "agenteval_report")
    html = _setting(config, "agenteval_html")
    base = config.invocation_params.dir
    return Settings(
        dataset_paths=dataset_paths,
        attempts=_setting(config, "agenteval_attempts", options.positive_int),
        agent_override=CallableAgentSpec(callable=agent) if agent else None,
        agent_override_source=f"--agenteval-agent {agent}"
        if config.getoption("agenteval_agent")
        else f"ini agenteval_agent = {agent}",
        agent_version=_setting(config, "agenteval_agent_version"),
        strict=bool(_setting(config, "agenteval_strict")),
        resume=config.getoption("agenteval_resume") or config.getoption("agenteval_plan"),
        rerun_errors=config.getoption("agenteval_rerun_errors"),
        rerun_all=config.getoption("agenteval_rerun"),
        allow_drift=config.getoption("agenteval_allow_drift"),
        run_id=config.getoption("agenteval_run_id"),
        report_dir=base / report if report else None,
        html_file=base / html if html else None,
        pass_k=_setting(config, "agenteval_pass_k", options.pass_ks),
        task_rule=_setting(config, "agenteval_task_rule", options.task_rule) or "any",
        min_pass_rate=_setting(config, "agenteval_min_pass_rate", options.rate),
        baseline=_setting(config, "agenteval_baseline"),
        max_regression=_setting(config, "agenteval_max_regression", options.rate),
        allow_errors=bool(_setting(config, "agenteval_allow_errors")),
        isolate=bool(_setting(config, "agenteval_isolate")),
        concurrency=_setting(config, "agenteval_concurrency", options.positive_int),
        max_in_flight=_setting(config, "agenteval_max_in_flight", options.positive_int),
        min_interval=_setting(config, "agenteval_min_interval", options.non_negative_float),
        max_cost=_setting(config, "agenteval_max_cost", options.positive_float),
        max_tokens=_setting(config, "agenteval_max_tokens", options.positive_int),
        deadline=config.getoption("agenteval_deadline"),
        interrupt_grace=_setting(config, "agenteval_interrupt_grace", options.seconds),
        show_plan=config.getoption("agenteval_plan"),
        invocation_dir=base,
        shard=_shard(config),
        sandboxes=SandboxPolicy(
            keep=_setting(config, "agenteval_keep_sandboxes", options.keep_sandboxes),
            max_alive=_setting(config, "agenteval_max_sandboxes", options.positive_int),
            allow=_setting(config, "agenteval_sandbox_allow", options.sandbox_allow) or frozenset(),
            hosts=_docker_hosts(config),
        ),
        variants=_variants(config),
        reference=_setting(config, "agenteval_reference", options.variant_name),
        otel=bool(_setting(config, "agenteval_otel")),
        probe=not config.getoption("agenteval_no_probe"),
        probe_only=bool(config.getoption("agenteval_probe_only")),
        model_cache=_setting(config, "agenteval_model_cache", options.model_cache) or "off",
    )


def _docker_hosts(config: pytest.Config) -> tuple[str, ...]:
    """`--agenteval-docker-host` (each), else ini `agenteval_docker_hosts`, checked alike."""
    given = config.getoption("agenteval_docker_hosts") or config.getini("agenteval_docker_hosts")
    try:
        return tuple(dict.fromkeys(options.docker_host(host) for host in given))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini setting agenteval_docker_hosts: {exc}") from None


def _variants(config: pytest.Config) -> tuple[str, ...]:
    """`--agenteval-variant` (each), else ini `agenteval_variants`; in the order given."""
    names = config.getoption("agenteval_variants") or config.getini("agenteval_variants")
    try:
        return tuple(dict.fromkeys(options.variant_name(name) for name in names))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini setting agenteval_variants: {exc}") from None


def _shard(config: pytest.Config) -> Shard | None:
    """`--agenteval-shard`, else ini `agenteval_shard`; `auto` read from the environment."""
    value = _setting(config, "agenteval_shard", parse_shard)
    try:
        return resolve_shard(value, os.environ)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"--agenteval-shard: {exc}") from None


def dry_run(config: pytest.Config) -> bool:
    """Whether this session runs no attempt (`--co`, `--agenteval-plan`, `--markers`,
    `--fixtures`): it then creates and claims no run."""
    option = config.option
    shows = option.markers or option.showfixtures or option.show_fixtures_per_test
    return bool(option.collectonly or shows)
