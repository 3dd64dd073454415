"""Special tokens come from the tokenizer's own files, as `transformers` reads them.

On Llama-3-style and Mistral-style tokenizer directories built here (nothing downloaded), the
trainer's documents are `AutoTokenizer(text).input_ids` + the end-of-text token, its bos/eos/pad
are AutoTokenizer's, and its chat rendering is `apply_chat_template`'s, text and ids. A
tokenizer with no identifiable end-of-text is refused naming its files unless data.eos_token
names one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.config import DataConfig
from tests.trainer.hf_tokenizers import llama3_style, mistral_style, qwen_style
from tests.trainer.test_trainer_formats import CONVERSATION, write_jsonl
from trainer.data import read_documents
from trainer.errors import ConfigError
from trainer.tokenizer import build_tokenizer
from trainer.tokenizer.chat_template import render_chat

transformers = pytest.importorskip("transformers")  # the dev extra; the image never has it

TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "  And the earth was without form,\n\nand void; <|eot_id|> </s> ünïcödé ✓",
    "",
]
STYLES = {
    "llama3": (llama3_style, CONVERSATION),
    "mistral": (mistral_style, CONVERSATION[1:]),  # its template allows no system turn
    "qwen": (qwen_style, CONVERSATION),  # Qwen2 / Qwen3: ChatML, no bos
}


@pytest.fixture(scope="module", params=STYLES, ids=STYLES)
def style(request, tmp_path_factory):
    build, conversation = STYLES[request.param]
    directory = build(tmp_path_factory.mktemp(request.param) / "tok")
    auto = transformers.AutoTokenizer.from_pretrained(str(directory))
    return request.param, directory, auto, conversation


def test_special_tokens_are_auto_tokenizers(style):
    name, directory, auto, _ = style
    ours = build_tokenizer(str(directory), 512)
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (
        auto.bos_token_id,
        auto.eos_token_id,
        auto.pad_token_id,
    )
    assert ours.vocab_size == len(auto)
    assert (ours.bos_id is None) == (name == "qwen")


@pytest.mark.parametrize("text", TEXTS, ids=["plain", "specials-in-text", "empty"])
def test_document_ids_are_auto_tokenizers_plus_end_of_text(style, text):
    name, directory, auto, _ = style
    ours = build_tokenizer(str(directory), 512).encode_document(text).tolist()
    assert ours == [*auto(text)["input_ids"], auto.eos_token_id]
    first = {"llama3": "<|begin_of_text|>", "mistral": "<s>", "qwen": None}[name]
    if first is not None:
        assert ours[0] == auto.convert_tokens_to_ids(first)


def test_chat_rendering_is_apply_chat_templates(style, tmp_path):
    _, directory, auto, conversation = style
    ours = build_tokenizer(str(directory), 512)
    for prefix in (conversation[:2], conversation):
        for generation_prompt in (False, True):
            expected = auto.apply_chat_template(
                prefix, tokenize=False, add_generation_prompt=generation_prompt
            )
            rendered = render_chat(
                ours.chat_template,
                prefix,
                ours.special_tokens,
                add_generation_prompt=generation_prompt,
            )
            assert rendered == expected
    cfg = DataConfig(
        path=write_jsonl(tmp_path / "chat.jsonl", [{"messages": conversation}]),
        format="chat",
        tokenizer=str(directory),
    )
    [document], _ = read_documents(cfg, ours)
    expected_ids = auto.apply_chat_template(conversation, tokenize=True)["input_ids"]
    assert document.tokens.tolist() == expected_ids


def test_template_saved_by_transformers_5_as_its_own_file(style, tmp_path):
    _, _, auto, conversation = style
    auto.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved/chat_template.jinja").is_file()
    ours = build_tokenizer(str(tmp_path / "saved"), 512)
    rendered = render_chat(ours.chat_template, conversation, ours.special_tokens)
    assert rendered == auto.apply_chat_template(conversation, tokenize=False)


def test_config_names_the_end_of_text_over_well_known_names(tmp_path):
    # Llama 3 Instruct's config says <|eot_id|>; <|end_of_text|> is also in the vocabulary.
    directory = llama3_style(tmp_path / "tok", eos="<|eot_id|>")
    ours = build_tokenizer(str(directory), 512)
    assert ours.eos_id == ours._tok.token_to_id("<|eot_id|>")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    # The AddedToken form older configs write.
    config["pad_token"] = {"__type": "AddedToken", "content": "<|end_of_text|>", "special": True}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    auto = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert build_tokenizer(str(directory), 512).pad_id == auto.pad_token_id is not None


def no_end_of_text(directory: Path) -> Path:
    """A tokenizer.json with special tokens but none that ends a text, and no config."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<sep>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(["some text to learn from"], trainer)
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def test_no_end_of_text_is_refused_naming_the_files_unless_set(tmp_path):
    directory = no_end_of_text(tmp_path / "tok")
    with pytest.raises(ConfigError) as error:
        build_tokenizer(str(directory), 512)
    message = str(error.value)
    assert message.startswith("data.tokenizer: no end-of-text token found: ")
    assert str(directory / "tokenizer_config.json") in message
    assert str(directory / "tokenizer.json") in message and "set data.eos_token" in message
    ours = build_tokenizer(str(directory), 512, eos_token="<sep>")
    assert ours.eos_id == 1 and ours.encode_document("text").tolist()[-1] == 1
    with pytest.raises(ConfigError, match=r"data.eos_token '<eos>' .* is not a token"):
        build_tokenizer(str(directory), 512, eos_token="<eos>")


def test_byte_tokenizer_takes_no_eos_token():
    with pytest.raises(ConfigError, match=r"^data.eos_token: the byte tokenizer"):
        build_tokenizer("byte", 257, eos_token="</s>")
