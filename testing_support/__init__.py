"""Test doubles and builders that tests/ and benchmarks/ share: an S3 server with fault
injection, a Kubernetes API server with simulated operators, strict CRD schemas, small Hugging
Face checkpoints, shared overrides. Not shipped in the wheel."""
