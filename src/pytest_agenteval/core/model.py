"""Frozen data models: what users write (manifest, tasks), what agents return, what is recorded."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    Tag,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import AgentError, did_you_mean
from .llm import MAX_RETRIES, JudgeSettings, ModelPrice, ProviderSpec, Seconds, Wait
from .options import HOST_CAP, split_docker_host
from .trace import Trace

if TYPE_CHECKING:
    from .chat import ChatClient
    from .environment import Environment

RECORD_SCHEMA = "agenteval.record/1"
TASK_ID_RE = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*")
TAG_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
Status = Literal["pass", "fail", "error"]
"""An attempt's verdict: its graders passed, one failed (a wrong answer), or it errored."""
Action = Literal["reuse", "regrade", "run"]
"""What a resume does with a planned attempt."""
Phase = Literal["agent", "grading", "crash", "budget", "build", "sandbox", "stopped"]
"""Where an errored attempt stopped: in the agent, in a grader, its process died, its usage
went over the task's budget (`over_budget`), its sandbox's image could not be had
(`build_failed`), its sandbox failed under it: the Docker daemon or CLI (`sandbox_error`), or
a run-wide stop ended its agent's loop between turns (`stopped`). A resume runs `crash`,
`build`, `sandbox` and `stopped` attempts again: nothing of them was judged."""
Stopped = Literal["max_turns", "budget", "timeout"]
"""The attempt's own limit that ended its agent's loop (it was graded on what it produced)."""


class UserModel(BaseModel):
    """Base of everything a user writes in YAML: frozen, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentLimits(UserModel):
    """How hard the run may hit an agent (a provider's rate limits), across every process of
    the run on this machine."""

    max_in_flight: PositiveInt | None = None
    """Calls of this agent running at once, at most."""
    min_interval: Wait | None = None
    """Seconds between the starts of two calls of this agent, at least."""


class Budget(UserModel):
    """What one attempt may use; an attempt whose agent reports more is an error of its own
    (`over_budget`), counted apart from other errors."""

    max_tokens: PositiveInt | None = None
    """Input plus output tokens one attempt may use (the `openai` agent also asks the server
    for at most this many output tokens)."""
    max_cost: PositiveFloat | None = None
    """What one attempt's agent call may cost (reported, or priced from `pricing:`)."""

    def over(self, tokens: int | None, cost: float | None) -> str | None:
        """Why usage of `tokens` and `cost` is over this budget, or None (unknown usage is
        never over)."""
        if self.max_tokens is not None and tokens is not None and tokens > self.max_tokens:
            return f"{tokens} tokens used (budget max_tokens {self.max_tokens})"
        if self.max_cost is not None and cost is not None and cost > self.max_cost:
            return f"cost {cost:.6g} (budget max_cost {self.max_cost:g})"
        return None


RETRYABLE = ("rate_limited", "provider_error", "timeout", "sandbox_error")
"""The error classes a `retry:` may name: trouble outside the agent, worth another try."""


def _seconds(value: Any) -> Any:
    """`10s`, `2m`, `500ms` or a number of seconds, as seconds."""
    if isinstance(value, str):
        text = value.strip()
        for unit, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
            if text.endswith(unit):
                try:
                    return float(text[: -len(unit)]) * scale
                except ValueError:
                    break
        raise ValueError(f"{value!r} is not a duration: write seconds, `10s`, `2m` or `500ms`")
    return value


_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+(ms|s|m)\s*$"},
    ],
    "description": "seconds, or `10s`, `2m`, `500ms`",
}


def _retry_class(name: str) -> str:
    """One class of `retry: on:`; each unknown one is its own error, at its own line."""
    if name not in RETRYABLE:
        meant = did_you_mean(name, RETRYABLE)
        raise ValueError(
            f"{name!r} is not an error class a retry may name"
            + (f" ({meant})" if meant else "")
            + "; valid: "
            + ", ".join(RETRYABLE)
        )
    return name


