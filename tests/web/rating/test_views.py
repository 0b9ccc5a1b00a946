"""Rating pages: campaigns, the Figure 7 rating page, pairwise comparisons, judges, items."""

from __future__ import annotations

from collections import Counter

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from agent.agreement import RUBRIC
from agent.judges import JUDGE_RUBRIC_PROMPT
from annotation.core.models import Job
from annotation.curation import services as curation_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun, Rollout
from annotation.rating import services as rating_services
from annotation.rating.forms import CampaignForm
from annotation.rating.models import Judge, PairJudgement, RatingAssignment, RatingCampaign
from tests.factories import UserFactory, make_endpoint, make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db

POLICIES = ("model-a", "model-b")


@pytest.fixture
def alice(db):
    return UserFactory(username="alice", roles=["rater"])


@pytest.fixture
def bob(db):
    return UserFactory(username="bob", roles=["rater"])


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sources(cv, n: int, *, paired: bool = False) -> list[rating_services.RatingSource]:
    """n trajectories alternating between the two models; paired: both models per spectrum."""
    out = []
    for i in range(n):
        spectrum_index = i // 2 if paired else i
        row = make_spectrum(object_id=f"S{spectrum_index}", seed=spectrum_index, task=cv)
        out.append(
            rating_services.RatingSource(
                source=f"test:{i}",
                data=curation_services.trajectory_to_stored(make_trajectory(row)),
                policy_name=POLICIES[i % 2],
                task=cv,
                spectrum=row,
                dataset="SDSS",
            )
        )
    return out


def make_campaign(cv, raters, creator, *, n=2, per_item=1, paired=False) -> RatingCampaign:
    campaign = rating_services.campaign_create(
        name="reasoning quality",
        raters=raters,
        raters_per_item=per_item,
        sources=sources(cv, n, paired=paired),
        created_by=creator,
        seed=3,
    )
    if paired:
        items = list(campaign.items.order_by("source"))
        rating_services.campaign_add_pairs(
            campaign=campaign,
            pairs=[(items[i], items[i + 1]) for i in range(0, n, 2)],
            raters_per_pair=len(raters),
            actor=None,
        )
    return campaign


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


def rate_url(campaign) -> str:
    return reverse("rating_rate", args=[campaign.pk])


def my_queue(campaign, rater):
    return RatingAssignment.objects.filter(item__campaign=campaign, rater=rater, score=None)


# --- campaigns ------------------------------------------------------------------------------------


def test_it_lists_the_campaigns_i_rate_with_my_progress(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=3)
    first = my_queue(campaign, alice).first()
    rating_services.rating_submit(assignment=first, rater=alice, score=4)
    body = logged_in(alice).get(reverse("rating_campaigns")).content.decode()
    assert campaign.name in body
    assert "1 / 3" in body
    assert "New campaign" not in body


def test_it_offers_staff_a_new_campaign(stella):
    body = logged_in(stella).get(reverse("rating_campaigns")).content.decode()
    assert reverse("rating_campaign_create") in body


def test_it_renders_every_campaign_field_exactly_once(stella):
    """A field rendered twice (a substring test once put "raters" in the pairwise fieldset too)
    leaves a second, empty, required copy that blocks the browser's submission."""
    body = logged_in(stella).get(reverse("rating_campaign_create")).content.decode()
    for name in CampaignForm.base_fields:
        assert body.count(f'name="{name}"') == 1, name


def test_it_refuses_the_new_campaign_page_to_non_staff(alice):
    response = logged_in(alice).get(reverse("rating_campaign_create"))
    assert response.status_code == 403
    assert "you need the staff role" in response.content.decode()


def test_it_creates_a_campaign_from_runs_with_pairs_over_shared_spectra(cv, alice, bob, stella):
    rows = [make_spectrum(object_id=f"P{i}", seed=i, task=cv) for i in range(3)]
    run_a = make_run(cv, "run a", "model-a", rows)
    run_b = make_run(cv, "run b", "model-b", rows[:2] + [make_spectrum(object_id="Q", seed=9)])
    response = logged_in(stella).post(
        reverse("rating_campaign_create"),
        {
            "name": "a vs b",
            "raters": [alice.pk, bob.pk],
            "raters_per_item": 1,
            "rollouts_per_run": 5,
            "pair_run_a": run_a.pk,
            "pair_run_b": run_b.pk,
            "raters_per_pair": 2,
            "seed": 11,
        },
    )
    campaign = RatingCampaign.objects.get()
    assert response["Location"] == reverse("rating_campaign", args=[campaign.pk])
    assert campaign.items.count() == 4  # the two spectra both runs finished, both models each
    assert Counter(campaign.items.values_list("policy_name", flat=True)) == {
        "model-a · run a": 2,
        "model-b · run b": 2,
    }
    pairs = list(campaign.pairs.select_related("left", "right"))
    assert len(pairs) == 2
    assert all(p.left.spectrum_id == p.right.spectrum_id for p in pairs)
    assert PairJudgement.objects.filter(pair__campaign=campaign).count() == 4


