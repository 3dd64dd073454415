"""serve-model's hostile requests against a tiny random model (no training: a 1-layer Llama
with a 32-token context on the byte tokenizer, built in a second): a prompt that leaves no
room in the context, a seed torch cannot take, text that is not Unicode, unbounded items,
malformed bodies and unknown routes. Each is a 400 (404/405 for routes) in OpenAI's error
shape naming the field, never a 500 or FastAPI's `detail`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import LlamaConfig, LlamaForCausalLM

from trainer.serving.app import create_app
from trainer.serving.engine import Engine
from trainer.serving.schema import MAX_BATCH, MAX_STOP_CHARS, MAX_TEXT, MAX_TOKEN_IDS
from trainer.tokenizer.byte import ByteTokenizer, hf_files

CONTEXT = 32


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    out = tmp_path_factory.mktemp("tiny-random")
    for name, text in hf_files(CONTEXT).items():
        (out / name).write_text(text)
    config = LlamaConfig(
        vocab_size=257,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=CONTEXT,
        eos_token_id=ByteTokenizer.eos_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    return Engine(Path(out), "tiny")


@pytest.fixture(scope="module")
def client(engine: Engine):
    with TestClient(create_app(engine), raise_server_exceptions=False) as test_client:
        yield test_client


def refused(answer, param: str | None, status: int = 400) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["type"] == "invalid_request_error" and error["code"] is None
    assert error["param"] == param
    assert "\n" not in error["message"] and "Traceback" not in error["message"]
    return error["message"]


def post_raw(client: TestClient, path: str, raw: bytes):
    return client.post(path, content=raw, headers={"content-type": "application/json"})


CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


# A prompt that fills the context leaves no token to answer with: refused, naming the prompt.


def test_a_chat_prompt_past_the_context_is_refused_without_max_tokens(client):
    message = refused(client.post(CHAT, json=user("x" * 40)), "messages")
    assert message.startswith("messages: ") and f"context of {CONTEXT} tokens" in message


def test_a_chat_prompt_filling_the_context_is_refused(client, engine):
    prompt = engine.chat_prompt([{"role": "user", "content": ""}])
    filling = "x" * (CONTEXT - len(prompt))  # byte tokenizer: one token a character
    assert len(engine.chat_prompt([{"role": "user", "content": filling}])) == CONTEXT
    refused(client.post(CHAT, json=user(filling)), "messages")
    answer = client.post(CHAT, json={**user(filling[1:]), "temperature": 0})
    assert answer.status_code == 200, answer.text  # one token of room: answered
    assert answer.json()["usage"]["completion_tokens"] == 1


def test_a_chat_max_tokens_past_the_context_is_refused_as_completions_are(client):
    for field in ("max_tokens", "max_completion_tokens"):
        message = refused(client.post(CHAT, json={**user("hi"), field: CONTEXT}), "max_tokens")
        assert f"exceeds the model's context of {CONTEXT} tokens" in message


def test_max_completion_tokens_zero_is_not_taken_for_missing(client):
    answer = client.post(CHAT, json={**user("hi"), "max_completion_tokens": 0, "max_tokens": 5})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("max_tokens", [0, 1, 16])
def test_a_completion_prompt_filling_the_context_is_refused(client, max_tokens):
    for prompt in ("x" * CONTEXT, [[7] * CONTEXT], "x" * 100):
        body = {"prompt": prompt, "max_tokens": max_tokens}
        message = refused(client.post(COMPLETIONS, json=body), "prompt")
        assert f"context of {CONTEXT} tokens" in message


def test_a_completion_prompt_and_max_tokens_past_the_context_name_max_tokens(client):
    body = {"prompt": "x" * (CONTEXT - 4), "max_tokens": 5}
    refused(client.post(COMPLETIONS, json=body), "max_tokens")
    body = {"prompt": "x" * (CONTEXT - 4), "max_tokens": 4, "temperature": 0}
    assert client.post(COMPLETIONS, json=body).status_code == 200


# Seeds: what torch.Generator.manual_seed takes, [-2**63, 2**64).


@pytest.mark.parametrize("seed", [2**70, -(2**70), 2**64, -(2**63) - 1])
@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_a_seed_torch_cannot_take_is_a_400(client, path, seed):
    body = {"prompt": "hi", "max_tokens": 2} if path == COMPLETIONS else {**user("hi")}
    message = refused(client.post(path, json={**body, "max_tokens": 2, "seed": seed}), "seed")
    assert message.startswith("seed: ")


@pytest.mark.parametrize("seed", [0, 2**64 - 1, -(2**63)])
def test_seeds_at_the_bounds_are_taken(client, seed):
    body = {"prompt": "hi", "max_tokens": 2, "seed": seed}
    assert client.post(COMPLETIONS, json=body).status_code == 200


# Text: valid Unicode only (a lone surrogate cannot be tokenized), each item bounded.

SURROGATE = {
    "prompt": (COMPLETIONS, b'{"prompt": "a\\ud800"}', "prompt"),
    "prompt list item": (COMPLETIONS, b'{"prompt": ["ok", "\\udfff"]}', "prompt"),
    "stop": (COMPLETIONS, b'{"prompt": "hi", "stop": "\\ud800"}', "stop"),
    "stop list item": (COMPLETIONS, b'{"prompt": "hi", "stop": ["a", "\\ud800"]}', "stop"),
    "model": (COMPLETIONS, b'{"prompt": "hi", "model": "\\ud800"}', "model"),
    "chat content": (
        CHAT,
        b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
        "messages.0.content",
    ),
}


@pytest.mark.parametrize("case", SURROGATE)
def test_a_lone_surrogate_is_a_400(client, case):
    path, raw, param = SURROGATE[case]
    message = refused(post_raw(client, path, raw), param)
    assert message.startswith(f"{param}: ") and "Unicode" in message


LONG = {
    "prompt item": ({"prompt": ["a", "x" * (MAX_TEXT + 1)]}, "prompt"),
    "token ids": ({"prompt": [1] * (MAX_TOKEN_IDS + 1)}, "prompt"),
    "token id list item": ({"prompt": [[1], [1] * (MAX_TOKEN_IDS + 1)]}, "prompt"),
    "token id lists": ({"prompt": [[1]] * (MAX_BATCH + 1)}, "prompt"),
    "stop string": ({"stop": "s" * (MAX_STOP_CHARS + 1)}, "stop"),
    "stop item": ({"stop": ["a", "s" * (MAX_STOP_CHARS + 1)]}, "stop"),
    "stop list": ({"stop": ["a"] * 5}, "stop"),
    "model": ({"model": "m" * 1000}, "model"),
    "prompt shape": ({"prompt": [1.5]}, "prompt"),
    "mixed prompt": ({"prompt": [[1], "a"]}, "prompt"),
    "bool ids": ({"prompt": [True, False]}, "prompt"),
    "prompt object": ({"prompt": {"a": 1}}, "prompt"),
    "stop number": ({"stop": 3}, "stop"),
}


@pytest.mark.parametrize("case", LONG)
def test_an_unbounded_or_misshapen_item_is_a_400_naming_the_field(client, case):
    fields, param = LONG[case]
    message = refused(client.post(COMPLETIONS, json={"prompt": "hi", **fields}), param)
    assert message.startswith(f"{param}: ") and "allowed" in message


# Every error is OpenAI's shape: malformed bodies, unknown routes, wrong methods.


def test_a_body_that_is_no_json_object_is_a_400_naming_the_body(client):
    assert refused(post_raw(client, COMPLETIONS, b"{not json"), None).startswith("body: ")
    assert refused(post_raw(client, COMPLETIONS, b"[1, 2]"), None).startswith("body: ")
    huge = b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}"  # past int's digits
    assert refused(post_raw(client, COMPLETIONS, huge), None).startswith("body: ")


def test_a_pydantic_error_is_a_400_naming_the_field(client):
    message = refused(client.post(CHAT, json={"messages": [{"role": "root", "content": "x"}]}),
                      "messages.0.role")  # fmt: skip
    assert message.startswith("messages.0.role: ")
    assert refused(client.post(CHAT, json={}), "messages").startswith("messages: ")


def test_unknown_routes_and_methods_answer_in_openais_shape(client):
    assert refused(client.get("/v1/nope"), None, 404).startswith("GET /v1/nope: ")
    assert refused(client.get(COMPLETIONS), None, 405).startswith(f"GET {COMPLETIONS}: ")