class RetrySpec(UserModel):
    """Runs an attempt that ended in one of the named error classes again, in the same
    session; the earlier tries stay in the record's `previous` (default: no retry)."""

    on: list[Annotated[str, AfterValidator(_retry_class)]] = Field(min_length=1)
    """The error classes retried: any of `rate_limited`, `provider_error`, `timeout`,
    `sandbox_error`."""
    max: Annotated[int, Field(ge=1, le=MAX_RETRIES)] = 2
    """Retries per attempt, at most (so `max + 1` tries in all; up to 100)."""
    backoff: Annotated[Wait, WithJsonSchema(_DURATION_SCHEMA)] = 10.0
    """Wait before each retry (`10s`, `2m`, `500ms` or seconds), cut short by a stop or the
    session's deadline."""

    @field_validator("on")
    @classmethod
    def _once(cls, classes: list[str]) -> list[str]:
        return list(dict.fromkeys(classes))

    _backoff = field_validator("backoff", mode="before")(_seconds)

    @model_validator(mode="before")
    @classmethod
    def _on_key(cls, data: Any) -> Any:
        """YAML 1.1 reads a plain `on:` key as True: it is the `on` field."""
        return _on_key(data) if isinstance(data, dict) else data


def effective_budget(task: Budget | None, defaults: Budget | None) -> Budget | None:
    """The task's budget over the manifest's: each limit the task sets replaces the default's."""
    if task is None or defaults is None:
        return task or defaults
    return defaults.model_copy(update=task.model_dump(exclude_unset=True))


class CallableAgentSpec(UserModel):
    """An agent that is a Python function, `module:function` or `path/to/file.py:function`."""

    callable: str = Field(pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_.]*$")
    """Where the function lives; the dataset root is importable."""
    limits: AgentLimits | None = None
    """Limits of this agent's calls (not part of the task's digests)."""


class CommandAgentSpec(UserModel):
    """An agent that is a program, run once per attempt as a real subprocess (no shell)."""

    command: list[str] = Field(min_length=1)
    """argv; `{input}`, `{task_id}`, `{attempt}`, `{seed}`, `{workspace}`, `{dataset}` and
    `{python}` are replaced."""
    stdin: Literal["json", "none"] = "json"
    """`json` writes the task as JSON to the program's stdin."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables added to the environment of the program."""
    output: Literal["text", "json"] = "text"
    """`text`: stdout is the output. `json`: stdout is an AgentResult as JSON (output, usage...)."""
    limits: AgentLimits | None = None
    """Limits of this agent's calls (not part of the task's digests)."""


class PluginAgentSpec(UserModel):
    """An agent of a kind a plugin provides through `pytest_agenteval_make_agent`, written as
    `{kind: {options}}`."""

    type: str
    """The agent kind a plugin registered."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options the plugin validates itself."""
    limits: AgentLimits | None = None
    """Limits of this agent's calls (not part of the task's digests)."""


def _agent_kind(value: Any) -> str:
    if isinstance(value, UserModel):  # serializing: the model says which kind it is
        return _KIND_TAGS[type(value).__name__]
    if isinstance(value, dict) and "command" in value:
        return "command-agent"
    if isinstance(value, dict) and "callable" not in value:
        return "plugin-agent"
    return "callable-agent"


def _agent_shorthand(value: Any) -> Any:
    if isinstance(value, str):
        return {"callable": value}
    if not isinstance(value, dict) or {"command", "callable", "type"} & set(value):
        return value
    rest = {key: item for key, item in value.items() if key != "limits"}
    if len(rest) != 1:
        return value
    ((kind, options),) = rest.items()
    limits = {"limits": value["limits"]} if "limits" in value else {}
    return {"type": kind, "options": options, **limits}


AgentSpec = Annotated[
    Annotated[CallableAgentSpec, Tag("callable-agent")]
    | Annotated[CommandAgentSpec, Tag("command-agent")]
    | Annotated[PluginAgentSpec, Tag("plugin-agent")],
    Discriminator(_agent_kind),
]
AnyAgentSpec = CallableAgentSpec | CommandAgentSpec | PluginAgentSpec
_KIND_TAGS = {
    "CallableAgentSpec": "callable-agent",
    "CommandAgentSpec": "command-agent",
    "PluginAgentSpec": "plugin-agent",
}
UNION_TAGS = frozenset(_KIND_TAGS.values())


class GraderSpec(UserModel):
    """One grader of a task: its registered type name and its options."""

    type: str
    """Name of a built-in or plugin-registered grader, e.g. `equals`."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options the grader validates itself."""


