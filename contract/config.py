"""The trainer's configuration: one dataclass per section, every default defined here once.

The trainer reads one YAML file (`--config PATH`) plus `key=value` overrides and merges them
onto `RunConfig` with OmegaConf, so unknown keys and wrong types are errors. The job
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
    "trainer.activation_checkpoint": ("none", "full", "selective", "selective_op"),
    "data.format": ("text", "prompt_completion", "chat"),
    "trainer.export_dtype": ("bf16", "fp32"),
}

# Exit codes the trainer documents (pods and `jobs` read them).
EXIT_OK = 0
EXIT_FAILED = 1
"""A failure retrying may or may not fix (checkpoints that do not save or load, crashes)."""
EXIT_BAD_INPUT = 2
"""Bad configuration or data: retrying will not help."""
EXIT_PREEMPTED = 143
"""Stopped by SIGTERM after writing a checkpoint (128 + SIGTERM): restart to resume. The
training operator's `ExitCode` restart policy treats 128-255 as retryable."""
EXIT_PEER_LOST = 129
"""(`trainer.launch` only) the rendezvous lost its peers or its store (another pod or node
died) and in-pod restarts could not recover: retryable like 143 (128 + SIGHUP: the peer hung
up), so the operator recreates the pod and it rejoins from the last checkpoint."""


@dataclass
class RopeScalingConfig:
    """Llama 3.1's `rope_scaling` (Hugging Face `rope_type: llama3`), as in config.json."""

    factor: float = 8.0
    """Long wavelengths are slowed by this factor."""
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_seq_len: int = 8192
    """The context length the model was pre-trained at (`original_max_position_embeddings`)."""


