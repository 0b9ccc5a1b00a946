"""The analysis page (paper Figure 4): CSV exports with hand-computed numbers, and API twins."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent import agreement
from annotation.core import charts
from annotation.curation import services as curation_services
from annotation.rating import services as rating_services
from annotation.rating.models import PairJudgement, RatingAssignment
from annotation.rating.views import FIGURES
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_endpoint, make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db

# Scores of each rater on items 0-3 (items in source order; even items model-a, odd model-b).
SCORES = {"alice": [5, 4, 3, 0], "bob": [5, 3, 3, 1], "carol": [4, 1, 2, 0]}
JUDGE_SCORES = [5, 3, 4, 0]


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


@pytest.fixture
def raters(db):
    return {name: UserFactory(username=name, roles=["rater"]) for name in SCORES}


def source(cv, i: int, policy: str, dataset: str, spectrum_index: int):
    row = make_spectrum(object_id=f"S{spectrum_index}", seed=spectrum_index, task=cv)
    return rating_services.RatingSource(
        source=f"test:{i}",
        data=curation_services.trajectory_to_stored(make_trajectory(row)),
        policy_name=policy,
        task=cv,
        spectrum=row,
        dataset=dataset,
    )


@pytest.fixture
def campaign(raters, stella):
    """Every rater scores every item with the scores in SCORES; one judge scores them too."""
    cv = Task.objects.get(code="CV")
    campaign = rating_services.campaign_create(
        name="hand-built",
        raters=list(raters.values()),
        raters_per_item=3,
        sources=[source(cv, i, ("model-a", "model-b")[i % 2], "SDSS", i) for i in range(4)],
        created_by=stella,
        seed=2,
    )
    items = list(campaign.items.order_by("source"))
    for assignment in RatingAssignment.objects.filter(item__campaign=campaign):
        score = SCORES[assignment.rater.username][items.index(assignment.item)]
        rating_services.rating_submit(
            assignment=assignment, rater=assignment.rater, score=score, comment=""
        )
    judge = rating_services.judge_create(name="gpt", endpoint=make_endpoint(name="j"), actor=stella)
    for item, score in zip(items, JUDGE_SCORES, strict=True):
        rating_services.judge_score_record(
            judge=judge, item=item, score=score, reason=f"r{score}", raw=""
        )
    rating_services.campaign_close(campaign=campaign, actor=stella)
    return campaign


def blind_ids(campaign) -> list[str]:
    return list(campaign.items.order_by("source").values_list("blind_id", flat=True))


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def csv_rows(user, campaign, figure: str) -> list[list[str]]:
    response = logged_in(user).get(reverse("rating_analysis_csv", args=[campaign.pk, figure]))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_it_exports_histogram_counts(campaign, stella):
    rows = csv_rows(stella, campaign, "histograms")
    assert rows[0] == ["score", "humans", "gpt"]
    assert [[int(v) for v in row] for row in rows[1:]] == [
        [0, 2, 1],
        [1, 2, 0],
        [2, 1, 0],
        [3, 3, 1],
        [4, 2, 1],
        [5, 2, 1],
    ]


def test_it_exports_cumulative_distributions(campaign, stella):
    rows = csv_rows(stella, campaign, "cdfs")
    humans = [float(row[1]) for row in rows[1:]]
    assert humans == pytest.approx([2 / 12, 4 / 12, 5 / 12, 8 / 12, 10 / 12, 1.0])


def test_it_reports_krippendorffs_alpha_over_all_raters(campaign, stella):
    units = [[SCORES[name][i] for name in SCORES] for i in range(4)]
    expected = agreement.krippendorff_alpha(units, level="ordinal")
    api = APIClient()
    api.force_authenticate(stella)
    data = api.get(reverse("api_rating_analysis", args=[campaign.pk])).json()
    assert data["krippendorff_alpha"] == pytest.approx(expected)
    body = logged_in(stella).get(reverse("rating_analysis", args=[campaign.pk])).content.decode()
    assert f'id="krippendorff-alpha">{expected:.3f}<' in body


def test_it_exports_quadratic_weighted_kappa_per_rater_pair(campaign, stella):
    rows = csv_rows(stella, campaign, "kappas")
    assert rows[0] == ["rater_a", "rater_b", "n_common", "kappa_quadratic"]
    by_pair = {frozenset(row[:2]): row for row in rows[1:]}
    assert len(by_pair) == 3 and all(row[2] == "4" for row in rows[1:])
    # alice (5,4,3,0) vs bob (5,3,3,1): sum(w O) = 2/100, sum(w E) = 5.5/25, kappa = 10/11
    assert float(by_pair[frozenset({"alice", "bob"})][3]) == pytest.approx(10 / 11)


def test_it_exports_spearman_between_the_human_mean_and_the_judge(campaign, stella):
    rows = csv_rows(stella, campaign, "spearman")
    assert rows[0] == ["", "human mean", "gpt"]
    # human means 14/3, 8/3, 8/3, 1/3 (ranks 4, 2.5, 2.5, 1) vs judge 5, 3, 4, 0 (4, 2, 3, 1)
    assert float(rows[1][2]) == pytest.approx(3 / math.sqrt(10))
    assert float(rows[1][1]) == pytest.approx(1.0)


def test_it_lists_the_largest_disagreement_first_with_a_link(campaign, stella):
    rows = csv_rows(stella, campaign, "disagreement")
    item_1 = blind_ids(campaign)[1]
    assert rows[1][:2] == [item_1, "model-b"]  # scores 4, 3, 1
    assert float(rows[1][2]) == 3.0
    assert float(rows[1][3]) == pytest.approx(math.sqrt(14 / 9))
    body = logged_in(stella).get(reverse("rating_analysis", args=[campaign.pk])).content.decode()
    assert reverse("rating_item", args=[campaign.pk, item_1]) in body


def test_it_exports_the_mean_human_score_per_model(campaign, stella):
    rows = csv_rows(stella, campaign, "policy_means")
    means = {row[0]: float(row[1]) for row in rows[1:]}
    assert means == pytest.approx({"model-a": 11 / 3, "model-b": 1.5})


def test_it_exports_every_items_human_mean_and_judge_score(campaign, stella):
    rows = csv_rows(stella, campaign, "judge_scores")
    assert rows[0] == ["blind_id", "policy", "dataset", "human_mean", "n_human", "gpt score"] + [
        "gpt reason"
    ]
    by_blind = {row[0]: row for row in rows[1:]}
    first = by_blind[blind_ids(campaign)[0]]
    assert first[1:3] == ["model-a", "SDSS"]
    assert float(first[3]) == pytest.approx(14 / 3)
    assert first[4:] == ["3", "5", "r5"]


def test_it_leaves_a_judge_score_empty_when_the_reply_had_none(campaign, stella):
    judge = rating_services.judge_create(
        name="vague", endpoint=make_endpoint(name="v"), actor=stella
    )
    item = campaign.items.order_by("source").first()
    rating_services.judge_score_record(
        judge=judge, item=item, score=None, reason="no score", raw="?"
    )
    rows = csv_rows(stella, campaign, "judge_scores")
    row = next(r for r in rows[1:] if r[0] == item.blind_id)
    assert row[rows[0].index("vague score")] == ""


@pytest.fixture
def pairwise_campaign(raters, stella):
    """model-a against model-b: in SDSS one win and one tie, in LAMOST one loss."""
    cv = Task.objects.get(code="CV")
    datasets = ["SDSS", "SDSS", "LAMOST"]
    sources = [
        source(cv, 2 * s + k, policy, datasets[s], s)
        for s in range(3)
        for k, policy in enumerate(("model-a", "model-b"))
    ]
    alice = raters["alice"]
    campaign = rating_services.campaign_create(
        name="pairs", raters=[alice], raters_per_item=1, sources=sources, created_by=stella, seed=8
    )
    items = list(campaign.items.order_by("source"))
    pairs = rating_services.campaign_add_pairs(
        campaign=campaign,
        pairs=[(items[2 * s], items[2 * s + 1]) for s in range(3)],
        raters_per_pair=1,
        actor=None,
    )
    wanted = {0: "model-a", 1: "tie", 2: "model-b"}  # the preferred policy per spectrum
    for s, pair in enumerate(pairs):
        judgement = PairJudgement.objects.get(pair=pair)
        if wanted[s] == "tie":
            outcome = "tie"
        else:
            outcome = "left" if pair.left.policy_name == wanted[s] else "right"
        rating_services.pair_judgement_submit(judgement=judgement, rater=alice, outcome=outcome)
    rating_services.campaign_close(campaign=campaign, actor=stella)
    return campaign


def test_it_exports_win_tie_loss_shares_per_data_set(pairwise_campaign, stella):
    rows = csv_rows(stella, pairwise_campaign, "pairwise")
    assert rows[0][:7] == ["dataset", "reference", "others", "n", "wins", "ties", "losses"]
    assert [row[:7] for row in rows[1:]] == [
        ["LAMOST", "model-a", "model-b", "1", "0", "0", "1"],
        ["SDSS", "model-a", "model-b", "2", "1", "1", "0"],
    ]
    assert [float(v) for v in rows[2][7:]] == [0.5, 0.5, 0.0]


def test_it_exports_bradley_terry_strengths_with_intervals(pairwise_campaign, stella):
    rows = csv_rows(stella, pairwise_campaign, "strengths")
    assert rows[0] == ["policy", "strength", "ci_low", "ci_high"]
    values = {row[0]: [float(v) for v in row[1:]] for row in rows[1:]}
    assert set(values) == {"model-a", "model-b"}
    assert all(low <= estimate <= high for estimate, low, high in values.values())
    # normalised to geometric mean 1; one win, one tie, one loss: equal strengths
    assert values["model-a"][0] * values["model-b"][0] == pytest.approx(1.0)
    assert values["model-a"][0] == pytest.approx(1.0)


@pytest.mark.parametrize("figure", FIGURES)
def test_it_serves_each_figure_through_the_api_as_in_its_csv(campaign, stella, figure):
    api = APIClient()
    api.force_authenticate(stella)
    data = api.get(reverse("api_rating_analysis_figure", args=[campaign.pk, figure])).json()
    as_text = [["" if v is None else str(v) for v in row] for row in data["rows"]]
    assert [data["columns"], *as_text] == csv_rows(stella, campaign, figure)


def test_it_draws_the_same_data_as_the_api_with_names_made_inert(campaign, stella):
    api = APIClient()
    api.force_authenticate(stella)
    from_api = api.get(reverse("api_rating_analysis", args=[campaign.pk])).json()
    body = logged_in(stella).get(reverse("rating_analysis", args=[campaign.pk])).content.decode()
    embedded = re.search(r'<script id="analysis-data" type="application/json">(.*?)</script>', body)
    assert json.loads(unescape(embedded.group(1))) == charts.analysis_chart_data(from_api)


def test_it_links_every_figure_to_its_csv_export(campaign, stella):
    body = logged_in(stella).get(reverse("rating_analysis", args=[campaign.pk])).content.decode()
    for figure in FIGURES:
        assert reverse("rating_analysis_csv", args=[campaign.pk, figure]) in body


@pytest.mark.parametrize("url_name", ["rating_analysis_csv", "api_rating_analysis_figure"])
def test_it_answers_404_for_an_unknown_figure(campaign, stella, url_name):
    client = APIClient() if url_name.startswith("api_") else Client()
    client.force_login(stella)
    assert client.get(reverse(url_name, args=[campaign.pk, "nope"])).status_code == 404