def normalize_grader(raw: Any) -> Any:
    """Accept `name`, `{name: value-or-options}` and `{type: name, ...options}` spellings."""
    if isinstance(raw, str):
        return {"type": raw}
    if isinstance(raw, dict) and "type" not in raw and len(raw) == 1:
        ((name, value),) = raw.items()
        options = _on_key(value) if isinstance(value, dict) else {"_primary": value}
        return {"type": name, "options": options}
    if isinstance(raw, dict) and "type" in raw and "options" not in raw:
        options = {k: v for k, v in _on_key(raw).items() if k != "type"}
        return {"type": raw["type"], "options": options}
    if isinstance(raw, dict) and isinstance(raw.get("options"), dict):
        return {**raw, "options": _on_key(raw["options"])}
    return raw


def _on_key(data: dict[Any, Any]) -> dict[Any, Any]:
    """YAML 1.1 reads a plain `on:` key as True: it is the `on` option (`judge: {on: trajectory}`,
    as `retry: {on: [...]}`); an option the grader does not take is its unknown key then."""
    if True in data and "on" not in data:
        return {("on" if k is True else k): v for k, v in data.items()}
    return data


class DockerHost(UserModel):
    """A Docker daemon of `docker: hosts:` with its own bound of containers alive."""

    url: str = Field(min_length=1)
    """The daemon's address, as `docker --host` takes it (`unix:///run/a.sock`)."""
    max_sandboxes: int = Field(ge=1)
    """Containers alive at once on this daemon, across the processes of this machine."""

    def entry(self) -> str:
        """The host entry: `ADDRESS?max_sandboxes=N`, as `--agenteval-docker-host` takes it."""
        return f"{self.url}{HOST_CAP}{self.max_sandboxes}"


HOSTS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "anyOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "object",
                "properties": {
                    "url": {"type": "string", "minLength": 1},
                    "max_sandboxes": {"type": "integer", "minimum": 1},
                },
                "required": ["url", "max_sandboxes"],
                "additionalProperties": False,
            },
        ]
    },
}
"""`docker: hosts:` as written (the model keeps a bounded one as its entry string)."""


