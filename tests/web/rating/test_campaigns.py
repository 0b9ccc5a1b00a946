from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from annotation.core import errors as core_errors
from annotation.core import services as core_services
from annotation.core.models import AuditLog
from annotation.curation import services as curation_services
from annotation.rating import jobs, selectors
from annotation.rating import services as rating_services
from annotation.rating.models import CampaignItem, JudgeScore, RatingAssignment
from annotation.spectra.models import Task
from tests.factories import (
    UserFactory,
    make_curation,
    make_endpoint,
    make_spectrum,
    make_trajectory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def raters(db):
    return [UserFactory(username=f"rater{i}", roles=["rater"]) for i in range(3)]


def sources(n: int, policies=("model-a", "model-b")):
    cv = Task.objects.get(code="CV")
    out = []
    for i in range(n):
        row = make_spectrum(object_id=f"R{i}", seed=i, task=cv, label="YES")
        out.append(
            rating_services.RatingSource(
                source=f"test:{i}",
                data=curation_services.trajectory_to_stored(make_trajectory(row)),
                policy_name=policies[i % len(policies)],
                task=cv,
                spectrum=row,
                dataset="LAMOST" if i % 2 else "SDSS",
            )
        )
    return out


def make_campaign(raters, staff, n=6, per_item=2, seed=7):
    return rating_services.campaign_create(
        name="c",
        raters=raters,
        raters_per_item=per_item,
        sources=sources(n),
        created_by=staff,
        seed=seed,
    )


def test_it_balances_assignments_between_raters():
    plan = rating_services.balanced_assignment(10, 3, 2, np.random.default_rng(0))
    load = Counter(r for item in plan for r in item)
    assert all(len(set(item)) == 2 for item in plan)
    assert max(load.values()) - min(load.values()) <= 1
    assert sum(load.values()) == 20


def test_it_refuses_more_raters_per_item_than_raters():
    with pytest.raises(core_errors.WorkflowError, match="raters per item"):
        rating_services.balanced_assignment(3, 2, 3, np.random.default_rng(0))


def test_it_assigns_each_item_to_distinct_raters(raters, staff):
    campaign = make_campaign(raters, staff)
    per_item = Counter(
        RatingAssignment.objects.filter(item__campaign=campaign).values_list("item", flat=True)
    )
    assert set(per_item.values()) == {2}
    assert campaign.items.count() == 6


def test_it_is_reproducible_from_its_seed(raters, staff):
    a = make_campaign(raters, staff, seed=11)
    b = make_campaign(raters, staff, seed=11)
    plan = lambda c: sorted(  # noqa: E731
        (x.item.source, x.rater_id, x.position)
        for x in RatingAssignment.objects.filter(item__campaign=c).select_related("item")
    )
    assert plan(a) == plan(b)


def test_it_hides_the_policy_from_raters(raters, staff):
    campaign = make_campaign(raters, staff)
    item = campaign.items.first()
    visible = selectors.blinded_trajectory(item.data)
    assert "policy" not in visible and "meta" not in visible
    assert "model-a" not in str(visible) and "model-b" not in str(visible)


def test_it_lets_only_the_assigned_rater_score(raters, staff):
    campaign = make_campaign(raters, staff)
    assignment = RatingAssignment.objects.filter(item__campaign=campaign, rater=raters[0]).first()
    with pytest.raises(core_errors.NotAllowed):
        rating_services.rating_submit(assignment=assignment, rater=raters[1], score=3)


@pytest.mark.parametrize("score", [-1, 6, 2.5, True, "4"])
def test_it_refuses_scores_outside_0_to_5(raters, staff, score):
    campaign = make_campaign(raters, staff)
    assignment = RatingAssignment.objects.filter(item__campaign=campaign, rater=raters[0]).first()
    with pytest.raises(core_errors.WorkflowError, match="0 to 5"):
        rating_services.rating_submit(assignment=assignment, rater=raters[0], score=score)


def test_it_freezes_ratings_once_closed(raters, staff):
    campaign = make_campaign(raters, staff)
    rating_services.campaign_close(campaign=campaign, actor=staff)
    assignment = RatingAssignment.objects.filter(item__campaign=campaign, rater=raters[0]).first()
    with pytest.raises(core_errors.WrongState, match="closed"):
        rating_services.rating_submit(assignment=assignment, rater=raters[0], score=3)


def test_it_shows_raters_the_analysis_only_after_closing(raters, staff):
    campaign = make_campaign(raters, staff)
    assert selectors.can_see_analysis(campaign=campaign, user=raters[0]) is False
    assert selectors.can_see_analysis(campaign=campaign, user=staff) is True
    rating_services.campaign_close(campaign=campaign, actor=staff)
    assert selectors.can_see_analysis(campaign=campaign, user=raters[0]) is True


def test_it_analyses_scores_agreement_and_judges(
    raters, staff, monkeypatch, django_capture_on_commit_callbacks
):
    campaign = make_campaign(raters, staff, n=4, per_item=3)
    for assignment in RatingAssignment.objects.filter(item__campaign=campaign):
        rating_services.rating_submit(assignment=assignment, rater=assignment.rater, score=4)
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(), actor=staff)

    class FakeJudge:
        def generate(self, messages):
            return "Reasoning is sound.\nScore: 4"

    monkeypatch.setattr(jobs, "judge_policy", lambda judge: FakeJudge())
    with django_capture_on_commit_callbacks(execute=True):
        core_services.job_create(
            kind="judge", params={"judge_id": judge.pk, "campaign_id": campaign.pk}
        )
    assert set(JudgeScore.objects.values_list("score", flat=True)) == {4}
    analysis = selectors.campaign_analysis(campaign=campaign)
    assert analysis["histograms"]["humans"] == [0, 0, 0, 0, 12, 0]
    assert analysis["histograms"]["gpt"] == [0, 0, 0, 0, 4, 0]
    assert analysis["policy_means"] == {"model-a": 4.0, "model-b": 4.0}
    assert analysis["disagreement"] == []


