"""The Kubernetes double: a fake API server (fake_apiserver) with simulated controllers (PyTorch
operator, Kubeflow Trainer, Kueue, batch Jobs) and a seeded cluster (cluster)."""