class DockerImage(UserModel):
    """A Docker image the sandbox starts from: a named one, or one built from a folder."""

    image: str | None = Field(default=None, min_length=1)
    """The image's name (`python:3.12-slim`, `my-eval:1`): used when present, else pulled."""
    build: str | None = Field(default=None, min_length=1)
    """A folder with a Dockerfile, relative to the dataset root: built once per content
    digest of the folder and tagged by it (`agenteval-build:<digest>`)."""
    hosts: Annotated[list[str], WithJsonSchema(HOSTS_SCHEMA)] = Field(default_factory=list)
    """The Docker daemons the containers may go to: addresses (`unix:///run/a.sock`,
    `ssh://ci@build-2`), or `{url: ADDRESS, max_sandboxes: N}` to bound the containers
    alive on that daemon across the machine's processes. Each attempt's goes to the one with
    the most free room, the image built on each. Default: the daemon `DOCKER_HOST` or the
    current context names. `--agenteval-docker-host` overrides it; not part of the task's
    digest. (A bounded one is kept as `ADDRESS?max_sandboxes=N`.)"""

    @field_validator("hosts", mode="before")
    @classmethod
    def _bounded(cls, hosts: object) -> object:
        if not isinstance(hosts, list):
            return hosts
        return [DockerHost.model_validate(h).entry() if isinstance(h, dict) else h for h in hosts]

    @field_validator("hosts")
    @classmethod
    def _addresses(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            split_docker_host(host)
        return list(dict.fromkeys(hosts))

    @model_validator(mode="after")
    def _one_source(self) -> DockerImage:
        if (self.image is None) == (self.build is None):
            raise ValueError("name exactly one of `image: NAME` or `build: DIR`")
        return self


class PluginSandbox(UserModel):
    """A sandbox of a kind a plugin registers (an `EnvironmentKind`), written
    `sandbox: {KIND: {options}}`."""

    type: str
    """The kind's name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options the kind validates with its own model."""


class SandboxSpec(UserModel):
    """Run each attempt's command agent and command graders in a fresh sandbox of its own: a
    Docker container (`docker:`), or a kind a plugin registers (`KIND: {options}`), beside
    the options common to every kind."""

    docker: DockerImage | None = None
    """The image: `{image: NAME}` or `{build: DIR}`."""
    plugin: PluginSandbox | None = None
    """A plugin's kind, written as `KIND: {options}` (never as `plugin:`)."""
    workdir: str = Field(default="/workspace", pattern=r"^/")
    """The container's working directory (`{workspace}`), holding a copy of the task's
    workspace template."""
    network: Literal["none", "bridge", "host"] = "none"
    """The container's network: `none` (default) has no interface but loopback."""
    cpus: PositiveFloat | None = None
    """CPUs the container may use (`docker --cpus`); default unbounded."""
    memory: str = Field(default="1g", pattern=r"^([0-9]+[bkmgBKMG]?|unbounded)$")
    """Memory the container may use, swap included (`512m`, `2g`); default `1g`. `unbounded`
    sets no limit, which the run must allow (`--agenteval-sandbox-allow unbounded`)."""
    pids_limit: PositiveInt = 256
    """Processes the container may run at once."""
    user: str | None = None
    """`uid[:gid]` or a name the image knows to run programs as (default: the image's)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the container."""
    environment: dict[str, str] = Field(default_factory=dict)
    """What to capture inside each attempt's container before its agent, by name: a shell
    command whose output (stripped) the record keeps (`{python: "python3 --version"}`); the
    summary warns when a name's values differ across the run's attempts. Not part of the
    task's digest: changing it runs nothing again."""

    @model_validator(mode="before")
    @classmethod
    def _kind_key(cls, value: Any) -> Any:
        """`KIND: {options}` beside the common options names a plugin's kind."""
        if not isinstance(value, dict) or "plugin" in value or "docker" in value:
            return value
        kinds = [key for key in value if key not in cls.model_fields]
        if len(kinds) != 1:
            return value  # none: the kind is missing; several: each is an unknown key
        (kind,) = kinds
        options = value[kind]
        rest = {key: item for key, item in value.items() if key != kind}
        return {"plugin": {"type": kind, "options": {} if options is None else options}, **rest}

    @model_validator(mode="after")
    def _one_kind(self) -> SandboxSpec:
        if (self.docker is None) == (self.plugin is None):
            raise ValueError(
                "name the sandbox's kind once: `docker: {image: NAME}` or a kind a plugin "
                "registers (`KIND: {options}`)"
            )
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped as written: a Docker sandbox exactly as before kinds (so its digests stay),
        a plugin's as `KIND: {options}`."""
        data: dict[str, Any] = handler(self)
        plugin = data.pop("plugin", None)
        if plugin is None:
            return data
        data.pop("docker", None)
        return {plugin["type"]: plugin["options"], **data}

    @property
    def kind(self) -> str:
        """The kind's name: `docker`, or the plugin's."""
        return self.plugin.type if self.plugin is not None else "docker"

    @property
    def kind_options(self) -> dict[str, Any]:
        """The options written under the kind's key."""
        if self.plugin is not None:
            return self.plugin.options
        assert self.docker is not None
        return self.docker.model_dump(exclude_defaults=True)

    @field_validator("memory")
    @classmethod
    def _some_memory(cls, value: str) -> str:
        if value != "unbounded" and int(value.rstrip("bkmgBKMG")) == 0:
            raise ValueError(
                "0 is no memory at all (Docker reads it as no limit): give a size such as "
                "`512m`, or `unbounded` (which the run must allow)"
            )
        return value

    def lifts(self) -> list[tuple[str, str]]:
        """What this sandbox lifts of the default isolation, as (field, the allowance of
        `--agenteval-sandbox-allow` it needs): a network, no memory limit."""
        found = [("network", "network")] if self.network != "none" else []
        return found + ([("memory", "unbounded")] if self.memory == "unbounded" else [])


ARTIFACTS_MAX_BYTES = 1024 * 1024
"""Bytes of an attempt's changed files kept by default (1 MiB)."""


class ArtifactsSpec(UserModel):
    """Keep the files an attempt's agent created or changed in its workspace with the attempt
    in the run store (sandboxed attempts keep them by default; local ones only with this set)."""

    max_bytes: NonNegativeInt = ARTIFACTS_MAX_BYTES
    """Bytes kept per attempt (default 1 MiB); files past it are listed by name and size."""


def _graders_before(value: Any) -> Any:
    return [normalize_grader(g) for g in value] if isinstance(value, list) else value


class Defaults(UserModel):
    """Manifest defaults applied to every task that does not say otherwise."""

    timeout: Seconds | None = None
    """Seconds an attempt's agent may take, all its tries (`retry:`) and turns together."""
    grader_timeout: Seconds | None = None
    """Seconds each grader may take to judge an attempt (default 60)."""
    attempts: PositiveInt | None = None
    """Attempts per task when neither `--attempts` nor ini `agenteval_attempts` is set."""
    concurrency: PositiveInt | None = None
    """Attempts in flight at once per process, when `--agenteval-concurrency` is not set."""
    graders: list[GraderSpec] | None = None
    """Graders for tasks that name none."""
    budget: Budget | None = None
    """What each attempt may use (tokens, cost); a task's own `budget:` limits replace these."""
    retry: RetrySpec | None = None
    """Retries of attempts that end in the named error classes (a task's own `retry:`
    replaces it)."""
    sandbox: SandboxSpec | None = None
    """The Docker sandbox of every task that names none (default: none, the local machine)."""
    artifacts: ArtifactsSpec | None = None
    """What every task keeps of its attempts' changed files (default: 1 MiB for a sandboxed
    task, nothing for a local one)."""

    _graders = field_validator("graders", mode="before")(_graders_before)


def _variant_shorthand(value: Any) -> Any:
    """A variant written as an agent spec alone means `{agent: SPEC}`."""
    if isinstance(value, dict) and "agent" in value:
        return value
    return {"agent": value}


class Variant(UserModel):
    """One agent configuration compared with the others on the same tasks."""

    agent: AgentSpec
    """The variant's agent: any agent kind (`module:function`, `{command: ...}`, ...)."""
    limits: AgentLimits | None = None
    """Limits of this variant's agent, across every process of the run."""
    agent_version: str | None = None
    """A version you declare for this variant's agent; part of its fingerprint."""

    _agent = field_validator("agent", mode="before")(_agent_shorthand)

    @field_validator("agent_version", mode="before")
    @classmethod
    def _scalar_to_str(cls, value: Any) -> Any:
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )


