"""Rating through the API: the whole flow with token auth, permissions, refusals, judges."""

from __future__ import annotations

from collections import Counter

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation.core.models import Job
from annotation.curation import services as curation_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun, Rollout
from annotation.rating import jobs
from annotation.rating import services as rating_services
from annotation.rating.models import JudgeScore, PairJudgement, RatingAssignment, RatingCampaign
from tests.factories import UserFactory, make_endpoint, make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db):
    return UserFactory(username="alice", roles=["rater"])


@pytest.fixture
def bob(db):
    return UserFactory(username="bob", roles=["rater"])


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


def token_client(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def make_run(cv, name: str, policy: str, rows) -> InspectionRun:
    """A finished inspection run: one stored rollout (index 0) per spectrum."""
    run = InspectionRun.objects.create(
        name=name, task=cv, policy_spec={"kind": "openai"}, policy_info={"name": policy}
    )
    for row in rows:
        candidate = Candidate.objects.create(run=run, spectrum=row, state=CandidateState.DONE)
        Rollout.objects.create(
            candidate=candidate,
            index=0,
            data=curation_services.trajectory_to_stored(make_trajectory(row)),
        )
    return run


@pytest.fixture
def runs(cv):
    rows = [make_spectrum(object_id=f"S{i}", seed=i, task=cv) for i in range(2)]
    return make_run(cv, "a", "model-a", rows), make_run(cv, "b", "model-b", rows)


def create_payload(runs, raters, **overrides) -> dict:
    return {
        "name": "api campaign",
        "raters": [r.username for r in raters],
        "raters_per_item": 1,
        "runs": [],
        "rollouts_per_run": 10,
        "pair_runs": [runs[0].pk, runs[1].pk],
        "raters_per_pair": 1,
        "seed": 21,
    } | overrides


def create_campaign(stella, runs, raters, **overrides):
    return token_client(stella).post(
        reverse("api_rating_campaign_create"), create_payload(runs, raters, **overrides), "json"
    )


def test_it_runs_the_whole_rating_flow_with_token_auth(runs, alice, stella):
    created = create_campaign(stella, runs, [alice])
    assert created.status_code == 201, created.content
    campaign_id = created.json()["id"]
    assert (created.json()["n_items"], created.json()["n_pairs"]) == (4, 2)
    rater = token_client(alice)
    listed = rater.get(reverse("api_rating_campaigns")).json()
    assert [c["id"] for c in listed] == [campaign_id] and listed[0]["progress"]["total"] == 4
    scores = iter([5, 4, 3, 2])
    while (nxt := rater.get(reverse("api_rating_next_item", args=[campaign_id])).json())["item"]:
        url = reverse("api_rating_submit", args=[nxt["assignment"]])
        assert rater.post(url, {"score": next(scores), "comment": "ok"}, "json").status_code == 200
    assert nxt["progress"] == {"rated": 4, "total": 4, "judged": 0, "pairs": 2}
    while (pair := rater.get(reverse("api_rating_next_pair", args=[campaign_id])).json())["left"]:
        url = reverse("api_rating_pair_submit", args=[pair["judgement"]])
        assert rater.post(url, {"outcome": "tie"}, "json").status_code == 200
    assert pair["progress"]["judged"] == 2
    close = token_client(stella).post(reverse("api_rating_campaign_close", args=[campaign_id]))
    assert close.status_code == 200 and close.json()["closed"] is True
    analysis = rater.get(reverse("api_rating_analysis", args=[campaign_id])).json()
    assert analysis["histograms"]["humans"] == [0, 0, 1, 1, 1, 1]
    assert analysis["pairwise"]["shares"]["TEST"]["tie"] == 1.0


def test_it_refuses_campaign_creation_to_non_staff(runs, alice):
    response = create_campaign(alice, runs, [alice])
    assert response.status_code == 403
    assert "you need the staff role" in response.json()["detail"]
    assert not RatingCampaign.objects.exists()


def test_it_names_unknown_raters(runs, stella):
    response = token_client(stella).post(
        reverse("api_rating_campaign_create"),
        create_payload(runs, []) | {"raters": ["alice", "nobody"]},
        "json",
    )
    # Well formed, naming users that do not exist: 404 naming them (issue 32), as a path would.
    assert response.status_code == 404
    assert "raters: unknown users: alice, nobody" in response.json()["detail"]


def test_it_names_runs_without_shared_spectra(cv, alice, stella):
    run_a = make_run(cv, "a", "model-a", [make_spectrum(object_id="X", seed=1, task=cv)])
    run_b = make_run(cv, "b", "model-b", [make_spectrum(object_id="Y", seed=2, task=cv)])
    response = create_campaign(stella, (run_a, run_b), [alice])
    assert response.status_code == 400
    assert "share no spectrum" in response.json()["detail"]


def test_it_balances_assignments_of_a_campaign_created_through_the_api(cv, stella):
    raters = [
        UserFactory(username=name, roles=["rater"]).username for name in ("ann", "ben", "cat")
    ]
    rows = [make_spectrum(object_id=f"B{i}", seed=i, task=cv) for i in range(5)]
    run = make_run(cv, "solo", "model-a", rows)
    payload = {"name": "balance", "raters": raters, "raters_per_item": 2}
    payload |= {"runs": [run.pk], "rollouts_per_run": 5}
    created = token_client(stella).post(reverse("api_rating_campaign_create"), payload, "json")
    campaign_id = created.json()["id"]
    detail = token_client(stella).get(reverse("api_rating_campaign", args=[campaign_id])).json()
    totals = [progress["total"] for progress in detail["raters"].values()]
    assert sum(totals) == 10 and max(totals) - min(totals) <= 1
    per_item = Counter(
        RatingAssignment.objects.filter(item__campaign_id=campaign_id).values_list("item", "rater")
    )
    assert set(per_item.values()) == {1}  # never the same rater twice on one item


def test_it_rejects_a_score_of_7_with_the_reason(runs, alice, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    client = token_client(alice)
    nxt = client.get(reverse("api_rating_next_item", args=[campaign_id])).json()
    response = client.post(reverse("api_rating_submit", args=[nxt["assignment"]]), {"score": 7})
    assert response.status_code == 400
    assert response.json()["detail"] == "a score is a whole number from 0 to 5; got 7"
    assert RatingAssignment.objects.get(pk=nxt["assignment"]).score is None


def test_it_refuses_to_score_another_raters_item(runs, alice, bob, stella):
    campaign_id = create_campaign(stella, runs, [alice, bob]).json()["id"]
    bobs = RatingAssignment.objects.filter(item__campaign_id=campaign_id, rater=bob).first()
    response = token_client(alice).post(reverse("api_rating_submit", args=[bobs.pk]), {"score": 3})
    assert response.status_code == 403
    bobs.refresh_from_db()
    assert bobs.score is None


def test_it_refuses_scores_once_the_campaign_is_closed(runs, alice, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    assignment = RatingAssignment.objects.filter(rater=alice).first()
    token_client(stella).post(reverse("api_rating_campaign_close", args=[campaign_id]))
    response = token_client(alice).post(
        reverse("api_rating_submit", args=[assignment.pk]), {"score": 3}
    )
    assert response.status_code == 409
    assert "closed" in response.json()["detail"]


def test_it_refuses_an_unknown_pair_outcome_with_the_reason(runs, alice, stella):
    create_campaign(stella, runs, [alice])
    judgement = PairJudgement.objects.filter(rater=alice).first()
    response = token_client(alice).post(
        reverse("api_rating_pair_submit", args=[judgement.pk]), {"outcome": "up"}
    )
    assert response.status_code == 400
    assert "left, tie or right" in response.json()["detail"]


def test_it_refuses_closing_to_a_rater(runs, alice, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    response = token_client(alice).post(reverse("api_rating_campaign_close", args=[campaign_id]))
    assert response.status_code == 403


def test_it_refuses_the_next_item_to_someone_not_rating(runs, alice, bob, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    response = token_client(bob).get(reverse("api_rating_next_item", args=[campaign_id]))
    assert response.status_code == 404


@pytest.mark.parametrize(("username", "expected"), [("stella", 201), ("alice", 403)])
def test_it_lets_only_staff_add_a_judge(alice, stella, username, expected):
    make_endpoint(name="judge", model="gpt-x")
    user = {"stella": stella, "alice": alice}[username]
    response = token_client(user).post(
        reverse("api_rating_judge_create"), {"name": "gpt", "endpoint": "judge"}, "json"
    )
    assert response.status_code == expected


def test_it_gives_a_new_judge_the_table_7_prompt_by_default(stella):
    from agent.judges import JUDGE_RUBRIC_PROMPT

    make_endpoint(name="judge", model="gpt-x")
    response = token_client(stella).post(
        reverse("api_rating_judge_create"), {"name": "gpt", "endpoint": "judge"}, "json"
    )
    assert response.json()["prompt"] == JUDGE_RUBRIC_PROMPT


def test_it_runs_a_judge_over_the_campaign(
    runs, alice, stella, monkeypatch, django_capture_on_commit_callbacks
):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=stella)

    class FakeJudge:
        def generate(self, messages):
            return "Sound reasoning.\nScore: 4"

    monkeypatch.setattr(jobs, "judge_policy", lambda judge: FakeJudge())
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(stella).post(
            reverse("api_rating_judge_run", args=[campaign_id, judge.pk])
        )
    assert response.status_code == 202
    assert Job.objects.get(pk=response.json()["job"]).state == "succeeded"
    assert list(JudgeScore.objects.values_list("score", flat=True)) == [4, 4, 4, 4]


def test_it_refuses_a_second_run_of_a_judge_still_queued(runs, alice, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=stella)
    url = reverse("api_rating_judge_run", args=[campaign_id, judge.pk])
    client = token_client(stella)
    assert client.post(url).status_code == 202  # its job stays queued: no commit in this test
    response = client.post(url)
    assert response.status_code == 409
    assert "already scoring" in response.json()["detail"]


def test_it_refuses_to_let_a_rater_start_a_judge(runs, alice, stella):
    campaign_id = create_campaign(stella, runs, [alice]).json()["id"]
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=stella)
    response = token_client(alice).post(
        reverse("api_rating_judge_run", args=[campaign_id, judge.pk])
    )
    assert response.status_code == 403
    assert not Job.objects.filter(kind="judge").exists()
