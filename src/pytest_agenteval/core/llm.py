"""What users write about model providers: how to reach a model, judge defaults, and prices."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    model_validator,
)

from .options import MAX_SECONDS

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
MAX_RETRIES = 100
"""Retries of one request or attempt, at most: more never ends against a server that keeps
refusing."""
MAX_PRICE = 10_000.0
"""US dollars per million tokens, at most: a larger price is a typo, and one near 1e308 makes
every cost infinite."""
Retries = Annotated[int, Field(ge=0, le=MAX_RETRIES)]
"""A number of retries, 0 to MAX_RETRIES."""
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
"""A timeout: more than 0, at most MAX_SECONDS."""
Wait = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
"""A backoff or interval: 0 to MAX_SECONDS."""
Price = Annotated[float, Field(ge=0, le=MAX_PRICE)]
"""A price per million tokens: 0 to MAX_PRICE."""


class UserModel(BaseModel):
    """Written by users in YAML: frozen, unknown keys are errors (as `model.UserModel`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ProviderLimits(UserModel):
    """What all the calls of one provider may do together, across xdist workers."""

    max_in_flight: PositiveInt | None = None
    """Most requests at the provider at once (shrunk on 429, regrown on success)."""
    requests_per_minute: PositiveInt | None = None
    """Most requests started in any minute (a token bucket holding one second's worth)."""
    tokens_per_minute: PositiveInt | None = None
    """Most tokens in any minute: each request reserves its body's bytes plus `max_tokens`,
    settled to what it used when it answers."""


class Endpoint(UserModel):
    """Where one API is and which environment variable holds its key."""

    base_url: str | None = None
    """The API's base URL (OpenAI kind: ending in `/v1`; default api.openai.com, or
    api.anthropic.com for the `anthropic` kind)."""
    api_key_env: str | None = None
    """The environment variable holding the key (default `OPENAI_API_KEY`, or
    `ANTHROPIC_API_KEY` for the `anthropic` kind)."""
    model: str | None = None
    """The model `task.llm()` asks for when a call names none."""


class ProviderSpec(UserModel):
    """One API endpoint and key of the manifest's `providers:`: its kind and its limits.

    `NAME: {openai: {base_url: ..., api_key_env: ...}, limits: {max_in_flight: 16}}` (or
    `anthropic: {...}` for Anthropic's Messages API)."""

    UNKNOWN_KEY_HINT: ClassVar[str] = (
        "a provider's kind is `openai:` or `anthropic:` (its other keys: limits, timeout, "
        "retries, backoff)"
    )
    """What an unknown key of a provider is told (a kind that does not exist: `gemini:`)."""

    openai: Endpoint | None = None
    """An OpenAI-compatible chat-completions API."""
    anthropic: Endpoint | None = None
    """Anthropic's Messages API."""
    limits: ProviderLimits = ProviderLimits()
    """Limits all the provider's calls share (agents, variants, judges, `task.llm()`)."""
    timeout: Seconds | None = None
    """Seconds one HTTP request may take (default: 600)."""
    retries: Retries | None = None
    """How many times a 429, a 5xx or a connection error is retried (default 3)."""
    backoff: Wait | None = None
    """Seconds before the first retry (default 1), doubled each time."""

    @model_validator(mode="after")
    def _one_kind(self) -> ProviderSpec:
        if (self.openai is None) == (self.anthropic is None):
            raise ValueError("a provider has exactly one kind: `openai:` or `anthropic:`")
        return self

    @property
    def kind(self) -> str:
        return "openai" if self.openai is not None else "anthropic"

    @property
    def endpoint(self) -> Endpoint:
        found = self.openai or self.anthropic
        assert found is not None
        return found


class ModelSettings(UserModel):
    """How to reach an OpenAI-compatible chat-completions endpoint and what to ask of it."""

    provider: str | None = None
    """The manifest's provider (`providers:`) the calls go through; its endpoint, key and
    limits replace `base_url` and `api_key_env`."""
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
    retries: Retries | None = None
    """How many times a 429, a 5xx or a connection error is retried (default 3)."""
    backoff: Wait | None = None
    """Seconds before the first retry (default 1); doubles each time, with jitter, unless the
    server says `Retry-After`."""
    timeout: Seconds | None = None
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

    input_per_mtok: Price
    """Price of a million input (prompt) tokens (at most 10,000)."""
    output_per_mtok: Price
    """Price of a million output (completion) tokens (at most 10,000)."""
    cached_input_per_mtok: Price | None = None
    """Price of a million cached input tokens (default: the input price)."""