VARIANT_NAME_PATTERN = r"^[A-Za-z0-9_.\-]+$"


def _variant_name(name: str) -> str:
    if not re.match(VARIANT_NAME_PATTERN, name):
        raise ValueError(
            f"variant name {name!r}: use letters, digits, `_`, `.` and `-` (it becomes part of "
            "item ids, so `-k NAME` selects it)"
        )
    _check_length("variant name", name)
    return name


VariantName = Annotated[str, AfterValidator(_variant_name)]


class Manifest(UserModel):
    """`agenteval.yaml` at the dataset root."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """Dataset name; keys records together with task id and attempt."""
    version: str = "0"
    """Dataset version, shown in summaries. Quote it: the YAML number 1.10 reads as "1.1"."""
    description: str = ""
    """What the dataset is about, for people reading it."""
    agent: AgentSpec | None = None
    """The default agent under test."""
    agent_version: str | None = None
    """A version you declare for the agent; part of its fingerprint, so a resume notices."""
    limits: AgentLimits | None = None
    """Limits of the manifest's agent, for every task that does not name its own agent."""
    defaults: Defaults = Defaults()
    """Settings for every task that does not name its own."""
    tasks: list[str] | None = None
    """Glob patterns of task files relative to the root (default: every other *.yaml/*.yml)."""
    judge: JudgeSettings | None = None
    """Defaults of every `judge` grader: model, base_url, api_key_env, threshold, ..."""
    providers: dict[str, ProviderSpec] | None = None
    """Model APIs by name (one per endpoint and key): `openai:` or `anthropic:`, and the
    `limits:` all their calls share. Agents, judges and `task.llm(NAME)` name one with
    `provider: NAME`."""
    pricing: dict[str, ModelPrice] | None = None
    """US dollars per million tokens by model name (as the server names it); prices attempts
    whose agent reports tokens and a model but no cost."""
    variants: dict[VariantName, Annotated[Variant, BeforeValidator(_variant_shorthand)]] | None = (
        None
    )
    """Agents compared on the same tasks in one run, by name (the first is the reference):
    `NAME: AGENT-SPEC` or `NAME: {agent: AGENT-SPEC, limits: ..., agent_version: ...}`. A name
    uses letters, digits and `_ . -`, at most 200 characters; quote one YAML reads otherwise
    (`"true"`, `"0"`)."""

    _agent = field_validator("agent", mode="before")(_agent_shorthand)

    @field_validator("version", "agent_version", mode="before")
    @classmethod
    def _scalar_to_str(cls, value: Any) -> Any:
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )

    @field_validator("variants")
    @classmethod
    def _some_variant(cls, value: dict[str, Variant] | None) -> dict[str, Variant] | None:
        if value is not None and not value:
            raise ValueError("`variants:` names no variant: add `NAME: AGENT-SPEC`, or drop it")
        return value


