"""The request bodies of the OpenAI-compatible API, bounded: every list, string and number a
client sends has a limit (a request past one is a 400 naming the field, never a slow answer),
and every string is valid Unicode (JSON's `"\\ud800"`, a lone surrogate, cannot be tokenized).

`prompt` and `stop` are checked by hand (PlainValidator): pydantic's union of their shapes would
name each member it tried (`prompt.list[int].0`) and lets a lone surrogate through."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator
from pydantic_core import PydanticCustomError

MAX_BATCH = 64
"""Prompts in one /v1/completions request (lm-eval sends `batch_size` at a time)."""
MAX_LOGPROBS = 20
"""Top alternatives per token, as OpenAI's API allows."""
MAX_STOP = 4
MAX_STOP_CHARS = 1024
"""Characters of one stop sequence (each is searched for after every token)."""
MAX_TEXT = 1_000_000
"""Characters of one prompt or message (the context length refuses long ones anyway)."""
MAX_TOKEN_IDS = MAX_TEXT
"""Token ids of one prompt sent as ids."""
MAX_NAME = 256
"""Characters of `model`."""
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
"""What torch.Generator.manual_seed takes (inclusive); past it torch raises OverflowError."""
PROMPT_SHAPES = "a string, a list of strings, a list of token ids or a list of those"


def refuse(message: str) -> PydanticCustomError:
    """A validation error whose message is `message` as is (no `Value error, ` prefix)."""
    return PydanticCustomError("invalid_request", message)


def unicode_text(value: str, where: str = "") -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise refuse(
            f"{where}not valid Unicode (a lone surrogate at character {exc.start}); "
            "allowed: text that UTF-8 can encode"
        ) from None
    return value


def _text(value: object, limit: int, where: str = "") -> str:
    if not isinstance(value, str):
        raise refuse(f"{where}{type(value).__name__}; allowed: a string")
    if len(value) > limit:
        raise refuse(f"{where}{len(value)} characters; allowed: at most {limit}")
    return unicode_text(value, where)


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ids(value: list, where: str = "") -> list[int]:
    if len(value) > MAX_TOKEN_IDS:
        raise refuse(f"{where}{len(value)} token ids; allowed: at most {MAX_TOKEN_IDS}")
    return value


def check_prompt(value: object) -> str | list[int] | list[str] | list[list[int]]:
    if isinstance(value, str):
        return _text(value, MAX_TEXT)
    if not isinstance(value, list):
        raise refuse(f"{type(value).__name__}; allowed: {PROMPT_SHAPES}")
    if value and all(_is_id(v) for v in value):
        return _ids(value)
    if not 1 <= len(value) <= MAX_BATCH:
        raise refuse(f"{len(value)} prompts; allowed: 1 to {MAX_BATCH}")
    if all(isinstance(v, str) for v in value):
        return [_text(v, MAX_TEXT, f"item {i}: ") for i, v in enumerate(value)]
    if all(isinstance(v, list) and all(_is_id(t) for t in v) for v in value):
        return [_ids(v, f"item {i}: ") for i, v in enumerate(value)]
    raise refuse(f"a list of mixed or other items; allowed: {PROMPT_SHAPES}")


def check_stop(value: object) -> str | list[str] | None:
    if value is None or isinstance(value, str):
        return None if value is None else _text(value, MAX_STOP_CHARS)
    if not isinstance(value, list):
        raise refuse(f"{type(value).__name__}; allowed: a string or a list of strings")
    if len(value) > MAX_STOP:
        raise refuse(f"{len(value)} sequences; allowed: at most {MAX_STOP}")
    return [_text(v, MAX_STOP_CHARS, f"item {i}: ") for i, v in enumerate(value)]


Prompt = Annotated[str | list[int] | list[str] | list[list[int]], PlainValidator(check_prompt)]
Stop = Annotated[str | list[str] | None, PlainValidator(check_stop)]
Name = Annotated[str, PlainValidator(lambda value: _text(value, MAX_NAME))]
Text = Annotated[str, PlainValidator(lambda value: _text(value, MAX_TEXT))]
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields we do not use

    model: Name | None = None
    prompt: Prompt = Field(default="")
    max_tokens: int = Field(default=16, ge=0)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    stop: Stop = None
    seed: Seed | None = None
    n: int = Field(default=1, ge=1, le=1)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: Text


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Name | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: Stop = None
    seed: Seed | None = None
    n: int = Field(default=1, ge=1, le=1)
