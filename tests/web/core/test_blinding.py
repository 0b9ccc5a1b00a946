"""Object-level read rules for runs, candidates, steps, trajectories and images (selectors.Blinding).

Two models, alpha and beta, inspect the same spectrum; their rollouts, and a curation drafted by
a third model, are the items of an open campaign rated by rita (rater role only) and erin (expert
and rater). Matching an item's text against a run, a candidate, a catalog entry, a curation or an
image would name its model, so while the campaign is open: rita reads nothing outside her items,
erin nothing that fed the campaign or shows its spectrum, and a hidden id answers like one that
does not exist. mel (ML engineer, no campaign) reads everything as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client, TestCase
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core.roles import Role
from annotation.curation.models import Curation
from annotation.inspections.models import (
    CatalogEntry,
    ExpertDecision,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.rating import services
from annotation.rating.models import RatingCampaign
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_curation, make_spectrum
from tests.web.core.test_url_access import url_patterns
from tests.web.security_world import make_run

pytestmark = pytest.mark.django_db

NAMES = {  # run name -> policy name
    "run-alpha": "model-alpha",
    "run-beta": "model-beta",
    "run-delta": "model-delta",  # same spectrum as the items, but in no campaign
    "run-gamma": "model-gamma",  # another spectrum, in no campaign
}
TEACHER = "model-epsilon"  # drafted the curation that is an item
MISSING_SHA = "0" * 64


@dataclass
class BlindWorld:
    runs: dict[str, InspectionRun]
    curation: Curation
    campaign: RatingCampaign
    other_campaign: RatingCampaign  # gamma's rollout, rated by someone else
    users: dict[str, Any]

    def candidate(self, run: str):
        return self.runs[run].candidates.get()

    def entry(self, run: str) -> CatalogEntry:
        return CatalogEntry.objects.get(candidate=self.candidate(run))

    def step_sha(self, run: str) -> str:
        step = LiveStep.objects.filter(candidate=self.candidate(run)).order_by("id").first()
        return step.data["tool_result"]["image"]["png_sha256"]

    def initial_sha(self, run: str) -> str:
        rollout = Rollout.objects.get(candidate=self.candidate(run))
        return rollout.data["initial_image"]["png_sha256"]


def give_roles(user, *roles: Role) -> None:
    for role in roles:
        Group.objects.get_or_create(name=role.value)[0].user_set.add(user)


def build(monkeypatch, capture) -> BlindWorld:
    users = {
        "rita": UserFactory(username="rita"),
        "erin": UserFactory(username="erin"),
        "mel": UserFactory(username="mel"),
        "vic": UserFactory(username="vic"),
        "otto": UserFactory(username="otto"),
        "stella": UserFactory(username="stella", is_staff=True),
    }
    give_roles(users["rita"], Role.RATER)
    give_roles(users["erin"], Role.EXPERT, Role.RATER)
    give_roles(users["mel"], Role.ML_ENGINEER)
    give_roles(users["vic"], Role.VIEWER)
    give_roles(users["otto"], Role.RATER)
    cv = Task.objects.get(code="CV")
    shared = make_spectrum(object_id="SHARED-1", task=cv, label="YES", seed=1)
    other = make_spectrum(object_id="OTHER-2", task=cv, label="YES", seed=2)
    runs = {
        name: make_run(
            cv,
            other if name == "run-gamma" else shared,
            name=name,
            policy=policy,
            text=f"{policy.removeprefix('model-')}-words",
            monkeypatch=monkeypatch,
            capture=capture,
        )
        for name, policy in NAMES.items()
    }
    curation = make_curation(object_id="CURATED-3", seed=3)
    Curation.objects.filter(pk=curation.pk).update(teacher={"name": TEACHER})
    curation.refresh_from_db()

    def first_rollouts(*names: str) -> list[Rollout]:
        return list(
            Rollout.objects.filter(candidate__run__name__in=names).select_related(
                "candidate__run__task", "candidate__spectrum"
            )
        )

    sources = services.rating_sources_from_rollouts(first_rollouts("run-alpha", "run-beta"))
    sources += services.rating_sources_from_curations([curation])
    campaign = services.campaign_create(
        name="blind",
        raters=[users["rita"], users["erin"]],
        raters_per_item=2,
        sources=sources,
        created_by=users["stella"],
        seed=5,
    )
    alpha, beta = (
        campaign.items.get(source=f"rollout:{r.pk}")
        for r in first_rollouts("run-alpha", "run-beta")
    )
    services.campaign_add_pairs(
        campaign=campaign, pairs=[(alpha, beta)], raters_per_pair=2, actor=None
    )
    other_campaign = services.campaign_create(
        name="elsewhere",
        raters=[users["otto"]],
        raters_per_item=1,
        sources=services.rating_sources_from_rollouts(first_rollouts("run-gamma")),
        created_by=users["stella"],
        seed=6,
    )
    return BlindWorld(runs, curation, campaign, other_campaign, users)


@contextmanager
def rolled_back(django_db_blocker) -> Iterator[BlindWorld]:
    with (
        django_db_blocker.unblock(),
        transaction.atomic(),
        pytest.MonkeyPatch.context() as patch,
    ):
        yield build(patch, TestCase.captureOnCommitCallbacks)
        transaction.set_rollback(True)


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[BlindWorld]:
    with rolled_back(django_db_blocker) as built:
        yield built


def client_for(world: BlindWorld, who: str, name: str) -> Client | APIClient:
    if name.startswith("api_"):
        api = APIClient()
        api.force_authenticate(world.users[who])
        return api
    client = Client()
    client.force_login(world.users[who])
    return client


def body_of(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


def assert_names_nothing(body: bytes, hidden: list[str], where: str) -> None:
    for value in hidden:
        assert value.encode() not in body, f"{where} names {value!r}"


# --- every URL that takes a run, candidate, entry, curation or image ---------------------------

OBJECT_PARAMS = {"run_id", "candidate_id", "entry_id", "sha256", "curation_id", "number"}
OBJECT_PATTERNS = [
    (name, params)
    for name, params, _ in url_patterns()
    if params and set(params) <= OBJECT_PARAMS and not name.startswith("admin:")
]
LIST_PATTERNS = [
    name
    for name, params, _ in url_patterns()
    if not params and not name.startswith("admin:") and name not in {"logout", "login"}
]
# Pages echo their query (export links, VOTable metadata), so no query names a hidden value.
QUERIES = [{}, {"format": "json"}, {"policy": "model", "ordering": "policy_spec", "search": "run"}]


# Whose hidden objects each walk asks for: rita (rater only) asks for the objects behind her own
# items and for those of a run in no campaign of hers; erin (expert and rater) for what fed her
# campaign and for a candidate of another run on the same spectrum. The image is one that only
# hidden objects show (the same window of the same spectrum is one blob, whoever zoomed into it).
SCENARIOS = {
    "rita-own-items": ("rita", "run-alpha", "run-alpha", "run-gamma"),
    "rita-elsewhere": ("rita", "run-gamma", "run-gamma", "run-gamma"),
    "erin-fed-the-campaign": ("erin", "run-alpha", "run-beta", "run-delta"),
    "erin-same-spectrum": ("erin", "run-beta", "run-delta", "run-delta"),
}


def hidden_kwargs(world: BlindWorld, params: tuple[str, ...], scenario: str) -> dict[str, Any]:
    _, run, candidate, image_of = SCENARIOS[scenario]
    values = {
        "run_id": world.runs[run].pk,
        "candidate_id": world.candidate(candidate).pk,
        "entry_id": world.entry(candidate).pk,
        "sha256": world.step_sha(image_of),
        "curation_id": world.curation.pk,
        "number": world.curation.head_number,
    }
    return {p: values[p] for p in params}


def missing_kwargs(params: tuple[str, ...]) -> dict[str, Any]:
    values = {"sha256": MISSING_SHA, "number": 1}
    return {p: values.get(p, 987654) for p in params}


def test_it_walks_the_object_urls():
    names = {name for name, _ in OBJECT_PATTERNS}
    assert {"run_detail", "api_candidate_steps", "image_blob", "catalog_image"} <= names
    assert {"catalog_detail", "api_catalog_detail", "curation_detail", "candidate_live"} <= names


def test_it_draws_the_walks_images_from_hidden_objects_only(world):
    own = {world.step_sha("run-alpha"), world.step_sha("run-beta")}
    assert world.step_sha("run-delta") not in own  # the tool label is drawn on the image
    assert world.step_sha("run-gamma") not in own


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(("name", "params"), OBJECT_PATTERNS, ids=[n for n, _ in OBJECT_PATTERNS])
def test_it_answers_a_hidden_id_as_if_it_did_not_exist(world, scenario, method, name, params):
    client = client_for(world, SCENARIOS[scenario][0], name)
    hidden = getattr(client, method)(reverse(name, kwargs=hidden_kwargs(world, params, scenario)))
    missing = getattr(client, method)(reverse(name, kwargs=missing_kwargs(params)))
    assert hidden.status_code == missing.status_code, (name, hidden.status_code)
    assert hidden.status_code in (403, 404, 405), (name, hidden.status_code)
    assert_names_nothing(body_of(hidden), [*NAMES, *NAMES.values(), TEACHER], name)


def test_it_changes_nothing_when_a_rater_posts_to_hidden_runs(world):
    for who in ("rita", "erin"):
        for name, run in (("run_cancel", "run-alpha"), ("api_run_cancel", "run-beta")):
            client_for(world, who, name).post(reverse(name, args=[world.runs[run].pk]))
        client_for(world, who, "vetting_decide").post(
            reverse("vetting_decide"),
            {"candidate": world.candidate("run-delta").pk, "decision": "NO"},
        )
    assert not InspectionRun.objects.filter(pk__in=[r.pk for r in world.runs.values()]).filter(
        cancelled=True
    )
    assert not ExpertDecision.objects.exists()


@pytest.mark.parametrize("query", QUERIES, ids=["plain", "format-json", "policy-ordering"])
@pytest.mark.parametrize("name", LIST_PATTERNS)
def test_it_names_no_model_to_a_rater_on_any_page_or_list(world, name, query):
    for who, hidden in (
        ("rita", [*NAMES, *NAMES.values(), TEACHER, "gamma-words", "delta-words"]),
        ("erin", ["run-alpha", "run-beta", "model-alpha", "model-beta", TEACHER]),
    ):
        response = client_for(world, who, name).get(reverse(name), query)
        assert response.status_code < 500, (who, name, response.status_code)
        assert_names_nothing(body_of(response), hidden, f"{name} for {who}")


# --- lists leave hidden objects out, counts included ------------------------------------------


@pytest.mark.parametrize("who", ["rita", "erin"])
@pytest.mark.parametrize(
    "name", ["api_run_list", "api_catalog_list", "api_curation_list", "api_vetting_next"]
)
def test_it_gives_no_oracle_through_filter_search_or_ordering_params(world, who, name):
    client = client_for(world, who, name)
    guesses = [
        {"policy": "model-alpha", "search": "alpha-words", "ordering": "policy_spec"},
        {"policy": "model-beta", "search": "beta-words", "ordering": "-policy_info"},
        {"policy": "model-zeta", "search": "zeta-words", "ordering": "name"},
    ]
    answers = {json.dumps(client.get(reverse(name), q).json(), sort_keys=True) for q in guesses}
    assert len(answers) == 1


def test_it_lists_no_run_candidate_or_entry_to_a_rater(world):
    for name in ("api_run_list", "api_catalog_list"):
        response = client_for(world, "rita", name).get(reverse(name))
        if response.status_code == 200:
            assert response.json()["count"] == 0, name


def test_it_leaves_what_fed_the_campaign_out_of_an_expert_raters_lists(world):
    runs = client_for(world, "erin", "api_run_list").get(reverse("api_run_list")).json()
    assert {row["name"] for row in runs["results"]} == {"run-delta", "run-gamma"}
    assert runs["count"] == 2
    delta = client_for(world, "erin", "api_run_detail").get(
        reverse("api_run_detail", args=[world.runs["run-delta"].pk])
    )
    assert delta.json()["candidates"] == [] and delta.json()["candidates_count"] == 0
    # Its figures too: a verdict on the item's spectrum, even as a count, is not hers to read.
    assert delta.json()["progress"]["total"] == 0 and delta.json()["metrics"] is None
    mel = client_for(world, "mel", "api_run_detail").get(
        reverse("api_run_detail", args=[world.runs["run-delta"].pk])
    )
    assert mel.json()["progress"]["total"] == 1 and mel.json()["metrics"]["n"] == 1
    catalog = client_for(world, "erin", "api_catalog_list").get(reverse("api_catalog_list"))
    assert [row["run"] for row in catalog.json()["results"]] == [world.runs["run-gamma"].pk]
    assert catalog.json()["count"] == 1


@pytest.mark.parametrize("run", ["run-alpha", "run-delta", "run-gamma"])
def test_it_gives_a_filter_on_a_hidden_run_the_answer_of_a_missing_one(world, run):
    client = client_for(world, "erin", "api_catalog_list")
    hidden = client.get(reverse("api_catalog_list"), {"run": world.runs[run].pk}).json()
    missing = client.get(reverse("api_catalog_list"), {"run": 987654}).json()
    if run == "run-gamma":
        assert hidden["count"] == 1
    else:
        assert hidden["count"] == missing["count"] == 0


def test_it_keeps_hidden_candidates_out_of_an_expert_raters_vetting_queue(world):
    queue = client_for(world, "erin", "api_vetting_next").get(reverse("api_vetting_next")).json()
    assert queue["remaining"] == 1
    assert queue["candidate"]["id"] == world.candidate("run-gamma").pk
    page = client_for(world, "erin", "vetting_queue").get(
        reverse("vetting_queue"), {"candidate": world.candidate("run-alpha").pk}
    )
    assert page.status_code == 404


def test_it_leaves_the_items_text_out_of_an_expert_raters_catalog_and_runs(world):
    client = client_for(world, "erin", "catalog_export_csv")
    for name in ("catalog_list", "catalog_export_csv", "run_list", "vetting_queue"):
        body = body_of(client.get(reverse(name)))
        assert_names_nothing(body, ["alpha-words", "beta-words", "delta-words", "SHARED-1"], name)
        assert b"OTHER-2" in body or name == "run_list"


def test_it_hides_the_curation_it_rates_from_an_expert_rater(world):
    for name in ("curation_detail", "api_curation_detail"):
        response = client_for(world, "erin", name).get(reverse(name, args=[world.curation.pk]))
        assert response.status_code == 404
    listed = client_for(world, "erin", "api_curation_list").get(reverse("api_curation_list"))
    assert world.curation.pk not in [row["id"] for row in listed.json()["results"]]


# --- images: shared by content, readable through a readable object -----------------------------


def image(world: BlindWorld, who: str, sha: str, **query: int):
    return client_for(world, who, "image_blob").get(reverse("image_blob", args=[sha]), query)


def test_it_serves_a_rater_the_images_of_her_items(world):
    for who in ("rita", "erin"):
        for sha in (world.step_sha("run-alpha"), world.initial_sha("run-beta")):
            assert image(world, who, sha).status_code == 200
            assert image(world, who, sha, campaign=world.campaign.pk).status_code == 200


def test_it_refuses_a_rater_an_image_of_an_item_not_assigned_to_her(world):
    gamma = world.step_sha("run-gamma")
    for query in (
        {},
        {"campaign": world.other_campaign.pk},
        {"campaign": world.campaign.pk},
        {"candidate": world.candidate("run-gamma").pk},
    ):
        assert image(world, "rita", gamma, **query).status_code in (403, 404), query
    assert image(world, "otto", gamma).status_code == 200  # his item
    assert image(world, "otto", gamma, campaign=world.other_campaign.pk).status_code == 200


def test_it_gives_no_oracle_on_which_candidate_shows_a_raters_image(world):
    """Her item's images are hers, but asking whether a candidate shows them would say which
    run (which model) wrote the item."""
    shared = world.initial_sha("run-alpha")
    assert shared == world.initial_sha("run-delta")  # one blob, several objects
    for who in ("rita", "erin"):
        for run in ("run-alpha", "run-beta", "run-delta"):
            candidate = world.candidate(run).pk
            scoped = image(world, who, shared, candidate=candidate)
            catalog = client_for(world, who, "catalog_image").get(
                reverse("catalog_image", args=[shared]), {"candidate": candidate}
            )
            assert scoped.status_code in (403, 404), (who, run)
            assert catalog.status_code in (403, 404), (who, run)


# --- who is not rating reads as before ----------------------------------------------------------


def test_it_shows_an_ml_engineer_every_run_candidate_step_and_image(world):
    alpha = world.candidate("run-alpha")
    runs = client_for(world, "mel", "api_run_list").get(reverse("api_run_list")).json()
    assert runs["count"] == 4
    detail = client_for(world, "mel", "api_run_detail").get(
        reverse("api_run_detail", args=[world.runs["run-alpha"].pk])
    )
    assert detail.json()["policy_info"]["name"] == "model-alpha"
    steps = client_for(world, "mel", "api_candidate_steps").get(
        reverse("api_candidate_steps", args=[alpha.pk])
    )
    assert "alpha-words" in json.dumps(steps.json()["steps"])
    page = client_for(world, "mel", "candidate_live").get(
        reverse("candidate_live", args=[alpha.pk])
    )
    assert page.status_code == 200 and b"alpha-words" in page.content
    sha = world.step_sha("run-alpha")
    assert f"{reverse('image_blob', args=[sha])}?candidate={alpha.pk}".encode() in page.content
    assert image(world, "mel", sha, candidate=alpha.pk).status_code == 200
    assert image(world, "mel", MISSING_SHA).status_code == 404


def test_it_shows_a_viewer_who_rates_nothing_the_whole_catalog(world):
    catalog = client_for(world, "vic", "api_catalog_list").get(reverse("api_catalog_list"))
    assert catalog.json()["count"] == 4
    assert "model-alpha" in {row["policy"] for row in catalog.json()["results"]}


def test_it_shows_an_expert_rater_everything_again_once_the_campaign_closes(world):
    with transaction.atomic():
        services.campaign_close(campaign=world.campaign, actor=world.users["stella"])
        runs = client_for(world, "erin", "api_run_list").get(reverse("api_run_list")).json()
        curation = client_for(world, "erin", "api_curation_detail").get(
            reverse("api_curation_detail", args=[world.curation.pk])
        )
        transaction.set_rollback(True)
    assert runs["count"] == 4
    assert curation.status_code == 200


def test_it_opens_a_closed_campaigns_item_images_to_all_its_raters(world):
    """While open a rater gets the images of her own items only; once closed, the item pages of
    the whole campaign are open to its raters, and so are their images."""
    with transaction.atomic():
        una = UserFactory(username="una")
        give_roles(una, Role.RATER)
        rollouts = Rollout.objects.filter(candidate__run__name__in=["run-gamma", "run-delta"])
        campaign = services.campaign_create(
            name="one each",
            raters=[una, world.users["otto"]],
            raters_per_item=1,
            sources=services.rating_sources_from_rollouts(rollouts.select_related("candidate")),
            created_by=world.users["stella"],
            seed=7,
        )
        theirs = campaign.items.exclude(assignments__rater=una).get()
        sha = theirs.data["steps"][0]["tool_result"]["image"]["png_sha256"]
        client = Client()
        client.force_login(una)
        url = reverse("image_blob", args=[sha])
        while_open = client.get(url, {"campaign": campaign.pk}).status_code
        services.campaign_close(campaign=campaign, actor=world.users["stella"])
        once_closed = client.get(url, {"campaign": campaign.pk}).status_code
        transaction.set_rollback(True)
    assert while_open in (403, 404)
    assert once_closed == 200


@pytest.fixture
def staff_erin(world):
    """erin (expert, rates the open campaign) made staff too: she may create campaigns."""
    # a fresh instance: the world's one keeps the roles an earlier test read (without staff)
    erin = type(world.users["erin"]).objects.get(pk=world.users["erin"].pk)
    erin.is_staff = True
    erin.save(update_fields=["is_staff"])
    return erin


def test_it_keeps_runs_behind_an_open_campaign_out_of_a_staff_raters_campaign_form(
    world, staff_erin
):
    """Staff who also rate saw every run name in the campaign-create chooser."""
    erin = staff_erin
    client = Client()
    client.force_login(erin)
    page = client.get(reverse("rating_campaign_create")).content.decode()
    assert "run-gamma" in page and "run-delta" in page
    assert "run-alpha" not in page and "run-beta" not in page


def test_it_answers_a_hidden_run_in_a_campaign_request_like_a_missing_one(world, staff_erin):
    api = APIClient()
    api.force_authenticate(staff_erin)
    hidden = world.runs["run-alpha"].pk
    body = {"name": "probe", "raters": ["rita"], "runs": [hidden]}
    response = api.post(reverse("api_rating_campaign_create"), body, format="json")
    assert response.status_code == 404, response.content  # a missing run's answer (issue 32)
    assert response.data["detail"] == f"runs: no such inspection runs: {hidden}"
    body["pair_runs"] = [hidden, world.runs["run-gamma"].pk]
    body["runs"] = []
    response = api.post(reverse("api_rating_campaign_create"), body, format="json")
    assert response.data["detail"] == f"pair_runs: no such inspection runs: {hidden}"


@pytest.fixture
def jobs(world):
    """Jobs that name the model behind erin's items, and two that do not."""
    from annotation.core.models import Job

    def job(kind: str, **params) -> Job:
        return Job.objects.create(kind=kind, params=params, result={"teacher": {"name": TEACHER}})

    curation = world.curation
    made = {
        "drafted the item": job("draft", spectrum_ids=[999999], task="CV"),
        "drafted its spectrum": job("draft", spectrum_ids=[curation.spectrum_id], task="CV"),
        "standardized it": job("standardize", curation_ids=[curation.pk]),
        "sent run-alpha": job("enqueue_candidates", run_id=world.runs["run-alpha"].pk),
        "sent run-gamma": job("enqueue_candidates", run_id=world.runs["run-gamma"].pk),
        "re-checked run-alpha": job(
            "inspection_recheck", run_id=world.runs["run-alpha"].pk, candidate_ids=[1]
        ),
        "drafted elsewhere": job("draft", spectrum_ids=[999998], task="CV"),
    }
    Curation.objects.filter(pk=curation.pk).update(draft_job=made["drafted the item"])
    return made