class TaskSpec(UserModel):
    """One task as written in YAML."""

    id: str | None = None
    """Unique id; defaults to the file path relative to the dataset root, without extension.
    Letters, digits and `_ . - /`, at most 200 characters (quote one YAML would read as a
    number or boolean: `id: "007"`)."""
    description: str = ""
    """What the task checks, for people reading it."""
    tags: list[str] = Field(default_factory=list)
    """Become pytest markers: `-m smoke` selects tasks tagged `smoke`."""
    input: Any
    """A string, a mapping, or a list of chat messages `{role, content}`."""
    expected: Any = None
    """The reference answer graders compare against; never shown to the agent."""
    graders: list[GraderSpec] | None = None
    """How the output is judged; all must pass (default: the manifest's, else `equals`)."""
    timeout: Seconds | None = None
    """Seconds the agent may take for one attempt, all its tries (`retry:`) and turns
    together (default: the manifest's, else none)."""
    grader_timeout: Seconds | None = None
    """Seconds each grader may take (default: the manifest's, else 60)."""
    agent: AgentSpec | None = None
    """Overrides the manifest's agent for this task."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data the agent receives with the task (`task.metadata`)."""
    workspace: str | None = None
    """A folder (relative to this file) copied into each attempt's fresh working directory."""
    budget: Budget | None = None
    """What each attempt may use (`max_tokens`, `max_cost`; default: the manifest's); usage
    over it makes the attempt an `over_budget` error."""
    retry: RetrySpec | None = None
    """Run an attempt that ends in one of `on:`'s error classes again in the same session,
    up to `max` times, `backoff` apart (default: the manifest's, else no retry)."""
    sandbox: SandboxSpec | None = None
    """A Docker container per attempt for its command agent and command graders (default:
    the manifest's `defaults.sandbox`, else none)."""
    artifacts: ArtifactsSpec | None = None
    """Keep the files each attempt's agent created or changed, up to `max_bytes` (default: the
    manifest's `defaults.artifacts`, else 1 MiB for a sandboxed task, nothing for a local one)."""

    _agent = field_validator("agent", mode="before")(_agent_shorthand)
    _graders = field_validator("graders", mode="before")(_graders_before)

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str | None) -> str | None:
        if value is not None:
            check_task_id(value)
        return value

    @field_validator("tags")
    @classmethod
    def _valid_tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not TAG_RE.fullmatch(tag):
                raise ValueError(f"tag {tag!r} is not a valid marker name (letters, digits, _)")
        return value

    @field_validator("input")
    @classmethod
    def _valid_input(cls, value: Any) -> Any:
        check_input(value)
        return value


class SourceTaskSpec(TaskSpec):
    """A task file whose tasks are the rows of a JSONL or CSV file: `id`, `description`,
    `input`, `expected` and `metadata` are templates filled from each row; the other fields are
    shared by every row."""

    source: str
    """The JSONL or CSV file (`.gz` allowed) of rows, relative to this file, inside the dataset."""
    format: Literal["jsonl", "csv"] | None = None
    """The file's format (default: from its name, `.jsonl` / `.csv`, before any `.gz`)."""
    id: str | None = None
    """Template of each row's task id, e.g. `"{task_id}"` (default: `<file id>/<row index>`)."""
    input: Any
    """Template of each row's input: `"Solve: {question}"`; `"{messages}"` keeps the row's value."""

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str | None) -> str | None:
        return value  # a template: each row's rendered id is checked

    @field_validator("input")
    @classmethod
    def _valid_input(cls, value: Any) -> Any:
        return value  # a template: each row's rendered input is checked


def check_input(value: Any) -> None:
    """Raise ValueError unless `value` is a string, a mapping or a list of chat messages."""
    if isinstance(value, str | dict):
        return
    if isinstance(value, list) and all(_is_message(m) for m in value):
        return
    raise ValueError(
        "input must be a string, a mapping, or a list of chat messages {role, content}"
    )


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and "content" in value


MAX_NAME_LENGTH = 200
"""Characters a task id or a variant name may have: both become parts of item ids and of
file and folder names (each at most 255 bytes on common file systems)."""


def check_task_id(value: str) -> None:
    """Raise ValueError unless `value` is usable in `-k` and as a file-name-safe key."""
    if not TASK_ID_RE.fullmatch(value) or any(p in (".", "..") for p in value.split("/")):
        raise ValueError(
            f"task id {value!r} may only use letters, digits and _ . - / "
            "(no empty, '.' or '..' path segments)"
        )
    _check_length("task id", value)


