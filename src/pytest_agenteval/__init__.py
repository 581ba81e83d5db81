"""pytest-agenteval: evaluate AI agents as pytest tests.

Public API: the objects agents receive and return, graders' building blocks, and the models of
what users write. Everything else may change between releases. Names load lazily, so that
pytest runs without `--agenteval` do not pay for importing them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from .core.version import __version__

if TYPE_CHECKING:
    from .core.chat import ToolSpec
    from .core.environment import ChangedFile, Environment, ExecResult
    from .core.errors import (
        AgentError,
        AttemptStopped,
        EnvironmentUnavailable,
        LimitReached,
        RunStopped,
    )
    from .core.identity import AttemptId
    from .core.kinds import EnvironmentKind, KindSession, SandboxRequest
    from .core.model import (
        AgentResult,
        AnyAgentSpec,
        GraderSpec,
        Manifest,
        Task,
        TaskSpec,
        Usage,
        Verdict,
    )
    from .core.records import AttemptRecord
    from .core.trace import LimitHit, Message, ModelCall, ToolCall, ToolResult, Trace
    from .execution.agents import Agent, AgentRef, AgentResolver
    from .execution.executor import AgentCall, Executor, LoopExecutor
    from .execution.graders import GradeContext, Grader
    from .execution.tools import Tool, ToolOutput
    from .reporting.summary import Summary


_WHERE = {
    "Agent": "execution.agents",
    "AgentCall": "execution.executor",
    "AgentRef": "execution.agents",
    "AgentResolver": "execution.agents",
    "AgentResult": "core.model",
    "AgentError": "core.errors",
    "AnyAgentSpec": "core.model",
    "AttemptId": "core.identity",
    "AttemptRecord": "core.records",
    "AttemptStopped": "core.errors",
    "LimitHit": "core.trace",
    "LimitReached": "core.errors",
    "Message": "core.trace",
    "ModelCall": "core.trace",
    "RunStopped": "core.errors",
    "ToolCall": "core.trace",
    "ToolResult": "core.trace",
    "Trace": "core.trace",
    "Tool": "execution.tools",
    "ToolOutput": "execution.tools",
    "ToolSpec": "core.chat",
    "ChangedFile": "core.environment",
    "Environment": "core.environment",
    "EnvironmentKind": "core.kinds",
    "EnvironmentUnavailable": "core.errors",
    "KindSession": "core.kinds",
    "SandboxRequest": "core.kinds",
    "ExecResult": "core.environment",
    "Executor": "execution.executor",
    "LoopExecutor": "execution.executor",
    "GradeContext": "execution.graders",
    "Grader": "execution.graders",
    "GraderSpec": "core.model",
    "Manifest": "core.model",
    "Summary": "reporting.summary",
    "Task": "core.model",
    "TaskSpec": "core.model",
    "Usage": "core.model",
    "Verdict": "core.model",
}

__all__ = [
    "Agent",
    "AgentCall",
    "AgentError",
    "AgentRef",
    "AgentResolver",
    "AgentResult",
    "AnyAgentSpec",
    "AttemptId",
    "AttemptRecord",
    "AttemptStopped",
    "ChangedFile",
    "Environment",
    "EnvironmentKind",
    "EnvironmentUnavailable",
    "ExecResult",
    "Executor",
    "GradeContext",
    "Grader",
    "GraderSpec",
    "KindSession",
    "LimitHit",
    "LimitReached",
    "LoopExecutor",
    "Manifest",
    "Message",
    "ModelCall",
    "RunStopped",
    "SandboxRequest",
    "Summary",
    "Task",
    "TaskSpec",
    "Tool",
    "ToolCall",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "Usage",
    "Verdict",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "Key":  # one release behind: the identity was a tuple
        warnings.warn(
            "pytest_agenteval.Key is deprecated: an attempt's identity is AttemptId "
            "(dataset, task_id, variant, attempt, read by attribute)",
            DeprecationWarning,
            stacklevel=2,
        )
        name = "AttemptId"
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
