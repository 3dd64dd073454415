"""What the simulated controllers (fake_operator.py, fake_trainer.py) share about the pods they
make: each pod's log (what the apiserver's log endpoint serves) and when it ends. Test-only."""

from __future__ import annotations

from tests.k8s.fake_apiserver import FakeKubeApiServer


class PodLogs:
    pod_label: str
    """The label naming the job a controller's pods belong to."""

    def __init__(self, server: FakeKubeApiServer) -> None:
        self.server = server
        self._logs: dict[str, list[str]] = {}
        self._closed: set[str] = set()

    def log_lines(self, pod_uid: str) -> list[str]:
        return list(self._logs.get(pod_uid, []))

    def log_closed(self, pod_uid: str) -> bool:
        return pod_uid in self._closed

    def _delete_pods(self, job_name: str, namespace: str) -> None:
        selector = {"labels": {self.pod_label: ("=", job_name)}}
        for pod in self.server.list("pods", namespace, selector):
            self._closed.add(pod["metadata"]["uid"])
            self.server.remove("pods", pod["metadata"]["name"], namespace)

    def _uid(self, pod_name: str, namespace: str) -> str:
        pod = self.server.get("pods", pod_name, namespace)
        return pod["metadata"]["uid"] if pod else ""

    def _log(self, pod_name: str, namespace: str, line: str) -> None:
        uid = self._uid(pod_name, namespace)
        if uid:
            self._logs.setdefault(uid, []).append(f"[{pod_name}] {line}")
            with self.server.cond:
                self.server.cond.notify_all()
