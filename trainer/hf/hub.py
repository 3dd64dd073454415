"""`model.init_from=hf://org/name[@revision]`: a Hugging Face Hub model, fetched with
huggingface_hub into a local directory (the Hugging Face cache by default) before anything
reads it, then loaded like any local checkpoint. HF_ENDPOINT (a mirror, or the tests' stand-in)
and HF_TOKEN are read when called, not at import."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass

from trainer.errors import ConfigError

SCHEME = "hf://"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}\Z")
HUB_TIMEOUT_S = 10.0
"""How long a launch waits for one answer from the Hub: a hung endpoint fails the launch in one
line instead of holding it (in the Training API, a request) without end."""
MODEL_FILES = ("config.json", "generation_config.json")
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
)


def is_hub(source: str | None) -> bool:
    return bool(source) and source.startswith(SCHEME)  # type: ignore[union-attr]


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str

    @property
    def cache_key(self) -> str:
        """A path segment naming repo and revision (the run storage cache's folder)."""
        return f"{self.repo_id.replace('/', '--')}/{self.revision.replace('/', '--')}"


def parse_hub(source: str) -> HubModel:
    """hf://org/name[@revision] -> HubModel; a malformed id is one line naming the key."""
    body = source.removeprefix(SCHEME)
    repo_id, _, revision = body.partition("@")
    revision = revision or "main"
    # `..` anywhere: huggingface_hub keeps a revision's ref at cache/refs/<revision>.
    if not _REPO.match(repo_id) or ".." in body or not _REVISION.match(revision):
        raise ConfigError(
            f"model.init_from: {source!r} is not a Hub id; allowed: hf://org/name or "
            "hf://org/name@revision (a branch, tag or commit)"
        )
    return HubModel(repo_id, revision)


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def _cache_dir() -> str:
    """huggingface_hub's cache location, read from the environment now (the library reads it
    once at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache", "huggingface"
    )
    return os.path.join(home, "hub")


def check_access(source: str, has_token: bool) -> None:
    """At launch: the repo and revision exist, and a gated repo comes with a token."""
    from huggingface_hub import HfApi  # lazy: huggingface_hub reads HF_* at import
    from huggingface_hub.errors import HfHubHTTPError  # lazy: huggingface_hub reads HF_* at import

    model = parse_hub(source)
    try:
        info = HfApi(endpoint=_endpoint()).model_info(
            model.repo_id, revision=model.revision, token=_token() or False, timeout=HUB_TIMEOUT_S
        )
    except HfHubHTTPError as exc:
        raise ConfigError(f"model.init_from: {source}: {_first_line(exc)}") from None
    except _transport_errors() as exc:
        raise _unreachable(source, exc) from None
    if info.gated and not has_token:
        raise ConfigError(
            f"model.init_from: {model.repo_id} is gated ({info.gated}) and the job has no "
            "token; allowed: set job.secrets.hf_token (a Secret holding an accepted account's "
            "token), or a public repo"
        )


def download(source: str, local_dir: str | None = None) -> str:
    """The model's config, weights and tokenizer files in a local directory (the Hugging Face
    cache unless `local_dir`); returns it. Files already there are not fetched again."""
    from huggingface_hub import hf_hub_download  # lazy: huggingface_hub reads HF_* at import
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
    )  # lazy: huggingface_hub reads HF_* at import

    model = parse_hub(source)

    def fetch(name: str, required: bool) -> str | None:
        try:
            return hf_hub_download(
                model.repo_id, name, revision=model.revision, endpoint=_endpoint(),
                token=_token() or False, local_dir=local_dir, cache_dir=_cache_dir(),
            )  # fmt: skip
        except EntryNotFoundError:
            if required:
                raise ConfigError(f"model.init_from: {source} has no {name}") from None
            return None
        except HfHubHTTPError as exc:
            raise ConfigError(f"model.init_from: {source}: {_first_line(exc)}") from None

    config = fetch("config.json", True)
    for name in (*MODEL_FILES[1:], *TOKENIZER_FILES):
        fetch(name, False)
    index = fetch(INDEX, False)
    if index is None:
        fetch(SINGLE, True)
    else:
        with open(index) as fh:
            shards = sorted(set(json.load(fh)["weight_map"].values()))
        for name in shards:
            fetch(name, True)
    return os.path.dirname(config)  # type: ignore[arg-type]


MAX_CONFIG_BYTES = 1024 * 1024
"""A model's config.json is a few KB: a launch (in the Training API, the API host on a
request's behalf) reads at most this much of it, and more is refused."""


def read_config_bytes(source: str) -> bytes:
    """config.json alone, for planning a job at launch: streamed into memory, at most
    MAX_CONFIG_BYTES, within HUB_TIMEOUT_S per answer; nothing is written (the Training API's
    pod has a read-only root and no home: no Hub cache)."""
    from huggingface_hub import hf_hub_url  # lazy: huggingface_hub reads HF_* at import
    from huggingface_hub.errors import HfHubHTTPError  # lazy: huggingface_hub reads HF_* at import
    from huggingface_hub.utils import (
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )  # lazy: huggingface_hub reads HF_* at import

    model = parse_hub(source)
    url = hf_hub_url(model.repo_id, "config.json", revision=model.revision, endpoint=_endpoint())
    headers = build_hf_headers(token=_token() or False)
    chunks, size = [], 0
    deadline = time.monotonic() + 3 * HUB_TIMEOUT_S  # a trickle is bounded too, in all
    try:
        with get_session().stream(
            "GET", url, headers=headers, timeout=HUB_TIMEOUT_S, follow_redirects=True
        ) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            for chunk in response.iter_bytes():
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError("config.json trickled past the deadline")
                if size > MAX_CONFIG_BYTES:
                    raise ConfigError(
                        f"model.init_from: {source}: config.json is over {MAX_CONFIG_BYTES} "
                        "bytes; allowed: a model's config (a few KB)"
                    )
                chunks.append(chunk)
    except HfHubHTTPError as exc:
        raise ConfigError(f"model.init_from: {source}: {_first_line(exc)}") from None
    except _transport_errors() as exc:
        raise _unreachable(source, exc) from None
    return b"".join(chunks)


def _transport_errors() -> tuple[type[Exception], ...]:
    """Timeouts and refused connections (no HTTP answer at all), from the HTTP client
    huggingface_hub uses (httpx2 in 2.x, httpx before); imported when called."""
    try:
        import httpx2 as client  # lazy: huggingface_hub's HTTP client, with it
    except ImportError:
        import httpx as client  # lazy: huggingface_hub's HTTP client, with it

    return (client.TransportError, OSError)


def _unreachable(source: str, exc: Exception) -> ConfigError:
    return ConfigError(
        f"model.init_from: {source}: the Hub did not answer within {HUB_TIMEOUT_S:g}s "
        f"({type(exc).__name__}); allowed: a reachable Hub (HF_ENDPOINT), a directory or s3://"
    )


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
