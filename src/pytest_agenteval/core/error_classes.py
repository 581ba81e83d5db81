"""Error classes: what kind of trouble ended an attempt, from one documented list.

`error_type` stays what it always was (the exception's type name, or a sandbox's own word);
`error_class` sorts every error into one class that summaries, the terminal and JUnit count
and that retries name (`retry: {on: [rate_limited, ...]}`). A record written before classes
existed gets its class derived from its phase and error type; a new one stores its class only
when that derivation would not find it (a provider's 429 or timeout), so records whose class
follows from their phase read and write byte for byte as before.
"""

from __future__ import annotations

ERROR_CLASSES: dict[str, str] = {
    "rate_limited": "the provider still answered 429 (too many requests) after its retries",
    "provider_error": "the model provider failed otherwise: refused, 5xx, no connection, an "
    "unreadable reply",
    "timeout": "the agent (or a model request) did not answer within its timeout",
    "sandbox_error": "the attempt's environment could not be started or failed under it",
    "build_failed": "the attempt's environment (image, files) could not be built",
    "crash": "the process running the attempt died (a resume runs it again)",
    "agent_error": "the agent raised, exited non-zero or returned something unreadable",
    "grading_error": "a grader could not judge the output (a judge's call failed, a grader "
    "crashed)",
    "over_budget": "the agent's usage went over the task's `budget:`",
    "stopped": "a run-wide stop (a cap, the deadline, a cancel) ended the attempt mid-call",
    "probe_failed": "the probe before the first attempt failed: the session stops (exit 2), "
    "never an attempt's error nor a run's status",
}
"""Every error class, with what it means (docs/reference/records.md lists them)."""

_BY_PHASE = {
    "agent": "agent_error",
    "grading": "grading_error",
    "crash": "crash",
    "build": "build_failed",
    "sandbox": "sandbox_error",
    "budget": "over_budget",
    "stopped": "stopped",
}
_BY_TYPE = {
    "AgentTimeout": "timeout",
    "RequestTimeout": "timeout",
    "ProviderError": "provider_error",
    "sandbox_error": "sandbox_error",
    "build_failed": "build_failed",
    "over_budget": "over_budget",
    "RunStopped": "stopped",
}


def phase_class(phase: str | None) -> str:
    """The class an error's phase alone implies (what an index line without one reads)."""
    return _BY_PHASE.get(phase or "agent", "agent_error")


def derived_class(phase: str | None, error_type: str | None) -> str:
    """The class of an error from its phase and error type (records without a stored one)."""
    if phase not in (None, "agent"):
        return phase_class(phase)
    return _BY_TYPE.get(error_type or "", "agent_error")


def class_of(exc: BaseException | None, phase: str | None, error_type: str | None) -> str:
    """The class of an error raised in `phase`: the exception's own (`error_class`, set by
    providers for 429s and timeouts), else what its phase and type imply."""
    own = getattr(exc, "error_class", None)
    if isinstance(own, str) and own in ERROR_CLASSES:
        return own
    return derived_class(phase, error_type)
