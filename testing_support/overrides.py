"""Hydra overrides the trainer tests and benchmarks share."""

# A ~70k-parameter model on short sequences: a step takes milliseconds, so each run costs
# little more than process start-up. Every step is logged, for bit-for-bit comparisons.
SMALL_MODEL = [
    "model.dim=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_hidden_dim=128",
    "data.seq_len=32",
    "trainer.micro_batch_size=2",
    "trainer.warmup_steps=2",
    "trainer.log_interval=1",
    "trainer.eval_interval=0",
    "trainer.max_steps=8",
    "trainer.peak_tflops=0.1",  # a stated peak: MFU is logged (null on CPU without one)
]
