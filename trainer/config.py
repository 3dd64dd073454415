"""The trainer's configuration: one dataclass per section, every default defined here once.

The trainer reads one YAML file (`--config PATH`) plus `key=value` overrides and merges them
onto `TrainerJobConfig` with OmegaConf, so unknown keys and wrong types are errors. The job
launcher (`jobs/`) writes exactly this structure; its Hydra groups `model`, `data` and `trainer`
map one-to-one onto the sections below.

torch-free on purpose: `jobs` imports it to validate and plan without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# OmegaConf 2.3 has no Literal support: closed choices are plain strings, listed here and
# checked by `validate_choices` with a message naming the key.
CHOICES: dict[str, tuple[str, ...]] = {
    "trainer.mixed_precision": ("auto", "fp32", "bf16"),
    "trainer.activation_checkpoint": ("none", "full", "selective"),
    "trainer.export_dtype": ("bf16", "fp32"),
}

# Exit codes the trainer documents (pods and `jobs` read them).
EXIT_OK = 0
EXIT_BAD_INPUT = 2
"""Bad configuration or data: retrying will not help."""
EXIT_PREEMPTED = 143
"""Stopped by SIGTERM after writing a checkpoint (128 + SIGTERM): restart to resume. The
training operator's `ExitCode` restart policy treats 128-255 as retryable."""


@dataclass
class ModelConfig:
    name: str | None = "tiny"
    """Preset in `trainer.model.args.MODEL_PRESETS`: tiny, llama3_1b, llama3_8b, llama3_70b.
    With `init_from` it may be null (the architecture is the checkpoint's config.json); a
    preset named there must have the checkpoint's shape."""
    init_from: str | None = None
    """A Hugging Face Llama directory (config.json, safetensors, tokenizer files), local or
    s3://bucket/prefix: the run starts from its weights (only when the run has no checkpoint
    of its own yet) and takes its architecture from config.json."""
    # Optional overrides of the preset's fields (null keeps the preset's value).
    dim: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    vocab_size: int | None = None
    ffn_hidden_dim: int | None = None
    max_seq_len: int | None = None
    norm_eps: float | None = None
    rope_theta: float | None = None
    tie_embeddings: bool | None = None


@dataclass
class DataConfig:
    path: str = "data/sample/train.jsonl"
    """JSONL file: a local path (relative to the working directory) or an s3:// URI."""
    text_field: str = "text"
    """Key of each JSON line holding the document text."""
    tokenizer: str | None = None
    """`byte` (built in, no download), or a Hugging Face tokenizer directory (local or
    s3://). Null: the `model.init_from` directory's tokenizer, or `byte` without one."""
    seq_len: int = 128
    """Tokens per packed training sequence."""
    eval_fraction: float = 0.05
    """Fraction of documents held out for the validation loss (chosen deterministically)."""
    max_bad_fraction: float = 0.01
    """Lines that are not JSON or lack `text_field` are skipped and counted; above this
    fraction of all lines the run stops with an error."""


@dataclass
class CheckpointConfig:
    interval: int = 50
    """Save every this many steps (and always at the end). 0 disables periodic saves."""
    keep: int = 3
    """Committed checkpoints to keep (the latest K); older ones are deleted."""
    async_save: bool = False
    """Write checkpoints in the background while training continues."""


@dataclass
class MetricsConfig:
    tensorboard: bool = False
    """Write TensorBoard events under <run_dir>/logs/tensorboard (needs `tensorboard`)."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project (needs `wandb`, and WANDB_API_KEY unless
    WANDB_MODE=offline)."""
    mlflow_tracking_uri: str | None = None
    """Log to this MLflow tracking server (needs `mlflow`; MLflow 3 takes a `file:` store only
    with MLFLOW_ALLOW_FILE_STORE=true)."""


@dataclass
class TrainerConfig:
    # The defaults are the default job (`make run`: 2 CPU processes, about 2 minutes; the
    # loss falls from ~5.6 to below 2.1, the held-out loss below 2.0).
    max_steps: int = 150
    """Optimizer steps to train for."""
    lr: float = 2e-3
    """Peak learning rate (the key users type; see also `trainer.optim`)."""
    warmup_steps: int = 10
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    """Max global gradient norm; 0 disables clipping."""
    micro_batch_size: int = 8
    """Sequences per rank per forward/backward."""
    grad_accum_steps: int = 1
    """Micro batches per optimizer step; ignored when `global_batch_size` is set."""
    global_batch_size: int | None = None
    """Sequences per optimizer step across all ranks; must be divisible by
    micro_batch_size * data-parallel size. Null means micro * accum * dp."""
    log_interval: int = 10
    """Log metrics every this many steps."""
    eval_interval: int = 50
    """Validation loss every this many steps (and at the end); 0 disables."""
    eval_batches: int = 4
    """Micro batches per rank in each validation pass."""
    mixed_precision: str = "auto"
    """One of auto, fp32, bf16. auto: bf16 params with fp32 reduction on CUDA, fp32 on CPU."""
    activation_checkpoint: str = "none"
    """One of none, full, selective. selective: recompute every other block."""
    compile: bool = False
    """torch.compile each transformer block."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device for MFU; null uses the known-GPU table, or on CPU a quick
    measurement (labelled as measured)."""
    export_hf: bool = False
    """At the end, export the final checkpoint as a Hugging Face directory into
    <run_dir>/export/ (config.json, safetensors, tokenizer files)."""
    export_dtype: str = "bf16"
    """bf16 or fp32: the dtype of the exported weights."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


@dataclass
class TrainerJobConfig:
    """The whole file passed as `--config`."""

    run_dir: str = "runs/default"
    """Local directory or s3://bucket/prefix; holds config.yaml, checkpoints/ and logs/."""
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