def test_it_samples_rollouts_per_run_reproducibly_from_the_seed(cv, alice, stella):
    rows = [make_spectrum(object_id=f"R{i}", seed=i, task=cv) for i in range(5)]
    run = make_run(cv, "run", "model-a", rows)
    data = {"name": "sample", "raters": [alice.pk], "raters_per_item": 1, "runs": [run.pk]}
    data |= {"rollouts_per_run": 2, "seed": 4}
    client = logged_in(stella)
    client.post(reverse("rating_campaign_create"), data)
    client.post(reverse("rating_campaign_create"), data)
    first, second = RatingCampaign.objects.order_by("id")
    assert first.items.count() == 2
    sampled = lambda c: sorted(c.items.values_list("source", flat=True))  # noqa: E731
    assert sampled(first) == sampled(second)


def test_it_explains_why_a_campaign_cannot_be_created(cv, alice, stella):
    response = logged_in(stella).post(
        reverse("rating_campaign_create"),
        {"name": "empty", "raters": [alice.pk], "raters_per_item": 1, "rollouts_per_run": 5},
    )
    assert response.status_code == 200
    assert "choose at least one inspection run or accepted curation" in response.content.decode()
    assert not RatingCampaign.objects.exists()


def test_it_balances_the_assignment_shown_on_the_overview(cv, stella):
    raters = [UserFactory(username=name, roles=["rater"]) for name in ("ann", "ben", "cat")]
    campaign = make_campaign(cv, raters, stella, n=5, per_item=2)
    response = logged_in(stella).get(reverse("rating_campaign", args=[campaign.pk]))
    totals = [row["progress"]["total"] for row in response.context["rater_rows"]]
    assert sum(totals) == 10
    assert max(totals) - min(totals) <= 1


@pytest.mark.parametrize(
    ("who", "sees_close"), [("stella", True), ("creator", False), ("alice", False)]
)
def test_it_shows_the_close_button_only_to_staff(cv, alice, stella, who, sees_close):
    creator = UserFactory(username="creator", roles=["rater"])  # was staff when creating it
    campaign = make_campaign(cv, [alice], creator)
    user = {"stella": stella, "creator": creator, "alice": alice}[who]
    body = logged_in(user).get(reverse("rating_campaign", args=[campaign.pk])).content.decode()
    assert ("Close campaign" in body) is sees_close
    assert ('id="rater-progress"' in body) is sees_close


