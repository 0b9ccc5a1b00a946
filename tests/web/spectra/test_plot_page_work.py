"""The work a plot-heavy page hands the browser (issue 37 item 10): points per trace, bytes per
plot and queries per page, on DESI-length spectra (7,781 pixels). Asserted as work, never as
seconds; `python -m annotation.bench.plot_pages` prints the times."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from annotation.curation import services as curation_services
from annotation.curation.models import Curation
from annotation.inspections import jobs
from annotation.inspections import services as inspection_services
from annotation.inspections.models import Candidate
from annotation.rating import services as rating_services
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra.models import Task
from tests.factories import (
    ScriptedPolicy,
    UserFactory,
    answer_turn,
    make_spectrum,
    make_trajectory,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db

DESI_PIXELS = 7781
# A plot shows at most 1,000 pixel columns: its lowest and highest pixel (and a gap) each.
MAX_POINTS = 3000
MAX_TRACE_BYTES = 4 * MAX_POINTS * 10  # four traces of <= 3,000 values of <= 9 characters
MAX_QUERIES = 40
JSON_SCRIPT = re.compile(r'<script id="([\w-]+)" type="application/json">(.*?)</script>', re.S)
TRACES = ("wavelength", "flux", "lower", "upper")


def plots_of(body: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """{json_script id: (bytes of its traces, data)} of the spectrum plots a page ships."""
    found = {}
    for name, text in JSON_SCRIPT.findall(body):
        data = json.loads(text)
        if isinstance(data, dict) and "flux" in data and "wavelength" in data:
            traces = {trace: data[trace] for trace in TRACES}
            found[name] = (len(json.dumps(traces, separators=(",", ":"))), data)
    return found


def long_spectrum(object_id: str, seed: int, task: Task) -> Any:
    return make_spectrum(object_id=object_id, seed=seed, task=task, n_pixels=DESI_PIXELS)


@pytest.fixture
def cv(db) -> Task:
    return Task.objects.get(code="CV")


@pytest.fixture
def campaign(cv, rater, staff_user) -> Any:
    shared = long_spectrum("PAIR-1", 0, cv)
    sources = [
        rating_services.RatingSource(
            source=f"plot-work:{i}",
            data=curation_services.trajectory_to_stored(make_trajectory(row)),
            policy_name=("model-a", "model-b")[i % 2],
            task=cv,
            spectrum=row,
            dataset="DESI",
        )
        for i, row in enumerate([shared, shared])  # a pair is two runs on one spectrum
    ]
    made = rating_services.campaign_create(
        name="plot work",
        raters=[rater],
        raters_per_item=1,
        sources=sources,
        created_by=staff_user,
        seed=3,
    )
    left, right = list(made.items.order_by("source"))
    rating_services.campaign_add_pairs(
        campaign=made, pairs=[(left, right)], raters_per_pair=1, actor=None
    )
    return made


@pytest.fixture
def staff_user(db) -> Any:
    return UserFactory(username="stella", is_staff=True)


@pytest.fixture
def unsure_candidate(cv, expert, monkeypatch, django_capture_on_commit_callbacks) -> Candidate:
    """A candidate on a DESI-length spectrum waiting for an expert, the agent having looked at
    one window."""
    row = long_spectrum("VET-1", 4, cv)
    turns = [tool_call_turn(6500, 6630, "H-alpha"), answer_turn("NO")]
    monkeypatch.setattr(jobs, "policy_for", lambda spec, sampling=None: ScriptedPolicy(turns, 0.6))
    with django_capture_on_commit_callbacks(execute=True):
        run = inspection_services.inspection_run_create(
            task=cv,
            spectrum_ids=[row.pk],
            policy_spec={"kind": "rule-based"},
            created_by=expert,
            confidence_threshold=0.75,
        )
    (candidate,) = run.candidates.all()
    assert candidate.needs_expert  # 0.6 under the run's 0.75: it waits in the vetting queue
    return candidate


def visit(
    user: Any,
    url: str,
    expected_plots: int,
    django_assert_max_num_queries: Any,
    *,
    fit_later: bool = False,
) -> dict[str, tuple[int, dict[str, Any]]]:
    client = Client()
    client.force_login(user)
    client.get(url)  # warm: the per-process caches (templates, tools), as a serving worker has
    # The redshift fit's template library is not the page's work: the viewer's pages where a
    # decision is made ask for the fit once drawn (a worker's first read of the library took
    # 0.8 s on a quiet machine, the queue's 14.9 s load event on a loaded one).
    spectra_selectors._template_set.clear()
    with django_assert_max_num_queries(MAX_QUERIES):
        response = client.get(url)
    assert response.status_code == 200, url
    if fit_later:  # the spectrum page draws the fit with the plot: it reads the library
        assert not spectra_selectors._template_set, f"{url} read the redshift template library"
    plots = plots_of(response.content.decode())
    assert len(plots) == expected_plots, (url, sorted(plots))
    for name, (size, data) in plots.items():
        assert data["n_pixels"] == DESI_PIXELS and data["decimated"] is True, name
        for trace in TRACES:
            assert data[trace] is None or len(data[trace]) <= MAX_POINTS, (name, trace)
        assert len(data["flux"]) > MAX_POINTS // 2  # thinned to the columns, not beyond
        assert size <= MAX_TRACE_BYTES, (name, size)
    return plots


def test_it_keeps_the_page_plots_to_what_a_plot_can_show() -> None:
    assert settings.SPECTRUM_PLOT_MAX_POINTS <= MAX_POINTS


def test_it_sends_the_rating_page_one_thinned_plot(
    campaign, rater, django_assert_max_num_queries
) -> None:
    visit(rater, reverse("rating_rate", args=[campaign.pk]), 1, django_assert_max_num_queries)


def test_it_sends_the_pairs_page_two_thinned_plots(
    campaign, rater, django_assert_max_num_queries
) -> None:
    plots = visit(
        rater, reverse("rating_pairs", args=[campaign.pk]), 2, django_assert_max_num_queries
    )
    assert sorted(plots) == ["plot-left", "plot-right"]


def test_it_lets_a_rating_plot_zoom_to_full_resolution_by_blind_id(
    campaign, rater, django_assert_max_num_queries
) -> None:
    """Issue 37 (b): the rating and pairs plots are thinned; a zoom asks for the window's own
    pixels by the item's blind id (the spectrum's URL would lead back to the run)."""
    rate = visit(
        rater, reverse("rating_rate", args=[campaign.pk]), 1, django_assert_max_num_queries
    )
    pairs = visit(
        rater, reverse("rating_pairs", args=[campaign.pk]), 2, django_assert_max_num_queries
    )
    urls = {data["zoom_url"] for _, data in [*rate.values(), *pairs.values()]}
    items = {item.blind_id: item for item in campaign.items.all()}
    assert urls == {
        reverse("api_rating_item_plot", args=[campaign.pk, blind_id]) for blind_id in items
    }
    (_, data), *_ = rate.values()
    item = next(i for b, i in items.items() if data["zoom_url"].endswith(f"/{b}/plot/"))
    assert f"/spectra/{item.spectrum_id}/" not in data["zoom_url"]
    client = Client()
    client.force_login(rater)
    window = client.get(data["zoom_url"], {"lo": 6500, "hi": 6700}).json()
    wave = spectra_selectors.spectrum_plot_arrays(item.spectrum)[0]
    assert window["decimated"] is False
    assert window["n_pixels"] == len(window["flux"]) > 100  # every pixel of the window
    assert abs(window["n_pixels"] - np.count_nonzero((wave >= 6500) & (wave <= 6700))) <= 2
    assert "object_id" not in window and "zoom_url" not in window
    # Raters of another campaign, or none, do not get the item's pixels.
    other: Any = UserFactory(username="someone", roles=["rater"])
    client.force_login(other)
    assert client.get(data["zoom_url"], {"lo": 6500, "hi": 6700}).status_code == 404


def test_it_sends_the_screening_page_one_thinned_plot(
    cv, expert, django_assert_max_num_queries
) -> None:
    row = long_spectrum("SCREEN-1", 2, cv)
    curation: Curation = curation_services.curation_create(
        spectrum=row,
        task=cv,
        trajectory=make_trajectory(row),
        ground_truth="YES",
        teacher={"name": "scripted"},
    )
    url = reverse("curation_screen", args=[curation.pk])
    visit(expert, url, 1, django_assert_max_num_queries)


def test_it_sends_the_spectrum_page_one_thinned_plot_and_a_zoom_url(
    cv, expert, django_assert_max_num_queries
) -> None:
    row = long_spectrum("PAGE-1", 3, cv)
    url = reverse("spectrum_detail", args=[row.pk])
    plots = visit(expert, url, 1, django_assert_max_num_queries)
    (_, data), *_ = plots.values()
    assert data["zoom_url"] == reverse("api_spectrum_plot", args=[row.pk])


VIEWER_PAGE_MAX_BYTES = 120_000  # the plot and the viewer (task template, lines), no fit


def visit_viewer(user: Any, url: str, django_assert_max_num_queries: Any) -> dict[str, Any]:
    """A page with the whole viewer where a decision is made: one thinned plot, the fit left to
    its URL, the page's HTML under VIEWER_PAGE_MAX_BYTES."""
    plots = visit(user, url, 1, django_assert_max_num_queries, fit_later=True)
    (_, data), *_ = plots.values()
    assert data["viewer"]["redshift_fit"] is None and data["viewer"]["redshift_fit_url"]
    assert data["viewer"]["compare"]["templates"] is None  # they come with the fit
    client = Client()
    client.force_login(user)
    body = client.get(url).content
    assert len(body) <= VIEWER_PAGE_MAX_BYTES, (url, len(body))
    print(f"\n{url}: page {len(body) / 1000:.0f} kB, plot {len(data['flux'])} points")
    return data


