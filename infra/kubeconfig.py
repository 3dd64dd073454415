"""A kubeconfig for an EKS cluster that authenticates with `aws eks get-token` (no static
credentials: whoever uses it needs AWS credentials mapped by an access entry)."""

from __future__ import annotations

import json


def eks_kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """JSON (valid YAML) with one cluster, user and context, all named after the cluster."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
            }
        ],
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": [
                            "eks",
                            "get-token",
                            "--cluster-name",
                            cluster_name,
                            "--region",
                            region,
                            "--output",
                            "json",
                        ],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [
            {"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}
        ],
        "current-context": cluster_name,
    }
    return json.dumps(config, indent=2)
