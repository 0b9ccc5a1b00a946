"""A campaign scored by one rater and no judge (issue 37 item 9): the analysis said "undefined"
twice for Krippendorff's alpha and drew an empty Spearman heatmap; it now says what each needs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.rating import selectors
from annotation.rating import services as rating_services
from annotation.rating.models import RatingAssignment
from annotation.spectra.models import Task
from tests.factories import UserFactory
from tests.web.rating.test_analysis import source

pytestmark = pytest.mark.django_db


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


@pytest.fixture
def one_rater_campaign(stella):
    alice = UserFactory(username="alice", roles=["rater"])
    cv = Task.objects.get(code="CV")
    campaign = rating_services.campaign_create(
        name="alone",
        raters=[alice],
        raters_per_item=1,
        sources=[source(cv, i, ("model-a", "model-b")[i % 2], "SDSS", i) for i in range(3)],
        created_by=stella,
        seed=1,
    )
    for score, assignment in enumerate(RatingAssignment.objects.filter(item__campaign=campaign)):
        rating_services.rating_submit(
            assignment=assignment, rater=alice, score=score + 2, comment=""
        )
    rating_services.campaign_close(campaign=campaign, actor=stella)
    return campaign


def test_it_says_alpha_needs_two_raters_instead_of_undefined(one_rater_campaign, stella):
    client = Client()
    client.force_login(stella)
    body = client.get(reverse("rating_analysis", args=[one_rater_campaign.pk])).content.decode()
    assert "undefined" not in body
    assert body.count("needs scores from at least two raters on the same trajectories") == 2
    assert "1 rater has scored so far" in body


def test_it_says_what_the_spearman_heatmap_needs_instead_of_drawing_it_empty(
    one_rater_campaign, stella
):
    client = Client()
    client.force_login(stella)
    body = client.get(reverse("rating_analysis", args=[one_rater_campaign.pk])).content.decode()
    assert 'id="spearman-plot"' not in body
    assert "needs a judge&#x27;s scores beside the human mean" in body


def test_it_gives_the_needs_through_the_api(one_rater_campaign, stella):
    client = Client()
    client.force_login(stella)
    url = reverse("api_rating_analysis", args=[one_rater_campaign.pk])
    analysis = client.get(url).json()
    assert analysis["n_raters"] == 1 and analysis["krippendorff_alpha"] is None
    assert analysis["needs"]["alpha"].startswith("needs scores from at least two raters")


@pytest.mark.parametrize(
    ("n_raters", "alpha", "n_series", "alpha_needs", "spearman_needs"),
    [
        (0, None, 1, "0 raters have scored", "needs a judge"),
        (2, None, 2, "not defined yet", ""),
        (3, 0.4, 2, "", ""),
    ],
)
def test_it_words_each_need_for_its_case(n_raters, alpha, n_series, alpha_needs, spearman_needs):
    needs = selectors.analysis_needs(n_raters=n_raters, alpha=alpha, n_series=n_series)
    assert (alpha_needs in needs["alpha"]) and (bool(needs["alpha"]) == bool(alpha_needs))
    assert (spearman_needs in needs["spearman"]) and (
        bool(needs["spearman"]) == bool(spearman_needs)
    )
