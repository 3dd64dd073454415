"""The Training API: `trainstack serve`, and the same app in the cluster (infra/training_api.py).

Every request that makes a job goes through `jobs.submission.prepare` (compose -> validate ->
materialize) and the kubernetes backend's verbs, exactly as `trainstack launch` does; reads
come from one shared snapshot of the cluster's TrainJobs and PyTorchJobs (snapshot.py).
"""
