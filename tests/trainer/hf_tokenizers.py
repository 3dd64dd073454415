"""Tokenizer directories shaped like real models' (Llama 3, Mistral), built here with the
`tokenizers` library on the sample corpus — nothing downloaded. Their special tokens,
post-processors, configs and chat templates follow the published files of those models."""

from __future__ import annotations

import json
from pathlib import Path

from tests.trainer.harness import SAMPLE, SMALL_CORPUS_DOCS

# meta-llama/Meta-Llama-3-8B-Instruct's template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
LLAMA3_SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]

# mistralai/Mistral-7B-Instruct-v0.1's template.
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)
MISTRAL_SPECIAL = ["<unk>", "<s>", "</s>"]

# Qwen/Qwen2.5-7B-Instruct's ChatML template without its tool-calling branches (Qwen3's adds
# <think> handling on top of the same turns).
QWEN_TEMPLATE = (
    "{%- for message in messages %}{%- if loop.first and messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def sample_texts(count: int = SMALL_CORPUS_DOCS) -> list[str]:
    return [json.loads(line)["text"] for line in SAMPLE.read_text().splitlines()[:count]]


def llama3_style(directory: Path, vocab_size: int = 512, eos: str = "<|eot_id|>") -> Path:
    """Byte-level BPE; the post-processor opens every sequence with <|begin_of_text|>."""
    from tokenizers import processors

    tokenizer = _byte_level_bpe(vocab_size, LLAMA3_SPECIAL)
    bos_id = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", bos_id)],
            ),
        ]
    )
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": eos,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 8192,
        "clean_up_tokenization_spaces": True,
        "chat_template": LLAMA3_TEMPLATE,
    }
    return _save(directory, tokenizer, config)


def mistral_style(directory: Path, vocab_size: int = 512) -> Path:
    """SentencePiece-converted BPE as `transformers` 5 builds Llama/Mistral tokenizers: no
    normalizer, metaspace without splitting, byte fallback over the 256 `<0xNN>` tokens that
    follow <unk>, <s>, </s>; the post-processor opens every sequence with <s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    fixed = [*MISTRAL_SPECIAL, *(f"<0x{byte:02X}>" for byte in range(256))]
    learner = Tokenizer(models.BPE(unk_token="<unk>"))
    learner.pre_tokenizer = metaspace
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(fixed))
    learner.train_from_iterator(sample_texts(), trainer)
    learned = json.loads(learner.to_str())["model"]
    ordered = fixed + [t for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1])]
    vocab = {token: index for index, token in enumerate(dict.fromkeys(ordered))}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tokenizer = Tokenizer(
        models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tokenizer.add_special_tokens(MISTRAL_SPECIAL)
    tokenizer.pre_tokenizer = metaspace
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1),
        ]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B:1",
        special_tokens=[("<s>", tokenizer.token_to_id("<s>"))],
    )
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "legacy": False,
        "tokenizer_class": "LlamaTokenizer",
        "model_max_length": 32768,
        "chat_template": MISTRAL_TEMPLATE,
    }
    return _save(directory, tokenizer, config)


def qwen_style(directory: Path, vocab_size: int = 512) -> Path:
    """Byte-level BPE as Qwen2/Qwen3 ship it: no post-processor framing (no bos at all),
    eos <|im_end|> (the instruct models' turn end), pad <|endoftext|>, ChatML template."""
    tokenizer = _byte_level_bpe(vocab_size, QWEN_SPECIAL)
    config = {
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 131072,
        "chat_template": QWEN_TEMPLATE,
    }
    return _save(directory, tokenizer, config)


def _byte_level_bpe(vocab_size: int, special: list[str]):
    """Byte-level BPE (Llama 3's and Qwen's kind) trained on the sample, `special` first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(sample_texts(), trainer)
    return tokenizer


def _save(directory: Path, tokenizer, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return directory
