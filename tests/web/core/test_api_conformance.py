"""Schemathesis: what GET operations answer matches what the schema documents for that status.

A client generated from the schema broke on the first list: paginated lists were documented as
plain arrays. Every GET operation is called with valid requests (path parameters naming the
fuzz world's objects) as a staff user holding every role and as a viewer, and each body is
validated against the schema of its status code (statuses the schema does not list are left
to the fuzz test)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.factories import UserFactory
from tests.web.core.test_api_contract import undocumented_keys
from tests.web.core.test_api_fuzz import (  # noqa: F401  (fixtures)
    api_schema,
    app,
    operation_labels,
    path_choices,
    staff_token,
    world,
)

pytestmark = pytest.mark.django_db

GET_LABELS = [label for label in operation_labels() if label.startswith("GET ")]
SKIP = {"GET /api/schema/"}  # the schema itself (one request is ~1 s; not described by itself)


@pytest.fixture(scope="module")
def viewer_token(request) -> str:
    request.getfixturevalue("world")  # inside the world's transaction
    return Token.objects.create(user=UserFactory(username="low", roles=["viewer"])).key


# Set up before the test's own transaction: built inside it (by getfixturevalue alone), the
# world and the tokens were rolled back after the first test, and every later request met
# 401 "Invalid token" (then undocumented, so no body was checked).
@pytest.mark.usefixtures("world", "api_schema", "staff_token", "viewer_token")
@pytest.mark.parametrize("who", ["staff", "viewer"])
@pytest.mark.parametrize("label", [label for label in GET_LABELS if label not in SKIP])
def test_it_answers_what_the_schema_documents(label, who, request):
    # By name: parameters named like the imported fixtures would shadow them.
    built, api = request.getfixturevalue("world"), request.getfixturevalue("api_schema")
    token = request.getfixturevalue("staff_token" if who == "staff" else "viewer_token")
    from django.db import transaction

    operation = api.find_operation_by_label(label)
    headers = {"Authorization": f"Token {token}"}
    strategy = st.sampled_from(path_choices(built, operation.path)).flatmap(
        lambda fixed: operation.as_strategy(
            generation_mode=GenerationMode.POSITIVE, path_parameters=fixed
        )
    )

    @given(case=strategy)
    @settings(
        max_examples=3,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        with transaction.atomic():
            response = case.call(headers=headers)
            statuses.append(response.status_code)
            case.validate_response(response, checks=[response_schema_conformance])
            documented = operation.definition.raw["responses"].get(str(response.status_code))
            schema = (documented or {}).get("content", {}).get("application/json", {})
            if response.status_code == 200 and "schema" in schema:
                extra = undocumented_keys(response.json(), schema["schema"], api.raw_schema, "body")
                assert not extra, f"{label} as {who}: undocumented keys {sorted(extra)}"
            transaction.set_rollback(True)

    statuses: list[int] = []
    call()
    assert 401 not in statuses, f"{label} as {who}: refused as anonymous, so nothing was checked"
