"""Fixtures every suite may use. Kept light: stdlib at import time, moto/boto3 only when a
fixture that needs them runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.s3_server import FaultProxy, MotoS3, s3_env


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1, shared by the session (tests isolate by bucket)."""
    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(moto_s3: MotoS3) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    moto_s3.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_direct(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> MotoS3:
    """boto3 in this process (and children given os.environ) talks straight to moto."""
    for name, value in s3_env(moto_s3.url).items():
        monkeypatch.setenv(name, value)
    return moto_s3


@pytest.fixture
def fault_proxy(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """boto3 talks to moto through a `FaultProxy` (no faults until a rule is set)."""
    proxy = FaultProxy(moto_s3.url).start()
    for name, value in s3_env(proxy.url).items():
        monkeypatch.setenv(name, value)
    yield proxy
    proxy.stop()