def test_it_stores_a_judge_reply_without_a_score_as_unscored(
    raters, staff, monkeypatch, django_capture_on_commit_callbacks
):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    judge = rating_services.judge_create(name="vague", endpoint=make_endpoint(), actor=staff)

    class Vague:
        def generate(self, messages):
            return "I would say it is between 3 and 4 overall."

    monkeypatch.setattr(jobs, "judge_policy", lambda judge: Vague())
    with django_capture_on_commit_callbacks(execute=True):
        core_services.job_create(
            kind="judge", params={"judge_id": judge.pk, "campaign_id": campaign.pk}
        )
    stored = JudgeScore.objects.first()
    assert stored.score is None and stored.raw.startswith("I would say")
    assert selectors.campaign_analysis(campaign=campaign)["judges_unscored"] == {"vague": 2}


def test_it_maps_pairwise_outcomes_back_to_policies(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    a, b = CampaignItem.objects.filter(campaign=campaign).order_by("source")
    b.spectrum = a.spectrum
    b.save()
    pair = rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(a, b)], raters_per_pair=3, actor=None
    )[0]
    winner_side = "left" if pair.left.policy_name == "model-a" else "right"
    for judgement in pair.judgements.all():
        rating_services.pair_judgement_submit(
            judgement=judgement, rater=judgement.rater, outcome=winner_side
        )
    shares = selectors.campaign_analysis(campaign=campaign)["pairwise"]["shares"]
    assert list(shares.values())[0]["win"] == 1.0  # model-a (the reference) always won


def test_it_refuses_pairs_of_different_spectra(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    a, b = CampaignItem.objects.filter(campaign=campaign)
    with pytest.raises(core_errors.WorkflowError, match="same spectrum"):
        rating_services.campaign_add_pairs(
            campaign=campaign, pairs=[(a, b)], raters_per_pair=1, actor=None
        )


def test_it_audit_logs_who_added_pairs(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    a, b = CampaignItem.objects.filter(campaign=campaign).order_by("source")
    b.spectrum = a.spectrum
    b.save()
    rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(a, b)], raters_per_pair=2, actor=staff
    )
    entry = AuditLog.objects.get(action="campaign_pairs_added")
    assert (entry.actor, entry.object_pk, entry.comment) == (
        staff,
        str(campaign.pk),
        "1 pairs x 2 raters",
    )


def test_it_refuses_pairs_for_a_closed_campaign(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    a, b = CampaignItem.objects.filter(campaign=campaign).order_by("source")
    b.spectrum = a.spectrum
    b.save()
    rating_services.campaign_close(campaign=campaign, actor=staff)
    with pytest.raises(core_errors.WrongState, match="closed"):
        rating_services.campaign_add_pairs(
            campaign=campaign, pairs=[(a, b)], raters_per_pair=1, actor=staff
        )
    assert not campaign.pairs.exists()


# --- conflict of interest (issue 26) ------------------------------------------------------------


def _audited_curation():
    from tests.web.curation.test_services import to_audit

    reviser = UserFactory(username="rev", roles=["expert", "rater"])
    auditor = UserFactory(username="aud", roles=["expert", "rater"])
    second = UserFactory(username="aud2", roles=["expert"])
    curation = to_audit(make_curation(), reviser, auditor, second)
    return curation, reviser, auditor


@pytest.mark.parametrize("role", ["reviser", "auditor"])
def test_it_refuses_a_rater_who_shaped_the_trajectory_being_rated(raters, staff, role):
    curation, reviser, auditor = _audited_curation()
    involved = reviser if role == "reviser" else auditor
    with pytest.raises(core_errors.WorkflowError) as refused:
        rating_services.campaign_create_from_choices(
            name="coi", description="", raters=[raters[0], involved], raters_per_item=1,
            runs=[], rollouts_per_run=1, curations=[curation], pair_runs=None,
            raters_per_pair=1, seed=1, created_by=staff,
        )  # fmt: skip
    message = str(refused.value)
    assert "conflict of interest" in message
    assert f"{involved.username} is the {role} of curation:{curation.pk}" in message
    assert not CampaignItem.objects.exists()


def test_it_accepts_raters_who_had_no_part_in_the_trajectory(raters, staff):
    curation, _, _ = _audited_curation()
    campaign = rating_services.campaign_create_from_choices(
        name="fine", description="", raters=list(raters), raters_per_item=1,
        runs=[], rollouts_per_run=1, curations=[curation], pair_runs=None,
        raters_per_pair=1, seed=1, created_by=staff,
    )  # fmt: skip
    assert campaign.items.count() == 1
