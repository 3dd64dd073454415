"""`trainstack serve` as its own process (uvicorn, as in the cluster), for tests and benchmarks
that kill it or load it: started on a free loopback port with the overrides given, its output
in a log file, stopped (or SIGKILLed) by its own pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ApiProcess:
    """One `trainstack serve` process; `start()` again after `kill()` is a restart on the same
    port (a new log section: `log()` reads what this start wrote)."""

    def __init__(
        self, token_hashes: Path, overrides: list[str], log_dir: Path, cwd: Path | None = None
    ):
        port = free_port()
        command = [sys.executable, "-m", "jobs.cli", "serve", "--port", str(port)]
        command += ["--token-hashes", str(token_hashes), *overrides]
        self._setup(command, f"http://127.0.0.1:{port}", log_dir, cwd)

    @classmethod
    def of_command(
        cls,
        command: list[str],
        url: str,
        log_dir: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        verify: str | bool = True,
    ) -> ApiProcess:
        """A `trainstack serve` started with `command` as it is (the stack's deployed
        arguments: tests/e2e/test_e2e_serve.py `deployed_process`), answering at `url`
        (https: `verify` is the CA that signed its certificate), with `env` on each start."""
        api = cls.__new__(cls)
        api._setup(command, url, log_dir, cwd, env, verify)
        return api

    def _setup(self, command, url, log_dir, cwd, env=None, verify: str | bool = True) -> None:
        self.command, self.url = command, url
        self.port = int(url.rsplit(":", 1)[1])
        self.env, self.verify = env or {}, verify
        self.log_dir, self.cwd = log_dir, cwd or log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log_path: Path | None = None

    def start(self, env: dict[str, str] | None = None, timeout_s: float = 120) -> ApiProcess:
        self.starts += 1
        self._log_path = self.log_dir / f"serve-{self.starts}.log"
        with self._log_path.open("w") as log:
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(env or {})},
            )
        self.wait_for(lambda: self._healthy(), timeout_s, "healthy")
        return self

    def log(self) -> str:
        return self._log_path.read_text() if self._log_path else ""

    def wait_for(self, condition, timeout_s: float = 60, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"trainstack serve exited {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"trainstack serve: not {what} in {timeout_s:.0f} s: {self.log()}"
                )
            time.sleep(0.05)

    def wait_for_line(self, text: str, timeout_s: float = 60) -> None:
        self.wait_for(lambda: text in self.log(), timeout_s, f"showing {text!r}")

    def _healthy(self) -> bool:
        import httpx  # lazy: httpx, for the callers that talk to it

        try:
            response = httpx.get(f"{self.url}/healthz", timeout=2, verify=self.verify)
            return response.status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL, by its pid: no handler, no shutdown, no finally."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
