"""An expert starts a rule-based inspection run and watches the agent's steps arrive (live view).

The run's jobs go to Celery's in-memory broker instead of running inside the request, and the
test plays the worker once the pages are open, so the pages' polling is what brings the steps in.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from playwright.sync_api import expect

from annotation.inspections import tasks
from annotation.inspections.models import Candidate, InspectionRun
from annotation.spectra.models import Task
from tests.e2e.conftest import BrowserPages
from tests.factories import UserFactory, make_spectrum
from webapp.celery import app

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def queued_jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Jobs wait in the in-memory broker (as they would for a real worker)."""
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    yield
    with contextlib.suppress(Exception):  # leave no message behind for later tests
        app.control.purge()


@pytest.fixture
def worker_lock(live_server: Any) -> Iterator[contextlib.AbstractContextManager[Any]]:
    """What the worker must hold while it writes.

    SQLite's in-memory test database is one connection, shared by the test and the live server's
    threads: there the server answers no request while the worker writes (the pages still poll
    and see the steps arrive). PostgreSQL needs nothing: the worker and the pages run concurrently.
    """
    if connection.vendor != "sqlite":
        yield contextlib.nullcontext()
        return
    lock = threading.Lock()
    httpd = live_server.thread.httpd
    app: Callable[..., Any] = httpd.get_app()

    def one_at_a_time(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with lock:
            return app(environ, start_response)

    httpd.set_app(one_at_a_time)
    try:
        yield lock
    finally:
        httpd.set_app(app)


def play_worker(run: InspectionRun, lock: contextlib.AbstractContextManager[Any]) -> None:
    for candidate in run.candidates.order_by("pk"):
        with lock:
            tasks.run_candidate.apply(args=[candidate.pk], throw=True)


def test_it_starts_a_rule_based_run_and_shows_the_steps_as_they_arrive(
    pages: BrowserPages, queued_jobs: None, worker_lock: contextlib.AbstractContextManager[Any]
) -> None:
    cv = Task.objects.get(code="CV")
    make_spectrum(object_id="POS", task=cv, label="YES", seed=1, line_amplitude=3.0)
    make_spectrum(object_id="NEG", task=cv, label="NO", seed=2, line_amplitude=0.0)
    run_page = pages.open("leavitt", UserFactory(username="leavitt", roles=["ml_engineer"]))

    run_page.goto("/inspections/new/")
    run_page.locator("#id_name").fill("browser run")
    run_page.locator("#id_task").select_option("CV")
    expect(run_page.locator("#id_policy")).to_have_value("rule-based")
    run_page.get_by_role("button", name="Start run").click()
    expect(run_page).to_have_url(re.compile(r"/inspections/\d+/$"))
    progress = run_page.locator("#progress")
    expect(progress).to_contain_text("0 done")
    expect(progress).to_contain_text("of 2")

    live = pages.tab("live", run_page)
    live.goto(run_page.get_by_role("link", name="POS").get_attribute("href") or "")
    expect(live.locator("#spectrum-plot.js-plotly-plot")).to_be_attached()
    steps = live.locator("#steps .step")
    expect(steps).to_have_count(0)
    expect(live.locator("#outcome")).not_to_contain_text("Verdict")
    pages.assert_clean()

    run = InspectionRun.objects.get()
    play_worker(run, worker_lock)

    # The live page's poller brings the steps in, then the "finished" event the verdict.
    candidate = Candidate.objects.get(spectrum__object_id="POS")
    expect(steps).to_have_count(candidate.live_steps.count())
    expect(steps.first.locator(".tool-call")).to_contain_text("spectral_visualization_tool")
    expect(steps.first.locator("img.tool-png")).to_have_js_property("complete", True)
    # Issue 26: the viewer's "Inspected windows" follow the steps without a reload.
    windows = live.locator("#steps [data-shown-range]").count()
    assert windows > 0
    expect(live.locator("[data-viewer=inspected] .inspected-chip")).to_have_count(windows)
    expect(live.locator("[data-viewer=inspected-empty]")).to_be_hidden()
    # A step that arrives while the page is open (what the poller's swap does) adds its window.
    live.evaluate(
        "() => { const steps = document.getElementById('steps');"
        " steps.insertAdjacentHTML('beforeend',"
        ' \'<article class="step card" data-shown-range="4820.0,4905.0"></article>\');'
        " document.body.dispatchEvent(new CustomEvent('htmx:afterSettle',"
        " { bubbles: true, detail: { target: steps } })); }"
    )
    expect(live.locator("[data-viewer=inspected] .inspected-chip")).to_have_count(windows + 1)
    expect(live.locator("[data-viewer=inspected] .inspected-chip").last).to_contain_text("4820")
    expect(live.locator("#outcome")).to_contain_text(f"Verdict: {candidate.verdict}")
    # The run page's progress poll sees the end and reloads with the metrics and their charts.
    expect(progress).to_contain_text("2 done")
    expect(run_page.locator("#reliability-plot.js-plotly-plot")).to_be_attached()
    expect(run_page.locator("#coverage-plot.js-plotly-plot")).to_be_attached()
    pages.assert_clean()
    assert run.name == "browser run" and run.policy_spec["kind"] == "rule-based"
