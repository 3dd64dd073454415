"""The OpenAI-compatible server's answers against transformers itself (the same exported
model): echoed prompt log-probabilities, greedy generation, stop sequences, chat; and every
bounded field refused with OpenAI's 400 naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from trainer.hf.export import export_run
from trainer.serving.app import MAX_BODY_BYTES, create_app
from trainer.serving.engine import Engine
from trainer.serving.schema import MAX_BATCH

pytestmark = pytest.mark.slow  # the module's run is trained once: ~30 s
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def engine(workspace, tmp_path_factory) -> Engine:
    out = tmp_path_factory.mktemp("served") / "model"
    export_run(str(workspace.cwd / "runs/tiny"), str(out), dtype="fp32")
    return Engine(Path(out), "tiny")


@pytest.fixture(scope="module")
def client(engine) -> TestClient:
    with TestClient(create_app(engine)) as test_client:
        yield test_client


def test_echoed_logprobs_are_the_models_own(client, engine):
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0}
    answer = client.post("/v1/completions", json=body)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    ids = engine.tokenizer(PROMPT).input_ids
    with torch.no_grad():
        logits = engine.model(torch.tensor([ids])).logits[0]
    expected = torch.log_softmax(logits.float(), -1)[torch.arange(len(ids) - 1), ids[1:]]
    got = choice["logprobs"]["token_logprobs"]
    assert got[0] is None and choice["logprobs"]["top_logprobs"][0] is None
    assert torch.allclose(torch.tensor(got[1:]), expected, atol=1e-5)
    assert choice["text"] == PROMPT and "".join(choice["logprobs"]["tokens"]) == PROMPT
    assert all(len(top) <= 2 for top in choice["logprobs"]["top_logprobs"][1:])
    assert answer.json()["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0,
                                      "total_tokens": len(ids)}  # fmt: skip


def test_greedy_generation_is_transformers_greedy(client, engine):
    ids = engine.tokenizer(PROMPT).input_ids
    body = {"prompt": [ids, ids], "max_tokens": 6, "temperature": 0, "logprobs": 1}
    choices = client.post("/v1/completions", json=body).json()["choices"]
    with torch.no_grad():
        out = engine.model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False,
                                    min_new_tokens=6)  # fmt: skip
    expected = engine.tokenizer.decode(out[0, len(ids) :])
    assert [c["text"] for c in choices] == [expected, expected]
    assert len(choices[0]["logprobs"]["token_logprobs"]) == 6
    # Greedy: every generated token is its step's best.
    for lp, top in zip(choices[0]["logprobs"]["token_logprobs"],
                       choices[0]["logprobs"]["top_logprobs"], strict=True):  # fmt: skip
        assert lp == pytest.approx(max(top.values()))


def test_a_stop_sequence_cuts_the_answer(client):
    free = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8,
                                                "temperature": 0}).json()  # fmt: skip
    text = free["choices"][0]["text"]
    stop = text[2:4]
    cut = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8,
                                               "temperature": 0, "stop": stop}).json()  # fmt: skip
    assert cut["choices"][0]["text"] == text[: text.find(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_chat_answers_as_the_assistant(client):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
    answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["model"] == "tiny"


BAD = {
    "model": ({"model": "other"}, "model"),
    "negative max_tokens": ({"max_tokens": -1}, "max_tokens"),
    "past the context": ({"max_tokens": 5000}, "max_tokens"),
    "logprobs": ({"logprobs": 21}, "logprobs"),
    "n": ({"n": 2}, "n"),
    "token id": ({"prompt": [[1, 2, 100000]]}, "prompt"),
    "batch": ({"prompt": ["a"] * (MAX_BATCH + 1)}, "prompt"),
    "empty": ({"prompt": ""}, "prompt"),
    "stops": ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    "temperature": ({"temperature": 3}, "temperature"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_completion_request_is_a_400_naming_the_field(client, case):
    fields, param = BAD[case]
    answer = client.post("/v1/completions", json={"prompt": PROMPT, **fields})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{param}: ")


def test_a_body_over_the_limit_is_refused_unread(client):
    big = json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 1)})
    answer = client.post("/v1/completions", content=big,
                         headers={"content-type": "application/json"})  # fmt: skip
    assert answer.status_code == 413
