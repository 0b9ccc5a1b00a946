"""The catalog list (filters, sorting, capped pagination, htmx), the detail page, the images
it shows and the catalog APIs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.catalog import selectors as catalog
from annotation.core.models import ImageBlob
from annotation.inspections import jobs, services
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.rating.models import CampaignItem, RatingAssignment, RatingCampaign
from annotation.spectra.models import Task
from tests.factories import (
    ScriptedPolicy,
    UserFactory,
    answer_turn,
    make_spectrum,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def make_run(name: str = "run", **fields) -> InspectionRun:
    fields.setdefault("policy_spec", {"kind": "rule-based"})
    return InspectionRun.objects.create(name=name, task=Task.objects.get(code="CV"), **fields)


def make_entry(run: InspectionRun, object_id: str, **fields) -> CatalogEntry:
    values = {
        "survey": "LAMOST",
        "ra": 10.0,
        "dec": 20.0,
        "task_code": "CV",
        "verdict": "YES",
        "confidence": 0.9,
        "snr": 30.0,
        "policy_name": "rule-based",
        **fields,
    }
    return CatalogEntry.objects.create(run=run, object_id=object_id, **values)


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()  # the survey choices are cached between requests


@pytest.fixture
def run(db):
    return make_run()


@pytest.fixture
def six_entries(run):
    """Six rows that differ in one attribute each from the baseline row A."""
    other_run = make_run("other")
    return {
        "A": make_entry(run, "A-1"),
        "B": make_entry(run, "B-1", task_code="WD", verdict="NO", confidence=0.3),
        "C": make_entry(run, "C-1", survey="SDSS", snr=4.0),
        "D": make_entry(run, "D-1", expert_decision="NO", confidence=0.55),
        "E": make_entry(run, "E-1", synthetic=True, verdict="", confidence=0.0),
        "F": make_entry(other_run, "A-2", expert_decision="unsure", snr=None),
    }


def listed_ids(response) -> list[str]:
    return [entry.object_id for entry in response.context["page"].entries]


def test_it_sends_anonymous_visitors_to_the_login_page(client, six_entries):
    for url in (reverse("catalog_list"), reverse("catalog_detail", args=[six_entries["A"].pk])):
        response = client.get(url)
        assert response.status_code == 302
        assert reverse("login") in response["Location"]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, {"A-1", "B-1", "C-1", "D-1", "E-1", "A-2"}),
        ({"task": "WD"}, {"B-1"}),
        ({"task": "wd"}, {"B-1"}),
        ({"verdict": "NO"}, {"B-1"}),
        ({"verdict": "none"}, {"E-1"}),
        ({"survey": "SDSS"}, {"C-1"}),
        ({"expert_decision": "NO"}, {"D-1"}),
        ({"expert_decision": "unsure"}, {"A-2"}),
        ({"expert_decision": "none"}, {"A-1", "B-1", "C-1", "E-1"}),
        ({"confidence_min": "0.5", "confidence_max": "0.6"}, {"D-1"}),
        ({"confidence_max": "0.3"}, {"B-1", "E-1"}),
        ({"snr_min": "10"}, {"A-1", "B-1", "D-1", "E-1"}),
        ({"object_id": "A-"}, {"A-1", "A-2"}),
        ({"object_id": "A-1"}, {"A-1"}),
        ({"synthetic": "yes"}, {"E-1"}),
        ({"synthetic": "no"}, {"A-1", "B-1", "C-1", "D-1", "A-2"}),
        ({"task": "CV", "verdict": "YES", "survey": "LAMOST"}, {"A-1", "D-1", "A-2"}),
    ],
)
def test_it_narrows_the_list_by_each_filter(expert_client, six_entries, params, expected):
    response = expert_client.get(reverse("catalog_list"), params)
    assert response.status_code == 200
    assert set(listed_ids(response)) == expected


def test_it_filters_by_run(expert_client, six_entries):
    other = six_entries["F"].run_id
    response = expert_client.get(reverse("catalog_list"), {"run": other})
    assert listed_ids(response) == ["A-2"]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"confidence_min": "high"}, "confidence_min must be a number"),
        ({"confidence_max": "1.5"}, "confidence_max must be between 0 and 1"),
        ({"confidence_min": "0.8", "confidence_max": "0.2"}, "is above confidence_max"),
        ({"verdict": "MAYBE"}, "verdict must be one of"),
        ({"run": "-3"}, "run must be a positive whole number"),
        ({"synthetic": "perhaps"}, "synthetic must be yes or no"),
        ({"snr_min": "nan"}, "snr_min must be a finite number"),
    ],
)
def test_it_explains_a_filter_it_cannot_read(expert_client, six_entries, params, reason):
    response = expert_client.get(reverse("catalog_list"), params)
    assert response.status_code == 400
    assert reason in response.content.decode()


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("confidence", ["E-1", "B-1", "D-1", "A-1", "C-1", "A-2"]),
        ("-confidence", ["A-2", "C-1", "A-1", "D-1", "B-1", "E-1"]),
        ("object_id", ["A-1", "A-2", "B-1", "C-1", "D-1", "E-1"]),
        ("-object_id", ["E-1", "D-1", "C-1", "B-1", "A-2", "A-1"]),
    ],
)
def test_it_sorts_by_an_allowed_key_with_the_id_breaking_ties(
    expert_client, six_entries, sort, expected
):
    response = expert_client.get(reverse("catalog_list"), {"sort": sort})
    assert listed_ids(response) == expected


def test_it_sorts_by_position_and_snr(expert_client, run):
    for name, ra, dec, snr in (("P", 200.0, -5.0, 8.0), ("Q", 5.0, 60.0, 90.0), ("R", 90, 0, 40)):
        make_entry(run, name, ra=ra, dec=dec, snr=snr)
    orders = {
        sort: listed_ids(expert_client.get(reverse("catalog_list"), {"sort": sort}))
        for sort in ("ra", "-dec", "-snr")
    }
    assert orders == {"ra": ["Q", "R", "P"], "-dec": ["Q", "R", "P"], "-snr": ["Q", "R", "P"]}


@pytest.mark.parametrize(
    ("sort", "expected"), [("snr", ["LOW", "HIGH", "NONE"]), ("-snr", ["HIGH", "LOW", "NONE"])]
)
def test_it_puts_rows_without_a_value_last_in_either_direction(expert_client, run, sort, expected):
    for name, snr in (("NONE", None), ("LOW", 3.0), ("HIGH", 80.0)):
        make_entry(run, name, snr=snr)
    assert listed_ids(expert_client.get(reverse("catalog_list"), {"sort": sort})) == expected


@pytest.mark.parametrize("sort", ["colour", "-password", "--confidence", "id; drop table"])
def test_it_falls_back_to_newest_first_for_an_unknown_sort(expert_client, run, sort):
    old = make_entry(run, "OLD")
    CatalogEntry.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    make_entry(run, "NEW")
    response = expert_client.get(reverse("catalog_list"), {"sort": sort})
    assert response.status_code == 200
    assert response.context["sort"] == catalog.DEFAULT_SORT
    assert listed_ids(response) == ["NEW", "OLD"]


def test_it_offers_the_other_direction_on_the_sorted_column(expert_client, six_entries):
    response = expert_client.get(reverse("catalog_list"), {"sort": "-confidence", "task": "CV"})
    headers = {h["label"]: h for h in response.context["headers"]}
    assert headers["Confidence"]["state"] == "desc"
    assert headers["Confidence"]["query"] == "task=CV&sort=confidence"
    assert headers["Object"]["query"] == "task=CV&sort=object_id"
    assert headers["Survey"]["query"] == ""


def test_it_pages_through_the_rows(expert_client, run):
    CatalogEntry.objects.bulk_create(
        [
            CatalogEntry(run=run, object_id=f"OBJ-{i:03d}", survey="LAMOST", task_code="CV")
            for i in range(120)
        ]
    )
    response = expert_client.get(reverse("catalog_list"), {"sort": "object_id", "page": "3"})
    page = response.context["page"]
    assert (page.number, page.num_pages, page.count_label) == (3, 3, "120")
    assert listed_ids(response) == [f"OBJ-{i:03d}" for i in range(100, 120)]
    assert (page.start_index, page.end_index) == (101, 120)


@pytest.mark.parametrize(("requested", "shown"), [("999", 3), ("0", 1), ("two", 1)])
def test_it_shows_the_nearest_page_for_a_page_out_of_range(expert_client, run, requested, shown):
    CatalogEntry.objects.bulk_create(
        [CatalogEntry(run=run, object_id=f"O{i}", task_code="CV") for i in range(101)]
    )
    response = expert_client.get(reverse("catalog_list"), {"page": requested})
    assert response.context["page"].number == shown


def test_it_counts_only_up_to_the_cap(expert_client, run, monkeypatch):
    monkeypatch.setattr(catalog, "COUNT_CAP", 5)
    # without the planner's estimate (its own tests: test_count_estimate.py): the lower bound
    monkeypatch.setattr(catalog, "estimated_count", lambda rows: None)
    CatalogEntry.objects.bulk_create(
        [CatalogEntry(run=run, object_id=f"O{i}", task_code="CV") for i in range(8)]
    )
    page = catalog.catalog_page(catalog.catalog_rows(catalog.CatalogFilters()), page=9, page_size=2)
    assert (page.count, page.count_capped, page.count_label) == (5, True, "5+")
    assert (page.num_pages, page.number, len(page.entries)) == (3, 3, 1)
    response = expert_client.get(reverse("catalog_list"))
    assert "5+</strong> entries" in response.content.decode()


def test_it_returns_only_the_results_partial_to_htmx(expert_client, six_entries):
    response = expert_client.get(reverse("catalog_list"), {"task": "WD"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.lstrip().startswith('<div id="results">')
    assert "B-1" in body and "A-1" not in body
    assert 'id="catalog-sort" hx-swap-oob="true"' in body


def test_it_shows_a_filter_error_in_place_of_the_htmx_results(expert_client, six_entries):
    response = expert_client.get(
        reverse("catalog_list"),
        {"confidence_min": "0.9", "confidence_max": "0.1"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert response.status_code == 200  # htmx swaps only 2xx answers
    assert body.lstrip().startswith('<div id="results">')
    assert "confidence_min (0.9) is above confidence_max (0.1)" in body


def test_it_documents_every_column_on_the_page(expert_client, six_entries):
    body = expert_client.get(reverse("catalog_list")).content.decode()
    assert '<details class="card column-docs"' in body
    for column in catalog.CATALOG_COLUMNS:
        assert f"<code>{column.name}</code>" in body
        assert column.description.replace("<", "&lt;").replace(">", "&gt;") in body


def test_it_escapes_hostile_object_ids(expert_client, run):
    entry = make_entry(run, HOSTILE, survey=HOSTILE)
    for url in (reverse("catalog_list"), reverse("catalog_detail", args=[entry.pk])):
        body = expert_client.get(url).content.decode()
        assert HOSTILE not in body
        assert "&lt;script&gt;" in body


def test_it_shows_an_entry_without_a_stored_candidate(expert_client, run):
    entry = make_entry(run, "BULK-1")
    response = expert_client.get(reverse("catalog_detail", args=[entry.pk]))
    assert response.status_code == 200
    assert "imported without its candidate" in response.content.decode()


def test_it_answers_404_for_an_unknown_entry(expert_client, db):
    assert expert_client.get(reverse("catalog_detail", args=[999999])).status_code == 404


# --- entries made by a real (scripted) run ----------------------------------------------------


class ConfidentPolicy(ScriptedPolicy):
    def __init__(self, turns, confidence):
        super().__init__(turns)
        self.confidence = confidence

    def info(self):
        return {"name": "scripted", "model": "scripted/v1", "checkpoint": "ckpt-42"}


@pytest.fixture
def inspected_entry(monkeypatch, expert, django_capture_on_commit_callbacks):
    """A finished candidate with one rollout: an H-alpha tool call, then YES at 0.8."""
    turns = [tool_call_turn(6500, 6630, "H-alpha", think="Look at H-alpha first."), answer_turn()]
    monkeypatch.setattr(
        jobs, "policy_for", lambda spec, sampling=None: ConfidentPolicy(list(turns), 0.8)
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = services.inspection_run_create(
            task=Task.objects.get(code="CV"),
            spectrum_ids=[make_spectrum(object_id="CAT-1").pk],
            policy_spec={"kind": "rule-based"},
            created_by=expert,
            name="provenance run",
        )
    # A spec written before secrets were stripped on creation must still not leak.
    InspectionRun.objects.filter(pk=run.pk).update(
        policy_spec={
            "kind": "openai",
            "model": "m",
            "api_key": "sk-SECRET",
            "extra": {"token": "t0k"},
        }
    )
    return CatalogEntry.objects.get(candidate__run=run)


def test_it_shows_the_trajectory_of_an_entry(expert_client, inspected_entry):
    body = expert_client.get(reverse("catalog_detail", args=[inspected_entry.pk])).content.decode()
    assert "Look at H-alpha first." in body
    assert "spectral_visualization_tool" in body
    assert "&quot;wavelength_range&quot;: [6500" in body.replace("6500.0", "6500")
    assert "Broad Balmer emission with He I." in body
    rollout = inspected_entry.candidate.rollouts.get()
    sha = rollout.data["steps"][0]["tool_result"]["image"]["png_sha256"]
    assert reverse("catalog_image", args=[sha]) in body


def test_it_shows_provenance_without_secrets(expert_client, inspected_entry):
    body = expert_client.get(reverse("catalog_detail", args=[inspected_entry.pk])).content.decode()
    run = inspected_entry.run
    assert reverse("run_detail", args=[run.pk]) in body
    assert run.code_version and run.code_version in body
    assert "ckpt-42" in body
    assert reverse("spectrum_detail", args=[inspected_entry.candidate.spectrum_id]) in body
    assert "sk-SECRET" not in body and "api_key" not in body and "t0k" not in body


def rate(rollout, *, closed: bool, score: int, comment: str) -> None:
    campaign = RatingCampaign.objects.create(name=f"campaign {score}", closed=closed)
    item = CampaignItem.objects.create(
        campaign=campaign,
        blind_id=f"B{score}",
        data=rollout.data,
        policy_name="scripted",
        source=f"rollout:{rollout.pk}",
        task=Task.objects.get(code="CV"),
    )
    RatingAssignment.objects.create(
        item=item,
        rater=UserFactory(username=f"rater{score}"),
        position=0,
        score=score,
        comment=comment,
        rated_at=timezone.now(),
    )


def test_it_shows_ratings_from_closed_campaigns_only(expert_client, api_client, inspected_entry):
    rollout = inspected_entry.candidate.rollouts.get()
    rate(rollout, closed=True, score=4, comment="clear H-alpha check")
    rate(rollout, closed=False, score=1, comment="still blind")
    body = expert_client.get(reverse("catalog_detail", args=[inspected_entry.pk])).content.decode()
    assert "4/5" in body and "clear H-alpha check" in body and "rater4" in body
    assert "still blind" not in body and "rater1" not in body
    data = api_client.get(reverse("api_catalog_detail", args=[inspected_entry.pk])).data
    assert [r["score"] for r in data["rollouts"][0]["ratings"]] == [4]


def test_it_serves_an_image_that_a_trajectory_shows(expert_client, inspected_entry):
    rollout = inspected_entry.candidate.rollouts.get()
    sha = rollout.data["steps"][0]["tool_result"]["image"]["png_sha256"]
    url = reverse("catalog_image", args=[sha])
    response = expert_client.get(url, {"candidate": inspected_entry.candidate_id})
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")
    assert expert_client.get(url).status_code == 200


@pytest.mark.parametrize("case", ["not in a trajectory", "other candidate", "not a hash"])
def test_it_refuses_an_image_outside_the_trajectories(expert_client, inspected_entry, case):
    rollout = inspected_entry.candidate.rollouts.get()
    sha = rollout.data["steps"][0]["tool_result"]["image"]["png_sha256"]
    params = {}
    if case == "not in a trajectory":
        sha = "ab" * 32
        ImageBlob.objects.create(sha256=sha, png=b"\x89PNG\r\n\x1a\nprivate")
    elif case == "other candidate":
        params = {"candidate": inspected_entry.candidate_id + 1000}
    else:
        sha = "../../etc/passwd"
    response = expert_client.get(f"/catalog/images/{sha}.png", params)
    assert response.status_code == 404


# --- APIs -------------------------------------------------------------------------------------


def test_it_refuses_anonymous_api_calls(six_entries):
    client = APIClient()
    for url in (
        reverse("api_catalog_list"),
        reverse("api_catalog_detail", args=[six_entries["A"].pk]),
    ):
        assert client.get(url).status_code in (401, 403)


def test_it_lists_the_catalog_through_the_api(api_client, six_entries):
    response = api_client.get(
        reverse("api_catalog_list"), {"task": "CV", "sort": "-confidence", "page_size": 2}
    )
    assert response.status_code == 200
    data = response.data
    assert (data["count"], data["count_capped"], data["num_pages"]) == (5, False, 3)
    assert [row["object_id"] for row in data["results"]] == ["A-2", "C-1"]
    assert data["results"][0]["task"] == "CV"


def test_it_falls_back_to_the_default_sort_in_the_api(api_client, six_entries):
    response = api_client.get(reverse("api_catalog_list"), {"sort": "secret_column"})
    assert response.status_code == 200
    assert response.data["sort"] == catalog.DEFAULT_SORT


@pytest.mark.parametrize(
    "params",
    [{"confidence_min": "2"}, {"verdict": "maybe"}, {"page_size": "5000"}, {"synthetic": "x"}],
)
def test_it_refuses_bad_api_filters(api_client, six_entries, params):
    assert api_client.get(reverse("api_catalog_list"), params).status_code == 400


def test_it_gives_an_entry_with_rollouts_and_provenance_through_the_api(
    api_client, inspected_entry
):
    response = api_client.get(reverse("api_catalog_detail", args=[inspected_entry.pk]))
    assert response.status_code == 200
    data = response.data
    step = data["rollouts"][0]["steps"][0]
    assert step["tool_arguments"]["wavelength_range"] == [6500, 6630]
    assert step["image_url"].startswith("/catalog/images/")
    assert data["provenance"]["policy_info"]["checkpoint"] == "ckpt-42"
    assert data["provenance"]["policy_spec"] == {"kind": "openai", "model": "m", "extra": {}}
    assert "sk-SECRET" not in response.content.decode()


def test_it_shows_provenance_without_credentials_or_model_server_addresses():
    spec = {
        "kind": "openai",
        "endpoint": "default",
        "base_url": "http://gpu-7.internal:8000/v1",
        "nested": {"api_key": "sk-secret", "url": "http://10.0.0.3/v1", "model": "spec-o3"},
    }
    assert catalog.public_policy_spec(spec) == {
        "kind": "openai",
        "endpoint": "default",
        "nested": {"model": "spec-o3"},
    }


# --- working from the list (issue 26) ----------------------------------------------------------


def test_it_keeps_the_lists_filters_and_sort_in_each_rows_link(expert_client, six_entries):
    body = expert_client.get(
        reverse("catalog_list"), {"survey": "LAMOST", "sort": "object_id"}
    ).content.decode()
    a = six_entries["A"]
    assert (
        f'href="{reverse("catalog_detail", args=[a.pk])}?survey=LAMOST&amp;sort=object_id"' in body
    )


def test_it_steps_to_the_previous_and_next_entry_of_the_filtered_list(expert_client, six_entries):
    # LAMOST rows sorted by object id, B-1, D-1, E-1 (C-1 is SDSS)
    query = {"survey": "LAMOST", "sort": "object_id"}
    order = ["A", "F", "B", "D", "E"]
    for at, name in enumerate(order):
        entry = six_entries[name]
        response = expert_client.get(reverse("catalog_detail", args=[entry.pk]), query)
        neighbours = response.context["neighbours"]
        assert neighbours.position == at + 1 and neighbours.count == len(order)
        expected_previous = six_entries[order[at - 1]].pk if at > 0 else None
        expected_next = six_entries[order[at + 1]].pk if at + 1 < len(order) else None
        assert (neighbours.previous_id, neighbours.next_id) == (expected_previous, expected_next)
    body = expert_client.get(
        reverse("catalog_detail", args=[six_entries["B"].pk]), query
    ).content.decode()
    back = f'href="{reverse("catalog_list")}?survey=LAMOST&amp;sort=object_id"'
    nxt = f'href="{reverse("catalog_detail", args=[six_entries["D"].pk])}?survey=LAMOST&amp;sort=object_id"'
    assert back in body and nxt in body and 'data-key="j"' in body
