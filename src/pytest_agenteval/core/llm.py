"""What users write about model providers: how to reach a model, judge defaults, and prices."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class UserModel(BaseModel):
    """Written by users in YAML: frozen, unknown keys are errors (as `model.UserModel`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSettings(UserModel):
    """How to reach an OpenAI-compatible chat-completions endpoint and what to ask of it."""

    model: str | None = None
    """The model name the server knows (e.g. `gpt-4o-mini`, `llama3.1:8b`)."""
    base_url: str | None = None
    """The API's base URL, e.g. `http://localhost:11434/v1` (default: the SDK's, api.openai.com)."""
    api_key_env: str | None = None
    """The environment variable holding the API key (default `OPENAI_API_KEY`); the key itself
    is never written in a file."""
    temperature: float | None = None
    """Sampling temperature (the judge's default is 0)."""
    max_tokens: PositiveInt | None = None
    """Most tokens the reply may have."""
    params: dict[str, Any] | None = None
    """Further request parameters sent as they are (e.g. `top_p`, `seed`, `stop`)."""
    retries: NonNegativeInt | None = None
    """How many times a 429, a 5xx or a connection error is retried (default 3)."""
    backoff: NonNegativeFloat | None = None
    """Seconds before the first retry (default 1); doubles each time, with jitter, unless the
    server says `Retry-After`."""
    timeout: PositiveFloat | None = None
    """Seconds one HTTP request may take (default: the task's timeout bounds the whole call)."""

    @property
    def key_env(self) -> str:
        return self.api_key_env or DEFAULT_KEY_ENV


class OpenAIAgentOptions(ModelSettings):
    """Options of the `openai` agent kind: `agent: {openai: {model: ..., ...}}`."""

    model: str = Field(min_length=1)
    """The model name the server knows (e.g. `gpt-4o-mini`, `llama3.1:8b`)."""
    system: str | None = None
    """A system message sent before a task's string input."""


class JudgeSettings(ModelSettings):
    """The manifest's `judge:` block: defaults of every `judge` grader of the dataset."""

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    """A score at or above this passes."""


class JudgeOptions(JudgeSettings):
    """Options of the `judge` grader (each defaults to the manifest's `judge:` block)."""

    rubric: str = Field(min_length=1)
    """What a good answer is; the judge scores the output against it from 0 to 1."""


class ModelPrice(UserModel):
    """US dollars per million tokens of one model."""

    input_per_mtok: NonNegativeFloat
    """Price of a million input (prompt) tokens."""
    output_per_mtok: NonNegativeFloat
    """Price of a million output (completion) tokens."""
    cached_input_per_mtok: NonNegativeFloat | None = None
    """Price of a million cached input tokens (default: the input price)."""