@dataclass
class LoraConfig:
    """Low-rank adapters over a frozen `model.init_from` (peft's LoRA): only they train, and
    the checkpoints hold only them and their optimizer state."""

    rank: int = 0
    """Rank of each adapter; 0: off (a full fine-tune)."""
    alpha: float = 16.0
    """The adapters' output is scaled by alpha / rank (peft's `lora_alpha`)."""
    dropout: float = 0.0
    """Dropout on the adapters' input during training, in [0, 1)."""
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Hugging Face module names adapted in every block: q_proj, k_proj, v_proj, o_proj,
    gate_proj, up_proj, down_proj (peft's `target_modules`)."""


@dataclass
class ModelConfig:
    """The architecture. Each `conf/model/<option>.yaml` states every field, so a run's
    config.yaml describes its model without the code; a field left null takes the value of
    the preset `name` in `contract.model.args.MODEL_PRESETS` (a trainer config written by
    hand), and a config stating them all needs no preset (`name` is then its label)."""

    name: str | None = "tiny"
    """What the model is called (run ids, plans); a preset name (tiny, llama3_1b, llama3_8b,
    llama3_70b) also fills the fields left null. With `init_from` it may be null (the
    architecture is the checkpoint's config.json); a preset named there must have the
    checkpoint's shape."""
    init_from: str | None = None
    """A Hugging Face model directory (config.json, safetensors, tokenizer files; model_type
    llama, qwen2, qwen3 or mistral), local or
    s3://bucket/prefix: the run starts from its weights (only when the run has no checkpoint
    of its own yet) and takes its architecture from config.json; any field stated here must
    agree with it."""
    dim: int | None = None
    """Hidden size (config.json `hidden_size`)."""
    n_layers: int | None = None
    """Transformer blocks."""
    n_heads: int | None = None
    """Query heads; dim / n_heads is the head dimension."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); divides n_heads."""
    vocab_size: int | None = None
    """Rows of the embedding (and output) matrix; the tokenizer's ids must fit."""
    ffn_hidden_dim: int | None = None
    """Hidden size of the SwiGLU MLP (config.json `intermediate_size`)."""
    max_seq_len: int | None = None
    """Longest sequence the model is made for (`max_position_embeddings`); data.seq_len <= it."""
    norm_eps: float | None = None
    """RMSNorm epsilon (`rms_norm_eps`)."""
    rope_theta: float | None = None
    """RoPE base frequency."""
    tie_embeddings: bool | None = None
    """The output layer reuses the input embedding (`tie_word_embeddings`)."""
    rope_scaling: RopeScalingConfig | None = None
    """Llama 3.1-style long-context RoPE scaling; null: plain RoPE (or the preset's)."""
    family: str | None = None
    """llama, qwen2, qwen3 or mistral (`contract.model.families`): the Hugging Face layout
    the model loads from and exports to; it fixes qkv_bias and qk_norm."""
    head_dim: int | None = None
    """Width of one attention head (config.json `head_dim`; Qwen3's is not dim / n_heads)."""
    qkv_bias: bool | None = None
    """q, k and v projections carry a bias (Qwen2)."""
    qk_norm: bool | None = None
    """RMSNorm over each query and key head before RoPE (Qwen3)."""
    sliding_window: int | None = None
    """A query attends to at most this many keys, itself included (Mistral v0.1); null: all."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA fine-tuning (off unless `lora.rank` > 0)."""


@dataclass
class MixtureSourceConfig:
    path: str = ""
    """A prepared dataset (its manifest.json, or the directory / s3:// prefix holding it)."""
    weight: float = 1.0
    """Share of training samples, relative to the other sources' weights (> 0)."""


@dataclass
class DataConfig:
    path: str | None = "data/sample/train.jsonl"
    """A JSONL file, or a prepared dataset (`trainstack data prepare`'s manifest.json, or the
    directory / s3:// prefix holding it): a local path (relative to the working directory) or
    an s3:// URI. Null with `mixture`."""
    mixture: list[MixtureSourceConfig] = field(default_factory=list)
    """Prepared datasets blended by weight, e.g. [{path: s3://b/web, weight: 3}, {path:
    s3://b/code, weight: 1}]; needs data.path=null. Sample g's source is a function of g."""
    format: str = "text"
    """One of text, prompt_completion, chat. text: every token is trained on (pre-training).
    prompt_completion: `{prompt, completion}` records, loss on the completion only. chat:
    `{messages: [{role, content}, ...]}` rendered with the tokenizer's chat template, loss on
    the assistant turns only. Instruction formats also keep packed documents from attending
    to each other."""
    text_field: str = "text"
    """Key of each JSON line holding the document text (format=text)."""
    prompt_field: str = "prompt"
    """Key holding the prompt (format=prompt_completion)."""
    completion_field: str = "completion"
    """Key holding the completion (format=prompt_completion)."""
    messages_field: str = "messages"
    """Key holding the conversation (format=chat)."""
    tokenizer: str | None = None
    """`byte` (built in, no download), or a Hugging Face tokenizer directory (local or
    s3://). Null: the `model.init_from` directory's tokenizer, or `byte` without one."""
    eos_token: str | None = None
    """The token that ends a document, for a tokenizer whose files name none (null: the
    tokenizer config's eos_token, else its post-processor's)."""
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
    max_consecutive_failures: int = 2
    """A failed save is abandoned and training goes on; this many failed saves in a row end
    the run (as does a failed final or SIGTERM save)."""


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
class ParallelConfig:
    """Data parallelism over a (replicate, shard) mesh: FSDP shards parameters, gradients and
    optimizer state within each group of `dp_shard` ranks, and each group holds a replica
    (HSDP). Shard within a node (dp_shard = GPUs per node) and replicate across nodes, so
    only the gradient all-reduce crosses the slower inter-node network."""

    dp_replicate: int = 1
    """Replicas (groups of ranks holding the whole sharded state)."""
    dp_shard: int = -1
    """Ranks each replica is sharded over; -1: world size / dp_replicate (the default,
    with dp_replicate=1: full sharding over all ranks)."""


@dataclass
class ProfileConfig:
    steps: list[int] = field(default_factory=list)
    """[first, last]: trace optimizer steps first..last (from 1, inclusive) with
    torch.profiler, one Chrome trace per rank (and a CUDA memory snapshot on GPU) under
    <run_dir>/profile/; empty: no profiling."""


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
    """One of none, full, selective, selective_op. selective: recompute every other block;
    selective_op: in every block keep the matmul outputs and recompute the cheap ops around
    them (norms, activations, RoPE)."""
    compile: bool = False
    """torch.compile each transformer block."""
    peak_tflops: float | None = None
    """Peak TFLOP/s (dense bf16) of one device for MFU; null uses the exact GPU table
    (`contract/gpu_peaks.py`). A CPU or an unknown GPU without it logs MFU as null (one note
    at start-up): no table states a CPU's peak."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    collective_timeout_s: int = 600
    """Seconds a collective (gloo or NCCL) waits for its peers before the process group gives
    up and the rank exits, so a hung or lost peer ends in minutes (torch's default: 30 min on
    gloo, 10 on NCCL) and torchrun restarts the ranks from the last checkpoint."""
    export_hf: bool = False
    """At the end, export the final checkpoint as a Hugging Face directory into
    <run_dir>/export/ (config.json, safetensors, tokenizer files)."""
    export_dtype: str = "bf16"
    """bf16 or fp32: the dtype of the exported weights."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume_from: str | None = None
    """Start from another run's committed checkpoint: its run dir (the newest committed step)
    or its `checkpoints/step-N` directory, local or s3:// (`trainstack launch` also takes
    RUN[/step-N] under storage.root). Used only while this run has no committed checkpoint
    of its own: a restart resumes from its own. Takes precedence over model.init_from's
    weights (init_from still gives the architecture and tokenizer)."""
    resume_weights_only: bool = False
    """With resume_from: keep only the model weights; the optimizer, LR schedule, step count,
    data position and RNG start fresh (step 0), as for a new run. False: everything the
    checkpoint holds is restored, so the run continues the source exactly."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


@dataclass
class RunConfig:
    """The whole file passed as `--config`."""

    run_dir: str = "runs/default"
    """Local directory or s3://bucket/prefix; holds config.yaml, checkpoints/ and logs/."""
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


@dataclass
class PeftSettings:
    """`runner.peft` of `runner=hf` (the job schema and the hf runner read this class): LoRA
    adapters through peft, while r > 0."""

    r: int = 0
    """LoRA rank; 0 trains every weight."""
    alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Module names (suffixes) that get adapters."""