def _check_length(what: str, value: str) -> None:
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(
            f"{what} {value[:40]!r}… has {len(value)} characters; at most {MAX_NAME_LENGTH} "
            "(it becomes part of item ids and folder names)"
        )


Count = Annotated[int, Field(ge=0)]
Money = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A cost: finite and not negative (NaN would turn a spend cap off, and is not JSON)."""


class Usage(UserModel):
    """What an attempt consumed, when the agent reports it. Numbers are refused unless finite
    and not negative: leave one unset (None) when it is not known."""

    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cost: Money | None = None
    """In the currency of your choice (usually USD); when unset, the manifest's `pricing:`
    prices the tokens of `model`."""
    cached_input_tokens: Count | None = None
    """Input tokens the provider served from its cache (part of `input_tokens`)."""
    model: str | None = None
    """The model that used the tokens, as the provider names it (looked up in `pricing:`)."""
    cached_calls: Count | None = None
    """Model calls answered from the model cache (`--agenteval-model-cache`): no request
    was sent, they cost 0 in `cost`."""
    cached_cost: Money | None = None
    """What the cached answers cost when they were first asked (not in `cost`)."""
    cache_misses: Count | None = None
    """Model calls the model cache was asked for and could not answer (they were sent)."""


class AgentResult(UserModel):
    """What an agent may return instead of a plain string."""

    output: str
    """The answer graders judge."""
    usage: Usage | None = None
    transcript: list[Any] | None = None
    """The agent's trace (messages, tool calls); kept in the record, never graded."""
    artifacts: dict[str, str] | None = None
    """Named files or values the agent produced (name -> path or text)."""
    call: dict[str, Any] | None = None
    """How a model provider answered: model, finish reason, retries (kept in the record)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One grader's judgement of one attempt."""

    grader: str
    """The grader's name, e.g. `equals` or a plugin's."""
    passed: bool
    """Whether the answer passed this grader."""
    reason: str
    """Why, in a few words for a person."""
    score: float | None = None
    """A score in [0, 1], when the grader gives one."""
    details: dict[str, Any] | None = None
    """How the grader reached it, kept in the record (an LLM judge: model, prompt, reply,
    usage with tokens and cost)."""

    def as_dict(self, details: bool = True) -> dict[str, Any]:
        fields = {
            "grader": self.grader,
            "passed": self.passed,
            "score": self.score,
            "reason": self.reason,
        }
        if details and self.details is not None:
            fields["details"] = self.details
        return fields

    @property
    def cost(self) -> float | None:
        """What grading cost (an LLM judge's call), when known."""
        usage = self.details.get("usage") if self.details else None
        return usage.get("cost") if isinstance(usage, dict) else None


