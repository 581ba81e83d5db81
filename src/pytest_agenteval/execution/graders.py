"""Graders judge an attempt's output: the Grader protocol, the built-ins and their registry."""

from __future__ import annotations

import difflib
import inspect
import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.chat import ChatClient
from ..core.environment import Environment
from ..core.errors import GraderError, GraderSpecError, did_you_mean
from ..core.importing import UnresolvedReference, resolve_callable
from ..core.llm import JudgeOptions
from ..core.model import AgentResult, GraderSpec, Task, TaskSpec, Verdict
from ..core.text import excerpt
from ..core.trace import AnyEvent, ToolCall, read_events, render, turns
from ..providers import judge
from .environment import environment_of, host_folder


@dataclass(slots=True)
class GradeContext:
    """Everything a grader may look at for one attempt."""

    output: str
    expected: Any
    task: Task
    result: AgentResult | None

    @property
    def environment(self) -> Environment:
        """Where the attempt's files are and its programs run."""
        return environment_of(self.task)

    @property
    def workspace(self) -> Path:
        """The environment's folder on this machine (deprecated: a container has none; use
        `environment`)."""
        return host_folder(self.environment)

    @property
    def trace(self) -> list[AnyEvent] | None:
        """The typed events of the attempt's trace, in order; None when its agent recorded
        none (trajectory graders then fail, saying so)."""
        return read_events(self.result.transcript) if self.result is not None else None


NO_TRACE = (
    "no trace: the agent recorded no typed events (model calls, tool calls: task.trace), so "
    "its trajectory is not known"
)


@runtime_checkable
class Grader(Protocol):
    """Judges one attempt. `grade` returns a Verdict, or bool / score / (bool, reason)."""

    name: str

    def grade(self, ctx: GradeContext) -> Any: ...


def as_verdict(name: str, value: Any, threshold: float = 0.5) -> Verdict:
    """Normalize what a grader returned: Verdict, bool, score in [0, 1], or (either, reason)."""
    reason = ""
    if isinstance(value, Verdict):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, reason = value
    if isinstance(value, bool):
        return Verdict(
            name, value, reason or ("passed" if value else "failed"), 1.0 if value else 0.0
        )
    if isinstance(value, int | float) and 0.0 <= value <= 1.0:
        passed = value >= threshold
        return Verdict(name, passed, reason or f"score {value:g} (pass at >= {threshold:g})", value)
    raise GraderError(
        f"grader {name!r} returned {value!r}",
        detail="return a bool, a score in [0, 1], (bool or score, reason), or a Verdict",
    )


class Options(BaseModel):
    """Base of a built-in grader's options: unknown options are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


_validated: dict[tuple[type, str], Any] = {}
"""Validated options by grader class and raw options: most tasks share the same few."""


class BuiltinGrader:
    """A built-in grader: validated options, and `expected` from the task as default value."""

    name: ClassVar[str]
    options_model: ClassVar[type[Options]]
    primary: ClassVar[str | None] = None
    """Option set by the shorthand `- name: value`."""
    needs_deadline: ClassVar[bool] = False
    """Whether grading may take unbounded time (user code, backtracking regexes), so it runs
    under the task's `grader_timeout`; plugin graders are assumed to."""
    uses_environment: bool = True
    """Whether grading may reach the attempt's environment (its files, its programs); when no
    grader left for the main thread does, a sandbox finished ahead of its turn is removed at
    once (plugin graders are assumed to)."""

    def __init__(self, options: Any, expected: Any, base: Path) -> None:
        self.options = options
        self.expected = expected
        self.base = base

    @classmethod
    def build(cls, raw: dict[str, Any], task: TaskSpec, base: Path) -> BuiltinGrader:
        if "_primary" in raw:
            if cls.primary is None:
                raise GraderSpecError(f"grader {cls.name!r} takes options as a mapping")
            raw = {cls.primary: raw["_primary"]}
        key = (cls, json.dumps(raw, sort_keys=True, default=repr))
        options = _validated.get(key)
        if options is not None:
            return cls(options, task.expected, base)
        try:
            options = _validated[key] = cls.options_model.model_validate(raw)
        except ValidationError as exc:
            raise _option_errors(exc, list(cls.options_model.model_fields)) from None
        return cls(options, task.expected, base)

    def grade(self, ctx: GradeContext) -> Verdict:
        raise NotImplementedError

    def verdict(self, passed: bool, reason: str, score: float | None = None) -> Verdict:
        return Verdict(
            self.name, passed, reason, 1.0 if passed else 0.0 if score is None else score
        )

    def value_or_expected(self, value: Any, option: str) -> Any:
        if value is None and self.expected is None:
            raise GraderSpecError(f"{self.name} needs `expected` on the task or `{option}`")
        return self.expected if value is None else value


