"""The masking, proven on the model and on the trainer's own step and eval functions:

- a token that is not a training target gets exactly zero gradient on its logits, and the
  step's gradient is that of the mean loss over the targets alone;
- in a packed sequence, a document cannot influence another's logits (perturb A, B's logits do
  not move; without the document mask they do), and B's logits are those of B run alone
  (positions restart);
- the eval loss is the mean over the held-out targets, masked like training;
- the labels themselves are right, not just consistent: for each format, records packed into
  windows give the labels written out by hand (each position predicts the next token if that
  token is a target of the same document), across document boundaries and window cuts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from contract.config import DataConfig
from contract.model.args import ModelArgs
from contract.plan import Plan
from tests.trainer.hf_tokenizers import llama3_style
from trainer.data import IGNORE_INDEX, Batch, PackedSequences, TokenStream, load_corpus
from trainer.model.model import Transformer
from trainer.tokenizer import build_tokenizer
from trainer.train import _evaluate, _train_step

ARGS = ModelArgs(
    dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, ffn_hidden_dim=64, max_seq_len=64
)
SEQ = 24


def keep_grad(into: list[torch.Tensor]):
    """A forward hook that keeps the module's output and its gradient."""

    def hook(_module, _inputs, output: torch.Tensor) -> None:
        output.retain_grad()
        into.append(output)

    return hook


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    """The step and eval all-reduce: a real one-rank gloo group in this process."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    built = Transformer(ARGS)
    built.init_weights(seed)
    return built


def packed_two_documents(generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """One sequence: document A (10 tokens) then document B (14 tokens)."""
    a = torch.randint(0, ARGS.vocab_size, (10,), generator=generator)
    b = torch.randint(0, ARGS.vocab_size, (14,), generator=generator)
    documents = torch.tensor([0] * 10 + [1] * 14)[None]
    positions = torch.cat((torch.arange(10), torch.arange(14)))[None]
    return a, b, documents, positions


def test_a_document_cannot_influence_another_in_a_packed_sequence():
    net, generator = model(), torch.Generator().manual_seed(1)
    a, b, documents, positions = packed_two_documents(generator)
    other_a = torch.randint(0, ARGS.vocab_size, (10,), generator=generator)
    with torch.no_grad():
        packed = net(torch.cat((a, b))[None], positions, documents)[0, 10:]
        perturbed = net(torch.cat((other_a, b))[None], positions, documents)[0, 10:]
        alone = net(b[None])[0]
        causal = net(torch.cat((a, b))[None])[0, 10:]
        causal_perturbed = net(torch.cat((other_a, b))[None])[0, 10:]
    assert torch.equal(packed, perturbed)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    # The same check without the document mask does see A: the test can fail.
    assert (causal - causal_perturbed).abs().max() > 1e-3


def test_no_gradient_flows_from_one_document_to_another():
    net, generator = model(), torch.Generator().manual_seed(2)
    a, b, documents, positions = packed_two_documents(generator)
    tokens = torch.cat((a, b))[None]

    def embedding_grad(**kwargs) -> torch.Tensor:
        captured: list[torch.Tensor] = []
        hook = net.tok_embeddings.register_forward_hook(keep_grad(captured))
        logits = net(tokens, **kwargs)
        hook.remove()
        # Loss on document B's targets only.
        F.cross_entropy(logits[0, 10:-1], tokens[0, 11:]).backward()
        net.zero_grad()
        return captured[0].grad[0].abs().sum(-1)

    isolated = embedding_grad(positions=positions, documents=documents)
    # (B's last token predicts nothing, and nothing comes after it.)
    assert torch.all(isolated[:10] == 0) and torch.all(isolated[10:-1] > 0)
    assert torch.all(embedding_grad()[:10] > 0)  # plain causal attention: A does feed B


def masked_micro_batches() -> list[Batch]:
    """Two micro batches over a stream of documents whose first half of tokens is prompt."""
    generator = torch.Generator().manual_seed(3)
    lengths = [7, 12, 5, 16, 9, 11, 14, 6, 10, 8]
    tokens = torch.randint(0, ARGS.vocab_size, (sum(lengths),), generator=generator)
    masks = [torch.arange(n) >= n // 2 for n in lengths]
    starts = torch.cumsum(torch.tensor(lengths), 0) - torch.tensor(lengths)
    stream = TokenStream(tokens, torch.cat(masks), starts, isolate_documents=True)
    sequences = PackedSequences(stream, SEQ)
    return [sequences.batch(torch.tensor([0, 1])), sequences.batch(torch.tensor([2]))]


def test_untrained_tokens_get_zero_gradient_and_the_step_is_the_target_mean():
    micro = masked_micro_batches()
    labels = torch.cat([batch.labels for batch in micro])
    assert (labels == IGNORE_INDEX).any() and (labels != IGNORE_INDEX).any()
    net = model()
    logits_seen: list[torch.Tensor] = []
    net.output.register_forward_hook(keep_grad(logits_seen))
    plan = Plan(
        ARGS, dp_size=1, micro_batch_size=2, grad_accum_steps=2, global_batch_size=3, seq_len=SEQ
    )
    loss = _train_step(net, micro, torch.device("cpu"), plan)

    for batch, logits in zip(micro, logits_seen, strict=True):
        per_token = logits.grad.abs().sum(-1)
        untrained = batch.labels == IGNORE_INDEX
        assert torch.all(per_token[untrained] == 0)
        assert torch.all(per_token[~untrained] > 0)
    step_grads = [p.grad.clone() for p in net.parameters()]

    # The reference: one mean cross-entropy over exactly the targets of both micro batches.
    reference = model()
    logits = [reference(b.inputs, positions=b.positions, documents=b.documents) for b in micro]
    flat_logits = torch.cat([x.flatten(0, 1) for x in logits])
    flat_labels = torch.cat([b.labels.flatten() for b in micro])
    trained = flat_labels != IGNORE_INDEX
    expected = F.cross_entropy(flat_logits[trained], flat_labels[trained])
    expected.backward()
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
    for got, want in zip(step_grads, (p.grad for p in reference.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_eval_loss_is_the_mean_over_held_out_targets():
    micro = masked_micro_batches()
    net = model()
    eval_loss = _evaluate(net, micro, torch.device("cpu"))
    with torch.no_grad():
        sums = [
            F.cross_entropy(
                net(b.inputs, positions=b.positions, documents=b.documents).flatten(0, 1),
                b.labels.flatten(),
                reduction="sum",
            )
            for b in micro
        ]
    targets = sum(int((b.labels != IGNORE_INDEX).sum()) for b in micro)
    assert eval_loss == pytest.approx(float(sum(sums)) / targets, rel=1e-5)
    assert net.training  # eval leaves the model as it found it


# One character per token in the hand-written windows below: "_" is a label that is not a
# target, "/" a newline, and the special tokens these symbols.
SYMBOLS = {
    "<|begin_of_text|>": "^",
    "<|start_header_id|>": "[",
    "<|end_header_id|>": "]",
    "<|eot_id|>": "$",
    "\n": "/",
}


@pytest.fixture(scope="module")
def char_llama3(tmp_path_factory) -> Path:
    """A Llama-3-style tokenizer with no merges: one token per character, its specials and
    chat template as Llama 3's."""
    return llama3_style(tmp_path_factory.mktemp("char") / "tok", vocab_size=261)


