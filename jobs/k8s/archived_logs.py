"""A rank's log after its pod is gone: the copy Fluent Bit shipped to CloudWatch Logs
(infra/container_logs.py), one stream per `<pod>.<container>` in the stack's log group
(`cluster.log_group`, from the stack's `container_log_group` output)."""

from __future__ import annotations

from jobs.k8s.watch import CONTAINER


def stream_name(pod: str) -> str:
    """Must match infra/container_logs.py's STREAM_TEMPLATE (`<pod>.<container>`)."""
    return f"{pod}.{CONTAINER}"


class ArchiveError(RuntimeError):
    """CloudWatch Logs could not be read (credentials, permissions, network); one line."""


def archived_log(region: str, log_group: str, pod: str) -> list[str] | None:
    """The pod's archived lines in time order, or None when the group has none for it."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.client("logs", region_name=region)
    try:
        pages = client.get_paginator("filter_log_events").paginate(
            logGroupName=log_group, logStreamNames=[stream_name(pod)]
        )
        events = [event for page in pages for event in page.get("events", [])]
    except client.exceptions.ResourceNotFoundException:
        return None
    except (BotoCoreError, ClientError) as err:
        raise ArchiveError(f"reading log group {log_group} failed: {err}") from err
    if not events:
        return None
    events.sort(key=lambda e: (e["timestamp"], e.get("ingestionTime", 0)))
    return [event["message"].rstrip("\n") for event in events]
