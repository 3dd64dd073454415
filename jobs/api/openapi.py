"""`python -m jobs.api.openapi > docs/openapi.json`: the API's schema, as checked into docs/
(tests/api compare it with what the app serves)."""

from __future__ import annotations

import json
import sys

from jobs.api.app import create_app
from jobs.api.service import Service


def schema() -> dict:
    return create_app(Service(), tokens=None).openapi()


if __name__ == "__main__":
    sys.stdout.write(json.dumps(schema(), indent=2, sort_keys=True) + "\n")