def packed_windows(
    tmp_path: Path,
    data_format: str,
    records: list[dict],
    seq_len: int,
    tokenizer: str = "byte",
    piece: Callable[[int], str] | None = None,
) -> tuple[list[str], list[str]]:
    """The records through the format, packing and windowing the trainer uses; every window's
    inputs and labels as one character per token."""
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    piece = piece or byte_piece
    cfg = DataConfig(
        path=str(path),
        format=data_format,
        tokenizer=tokenizer,
        seq_len=seq_len,
        eval_fraction=0.0,
    )
    stream = load_corpus(cfg, build_tokenizer(tokenizer, 512)).train
    sequences = PackedSequences(stream, seq_len)
    batch = sequences.batch(torch.arange(sequences.count))

    def shown(row: list[int]) -> str:
        chars = ["_" if i == IGNORE_INDEX else SYMBOLS.get(piece(i), piece(i)) for i in row]
        assert all(len(c) == 1 for c in chars), chars  # one token per character
        return "".join(chars)

    return [shown(row) for row in batch.inputs.tolist()], [
        shown(row) for row in batch.labels.tolist()
    ]


def byte_piece(token: int) -> str:
    return "$" if token == 256 else chr(token)


def hf_piece(directory: Path) -> Callable[[int], str]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    return lambda token: tokenizer.decode([token], skip_special_tokens=False)


def test_text_labels_are_the_next_token_everywhere_across_documents(tmp_path):
    records = [{"text": "ab"}, {"text": "cde"}, {"text": "fg"}]
    inputs, labels = packed_windows(tmp_path, "text", records, 3)
    # Pre-training keeps one causal stream: the end-of-text predicts the next document.
    assert inputs == ["ab$", "cde", "$fg"]
    assert labels == ["b$c", "de$", "fg$"]


def test_prompt_completion_labels_are_the_completion_and_its_end(tmp_path, char_llama3):
    records = [
        {"prompt": "ab", "completion": "cd"},
        {"prompt": "e", "completion": "fgh"},
        {"prompt": "ij", "completion": "k"},
    ]
    inputs, labels = packed_windows(
        tmp_path, "prompt_completion", records, 4, str(char_llama3), hf_piece(char_llama3)
    )
    # The last prompt token predicts the completion's first; the end of one document
    # predicts nothing of the next; windows cut documents without changing a label.
    assert inputs == ["^abc", "d$^e", "fgh$", "^ijk"]
    assert labels == ["__cd", "$__f", "gh$_", "__k$"]


def test_chat_labels_are_both_assistant_turns_and_nothing_else(tmp_path, char_llama3):
    two_turns = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"},
        {"role": "user", "content": "More"},
        {"role": "assistant", "content": "Ok"},
    ]
    one_turn = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "R"}]
    records = [{"messages": two_turns}, {"messages": one_turn}]
    inputs, labels = packed_windows(
        tmp_path, "chat", records, 41, str(char_llama3), hf_piece(char_llama3)
    )
    # The header's last newline predicts the reply; the reply predicts its end-of-turn; the
    # end-of-turn predicts nothing (the next header, or the next conversation).
    assert inputs == [
        "^[user]//Hi$[assistant]//Yo$[user]//More$",
        "[assistant]//Ok$^[user]//Q$[assistant]//R",
    ]
    assert labels == [
        "________________________Yo$______________",
        "____________Ok$________________________R$",
    ]