def test_it_keeps_jobs_that_name_an_items_model_from_its_rater(world, staff_erin, jobs):
    """A rater who also reads jobs (staff, ML engineer) could read the teacher of a curation
    item off its draft job, or a run's policy off the job that sent its candidates."""
    from annotation.blinding import BLINDED_JOB_KINDS
    from annotation.core.jobs import RUNNERS

    assert set(BLINDED_JOB_KINDS) <= set(RUNNERS)
    hidden = {
        "drafted the item",
        "drafted its spectrum",
        "standardized it",
        "sent run-alpha",
        "re-checked run-alpha",
    }
    client, api = Client(), APIClient()
    client.force_login(staff_erin)
    api.force_authenticate(staff_erin)
    listed = {row["id"] for row in api.get(reverse("api_job_list")).data["results"]}
    page = client.get(reverse("job_list")).content.decode()
    for name, job in jobs.items():
        detail = client.get(reverse("job_detail", args=[job.pk])).status_code
        api_detail = api.get(reverse("api_job_detail", args=[job.pk])).status_code
        if name in hidden:
            assert job.pk not in listed and (detail, api_detail) == (404, 404), name
            assert f'href="/jobs/{job.pk}/"' not in page, name
        else:
            assert job.pk in listed and (detail, api_detail) == (200, 200), name


def test_it_shows_the_same_jobs_to_staff_who_rate_nothing(world, jobs):
    stella = world.users["stella"]
    api = APIClient()
    api.force_authenticate(stella)
    listed = {row["id"] for row in api.get(reverse("api_job_list")).data["results"]}
    assert {job.pk for job in jobs.values()} <= listed
