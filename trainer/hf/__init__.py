"""Hugging Face checkpoints in and out: config.json, safetensors weights, export."""
