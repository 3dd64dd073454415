"""The Pulumi program that provisions trainstack's AWS side (`Pulumi.yaml` at the repo root).

`__main__.py` wires one ComponentResource per concern; `config.py` validates every setting
first. `stack_defaults.py` turns a stack's outputs into job config defaults.
"""
