"""Object ids in request bodies are bounded to 64 bits: a larger one is bad input (400), not a 500.

Found by tests/web/core/test_api_fuzz.py: SQLite refuses such an integer inside IN (...) with an
OverflowError.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HUGE = 2**70


def client_with(*roles: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(UserFactory(username="ida", roles=list(roles)))
    return client


@pytest.mark.parametrize("field", ["runs", "curations", "pair_runs"])
def test_it_refuses_a_huge_run_or_curation_id_for_a_campaign(field):
    UserFactory(username="rita", roles=["rater"])
    ids = [HUGE, 1] if field == "pair_runs" else [HUGE]
    response = client_with("staff").post(
        reverse("api_rating_campaign_create"),
        {"name": "c", "raters": ["rita"], field: ids},
        format="json",
    )
    assert response.status_code == 400
    assert field in response.json()


def test_it_refuses_a_huge_spectrum_id_for_an_inspection_run():
    response = client_with("ml_engineer").post(
        reverse("api_run_create"),
        {"task": "CV", "spectrum_ids": [HUGE], "policy": {"kind": "rule-based"}},
        format="json",
    )
    assert response.status_code == 400
    assert "spectrum_ids" in response.json()
