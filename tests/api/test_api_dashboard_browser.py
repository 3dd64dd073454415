"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium against
the API on the fake cluster and run dirs with metrics. Pages load without console errors, the
charts hold the run's points (and grow while it trains), screenshots are kept as artifacts
under tests/artifacts/dashboard/ (ignored by git)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from testing_support.k8s.fake_operator import JobPlan
from tests.api.conftest import TOKEN
from tests.api.test_api_runs import wait_for

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


@pytest.fixture
def browser(tmp_path):
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are missing: `make install` installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def write_metrics(run_dir: Path, steps, max_steps: int = 100, lr: float = 1e-3) -> list[dict]:
    records = []
    for step in steps:
        records.append(
            {
                "step": step,
                "loss": 5.0 / (1 + step / 10),
                "tokens_seen": 4096 * step,
                "throughput/tokens_per_s": 1000.0 + step,
                "mfu/percent": 30.0 + step / 100,
                "memory/max_rss_gib": 1.5,
            }
        )
        if step % 20 == 0:
            records.append({"step": step, "eval_loss": 5.2 / (1 + step / 10)})
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    with (run_dir / "logs" / "metrics.jsonl").open("a") as out:
        out.writelines(json.dumps(r) + "\n" for r in records)
    (run_dir / "config.yaml").write_text(
        f"trainer:\n  max_steps: {max_steps}\n  lr: {lr}\nmodel:\n  name: tiny\n"
    )
    return records


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def points(driver, chart: str) -> list[int]:
    """x-values per series of a drawn chart (uPlot's aligned data, gaps left out)."""
    return driver.execute_script(
        "const p = window.trainstackPlots[arguments[0]];"
        "return p ? p.data.slice(1).map(s => s.filter(v => v != null).length) : null;",
        chart,
    )


def wait_until(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)
    return value


def shot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def test_dashboard_runs_run_page_live_and_sweep(api, apiserver, browser, monkeypatch):
    from jobs.api import dashboard

    monkeypatch.setattr(dashboard, "POLL_MS", 300)
    apiserver.operator.plans["live1"] = [JobPlan(hold=True)]
    first = write_metrics(api.runs_root / "live1", range(10, 60, 10))
    assert api.client.post("/v1/runs", json=api.run_request("live1")).status_code == 201
    sweep = {
        "overrides": [
            "compute=p4d.24xlarge",
            "job.image=registry.example.com/trainer:v1",
            "trainer.lr=1e-3,1e-2",
        ],
        "sweep_id": "swd",
    }
    for index, lr in enumerate((1e-3, 1e-2)):
        write_metrics(api.runs_root / f"swd-{index}", range(10, 110, 10), lr=lr)
    assert api.client.post("/v1/sweeps", json=sweep).status_code == 201
    # The runs list is a snapshot at most about two ttls old: wait until it shows live1 up.
    wait_for(lambda: api.client.get("/v1/runs/live1").json()["state"] == "running")

    # Signing in: a page asked for without a session is the sign-in form (401); it sets the
    # session cookie and returns to that page.
    browser.get(f"{api.url}/")
    browser.find_element("id", "token").send_keys(TOKEN)
    browser.find_element("id", "sign-in").click()
    wait_until(lambda: browser.find_elements("id", "runs"))
    assert [e for e in console_errors(browser) if "401" not in e] == []  # the form's own 401
    cookie = browser.get_cookie("trainstack_session")
    assert cookie["httpOnly"] and cookie["value"] != TOKEN
    rows = {
        r.get_attribute("data-run") for r in browser.find_elements("css selector", "tr[data-run]")
    }
    assert rows == {"live1", "swd-0", "swd-1"}
    live_row = browser.find_element("css selector", 'tr[data-run="live1"]').text
    assert "running" in live_row and "50/100" in live_row and "$" in live_row
    shot(browser, "runs")
    assert console_errors(browser) == []

    # Two scored checkpoints (one task name is markup a run's own results.json could hold).
    for step, acc in ((20, 0.25), (40, 0.5)):
        folder = api.runs_root / "live1" / "eval" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        scores = {"ts_mc": {"acc,none": acc}, "<b>bold</b>": {"acc,none": 1.0}}
        (folder / "results.json").write_text(json.dumps({"results": scores}))
    browser.find_element("link text", "live1").click()
    charts = wait_until(lambda: browser.find_elements("css selector", "#charts[data-loaded]"))[0]
    table = browser.find_element("id", "evals")
    assert table.find_elements("css selector", "b") == []  # the name shows as text
    assert [r.text for r in table.find_elements("css selector", "tr[data-step]")] == [
        "40 export ts_mc acc 0.5000",
        "40 export <b>bold</b> acc 1.0000",
        "20 export ts_mc acc 0.2500",
        "20 export <b>bold</b> acc 1.0000",
    ]
    assert points(browser, "eval_scores") == [2, 2]  # beside the loss: a series per task
    train_points = sum(1 for r in first if "loss" in r)
    eval_points = sum(1 for r in first if "eval_loss" in r)
    assert points(browser, "loss_step") == [train_points, eval_points]
    assert points(browser, "loss_tokens") == [train_points, eval_points]
    assert points(browser, "throughput") == [train_points]
    assert points(browser, "mfu") == [train_points]
    assert points(browser, "memory") == [train_points]
    # Evaluation looks unlike training: dashed, a marker on every point, its own label.
    styles = browser.execute_script(
        "return window.trainstackPlots.loss_step.series.slice(1)"
        ".map(s => [s.label, Array.isArray(s.dash) && s.dash.length > 0, s.points.size]);"
    )
    assert styles == [["live1 train loss", False, 5], ["live1 eval loss", True, 7]]
    shot(browser, "run-before")
    # The run trains on: new lines show up without a reload.
    more = write_metrics(api.runs_root / "live1", range(60, 90, 10))
    train_points += sum(1 for r in more if "loss" in r)
    eval_points += sum(1 for r in more if "eval_loss" in r)
    wait_until(lambda: points(browser, "loss_step") == [train_points, eval_points])
    assert int(charts.get_attribute("data-loaded")) > 1
    shot(browser, "run-live")
    assert console_errors(browser) == []

    browser.get(f"{api.url}/sweeps/swd")
    wait_until(lambda: browser.find_elements("css selector", "#charts[data-loaded]"))
    assert points(browser, "loss_step") == [10, 5, 10, 5]  # two runs x (train, eval)
    labels = browser.execute_script(
        "return window.trainstackFigure.runs.map(r => [r.label, r.color]);"
    )
    assert [label for label, _ in labels] == [
        "swd-0 (trainer.lr=0.001)",
        "swd-1 (trainer.lr=0.01)",
    ]
    assert labels[0][1] != labels[1][1]  # coloured by the swept value
    shot(browser, "sweep")
    assert console_errors(browser) == []