class Task:
    """What the agent under test receives for one attempt. Public API: keep these names."""

    __slots__ = (
        "_environment",
        "_llm",
        "_make_environment",
        "_make_workspace",
        "_workspace",
        "attempt",
        "budget",
        "id",
        "input",
        "metadata",
        "seed",
        "trace",
    )

    def __init__(
        self,
        *,
        id: str,
        input: Any,
        metadata: dict[str, Any],
        attempt: int,
        seed: int,
        workspace: Path | Callable[[], Path],
        environment: Callable[[], Environment] | None = None,
        budget: Budget | None = None,
        llm: Callable[..., ChatClient] | None = None,
    ) -> None:
        self.id = id
        self.input = input
        self.metadata = metadata
        self.attempt = attempt
        self.seed = seed
        self.budget = budget
        """What this attempt may use (tokens, cost), or None: an agent may stop early."""
        self._workspace = workspace if isinstance(workspace, Path) else None
        self._make_workspace = None if isinstance(workspace, Path) else workspace
        self._environment: Environment | None = None
        self._make_environment = environment
        self._llm = llm
        self.trace = Trace()
        """This attempt's typed trace: append its model calls, tool calls and messages as
        they happen (kept in the record's `transcript`)."""

    def check(self) -> None:
        """Ask before each turn of your own loop whether to go on: raises `RunStopped` when the
        run stops (cancel, deadline, a spend or token cap) and `LimitReached` when this
        attempt's `budget` or `timeout` is passed by the model calls its trace holds."""
        self.trace.check(self.budget)

    def llm(self, provider: str | None = None, *, traced: bool = True) -> ChatClient:
        """A chat client of the manifest's provider `provider` (None: the only one, else the
        implicit OpenAI one) bound to this attempt: `chat(messages)` / `await achat(...)`.
        Its calls hold the provider's limits, the run's caps and retries, and are counted in
        this attempt's usage and cost without the agent reporting anything (`traced=False`:
        a call that is not the agent's, such as a grader's, is kept out of the trace)."""
        if self._llm is None:
            raise AgentError(
                "this Task has no model providers (it was made by hand)",
                detail="run it through pytest-agenteval, or pass llm= to Task",
            )
        return self._llm(provider, self.trace if traced else None)

    def _llm_for(self, settings: Any, traced: bool = True) -> ChatClient | None:
        """The built-in agents' and judges' client: the provider their `settings` name, or
        the implicit one of their base_url and key variable, bound like `llm` (None for a
        Task made by hand)."""
        if self._llm is None:
            return None
        return self._llm(None, self.trace if traced else None, settings=settings)

    @property
    def workspace(self) -> Path:
        """This attempt's fresh working directory (created on first use)."""
        if self._workspace is None:
            assert self._make_workspace is not None
            self._workspace = self._make_workspace()
        return self._workspace

    @property
    def environment(self) -> Environment | None:
        """Where this attempt's files live and its programs run (made on first use): `exec`,
        `read_file`, `write_file`. None for a Task made by hand without one."""
        if self._environment is None and self._make_environment is not None:
            self._environment = self._make_environment()
        return self._environment

    def as_json(self) -> dict[str, Any]:
        """The task as command agents receive it on stdin."""
        return {
            "id": self.id,
            "input": self.input,
            "metadata": self.metadata,
            "attempt": self.attempt,
            "seed": self.seed,
            "workspace": env.workdir if (env := self.environment) else str(self.workspace),
            **({"budget": self.budget.model_dump()} if self.budget else {}),
        }

    def __reduce__(self) -> tuple[Any, ...]:
        """A Task pickles (for an executor that runs the call in another process) as its data
        and its environment, made first so the copy reaches the same files; a Task made by
        hand with a folder, as that folder. The model providers of a run's Task stay behind:
        they hold the run's spend caps, which no other process can hold, so the copy's
        `llm()` (and the built-in model agents) refuse, never spending uncapped, until it is
        `rebind`-ed."""
        environment = self.environment
        folder = self.workspace if environment is None else None
        data = (self.id, self.input, self.metadata, self.attempt, self.seed, self.budget)
        return (_unpickled_task, (*data, folder, environment, self._llm is not None))

    def rebind(self, original: Task) -> None:
        """Give this unpickled copy the model providers and the trace of the `original` it
        was copied from (`call.task`), for an executor that answers the copy in the pytest
        process: its model calls are then capped and counted as the original's."""
        self._llm = original._llm
        self.trace = original.trace

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, attempt={self.attempt})"


def _unpickled_task(
    id: str,
    input: Any,
    metadata: dict[str, Any],
    attempt: int,
    seed: int,
    budget: Budget | None,
    folder: Path | None,
    environment: Environment | None,
    had_llm: bool = False,
) -> Task:
    """The Task `Task.__reduce__` packed, its model providers (when it `had_llm`) left
    behind."""
    data = {"id": id, "input": input, "metadata": metadata, "attempt": attempt, "seed": seed}
    data["llm"] = _left_behind if had_llm else None
    if environment is None:
        assert folder is not None
        return Task(**data, workspace=folder, budget=budget)
    task = Task(**data, workspace=partial(local_folder, environment), budget=budget)
    task._environment = environment
    return task


def _left_behind(*_: Any, **__: Any) -> ChatClient:
    """An unpickled Task's `llm`: the providers stayed in the pytest process with the caps."""
    raise AgentError(
        "task.llm: this Task was pickled for another process and its model providers stayed "
        "in the pytest process (they hold the run's spend caps)",
        detail="Hint: an executor that answers the copy in the pytest process calls "
        "`copy.task.rebind(call.task)`; one that runs it elsewhere makes no model call "
        "through task.llm() there",
    )


def local_folder(environment: Environment) -> Path:
    """The folder on this machine holding the environment's files (`task.workspace`)."""
    path = environment.local_path
    if path is None:
        raise AgentError(
            f"this attempt's files are not on this machine ({environment.where})",
            detail="use task.environment (exec, read_file, write_file) instead of task.workspace",
        )
    return path
