"""`trainstack serve-model` here: a small OpenAI-compatible server over transformers on the
CPU (or one GPU), enough for lm-eval's `local-completions` (echo + logprobs) and for chat.
On a cluster the same API is vLLM's."""
