"""`runner=hf`: Hugging Face `transformers.Trainer` for any `AutoModelForCausalLM` checkpoint,
driven by the built-in trainer's keys where they mean the same thing (`settings.py`), reading
the same data pipeline (`data.py`), resuming from its newest complete `checkpoint-N`
(`checkpoints.py`), and writing an HF export at the end (`train.py`).

Needs the `hf-runner` extra (transformers, accelerate, peft): the trainer image's `-hf`
variant. `python -m trainer.runners.hf --config PATH` under torchrun."""
