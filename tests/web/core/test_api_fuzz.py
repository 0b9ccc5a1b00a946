"""Schemathesis against the served OpenAPI schema: no operation answers 500.

Every operation of /api/schema/ is called in-process (the WSGI app, no server) as a staff user
who holds every role, with an API token, with a bounded number of generated requests, valid and
invalid. Path parameters name the objects of a built world half of the time (generated ids
mostly reach a 404 and nothing behind it). Each request runs in a savepoint that is rolled back
afterwards, so one request cannot disturb the next.

Schemathesis' own pytest loader (`schemathesis.pytest.from_fixture`) does not run under pytest 9
(it sets `Node._nodeid`), so each operation is its own test driving `operation.as_strategy()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from drf_spectacular.generators import EndpointEnumerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from annotation.core.roles import Role
from tests.factories import UserFactory
from tests.web.security_world import World, world_rolled_back
from webapp.wsgi import application

pytestmark = pytest.mark.django_db

# Requests per operation and generation mode (valid, invalid): ~70 operations stay around a
# minute on 2 cores. SPECVET_FUZZ_EXAMPLES=100 for a deeper search by hand.
MAX_EXAMPLES = int(os.getenv("SPECVET_FUZZ_EXAMPLES", "5"))
FEWER = {"GET /api/schema/": 1}  # one request builds the whole schema (~1 s)


def operation_labels() -> list[str]:
    """Every API operation, known at collection time from the URL patterns (no database)."""
    return [f"{method} {path}" for path, _, method, _ in EndpointEnumerator().get_api_endpoints()]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        "fuzzed", django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


@pytest.fixture(scope="module")
def app(world: World) -> Iterator[Any]:
    """The project's WSGI app, on the test's own database connection: like Django's test client,
    it must not close the connection between requests (that would end the test transaction)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield application
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture(scope="module")
def staff_token(world: World) -> str:
    """A staff user's token; the user holds every other role too, so that the role gates let
    requests through to the code behind them."""
    fuzzer = UserFactory(username="fuzzer", roles=[role.value for role in Role])
    return Token.objects.create(user=fuzzer).key


@pytest.fixture(scope="module")
def api_schema(app: Any, staff_token: str):
    headers = {"Authorization": f"Token {staff_token}"}
    return schemathesis.openapi.from_wsgi("/api/schema/", app, headers=headers)


def known_values(world: World) -> dict[tuple[str, str], list[Any]]:
    """(path prefix, parameter) -> values that name an object of the world."""
    return {
        ("/api/curation/", "curation_id"): [
            world.curation.pk,
            world.open_curation.pk,
            world.discarded.pk,
        ],
        ("/api/curation/", "number"): [1, 2],
        ("/api/curation/images/", "sha256"): [world.image_sha],
        ("/api/datasets/", "export_id"): [world.export.pk],
        ("/api/inspections/", "run_id"): [world.run.pk],
        ("/api/inspections/", "candidate_id"): [world.candidate.pk],
        ("/api/jobs/", "job_id"): [world.job.pk],
        ("/api/catalog/", "entry_id"): [world.entry.pk],
        ("/api/rating/", "campaign_id"): [world.campaign.pk, world.open_campaign.pk],
        ("/api/rating/", "judge_id"): [world.judge.pk],
        ("/api/rating/", "assignment_id"): [world.assignment.pk],
        ("/api/rating/", "judgement_id"): [world.judgement.pk],
        ("/api/rating/", "figure"): ["histograms", "spearman", "pairwise", "strengths"],
        ("/api/spectra/", "spectrum_id"): [world.spectrum.pk],
    }


def path_choices(world: World, path: str) -> list[dict[str, Any] | None]:
    """Fixed path parameters naming the world's objects, or None to let them be generated."""
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    names = [name.split("}")[0] for name in names]
    if not names:
        return [None]
    known = known_values(world)
    values = {
        name: [
            v
            for (prefix, key), vs in known.items()
            if key == name and path.startswith(prefix)
            for v in vs
        ]
        for name in names
    }
    if not all(values.values()):
        return [None]
    combos = [dict(zip(values, row, strict=True)) for row in zip(*values.values(), strict=False)]
    return [None, *combos]


def with_nul(case: Any) -> tuple[Any, str | None]:
    """The case with a NUL character added to its first text query parameter or body field,
    and that parameter's name (None: the case has no text to add it to).

    PostgreSQL text cannot hold NUL (a 500 there, not on SQLite); every request holding one
    must be refused with 400 naming it, whatever the database. A case whose generated text
    already holds a NUL (Schemathesis generates some) is named None: the refusal may name
    that one."""
    if holds_nul((case.query, case.body)):
        return case, None
    for params in (case.query, case.body if isinstance(case.body, dict) else None):
        for key, value in (params or {}).items():
            if isinstance(value, str) and isinstance(key, str):
                params[key] = f"{value[:3]}\x00{value[3:]}"
                return case, key
    return case, None


def holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(key) or holds_nul(inner) for key, inner in value.items())
    if isinstance(value, list | tuple):
        return any(holds_nul(inner) for inner in value)
    return False


@pytest.mark.parametrize("label", operation_labels())
def test_it_never_answers_a_server_error(label, world, api_schema, staff_token):
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, label
    headers = {"Authorization": f"Token {staff_token}"}

    def cases(mode: GenerationMode):
        return st.sampled_from(path_choices(world, operation.path)).flatmap(
            lambda fixed: operation.as_strategy(generation_mode=mode, path_parameters=fixed)
        )

    @given(
        case_and_nul=st.one_of(
            cases(GenerationMode.POSITIVE).map(lambda case: (case, None)),
            cases(GenerationMode.NEGATIVE).map(lambda case: (case, None)),
            cases(GenerationMode.POSITIVE).map(with_nul),
        )
    )
    @settings(
        max_examples=3 * FEWER.get(label, MAX_EXAMPLES),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case_and_nul: tuple[Any, str | None]) -> None:
        case, nul_in = case_and_nul
        with transaction.atomic():
            response = case.call(headers=headers)
            case.validate_response(response, checks=[not_a_server_error], headers=headers)
            if nul_in is not None:
                assert response.status_code == 400, (label, nul_in, response.status_code)
                detail = response.json()["detail"]
                assert f'"{nul_in}"' in detail and "NUL character" in detail, detail
            transaction.set_rollback(True)

    call()


def test_it_fuzzes_every_operation_the_schema_serves(api_schema):
    results = list(api_schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), "the schema has invalid operations"
    served = {result.ok().label for result in results}
    assert set(operation_labels()) - served == {"GET /api/schema/"}  # it leaves itself out
    assert served <= set(operation_labels())
