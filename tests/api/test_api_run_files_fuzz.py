"""A fuzz pass over what a run's own code writes (hypothesis): metrics.jsonl lines,
config.yaml and job/state.json. Whatever they hold, the readers the API and `trainstack runs`
use never raise, return only what the API can serialize (no NaN, integer steps), and stay
within their bounds of work (each example under a deadline)."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from jobs.api.models import Metrics, Run  # noqa: E402

SETTINGS = settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 2**63, 2**64, 1e308, -0.0, 8.5])
NUMBERS = st.one_of(
    SPECIAL,
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
)
VALUES = st.recursive(
    NUMBERS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(["step", "loss", "eval_loss", "tokens_seen", "mfu/percent", "x"])
RECORDS = st.dictionaries(KEYS, VALUES, max_size=6)


def _line(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


LINES = st.one_of(
    RECORDS.map(_line),
    st.builds(lambda s, loss: _line({"step": s, "loss": loss}), NUMBERS, NUMBERS),
    st.builds(
        lambda s, values: _line({"step": s, **values}),
        st.integers(0, 10**6),
        st.dictionaries(KEYS.filter(lambda k: k != "step"), NUMBERS, max_size=4),
    ),
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(1, 200_000).map(lambda n: b'{"step": 1, "pad": "' + b"x" * n + b'"}'),
    st.integers(1, 50_000).map(lambda n: b"[" * n),
)


def _serializable(payload) -> None:
    json.dumps(payload, allow_nan=False)  # what the API's JSON responses require


@SETTINGS
@given(lines=st.lists(LINES, max_size=30), after=st.one_of(st.none(), st.integers(-5, 10**6)))
def test_metrics_lines_never_fail_a_reader(tmp_path_factory, lines, after):
    from jobs.plot.metrics import LastMetrics, MetricsFile, parse_lines

    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "logs").mkdir()
    body = b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n"
    (run_dir / "logs" / "metrics.jsonl").write_bytes(body)
    step, loss = LastMetrics().get(str(run_dir))
    assert step is None or (isinstance(step, int) and step >= 0)
    assert loss is None or math.isfinite(loss)
    metrics = MetricsFile("r", str(run_dir), refresh_bytes=64 * 1024).refresh()
    records, _ = metrics.page(after, 50)
    assert all(isinstance(r["step"], int) and r["step"] >= 0 for r in records)
    _serializable(Metrics(run_id="r", records=records).model_dump())
    figure = metrics.downsampled(100)
    _serializable([{k: v for k, v in r.items()} for r in figure.records])
    parse_lines(body.decode("utf-8", "replace"))


YAML_TEXT = st.one_of(
    st.text(max_size=300),
    VALUES.map(lambda v: json.dumps({"trainer": v}, allow_nan=True)),
    st.builds(
        lambda depth: "a: &a [" + "[" * depth + "*a" + "]" * depth + "]\n", st.integers(0, 50)
    ),
    st.builds(
        lambda depth: "a: &a {b: " + "{c: " * depth + "*a" + "}" * depth + "}\n", st.integers(0, 50)
    ),
    st.integers(1, 9).map(
        lambda n: (
            "a: &a [1,2,3,4,5,6,7,8,9]\n"
            + "".join(
                f"{c}: &{c} [" + ",".join(["*" + p] * 9) + "]\n"
                for p, c in zip("abcdefgh"[:n], "bcdefghi"[:n], strict=True)
            )
        )
    ),
    st.integers(1, 20_000).map(lambda n: "{" * n + "}" * n),
    st.sampled_from(["!!python/object/apply:os.system ['true']", "x: !!binary AAAA", "? [a]\n: 1"]),
)


@SETTINGS
@given(text=YAML_TEXT)
def test_a_config_yaml_never_fails_a_reader(tmp_path_factory, text):
    from jobs.plot.charts import swept_values
    from jobs.plot.metrics import RunMetrics, max_steps, read_config

    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "config.yaml").write_text(text, errors="surrogatepass")
    config = read_config(str(run_dir))
    assert isinstance(config, dict)
    steps = max_steps(config)
    assert steps is None or (isinstance(steps, int) and steps > 0)
    swept_values([RunMetrics("a", [], config), RunMetrics("b", [], {"trainer": {"lr": 1}})])


STATES = st.one_of(
    st.dictionaries(
        st.sampled_from(["run_id", "state", "nodes", "started_at", "finished_at", "sweep_id"]),
        VALUES,
        max_size=6,
    ).map(lambda d: json.dumps(d, allow_nan=True)),
    st.text(max_size=200),
    VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
)


@SETTINGS
@given(text=STATES)
def test_a_state_json_never_fails_a_reader(tmp_path_factory, text):
    from jobs.backends.run_state import STATE_FILE, read_state, to_status

    run_dir = Path(tmp_path_factory.mktemp("run"))
    (run_dir / STATE_FILE).parent.mkdir(parents=True)
    (run_dir / STATE_FILE).write_text(text, errors="surrogatepass")
    state = read_state(run_dir)
    assert state is None or isinstance(state, dict)
    status = to_status(run_dir, state)
    assert isinstance(status.run_id, str) and isinstance(status.nodes, int)
    Run(
        run_id=status.run_id, state=status.state, sweep_id=status.sweep_id, nodes=status.nodes,
        retries=status.retries, started_at=status.started_at, finished_at=status.finished_at,
        last_step=status.last_step, last_loss=status.last_loss, max_steps=None, progress=None,
        instance_type=None, hourly_usd=None, cost_so_far_usd=None, run_dir=status.run_dir,
        message=status.message,
    )  # fmt: skip
