"""One model in memory and the completion loop the API calls: a forward pass over the prompt
(its log-probabilities when `echo` asks for them, as lm-eval's loglikelihood needs), then
token by token with the KV cache, greedy at temperature 0. One request at a time (a lock):
the model's threads already use every core, and answers do not depend on what else runs."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class RequestError(ValueError):
    """A request the model cannot answer as asked (too long, unknown token ids): a 400."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)


class Engine:
    def __init__(self, model_dir: Path, name: str, dtype: str = "fp32", device: str = "cpu"):
        self.name = name
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype])
        self.model.to(device).eval()
        self.device = device
        self.max_len = int(self.model.config.max_position_embeddings)
        self.vocab = int(self.model.config.vocab_size)
        self.eos_id = self.tokenizer.eos_token_id
        self._lock = threading.Lock()

    def encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True).input_ids)
        if any(not 0 <= t < self.vocab for t in prompt):
            raise RequestError("prompt", f"token ids must be in [0, {self.vocab})")
        return list(prompt)

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """The tokenizer's own chat template; without one (the byte tokenizer) a plain
        transcript, `role: content` a line, ending in `assistant:`."""
        if self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer(text, add_special_tokens=False).input_ids)
        lines = [f"{m['role']}: {m['content']}" for m in messages]
        return self.encode("\n".join([*lines, "assistant:"]))

    def complete(
        self,
        ids: list[int],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> Completion:
        if not ids:
            raise RequestError("prompt", "empty; allowed: at least one token")
        if len(ids) + max_tokens > self.max_len:
            raise RequestError(
                "max_tokens",
                f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
                f"context of {self.max_len} tokens",
            )
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        with self._lock, torch.inference_mode():
            return self._complete(
                ids, max_tokens, temperature, top_p, logprobs, echo, stop or [], generator
            )

    def _complete(self, ids, max_tokens, temperature, top_p, logprobs, echo, stop, generator):
        out = self.model(torch.tensor([ids], device=self.device), use_cache=True)
        logits = out.logits[0].float()
        past = out.past_key_values
        result = Completion("", len(ids), 0, "length")
        if echo:
            result.text = self.tokenizer.decode(ids, skip_special_tokens=True)
            if logprobs is not None:
                prompt_lp = torch.log_softmax(logits[:-1], dim=-1)
                self._record(result, ids[0], None, None)
                for i, token in enumerate(ids[1:]):
                    self._record(result, token, prompt_lp[i], logprobs)
        new: list[int] = []
        generated: str | None = None  # set when a stop ends the answer early
        next_logits = logits[-1]
        for _ in range(max_tokens):
            lp = torch.log_softmax(next_logits, dim=-1)
            token = self._pick(next_logits, temperature, top_p, generator)
            new.append(token)
            if logprobs is not None:
                self._record(result, token, lp, logprobs)
            if token == self.eos_id:
                generated = self.tokenizer.decode(new[:-1], skip_special_tokens=True)
                break
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            cut = min((text.find(s) for s in stop if s and s in text), default=-1)
            if cut >= 0:
                generated = text[:cut]
                break
            if len(new) < max_tokens:
                step = self.model(
                    torch.tensor([[token]], device=self.device),
                    past_key_values=past,
                    use_cache=True,
                )
                past, next_logits = step.past_key_values, step.logits[0, -1].float()
        if generated is not None:
            result.finish_reason = "stop"
        else:
            generated = self.tokenizer.decode(new, skip_special_tokens=True)
        result.text += generated
        result.completion_tokens = len(new)
        return result

    def _pick(self, logits, temperature, top_p, generator) -> int:
        if temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1:
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=generator))

    def _record(self, result: Completion, token: int, lp, k: int | None) -> None:
        piece = self.tokenizer.decode([token])
        result.text_offset.append(sum(len(t) for t in result.tokens))
        result.tokens.append(piece)
        if lp is None:
            result.token_logprobs.append(None)
            result.top_logprobs.append(None)
            return
        value = float(lp[token])
        result.token_logprobs.append(value if math.isfinite(value) else -1e30)
        top: dict[str, float] = {}
        if k:
            values, indices = lp.topk(k)
            for v, i in zip(values.tolist(), indices.tolist(), strict=True):
                key = self.tokenizer.decode([i])
                # Two ids may decode alike (partial UTF-8 bytes): keep the larger, so the best
                # alternative's value is always there (lm-eval's is_greedy compares with it).
                top[key] = max(v, top.get(key, -math.inf))
        result.top_logprobs.append(top)
