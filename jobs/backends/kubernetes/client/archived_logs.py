"""A rank's log after its pod is gone: the copy Fluent Bit shipped to CloudWatch Logs
(infra/container_logs.py), one stream per `<pod>.<container>` in the stack's log group
(`cluster.log_group`, from the stack's `container_log_group` output).

A PyTorchJob's pods are named by rank, so its stream is asked for by name. A TrainJob's pods
are its JobSet's Indexed Job's, `<jobset>-<replicatedJob>-<jobIndex>-<rank>-<random>`: the
rank's streams are listed by the name up to the random suffix, and the newest one (a restart
leaves one per attempt) is read."""

from __future__ import annotations

import re
from dataclasses import dataclass

from jobs.backends.kubernetes.client.watch import CONTAINER


def stream_name(pod: str, container: str = CONTAINER) -> str:
    """Must match infra/container_logs.py's STREAM_TEMPLATE (`<pod>.<container>`)."""
    return f"{pod}.{container}"


def jobset_pod_prefix(jobset: str, replicated_job: str, rank: int) -> str:
    """The name of a JobSet rank's pods up to their random suffix, ending with the separator so
    run `a`'s prefix is no prefix of run `ab`'s pods (a TrainJob's JobSet has one Job per
    replicated job, index 0, whose completion index is the node rank)."""
    return f"{jobset}-{replicated_job}-0-{rank}-"


class ArchiveError(RuntimeError):
    """CloudWatch Logs could not be read (credentials, permissions, network); one line."""


@dataclass(frozen=True)
class ArchivedLog:
    pod: str
    lines: list[str]
    streams: int = 1
    """How many streams the rank had (more than one after a restart); `pod` is the newest."""


def _errors(client):
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
    )  # lazy: start-up (boto3)

    return client.exceptions.ResourceNotFoundException, (BotoCoreError, ClientError)


def _read(client, log_group: str, stream: str) -> list[str] | None:
    pages = client.get_paginator("filter_log_events").paginate(
        logGroupName=log_group, logStreamNames=[stream]
    )
    events = [event for page in pages for event in page.get("events", [])]
    if not events:
        return None
    events.sort(key=lambda e: (e["timestamp"], e.get("ingestionTime", 0)))
    return [event["message"].rstrip("\n") for event in events]


def archived_log(
    region: str, log_group: str, pod: str, container: str = CONTAINER
) -> ArchivedLog | None:
    """The pod's archived lines in time order, or None when the group has none for it."""
    import boto3  # lazy: start-up (boto3)

    client = boto3.client("logs", region_name=region)
    missing, failed = _errors(client)
    try:
        lines = _read(client, log_group, stream_name(pod, container))
    except missing:
        return None
    except failed as err:
        raise ArchiveError(f"reading log group {log_group} failed: {err}") from err
    return None if lines is None else ArchivedLog(pod, lines)


def archived_log_by_prefix(
    region: str, log_group: str, pod_prefix: str, container: str
) -> ArchivedLog | None:
    """The archived lines of the newest pod named `<pod_prefix><random suffix>`, or None.
    FilterLogEvents is then asked for that one stream by its exact name."""
    import boto3  # lazy: start-up (boto3)

    client = boto3.client("logs", region_name=region)
    missing, failed = _errors(client)
    # Only this container's streams of pods whose names end in one suffix after the prefix.
    own = re.compile(re.escape(pod_prefix) + r"[a-z0-9]+" + re.escape(f".{container}"))
    try:
        pages = client.get_paginator("describe_log_streams").paginate(
            logGroupName=log_group, logStreamNamePrefix=pod_prefix
        )
        streams = [
            s
            for page in pages
            for s in page.get("logStreams", [])
            if own.fullmatch(s["logStreamName"])
        ]
        if not streams:
            return None
        # DescribeLogStreams can't order by time under a prefix: the newest is picked here.
        newest = max(
            streams,
            key=lambda s: (
                s.get("lastEventTimestamp") or 0,
                s.get("creationTime") or 0,
                s["logStreamName"],
            ),
        )
        lines = _read(client, log_group, newest["logStreamName"])
    except missing:
        return None
    except failed as err:
        raise ArchiveError(f"reading log group {log_group} failed: {err}") from err
    if lines is None:
        return None
    pod = newest["logStreamName"].removesuffix(f".{container}")
    return ArchivedLog(pod, lines, streams=len(streams))
