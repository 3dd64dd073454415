"""A Hugging Face tokenizer directory: `tokenizer.json` (+ `tokenizer_config.json`, and a
`chat_template.jinja` where newer `transformers` saves the template), read with the `tokenizers`
library alone — the trainer image does not carry `transformers`.

Special tokens follow `transformers`' rules, so a document here has the ids
`AutoTokenizer(text).input_ids` has, plus the end-of-text token:
- bos/eos/pad are the config's `bos_token`/`eos_token`/`pad_token`; without a config entry, the
  token `tokenizer.json`'s post-processor puts before (bos) or after (eos) a sequence.
- What opens a document is what the post-processor puts before a sequence (as in
  `transformers` 5, which keeps `tokenizer.json`'s post-processor whatever the config's
  `add_bos_token` says); the end-of-text token closes it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.errors import ConfigError

# Names of end-of-text tokens when neither the config nor the post-processor names one; only
# ever taken when the tokenizer declares them special.
_WELL_KNOWN_EOS = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


class HuggingFaceTokenizer:
    def __init__(self, path: str, eos_token: str | None = None):
        try:
            from tokenizers import (
                Tokenizer as HFTokenizer,
            )  # lazy: tokenizers, for a Hugging Face tokenizer only
        except ImportError:
            raise ConfigError(
                f"data.tokenizer: {path!r} needs the `tokenizers` package; install it or use "
                "data.tokenizer=byte"
            ) from None
        directory = Path(path) if Path(path).is_dir() else Path(path).parent
        file = directory / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ConfigError(
                f"data.tokenizer: {path!r} is neither 'byte' nor a directory holding "
                "tokenizer.json (or the file itself)"
            )
        try:
            self._tok = HFTokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises plain Exception
            raise ConfigError(f"data.tokenizer: {str(file)!r} does not load: {exc}") from None
        self.vocab_size = self._tok.get_vocab_size()
        config_file = directory / "tokenizer_config.json"
        config = _read_json(config_file) if config_file.is_file() else {}
        self.special_tokens = {
            key: text for key in _SPECIAL_KEYS if (text := _token_text(config.get(key)))
        }
        prefix, suffix = self._post_processor_framing()

        self.bos_id = self._config_token("bos_token", config_file)
        if self.bos_id is None and len(prefix) == 1:
            self.bos_id = prefix[0]
        self.pad_id = self._config_token("pad_token", config_file)
        if eos_token is not None:
            self.eos_id = self._id_or_refuse(eos_token, "data.eos_token", file)
            self.special_tokens["eos_token"] = eos_token
        else:
            self.eos_id = self._find_eos(suffix, config_file, file)
        for key, token_id in (("bos_token", self.bos_id), ("eos_token", self.eos_id)):
            if token_id is not None:
                self.special_tokens.setdefault(key, self._tok.id_to_token(token_id))

        self.prefix_ids: list[int] = prefix
        self._suffix = suffix if suffix[-1:] == [self.eos_id] else [*suffix, self.eos_id]
        self.chat_template = _chat_template(directory, config, config_file)
        self.fingerprint = _fingerprint(directory, file, self.special_tokens)

    def encode(self, text: str) -> torch.Tensor:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return torch.tensor(ids, dtype=torch.int64)

    def encode_document(self, text: str) -> torch.Tensor:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return torch.tensor([*self.prefix_ids, *ids, *self._suffix], dtype=torch.int64)

    def encode_documents(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode_document` of many texts at once, for `data prepare`: the tokenizer's own
        batch encoding (its Rust side, no Python per token), framed with numpy. Returns the
        uint32 ids of all documents back to back and each document's length."""
        ids = [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        body = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.uint32, int(body.sum()))
        prefix = np.asarray(self.prefix_ids, dtype=np.uint32)
        suffix = np.asarray(self._suffix, dtype=np.uint32)
        lengths = body + len(prefix) + len(suffix)
        starts = np.cumsum(lengths) - lengths
        out = np.empty(int(lengths.sum()), dtype=np.uint32)
        framing = np.zeros(len(out), dtype=bool)
        for offset, token in enumerate(prefix):
            out[starts + offset] = token
            framing[starts + offset] = True
        for offset, token in enumerate(suffix):
            where = starts + len(prefix) + body + offset
            out[where] = token
            framing[where] = True
        out[~framing] = flat
        return out, lengths

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self._tok.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def _post_processor_framing(self) -> tuple[list[int], list[int]]:
        """The special tokens the post-processor puts before and after one sequence."""
        for probe in ("a", "0", " ", "."):
            plain = self._tok.encode(probe, add_special_tokens=False).ids
            framed = self._tok.encode(probe, add_special_tokens=True).ids
            for start in range(len(framed) - len(plain) + 1) if plain else ():
                if framed[start : start + len(plain)] == plain:
                    return framed[:start], framed[start + len(plain) :]
        # No text token to anchor on: whatever it adds to an empty text opens a document.
        return self._tok.encode("", add_special_tokens=True).ids, []

    def _config_token(self, key: str, config_file: Path) -> int | None:
        text = self.special_tokens.get(key)
        return None if text is None else self._id_or_refuse(text, key, config_file)

    def _id_or_refuse(self, text: str, key: str, file: Path) -> int:
        token_id = self._tok.token_to_id(text)
        if token_id is None:
            raise ConfigError(
                f"data.tokenizer: {key} {text!r} (from {str(file)!r}) is not a token of "
                "the tokenizer's vocabulary"
            )
        return token_id

    def _find_eos(self, suffix: list[int], config_file: Path, file: Path) -> int:
        configured = self._config_token("eos_token", config_file)
        if configured is not None:
            return configured
        if len(suffix) == 1:
            return suffix[0]
        special = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}
        for name in _WELL_KNOWN_EOS:
            if name in special:
                return self._tok.token_to_id(name)
        raise ConfigError(
            f"data.tokenizer: no end-of-text token found: {str(config_file)!r} has no eos_token "
            f"and the post-processor of {str(file)!r} appends none; set data.eos_token to the "
            "token that ends a document"
        )


def _fingerprint(directory: Path, file: Path, special_tokens: dict[str, str]) -> str:
    """sha256 over the files that decide token ids and framing, and the special tokens chosen
    (an eos override changes every document's last id, so it changes the fingerprint)."""
    digest = hashlib.sha256()
    for path in (file, directory / "tokenizer_config.json", directory / "chat_template.jinja"):
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<absent>")
    digest.update(json.dumps(special_tokens, sort_keys=True).encode())
    return f"sha256:{digest.hexdigest()}"


def _read_json(file: Path) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"data.tokenizer: {str(file)!r} is not readable JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"data.tokenizer: {str(file)!r} is not a JSON object")
    return value


def _token_text(value: Any) -> str | None:
    """A special token as the config writes it: a string, or an AddedToken's dict form."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _chat_template(directory: Path, config: dict[str, Any], config_file: Path) -> str | None:
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the one called "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ConfigError(
            f"data.tokenizer: chat_template in {str(config_file)!r} is neither a string nor a "
            "list of named templates with a 'default'"
        )
    return template
