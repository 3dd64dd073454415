"""The request bodies of the OpenAI-compatible API, bounded: every list and number a client
sends has a limit (a request past one is a 400 naming the field, never a slow answer)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BATCH = 64
"""Prompts in one /v1/completions request (lm-eval sends `batch_size` at a time)."""
MAX_LOGPROBS = 20
"""Top alternatives per token, as OpenAI's API allows."""
MAX_STOP = 4
MAX_TEXT = 1_000_000
"""Characters of one prompt or message (the context length refuses long ones anyway)."""

Prompt = str | list[int] | list[str] | list[list[int]]


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields we do not use

    model: str | None = None
    prompt: Prompt = Field(default="")
    max_tokens: int = Field(default=16, ge=0)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(max_length=MAX_TEXT)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
