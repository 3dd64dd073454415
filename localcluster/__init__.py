"""A real Kubernetes control plane on this machine, without Docker: `make cluster-up`.

The upstream components (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
JobSet, Kubeflow Trainer, Kueue, the Training Operator and KubeRay's operator) are built from
their own Go modules at the versions infra/settings/versions.py pins (`build`), started as local
processes on 127.0.0.1 (`up`), and given what `pulumi up` installs into a cluster, taken from the
same pure functions infra uses (`install`). Pods are simulated by kwok: no container runs, no
CNI enforces NetworkPolicies; a RayJob's Ray head is stood in for by `ray_dashboard`, which
answers the operator's Jobs API calls from the RayJob's submitter pod.

Not part of the wheel (pyproject's package list leaves this folder out): a development and CI
tool, and nothing Go-built ever ships.
"""