class EqualsOptions(Options):
    """Options of `equals`."""

    value: Any = None
    """The text the output must equal (default: the task's `expected`)."""
    strip: bool = True
    """Ignore leading and trailing whitespace."""
    case_insensitive: bool = False
    """Compare case-folded text."""


class Equals(BuiltinGrader):
    """Output equals the expected text (after optional strip / case folding)."""

    name, options_model, primary = "equals", EqualsOptions, "value"
    uses_environment = False

    def __init__(self, options: EqualsOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        self.shown = str(self.value_or_expected(options.value, "value"))
        self.want = self._norm(self.shown)

    def _norm(self, text: str) -> str:
        text = text.strip() if self.options.strip else text
        return text.casefold() if self.options.case_insensitive else text

    def grade(self, ctx: GradeContext) -> Verdict:
        if self._norm(ctx.output) == self.want:
            return self.verdict(True, "output equals expected")
        shown = self.shown.strip() if self.options.strip else self.shown
        ignoring = " (ignoring case)" if self.options.case_insensitive else ""
        return self.verdict(
            False,
            f"expected {excerpt(shown, 80)!r}{ignoring}, got {excerpt(ctx.output, 80)!r}",
        )


class ContainsOptions(Options):
    """Options of `contains`."""

    all: list[str] | None = None
    """Strings that must all occur (default: the task's `expected`, unless `any` is given;
    with only `none`, nothing must occur when the task has no `expected`)."""
    any: list[str] | None = None
    """Strings of which at least one must occur."""
    none: list[str] | None = None
    """Strings that must not occur."""
    case_insensitive: bool = False
    """Compare case-folded text."""


class Contains(BuiltinGrader):
    """Output contains all (or any) of the given strings, and none of `none`."""

    name, options_model, primary = "contains", ContainsOptions, "all"
    uses_environment = False

    @classmethod
    def build(cls, raw: dict[str, Any], task: TaskSpec, base: Path) -> BuiltinGrader:
        if isinstance(raw.get("_primary"), str):
            raw = {"_primary": [raw["_primary"]]}
        return super().build(raw, task, base)

    def __init__(self, options: ContainsOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        if (
            options.all is None
            and options.any is None
            and (options.none is None or expected is not None)
        ):
            default = self.value_or_expected(None, "all")
            self.all = [str(x) for x in default] if isinstance(default, list) else [str(default)]
        else:
            self.all = options.all or []
        self.any = options.any or []
        self.none = options.none or []

    def grade(self, ctx: GradeContext) -> Verdict:
        fold = str.casefold if self.options.case_insensitive else str
        out = fold(ctx.output)
        missing = [s for s in self.all if fold(s) not in out]
        if missing:
            return self.verdict(False, "missing " + ", ".join(repr(s) for s in missing))
        if self.any and not any(fold(s) in out for s in self.any):
            return self.verdict(False, "none of " + ", ".join(repr(s) for s in self.any))
        forbidden = [s for s in self.none if fold(s) in out]
        if forbidden:
            return self.verdict(
                False, "contains forbidden " + ", ".join(repr(s) for s in forbidden)
            )
        found = [*self.all, *self.any]
        absent = "none of " + ", ".join(repr(s) for s in self.none) if self.none else ""
        present = "contains " + ", ".join(repr(s) for s in found) if found else ""
        return self.verdict(True, "; ".join(p for p in (present, absent) if p))


class RegexOptions(Options):
    """Options of `regex`."""

    pattern: str | None = None
    """A Python regular expression (default: the task's `expected`)."""
    fullmatch: bool = False
    """The whole output must match, not just a part of it."""
    ignorecase: bool = False
    """Match letters case-insensitively (re.IGNORECASE)."""
    multiline: bool = False
    """`^` and `$` match at every line (re.MULTILINE)."""
    dotall: bool = False
    """`.` matches newlines too (re.DOTALL)."""


class Regex(BuiltinGrader):
    """Output matches a regular expression (search by default, or `fullmatch: true`)."""

    name, options_model, primary = "regex", RegexOptions, "pattern"
    uses_environment = False
    needs_deadline = True

    def __init__(self, options: RegexOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        pattern = str(self.value_or_expected(options.pattern, "pattern"))
        flags = (
            (re.IGNORECASE if options.ignorecase else 0)
            | (re.MULTILINE if options.multiline else 0)
            | (re.DOTALL if options.dotall else 0)
        )
        try:
            self.regex = re.compile(pattern, flags)
        except re.error as exc:
            raise GraderSpecError(f"invalid regex {pattern!r}: {exc}", option="pattern") from None

    def grade(self, ctx: GradeContext) -> Verdict:
        match = (self.regex.fullmatch if self.options.fullmatch else self.regex.search)(ctx.output)
        if match:
            return self.verdict(True, f"matches /{self.regex.pattern}/")
        return self.verdict(False, f"does not match /{self.regex.pattern}/")


class JsonOptions(Options):
    """Options of `json`."""

    subset: Any = None
    """Values the parsed output must contain: objects by subset, lists element-wise (default:
    the task's `expected`; none: any valid JSON passes)."""
    extract: bool = True
    """Parse the first ```json fenced block of the output when there is one."""
    json_schema: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    """A JSON Schema (draft 2020-12 unless it says `$schema`) the parsed output must match;
    needs the `jsonschema` package: `pip install 'pytest-agenteval[jsonschema]'`."""


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


class Json(BuiltinGrader):
    """Output parses as JSON (a fenced block is found) and contains `subset`/expected."""

    name, options_model, primary = "json", JsonOptions, "subset"
    uses_environment = False

    def __init__(self, options: JsonOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        self.subset = expected if options.subset is None else options.subset
        schema = options.json_schema
        self.validator = None if schema is None else schema_validator(schema)

    def grade(self, ctx: GradeContext) -> Verdict:
        text = ctx.output
        fenced = _FENCE.search(text) if self.options.extract else None
        try:
            value = json.loads(fenced.group(1) if fenced else text)
        except ValueError as exc:
            return self.verdict(False, f"output is not JSON: {exc}")
        if self.validator is not None:
            problem = schema_mismatch(self.validator, value)
            if problem is not None:
                return self.verdict(False, problem)
        if self.subset is None:
            valid = "output matches the schema" if self.validator else "output is valid JSON"
            return self.verdict(True, valid)
        problem = json_mismatch(self.subset, value, "$")
        return self.verdict(problem is None, problem or "JSON contains the expected values")


_validators: dict[str, Any] = {}
"""Checked schema validators by schema text: the rows of a source share one schema."""


def schema_validator(schema: dict[str, Any] | bool) -> Any:
    """A jsonschema validator of `schema`; GraderSpecError when the package is missing or the
    schema is not a valid JSON Schema (a load error at the grader's line)."""
    key = json.dumps(schema, sort_keys=True)
    found = _validators.get(key)
    if found is not None:
        return found
    try:
        import jsonschema
    except ImportError:
        raise GraderSpecError(
            "the `schema` option needs the jsonschema package, which is not installed",
            option="schema",
            hint="pip install 'pytest-agenteval[jsonschema]'",
        ) from None
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = exc.json_path.replace("$", "schema", 1)
        raise GraderSpecError(
            f"not a valid JSON Schema: at {where}: {excerpt(exc.message, 200)}", option="schema"
        ) from None
    found = _validators[key] = cls(schema)
    return found


def schema_mismatch(validator: Any, value: Any) -> str | None:
    """Why `value` does not match the validator's schema (its most relevant error), or None."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    return f"schema: at {error.json_path}: {excerpt(error.message, 200)}"


def json_mismatch(want: Any, got: Any, path: str) -> str | None:
    """Where `got` fails to contain `want` (mappings by subset, lists element-wise), or None."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"at {path}: expected an object, got {excerpt(json.dumps(got), 60)}"
        for key, sub in want.items():
            if key not in got:
                return f"at {path}: missing key {key!r}"
            problem = json_mismatch(sub, got[key], f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"at {path}: expected a list of {len(want)}, got {excerpt(json.dumps(got), 60)}"
        for index, (w, g) in enumerate(zip(want, got, strict=True)):
            problem = json_mismatch(w, g, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if want != got or isinstance(want, bool) != isinstance(got, bool):
        return f"at {path}: expected {json.dumps(want)}, got {excerpt(json.dumps(got), 60)}"
    return None


class NumberOptions(Options):
    """Options of `number`."""

    value: float | None = None
    """The expected number (default: the task's `expected`)."""
    tolerance: float = 0.0
    """Largest absolute difference that still passes."""
    rel_tolerance: float = 0.0
    """Largest difference relative to the larger number that still passes."""


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


class Number(BuiltinGrader):
    """The output's number (the whole output, else its last number) is within tolerance."""

    name, options_model, primary = "number", NumberOptions, "value"
    uses_environment = False

    def __init__(self, options: NumberOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        want = self.value_or_expected(options.value, "value")
        try:
            self.want = float(want)
        except (TypeError, ValueError):
            raise GraderSpecError(f"number needs a numeric expected value, not {want!r}") from None

    def grade(self, ctx: GradeContext) -> Verdict:
        got = parse_number(ctx.output)
        if got is None:
            return self.verdict(False, f"no number in output {excerpt(ctx.output, 80)!r}")
        opts = self.options
        if math.isclose(got, self.want, rel_tol=opts.rel_tolerance, abs_tol=opts.tolerance):
            return self.verdict(True, f"{got:g} == {self.want:g}")
        return self.verdict(False, f"expected {self.want:g}, got {got:g}")


def parse_number(text: str) -> float | None:
    """The whole text as a number, else the last number in it (thousands commas allowed)."""
    try:
        return float(text.strip())
    except ValueError:
        found = _NUMBER.findall(text)
        return float(found[-1].replace(",", "")) if found else None


class CommandOptions(Options):
    """Options of `command`."""

    argv: list[str] | str
    """The program and its arguments (a string is split like a shell would); `{python}` is
    replaced by the Python of the attempt's environment."""
    timeout: float = 300.0
    """Seconds the program may run; a timeout fails the attempt."""
    env: dict[str, str] = {}
    """Variables added to the program's environment."""


class Command(BuiltinGrader):
    """Run a program in the attempt's environment (output on stdin); exit status 0 passes."""

    name, options_model, primary = "command", CommandOptions, "argv"
    waits = True
    """Grading waits on a program bounded by its own timeout: under concurrency it runs in the
    attempt's pool thread, beside other attempts, not on the main thread."""

    def __init__(self, options: CommandOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        argv = options.argv
        self.argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise GraderSpecError("command needs a program to run", option="argv")

    def grade(self, ctx: GradeContext) -> Verdict:
        environment = ctx.environment
        argv = [a.replace("{python}", environment.python) for a in self.argv]
        try:
            done = environment.exec(
                argv, input=ctx.output.encode(), timeout=self.options.timeout, env=self.options.env
            )
        except OSError as exc:
            raise GraderError(f"grader command {argv[0]!r} could not start: {exc}") from None
        if done.timed_out:
            return self.verdict(
                False, f"{shlex.join(argv)} timed out after {self.options.timeout:g}s"
            )
        if done.returncode == 0:
            return self.verdict(True, f"{shlex.join(argv)} exited 0")
        return self.verdict(
            False, f"{shlex.join(argv)} exited {done.returncode}:\n{excerpt(done.tail(), 1500)}"
        )


class PythonOptions(Options):
    """Options of `python`."""

    function: str
    """`module:function` or `path/to/file.py:function` (relative to the dataset root)."""
    threshold: float = 0.5
    """A returned score passes at this value or above."""
    args: dict[str, Any] = {}
    """Extra keyword arguments for the function."""


GRADER_PARAMETERS = ("output", "expected", "task", "result", "workspace", "environment")


class Python(BuiltinGrader):
    """Call `module:function`; parameters are filled by name from output, expected, task, ..."""

    name, options_model, primary = "python", PythonOptions, "function"
    needs_deadline = True

    def __init__(self, options: PythonOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        try:
            self.function = resolve_callable(options.function, base)
        except UnresolvedReference as exc:
            raise GraderSpecError(str(exc), option="function", hint=exc.hint) from None
        self.wants = _parameters(self.function, options.args)
        self.uses_environment = bool({"task", "workspace", "environment"} & set(self.wants))

    def grade(self, ctx: GradeContext) -> Verdict:
        available = {
            "output": ctx.output,
            "expected": ctx.expected,
            "task": ctx.task,
            "result": ctx.result,
        }
        kwargs = {p: available[p] if p in available else getattr(ctx, p) for p in self.wants}
        value = self.function(**kwargs, **self.options.args)
        return as_verdict(self.options.function, value, self.options.threshold)


def _parameters(function: Callable[..., Any], args: dict[str, Any]) -> list[str]:
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return ["output"]
    wanted = []
    for name, param in params.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name in args:
            continue
        if name in GRADER_PARAMETERS:
            wanted.append(name)
        elif param.default is param.empty:
            raise GraderSpecError(
                f"grader function parameter {name!r} cannot be filled",
                option="function",
                hint="name parameters from: " + ", ".join(GRADER_PARAMETERS) + ", or pass `args`",
            )
    return wanted


class ToolCalledOptions(Options):
    """Options of `tool_called`."""

    tool: str | None = None
    """The tool's name (`bash`); None: any tool."""
    args_match: str | None = None
    """A regular expression searched in the call's arguments (each string in them, and their
    JSON text); None: any arguments."""
    min: int = Field(1, ge=0)
    """Calls that must match, at least."""
    max: int | None = Field(None, ge=0)
    """Calls that may match, at most (None: no limit)."""


class ToolCalled(BuiltinGrader):
    """The trace holds between `min` and `max` calls of `tool` whose arguments match."""

    name, options_model, primary = "tool_called", ToolCalledOptions, "tool"
    uses_environment = False
    needs_deadline = True  # a backtracking `args_match`

    def __init__(self, options: ToolCalledOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        try:
            self.pattern = None if options.args_match is None else re.compile(options.args_match)
        except re.error as exc:
            raise GraderSpecError(
                f"invalid regex {options.args_match!r}: {exc}", option="args_match"
            ) from None
        if options.max is not None and options.max < options.min:
            raise GraderSpecError(f"max {options.max} is below min {options.min}", option="max")

    def grade(self, ctx: GradeContext) -> Verdict:
        events = ctx.trace
        if events is None:
            return self.verdict(False, NO_TRACE)
        found = sum(1 for e in events if isinstance(e, ToolCall) and self._matches(e))
        o = self.options
        what = f"{o.tool or 'a tool'}" + (f" matching /{o.args_match}/" if o.args_match else "")
        bounds = f"at least {o.min}" + ("" if o.max is None else f", at most {o.max}")
        passed = found >= o.min and (o.max is None or found <= o.max)
        times = "once" if found == 1 else f"{found} times"
        return self.verdict(passed, f"{what} called {times} ({bounds})")

    def _matches(self, call: ToolCall) -> bool:
        if self.options.tool is not None and call.tool != self.options.tool:
            return False
        if self.pattern is None:
            return True
        texts = [*_strings(call.arguments), json.dumps(call.arguments, ensure_ascii=False)]
        return any(self.pattern.search(text) for text in texts)


def _strings(value: Any) -> list[str]:
    """The strings in a JSON value, at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


class MaxTurnsOptions(Options):
    """Options of `max_turns`."""

    turns: int = Field(ge=0)
    """Model turns (model calls in the trace) the attempt may use, at most."""


class MaxTurns(BuiltinGrader):
    """The attempt used at most `turns` model turns (`max_turns: 10`)."""

    name, options_model, primary = "max_turns", MaxTurnsOptions, "turns"
    uses_environment = False

    def grade(self, ctx: GradeContext) -> Verdict:
        events = ctx.trace
        if events is None:
            return self.verdict(False, NO_TRACE)
        used, most = turns(events), self.options.turns
        return self.verdict(used <= most, f"{used} model turns (at most {most})")


class JudgeGraderOptions(Options, JudgeOptions):
    """Options of `judge`: a rubric, and settings that default to the manifest's `judge:`."""

    on: Literal["output", "trajectory"] = "output"
    """What the judge reads: the attempt's `output`, or its `trajectory` (the typed trace:
    model calls, tool calls and their results, messages) instead."""


class Judge(BuiltinGrader):
    """An LLM scores the output against a rubric from 0 to 1 (passes at `threshold`)."""

    name, options_model, primary = "judge", JudgeGraderOptions, "rubric"
    uses_environment = False
    needs_deadline = False  # an HTTP call bounded by its own timeout and retries
    waits = True
    """Under `--agenteval-concurrency` it is asked in the pool, right after the agent call."""

    def __init__(self, options: JudgeOptions, expected: Any, base: Path) -> None:
        super().__init__(options, expected, base)
        judge.check_options(options)

    def grade(self, ctx: GradeContext) -> Verdict:
        if self.options.on == "trajectory":
            events = ctx.trace
            if events is None:
                return self.verdict(False, NO_TRACE)
            return judge.judge(
                self.options,
                ctx.task.input,
                ctx.expected,
                ctx.output,
                trajectory=render(events),
                client=self.client(ctx),
            )
        return judge.judge(
            self.options, ctx.task.input, ctx.expected, ctx.output, client=self.client(ctx)
        )

    def client(self, ctx: GradeContext) -> ChatClient | None:
        """The judge's provider, bound to the run's caps (its calls are no part of the
        agent's trace); None for a Task made by hand."""
        return ctx.task._llm_for(self.options, traced=False)


BUILTIN_GRADERS: dict[str, type[BuiltinGrader]] = {
    g.name: g
    for g in (Equals, Contains, Regex, Json, Number, Command, Python, Judge, ToolCalled, MaxTurns)
}


def make_builtin_grader(spec: GraderSpec, task: TaskSpec, base: Path) -> BuiltinGrader | None:
    """Build a built-in grader from its spec; None for a name that is not built in."""
    cls = BUILTIN_GRADERS.get(spec.type)
    return None if cls is None else cls.build(spec.options, task, base)


def _option_errors(exc: ValidationError, fields: list[str]) -> GraderSpecError:
    """Every problem of a grader's options in one error (the first, with the others): an
    unknown key with its did-you-mean, and no "missing" for the option it misspells."""
    errors = exc.errors(include_url=False)
    extra = [str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden"]
    meant = {m for key in extra for m in difflib.get_close_matches(key, fields, n=1, cutoff=0.6)}
    found = []
    for error in errors:
        option = ".".join(str(p) for p in error["loc"]) or None
        if error["type"] == "extra_forbidden":
            hint = did_you_mean(str(error["loc"][-1]), fields) or "options: " + ", ".join(fields)
            found.append(GraderSpecError(f"unknown key {option!r}", hint=hint))
        elif error["type"] != "missing" or option not in meant:
            found.append(GraderSpecError(error["msg"], option=option))
    first, *others = found
    first.others = tuple(others)
    return first


def unknown_grader(name: str, known: list[str]) -> GraderSpecError:
    """The error for a grader name nobody registered."""
    hint = did_you_mean(name, known) or "built-in graders: " + ", ".join(sorted(known))
    return GraderSpecError(f"unknown grader {name!r}", hint=hint)
