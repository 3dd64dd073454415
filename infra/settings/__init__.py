"""A stack's settings, read once and validated before any resource is declared.

- `stack`: `load_stack_config` / `parse_stack_config`, the `trainstack:<key>` map -> `StackConfig`.
- `operations`: the deploy path, the autoscaler, data protection, the Training API and the
  Capacity Block end (parsed like the rest, one `ConfigError` naming the key).
- `reader`: typed access to the raw values; every error names the full key.
- `types`: the frozen dataclasses the components consume.
- `versions`: every version the stack installs.
"""
