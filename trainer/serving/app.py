"""The OpenAI-compatible routes over one Engine: `/v1/completions` (echo, logprobs, stop),
`/v1/chat/completions`, `/v1/models`, `/health`. Every error is OpenAI's shape, `{"error":
{"message", "type", "param", "code"}}`, one line: 400 for a bad request (pydantic's, a body that
is no JSON, a prompt the context cannot hold), 404/405 for a route, 500 without a traceback; a
body over MAX_BODY_BYTES is refused before it is read."""

from __future__ import annotations

import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from trainer.serving.engine import Completion, Engine, RequestError
from trainer.serving.schema import MAX_BATCH, ChatRequest, CompletionRequest

MAX_BODY_BYTES = 8 * 2**20
"""A request body's most bytes: 64 prompts of a 2k context as token ids are well under."""

ALLOWED_BODY = "allowed: a JSON object of the request's fields"


def _line(text: str) -> str:
    """One line that UTF-8 can encode (a client's text may hold a lone surrogate)."""
    return " ".join(text.split()).encode("utf-8", "backslashreplace").decode("utf-8")


def error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    param = None if param is None else _line(param)
    body = {"error": {"message": _line(message), "type": kind, "param": param, "code": None}}
    return JSONResponse(body, status_code=status)


def validation_error(exc: RequestValidationError) -> JSONResponse:
    """pydantic's first error as `<field>: <what>`; a body that is no JSON object names `body`."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    if first.get("type") == "json_invalid" or loc[1:2] == [] or loc[:1] != ["body"]:
        what = "not valid JSON" if first.get("type") == "json_invalid" else first.get("msg")
        return error(400, f"body: {what}; {ALLOWED_BODY}")
    param = ".".join(loc[1:])
    return error(400, f"{param}: {first.get('msg')}", param)


def _stops(stop: str | list[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else list(stop or [])


def _room(engine: Engine, ids: list[int], param: str) -> int:
    """Tokens the context has left after the prompt; a prompt that leaves none is refused."""
    if len(ids) >= engine.max_len:
        raise RequestError(
            param,
            f"{len(ids)} prompt tokens leave no room in the model's context of "
            f"{engine.max_len} tokens; allowed: at most {engine.max_len - 1}",
        )
    return engine.max_len - len(ids)


def _check_model(engine: Engine, model: str | None) -> None:
    if model is not None and model != engine.name:
        raise RequestError("model", f"{model!r} is not served; allowed: {engine.name!r}")


def _prompts(engine: Engine, prompt) -> list[list[int]]:
    """A string, a list of strings, a list of token ids or a list of those: one id list each."""
    if isinstance(prompt, str) or (prompt and all(isinstance(p, int) for p in prompt)):
        items = [prompt]
    else:
        items = list(prompt)
    if not items or len(items) > MAX_BATCH:
        raise RequestError("prompt", f"{len(items)} prompts; allowed: 1 to {MAX_BATCH}")
    return [engine.encode(item) for item in items]


def _logprobs(c: Completion) -> dict:
    return {
        "tokens": c.tokens,
        "token_logprobs": c.token_logprobs,
        "top_logprobs": c.top_logprobs,
        "text_offset": c.text_offset,
    }


def create_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="trainstack serve-model", docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def bounded_body(request: Request, call_next):
        if request.method == "POST":
            length = request.headers.get("content-length")
            if length is None or not length.isdigit():
                return error(411, "a POST needs a Content-Length")
            if int(length) > MAX_BODY_BYTES:
                return error(413, f"body of {length} bytes; allowed: {MAX_BODY_BYTES}")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 400:  # FastAPI's: a body json could not parse (an int's digits)
            return error(400, f"body: not valid JSON; {ALLOWED_BODY}")
        return error(exc.status_code, f"{where}: {exc.detail}")

    @app.exception_handler(Exception)
    async def failed(_: Request, exc: Exception) -> JSONResponse:
        return error(500, f"internal error: {type(exc).__name__}")

    @app.exception_handler(RequestError)
    async def refused(_: Request, exc: RequestError) -> JSONResponse:
        return error(400, str(exc), exc.param)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "model": engine.name}

    @app.get("/v1/models")
    def models() -> dict:
        card = {
            "id": engine.name,
            "object": "model",
            "created": 0,
            "owned_by": "trainstack",
            "max_model_len": engine.max_len,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    def completions(body: CompletionRequest) -> dict:
        _check_model(engine, body.model)
        stops = _stops(body.stop)
        choices, prompt_tokens, completion_tokens = [], 0, 0
        prompts = _prompts(engine, body.prompt)
        for ids in prompts:  # all refused before any is answered
            _room(engine, ids, "prompt")
        for index, ids in enumerate(prompts):
            c = engine.complete(
                ids,
                max_tokens=body.max_tokens,
                temperature=body.temperature,
                top_p=body.top_p,
                logprobs=body.logprobs,
                echo=body.echo,
                stop=stops,
                seed=body.seed,
            )
            prompt_tokens += c.prompt_tokens
            completion_tokens += c.completion_tokens
            choices.append(
                {
                    "index": index,
                    "text": c.text,
                    "logprobs": None if body.logprobs is None else _logprobs(c),
                    "finish_reason": c.finish_reason,
                }
            )
        return _answer("text_completion", engine, choices, prompt_tokens, completion_tokens)

    @app.post("/v1/chat/completions")
    def chat(body: ChatRequest) -> dict:
        _check_model(engine, body.model)
        ids = engine.chat_prompt([m.model_dump() for m in body.messages])
        room = _room(engine, ids, "messages")
        limit = (
            body.max_tokens if body.max_completion_tokens is None else body.max_completion_tokens
        )
        c = engine.complete(
            ids,
            max_tokens=limit if limit is not None else min(256, room),
            temperature=body.temperature,
            top_p=body.top_p,
            stop=_stops(body.stop),
            seed=body.seed,
        )
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": c.finish_reason,
        }
        return _answer("chat.completion", engine, [choice], c.prompt_tokens, c.completion_tokens)

    return app


def _answer(kind: str, engine: Engine, choices: list, prompt: int, completion: int) -> dict:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": engine.name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