def test_it_closes_a_campaign_for_its_creator(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    logged_in(stella).post(reverse("rating_campaign_close", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert campaign.closed


def test_it_refuses_to_let_a_rater_close_the_campaign(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    response = logged_in(alice).post(reverse("rating_campaign_close", args=[campaign.pk]))
    campaign.refresh_from_db()
    assert response.status_code == 403
    assert not campaign.closed


def test_it_refuses_the_campaign_to_outsiders(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    outsider = UserFactory(username="outsider", roles=["rater"])
    response = logged_in(outsider).get(reverse("rating_campaign", args=[campaign.pk]))
    assert response.status_code == 404


# --- the rating page ----------------------------------------------------------------------------


def test_it_shows_score_buttons_keys_and_the_rubric(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    body = logged_in(alice).get(rate_url(campaign)).content.decode()
    for score, text in RUBRIC.items():
        assert f'data-score="{score}"' in body
        assert f'aria-keyshortcuts="{score}"' in body
        assert text in body
    assert 'id="rubric-panel"' in body and "data-toggle-rubric" in body
    assert "js/rating.js" in body
    assert 'name="comment"' in body


def test_it_shows_the_whole_trajectory_and_the_spectrum_with_inspected_windows(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=1)
    response = logged_in(alice).get(rate_url(campaign))
    body = response.content.decode()
    item = response.context["item"]
    assert item["question"] == cv.question and escape(cv.question) in body
    assert item["steps"][0]["tool_call"]["name"] == "spectral_visualization_tool"
    assert item["steps"][0]["tool_result"]["image"]["url"] in body
    assert "Broad Balmer emission" in body  # the final answer's justification
    assert response.context["plot_data"]["inspected"] == [[6500.0, 6630.0]]
    assert 'data-plot-source="plot-data"' in body


def test_it_moves_to_the_next_item_after_a_score(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2)
    first, second = my_queue(campaign, alice).order_by("position")
    client = logged_in(alice)
    response = client.post(
        rate_url(campaign), {"assignment": first.pk, "score": 4, "comment": "fine"}
    )
    assert response["Location"] == rate_url(campaign)
    first.refresh_from_db()
    assert (first.score, first.comment) == (4, "fine")
    assert client.get(rate_url(campaign)).context["item"]["blind_id"] == second.item.blind_id


def test_it_answers_htmx_with_the_next_items_panel(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2)
    first, second = my_queue(campaign, alice).order_by("position")
    response = logged_in(alice).post(
        rate_url(campaign), {"assignment": first.pk, "score": 5}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="rate-panel"')
    assert second.item.blind_id in body and first.item.blind_id not in body


@pytest.mark.parametrize("score", ["7", "-1", "two", ""])
def test_it_shows_the_error_for_an_invalid_score(cv, alice, stella, score):
    campaign = make_campaign(cv, [alice], stella)
    first = my_queue(campaign, alice).order_by("position").first()
    response = logged_in(alice).post(rate_url(campaign), {"assignment": first.pk, "score": score})
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()
    assert response.context["item"]["blind_id"] == first.item.blind_id
    first.refresh_from_db()
    assert first.score is None


def test_it_names_the_rule_an_out_of_range_score_breaks(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    first = my_queue(campaign, alice).first()
    response = logged_in(alice).post(rate_url(campaign), {"assignment": first.pk, "score": "7"})
    assert "a score is a whole number from 0 to 5; got 7" in response.content.decode()


def test_it_refuses_a_score_for_someone_elses_item(cv, alice, bob, stella):
    campaign = make_campaign(cv, [alice, bob], stella, n=2, per_item=1)
    bobs = RatingAssignment.objects.get(item__campaign=campaign, rater=bob)
    response = logged_in(alice).post(rate_url(campaign), {"assignment": bobs.pk, "score": 3})
    bobs.refresh_from_db()
    assert response.status_code == 400
    assert bobs.score is None


def test_it_counts_my_progress(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=3)
    client = logged_in(alice)
    assert "Scored <strong>0 / 3</strong>" in client.get(rate_url(campaign)).content.decode()
    first = my_queue(campaign, alice).first()
    client.post(rate_url(campaign), {"assignment": first.pk, "score": 2})
    assert "Scored <strong>1 / 3</strong>" in client.get(rate_url(campaign)).content.decode()


def test_it_says_when_everything_is_scored(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=1)
    first = my_queue(campaign, alice).first()
    rating_services.rating_submit(assignment=first, rater=alice, score=3)
    body = logged_in(alice).get(rate_url(campaign)).content.decode()
    assert "All 1 trajectories scored" in body
    assert "data-score" not in body


def test_it_lets_a_rater_revise_an_earlier_score(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2)
    first = my_queue(campaign, alice).order_by("position").first()
    client = logged_in(alice)
    client.post(rate_url(campaign), {"assignment": first.pk, "score": 1, "comment": "hmm"})
    response = client.get(rate_url(campaign), {"assignment": first.pk})
    assert response.context["item"]["blind_id"] == first.item.blind_id
    assert (response.context["my_score"], response.context["my_comment"]) == (1, "hmm")
    client.post(rate_url(campaign), {"assignment": first.pk, "score": 3})
    first.refresh_from_db()
    assert first.score == 3


def test_it_shows_no_item_to_rate_once_closed(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    rating_services.campaign_close(campaign=campaign, actor=stella)
    response = logged_in(alice).get(rate_url(campaign))
    assert response.context["item"] is None
    assert "closed" in response.content.decode()


def test_it_refuses_the_rating_page_to_non_raters(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella)
    assert logged_in(stella).get(rate_url(campaign)).status_code == 403


# --- pairwise comparisons -----------------------------------------------------------------------


def test_it_shows_both_sides_with_arrow_keys_a_tie_letter_and_buttons(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2, paired=True)
    body = logged_in(alice).get(reverse("rating_pairs", args=[campaign.pk])).content.decode()
    # ↓ scrolls a long trajectory: it must not be the tie key (issue 26)
    assert "ArrowDown" not in body
    for outcome, key in (("left", "ArrowLeft"), ("tie", "t"), ("right", "ArrowRight")):
        assert f'data-outcome="{outcome}"' in body
        assert f'aria-keyshortcuts="{key}"' in body
    assert 'data-plot-source="plot-left"' in body and 'data-plot-source="plot-right"' in body


def test_it_records_a_pair_outcome_and_maps_it_back_to_the_policies(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=4, paired=True)
    client = logged_in(alice)
    url = reverse("rating_pairs", args=[campaign.pk])
    for judgement in PairJudgement.objects.filter(pair__campaign=campaign, rater=alice):
        side = "left" if judgement.pair.left.policy_name == "model-b" else "right"
        client.post(url, {"judgement": judgement.pk, "outcome": side})
    outcomes = set(PairJudgement.objects.values_list("outcome", flat=True))
    assert outcomes <= {"left", "right"} and "" not in outcomes
    rating_services.campaign_close(campaign=campaign, actor=stella)
    analysis = client.get(reverse("api_rating_analysis", args=[campaign.pk])).json()
    # model-a is the reference; alice preferred model-b every time
    assert analysis["pairwise"]["shares"]["SDSS"]["loss"] == 1.0


def test_it_advances_to_the_next_pair(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=4, paired=True)
    first, second = PairJudgement.objects.filter(rater=alice).order_by("position")
    response = logged_in(alice).post(
        reverse("rating_pairs", args=[campaign.pk]),
        {"judgement": first.pk, "outcome": "tie"},
        HTTP_HX_REQUEST="true",
    )
    assert response.context["judgement_id"] == second.pk
    assert "Judged <strong>1 / 2</strong>" in response.content.decode()


def test_it_shows_the_error_for_an_unknown_outcome(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2, paired=True)
    judgement = PairJudgement.objects.get(rater=alice)
    response = logged_in(alice).post(
        reverse("rating_pairs", args=[campaign.pk]), {"judgement": judgement.pk, "outcome": "up"}
    )
    assert response.status_code == 400
    assert "the outcome is left, tie or right; got up" in response.content.decode()


# --- judges and items ---------------------------------------------------------------------------


def test_it_adds_a_judge_with_the_rubric_prompt_offered(stella):
    make_endpoint(name="judge")
    client = logged_in(stella)
    assert JUDGE_RUBRIC_PROMPT[:60] in client.get(reverse("rating_judges")).content.decode()
    client.post(
        reverse("rating_judges"),
        {
            "name": "gpt",
            "endpoint": "judge",
            "prompt": JUDGE_RUBRIC_PROMPT,
            "include_images": "on",
        },
    )
    judge = Judge.objects.get()
    assert (judge.name, judge.prompt, judge.include_images) == ("gpt", JUDGE_RUBRIC_PROMPT, True)


def test_it_refuses_the_judges_page_to_non_staff(alice):
    assert logged_in(alice).get(reverse("rating_judges")).status_code == 403


def test_it_starts_a_judge_job_from_the_campaign_page(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=2)
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=stella)
    logged_in(stella).post(reverse("rating_judge_run", args=[campaign.pk, judge.pk]))
    job = Job.objects.get(kind="judge")
    assert job.params == {"judge_id": judge.pk, "campaign_id": campaign.pk}
    assert job.total == 2


def test_it_shows_an_item_with_its_policy_ratings_and_escaped_judge_reply(cv, alice, stella):
    campaign = make_campaign(cv, [alice], stella, n=1)
    assignment = my_queue(campaign, alice).get()
    rating_services.rating_submit(
        assignment=assignment, rater=alice, score=4, comment="clear lines"
    )
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=stella)
    rating_services.judge_score_record(
        judge=judge, item=assignment.item, score=None, reason="", raw="<script>x</script> 3.5"
    )
    rating_services.campaign_close(campaign=campaign, actor=stella)
    url = reverse("rating_item", args=[campaign.pk, assignment.item.blind_id])
    body = logged_in(alice).get(url).content.decode()
    assert "model-a" in body and "clear lines" in body and "no valid score" in body
    assert "&lt;script&gt;x&lt;/script&gt; 3.5" in body and "<script>x</script>" not in body
