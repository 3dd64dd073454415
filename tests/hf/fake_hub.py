"""A stand-in for the Hugging Face Hub on 127.0.0.1 (HF_ENDPOINT points at it), serving model
directories built in the test: the model-info API and `resolve` downloads with the headers
huggingface_hub reads (X-Repo-Commit, ETag, Content-Length, X-Error-Code). A gated repo
answers downloads without a bearer token with 401 GatedRepo. Nothing leaves the machine."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


@dataclass
class Repo:
    directory: Path
    revisions: dict[str, str]
    """branch or tag -> 40-hex commit sha"""
    gated: bool = False
    token: str = "hf_test_token"


@dataclass
class FakeHub:
    url: str
    repos: dict[str, Repo]
    downloads: list[str] = field(default_factory=list)
    """Every file GET served, as repo/file."""


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _error(self, status: int, code: str) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            payload = json.dumps({"error": code}).encode()
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(payload)

        def _repo(self, repo_id: str, revision: str) -> tuple[Repo, str] | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound")
                return None
            commits = set(repo.revisions.values())
            sha = repo.revisions.get(revision, revision if revision in commits else None)
            if sha is None:
                self._error(404, "RevisionNotFound")
                return None
            return repo, sha

        def _serve(self, body: bool) -> None:
            path = unquote(self.path.split("?", 1)[0])
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and "revision" in parts:
                at = parts.index("revision")
                found = self._repo("/".join(parts[2:at]), "/".join(parts[at + 1 :]))
                if found is None:
                    return
                repo, sha = found
                files = sorted(p.name for p in repo.directory.iterdir() if p.is_file())
                info = {"id": "/".join(parts[2:at]), "sha": sha, "private": False,
                        "gated": "manual" if repo.gated else False,
                        "siblings": [{"rfilename": f} for f in files]}  # fmt: skip
                self._send(json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
                return
            if len(parts) >= 5 and parts[2] == "resolve":
                repo_id, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
                found = self._repo(repo_id, revision)
                if found is None:
                    return
                repo, sha = found
                if repo.gated and self.headers.get("Authorization") != f"Bearer {repo.token}":
                    self._error(401, "GatedRepo")
                    return
                file = repo.directory / name
                if not file.is_file():
                    self._error(404, "EntryNotFound")
                    return
                data = file.read_bytes()
                headers = {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
                if body:
                    hub.downloads.append(f"{repo_id}/{name}")
                self._send(data, headers, body)
                return
            self._error(404, "RepoNotFound")

        def _send(self, data: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


@contextmanager
def fake_hub(repos: dict[str, Repo]) -> Iterator[FakeHub]:
    """The Hub on a free port of 127.0.0.1 for the block; stopped and closed after it."""
    hub = FakeHub("", repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
