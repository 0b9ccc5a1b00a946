from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import UserFactory


@pytest.fixture
def expert(db):
    return UserFactory(username="payne")


@pytest.fixture
def outsider(db):
    return UserFactory(username="outsider")


@pytest.fixture
def expert_client(expert) -> Client:
    client = Client()
    client.force_login(expert)
    return client


@pytest.fixture
def api_client(expert) -> APIClient:
    client = APIClient()
    client.force_authenticate(expert)
    return client
