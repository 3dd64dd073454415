"""The GPU check's cases, in the order they run, and the two sizes they run at.

Stdlib only: the orchestrator (`benchmarks.gpu.check`) reads this table without importing
torch, so a machine missing a package still gets its JSON and table. The cases themselves are
`benchmarks.gpu.cases`, one function per name here. The order is the priority: when the
budget runs out, the cases at the end are the ones skipped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    """One line for the table and the README."""
    gpu_timeout_s: int
    smoke_timeout_s: int
    """Generous: a safety net on a shared 2-core machine, which can run 5x slower than idle."""
    gpu_only: str | None = None
    """Why the CPU form skips it (None: it runs in both)."""


TRAIN_ROWS = {
    # case name -> (trainer.compile, trainer.activation_checkpoint)
    "train_1b/eager/ac_none": (False, "none"),
    "train_1b/eager/ac_selective_op": (False, "selective_op"),
    "train_1b/compile/ac_none": (True, "none"),
    "train_1b/compile/ac_selective_op": (True, "selective_op"),
    "train_1b/eager/ac_full": (False, "full"),
}
COMPILE_ON_CPU = "torch.compile (inductor) on 2 CPU cores takes minutes; the GPU run covers it"
SAME_ROW_CODE = "the other training rows run the same code (full AC has its tests in tests/trainer)"

CASES: tuple[Case, ...] = (
    Case("environment", "the device, its catalog peak, the library versions", 90, 120),
    Case("train_1b/eager/ac_none", "built-in, 1B, bf16, no compile, no AC", 120, 120),
    Case("train_1b/eager/ac_selective_op", "built-in, 1B, op-level selective AC", 120, 120),
    Case("resume", "checkpoint at 10, SIGKILL, resume: losses 11-20 vs uninterrupted", 200, 240),
    Case("lora", "LoRA r=16 on the 1B (bf16 frozen base) vs full fine-tuning", 150, 120),
    Case("hf_runner", "runner=hf vs built-in on a small Llama, 10 steps", 180, 180),
    Case("train_1b/compile/ac_none", "built-in, 1B, torch.compile", 180, 1, COMPILE_ON_CPU),
    Case("family/qwen3", "qwen3: one trainer step; bf16 logits vs transformers", 120, 120),
    Case("family/mistral", "mistral (sliding window): one step; bf16 logits", 120, 120),
    Case(
        "train_1b/compile/ac_selective_op",
        "built-in, 1B, torch.compile + op-level SAC",
        180,
        1,
        COMPILE_ON_CPU,
    ),
    Case("train_1b/eager/ac_full", "built-in, 1B, full AC", 120, 1, SAME_ROW_CODE),
)
BY_NAME = {case.name: case for case in CASES}


@dataclass(frozen=True)
class Sizes:
    """What a case trains: the GPU form's real sizes, or the CPU form's tiny ones."""

    big: tuple[str, ...]
    """model.* overrides of the ~1B Llama 3 (the `llama3_1b` preset on a GPU)."""
    small_llama: str
    """The preset a "small Llama" is built from (HF checkpoint for runner=hf, the resume)."""
    small_overrides: dict[str, int]
    """ModelArgs fields replaced in that preset (the CPU form shrinks it)."""
    family_overrides: dict[str, int]
    """ModelArgs fields replaced in the qwen3 / mistral presets for the logits check."""
    sliding_window: int
    seq_len: int
    micro_batch: int
    steps: int
    """Steps of each train_1b row and of the LoRA run (30 on a GPU)."""
    log_interval: int
    resume_steps: int
    """The uninterrupted run's length; the kill comes after the checkpoint at half of it."""
    hf_steps: int
    logits_batch: tuple[int, int]
    """(sequences, tokens) of the fixed batch the logits are compared on."""
    dataset_tokens: int
    document_tokens: tuple[int, int]
    """Synthetic documents' shortest and longest length."""


GPU = Sizes(
    big=("model.name=llama3_1b",),
    small_llama="smollm2_135m",
    small_overrides={},
    family_overrides={"n_layers": 2},
    sliding_window=512,
    seq_len=2048,
    micro_batch=4,
    steps=30,
    log_interval=5,
    resume_steps=20,
    hf_steps=10,
    logits_batch=(2, 1024),
    dataset_tokens=1_000_000,
    document_tokens=(300, 6000),
)

_TINY = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden_dim": 128}
SMOKE = Sizes(
    big=("model.name=tiny", *(f"model.{key}={value}" for key, value in _TINY.items())),
    small_llama="smollm2_135m",
    small_overrides={**_TINY, "vocab_size": 512},
    family_overrides={**_TINY, "vocab_size": 384},
    sliding_window=16,
    seq_len=32,
    micro_batch=2,
    steps=6,
    log_interval=2,
    resume_steps=6,
    hf_steps=4,
    logits_batch=(2, 48),
    dataset_tokens=40_000,
    document_tokens=(20, 300),
)
