"""/api/evaluations/, the read twin of the evaluations page: for every reader it lists the rows
the page lists (the jobs, the shown job's table, each model's figures on the vetted spectra),
and what the page hides from a reader it hides too: the vetted part from a vetter with a gold
item waiting, a blinded run's model from a rater of an open campaign."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent import real_evaluation as real_bench
from agent.real_corpus import CorpusUnavailable
from annotation.core.models import JobState
from annotation.inspections import evaluations, services
from annotation.inspections.models import Rollout
from annotation.learning import services as learning_services
from annotation.rating import services as rating_services
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

TRUTH = ["NO", "YES", "YES", "NO"]


@pytest.fixture
def world(owner, expert, outsider, staff, monkeypatch, django_capture_on_commit_callbacks):
    """Labels TRUTH on four spectra from two agreeing experts on model A's run; model B's run
    on the same spectra; a finished rule-based evaluation job over the vetted part."""
    spectra = [
        make_spectrum(object_id=f"EV-{i}", seed=i, line_amplitude=0.05 + 0.9 * (i % 2))
        for i in range(4)
    ]
    run_a = make_inspected(
        spectra=spectra,
        verdicts={row.pk: ("YES", 0.6) for row in spectra},
        created_by=owner,
        model=("model:a", "A"),
    )
    for row, truth in zip(spectra, TRUTH, strict=True):
        candidate = run_a.candidates.get(spectrum=row)
        for user in (expert, outsider):
            services.expert_decision_record(candidate=candidate, expert=user, decision=truth)
    run_b = make_inspected(
        spectra=spectra,
        verdicts={row.pk: (truth, 0.95) for row, truth in zip(spectra, TRUTH, strict=True)},
        created_by=owner,
        model=("model:b", "B"),
    )

    def unavailable(split, tasks):
        raise CorpusUnavailable("not built in this test")

    monkeypatch.setattr(real_bench, "real_eval_samples", unavailable)
    with django_capture_on_commit_callbacks(execute=True):
        job = evaluations.evaluation_start(
            policy_spec={"kind": "rule-based"},
            tasks=["CV"],
            synthetic_per_task=0,
            vetted_per_task=10,
            max_tool_calls=8,
            actor=owner,
        )
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    return {"spectra": spectra, "run_a": run_a, "run_b": run_b, "job": job, "staff": staff}


def _gold_vetter(world: dict[str, Any]):
    """An expert with a gold item waiting: spectra[1]'s label, which the job's vetted part
    scored."""
    learning_services.gold_item_mark(
        candidate=world["run_a"].candidates.get(spectrum=world["spectra"][1]),
        actor=world["staff"],
    )
    return UserFactory(username="gold-vetter", roles=["expert", "ml_engineer"])


def _campaign_rater(world: dict[str, Any]):
    """An expert who rates an open campaign holding model B's trajectory of spectra[0]: model
    B's run, and every candidate of spectra[0], are hidden from them while it is open."""
    rater: Any = UserFactory(username="rating-expert", roles=["expert", "rater"])
    candidate = world["run_b"].candidates.get(spectrum=world["spectra"][0])
    rollout = Rollout.objects.create(
        candidate=candidate, index=0, data={"turns": []}, prediction="NO", confidence=0.95
    )
    rating_services.campaign_create(
        name="blind",
        raters=[rater],
        raters_per_item=1,
        sources=rating_services.rating_sources_from_rollouts([rollout]),
        created_by=world["staff"],
        seed=3,
    )
    return rater