def test_it_keeps_the_vetting_queues_work_small(
    unsure_candidate, expert, django_assert_max_num_queries
) -> None:
    visit_viewer(expert, reverse("vetting_queue"), django_assert_max_num_queries)


def test_it_keeps_the_candidates_page_in_the_queue_small(
    unsure_candidate, expert, django_assert_max_num_queries
) -> None:
    url = f"{reverse('vetting_queue')}?candidate={unsure_candidate.pk}"
    data = visit_viewer(expert, url, django_assert_max_num_queries)
    assert data["inspected"] == [[6500.0, 6630.0]]


def test_it_keeps_the_live_page_small(
    unsure_candidate, expert, django_assert_max_num_queries
) -> None:
    url = reverse("candidate_live", args=[unsure_candidate.pk])
    visit_viewer(expert, url, django_assert_max_num_queries)


def test_it_sends_the_viewers_template_choices_with_the_fit(unsure_candidate, expert) -> None:
    client = Client()
    client.force_login(expert)
    fit = client.get(reverse("spectrum_viewer_fit", args=[unsure_candidate.spectrum_id])).json()
    choices = fit["template_choices"]
    assert choices and [c["index"] for c in choices] == list(range(len(choices)))
    assert {c["kind"] for c in choices} >= {"star", "galaxy", "qso"}


def test_it_loads_one_small_plotly_bundle_without_eval() -> None:
    """Each browser's first plot page parses the bundle before drawing: the cartesian partial
    bundle (1.5 MB; the strict full build was 5.2 MB), no `eval` for the Content-Security-Policy."""
    root = Path(settings.BASE_DIR)
    (bundle,) = sorted((root / "static" / "vendor").glob("plotly-*.min.js"))
    assert bundle.stat().st_size < 2_000_000
    assert "new Function" not in bundle.read_text()
    loading = [t for t in (root / "templates").rglob("*.html") if "vendor/plotly-" in t.read_text()]
    assert loading and all(f"vendor/{bundle.name}" in t.read_text() for t in loading)
