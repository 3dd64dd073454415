"""Talking to the cluster: the kubernetes backend's pieces, one concern per module.

`api` (client setup, error translation, bounded retries), `state` (what a PyTorchJob object
says: state, retries, cancellation, pod per rank), `submit` (idempotent apply/resume),
`preflight`, `watch` (conditions and logs), `ecr` (tag -> digest). Only the official
`kubernetes` client is used, imported lazily so that rendering jobs never loads it.
"""