def _figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def page_and_api(user) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the page and the API list for ``user``, in the same terms."""
    client = Client()
    client.force_login(user)
    page = client.get(reverse("evaluation_list"))
    api = APIClient()
    api.force_authenticate(user)
    answer = api.get(reverse("api_evaluation_list"))
    assert (page.status_code, answer.status_code) == (200, 200)
    body = answer.json()
    context = page.context
    from_page = {
        "jobs": [job.pk for job in context["jobs"]],
        "shown": context["shown"].pk if context["shown"] else None,
        "withheld": context["vetted_withheld"],
        "rows": [
            (row["task"], row["part"], row["n"], row["positives"], row["accuracy"], row["f1"])
            for row in context["rows"]
        ],
        "vetted": [
            (row["task"], row["model_key"], row["n"], row["positives"], row["accuracy"])
            for row in context["vetted_rows"]
        ],
    }
    shown = body["shown"] or {}
    from_api = {
        "jobs": [job["id"] for job in body["jobs"]],
        "shown": shown.get("id"),
        "withheld": shown.get("vetted_withheld", False),
        "rows": [
            (
                row["task"],
                row["part"],
                row["n"],
                row["positives"],
                _figure(row["accuracy"]),
                _figure(row["f1"]),
            )
            for row in shown.get("rows", [])
        ],
        "vetted": [
            (row["task"], row["model_key"], row["n"], row["positives"], _figure(row["accuracy"]))
            for row in body["vetted_by_model"]
        ],
    }
    return from_page, from_api


def test_it_lists_the_rows_the_page_lists_for_every_reader(
    world, owner, expert, viewer, staff, ml_engineer
):
    gold_vetter = _gold_vetter(world)
    campaign_rater = _campaign_rater(world)
    seen = {}
    for name, user in (
        ("viewer", viewer),
        ("expert", expert),
        ("ml_engineer", ml_engineer),
        ("owner", owner),
        ("staff", staff),
        ("gold_vetter", gold_vetter),
        ("campaign_rater", campaign_rater),
    ):
        from_page, from_api = page_and_api(user)
        assert from_api == from_page, name
        seen[name] = from_api
    job = world["job"].pk
    full = seen["owner"]
    assert full["jobs"] == [job] and full["shown"] == job
    assert [part for _, part, *_ in full["rows"]] == ["vetted"]
    assert [model for _, model, *_ in full["vetted"]] == ["model:a", "model:b"]
    assert full["vetted"][0][2] == 4
    # What is hidden stays hidden, on the API as on the page
    assert seen["gold_vetter"]["withheld"] is True
    assert seen["gold_vetter"]["rows"] == []
    blinded = seen["campaign_rater"]["vetted"]
    assert [model for _, model, *_ in blinded] == ["model:a"]  # model B's run is hidden
    # and every candidate of the rated spectrum; the gold item waits for this expert too
    assert blinded[0][2] == 2
    # the gold label's answer is blank for the vetter: model A counts one spectrum fewer
    assert seen["gold_vetter"]["vetted"][0][2] == 3


def test_it_shows_the_job_asked_for_and_its_numbers(world, owner):
    api = APIClient()
    api.force_authenticate(owner)
    body = api.get(reverse("api_evaluation_list"), {"job": world["job"].pk}).json()
    shown = body["shown"]
    stored = world["job"].result["tasks"]["CV"]["vetted"]
    (vetted,) = [row for row in shown["rows"] if row["part"] == "vetted"]
    assert (vetted["n"], vetted["accuracy"], vetted["ece"]) == (
        stored["n"],
        stored["accuracy"],
        stored["ece"],
    )
    assert vetted["triage"] == stored["triage"]
    assert shown["policy"] == "rule-based" and shown["policy_spec"]["kind"] == "rule-based"
    assert shown["created_by"] == owner.username


@pytest.mark.parametrize("job", ["0", "-1", "x", str(2**63)])
def test_it_refuses_a_job_that_is_not_an_id(owner, job):
    api = APIClient()
    api.force_authenticate(owner)
    answer = api.get(reverse("api_evaluation_list"), {"job": job})
    assert answer.status_code == 400
    assert "job" in answer.json()


def test_it_answers_an_empty_overview_before_any_evaluation(viewer):
    api = APIClient()
    api.force_authenticate(viewer)
    body = api.get(reverse("api_evaluation_list")).json()
    assert body == {"jobs": [], "shown": None, "vetted_by_model": []}


def test_it_refuses_a_confined_rater_as_the_page_does(rater):
    client = Client()
    client.force_login(rater)
    api = APIClient()
    api.force_authenticate(rater)
    assert client.get(reverse("evaluation_list")).status_code == 403
    assert api.get(reverse("api_evaluation_list")).status_code == 403
