"""Text holding a NUL character (U+0000) is refused with 400 naming where, on every page and API.

PostgreSQL text cannot store NUL: before, a task code or a search with one reached a query and
raised DataError, a 500, on 11 URLs (on SQLite they passed). One middleware refuses it for the
query string, form fields, JSON bodies (at any depth) and paths; these tests pass on SQLite and
PostgreSQL alike (DATABASE_URL=postgres://...)."""

from __future__ import annotations

import html
import json

import pytest
from django.test import Client
from django.urls import reverse

from annotation.core.roles import Role
from tests.factories import UserFactory, make_spectrum
from tests.web.core.test_url_access import PATTERNS

pytestmark = pytest.mark.django_db

NUL = "\x00"


@pytest.fixture
def everyone(db):
    """An account holding every role, so that no role gate answers before the input is read."""
    return UserFactory(username="all-roles", roles=[role.value for role in Role])


@pytest.fixture
def client(everyone) -> Client:
    client = Client()
    client.force_login(everyone)
    return client


def assert_refused(response, where: str) -> None:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    text = html.unescape(response.content.decode())
    if response["Content-Type"].startswith("application/json"):
        text = response.json()["detail"]
    assert where in text and "NUL character" in text, text


# The 11 URLs that answered 500 on PostgreSQL (issue 32, item 6).
JSON_POSTS = [
    ("api_run_create", {"spectrum_ids": [1], "policy": {"kind": "rule-based"}}),
    ("api_curation_drafts", {}),
    ("api_calibration_refit", {}),
    ("api_triage_target", {"target_purity": 0.9}),
    ("api_audit_sample_create", {"per_stratum": 1}),
]


@pytest.mark.parametrize(("url_name", "rest"), JSON_POSTS, ids=[n for n, _ in JSON_POSTS])
def test_it_refuses_a_task_holding_nul_in_each_json_api(client, url_name, rest):
    make_spectrum()
    body = json.dumps({"task": f"ha{NUL}", **rest})
    response = client.post(reverse(url_name), body, content_type="application/json")
    assert_refused(response, 'the field "task" of the JSON body')


@pytest.mark.parametrize(
    ("url_name", "param"),
    [
        ("account_roles", "q"),
        ("api_account_roles", "q"),
        ("spectrum_list", "q"),
        ("spectrum_list", "task"),
        ("catalog_list", "q"),
        ("catalog_list", "task"),
        ("calibration", "task"),
    ],
)
def test_it_refuses_a_query_parameter_holding_nul_on_each_list(client, url_name, param):
    response = client.get(reverse(url_name), {param: f"x{NUL}y"})
    assert_refused(response, f'the query parameter "{param}"')


@pytest.mark.parametrize(
    "url_name", ["revised_export_create", "calibration_refit", "triage_target", "audit_draw"]
)
def test_it_refuses_a_form_field_holding_nul_on_each_page_post(client, url_name):
    response = client.post(reverse(url_name), {"task": f"ha{NUL}", "target_purity": "0.9"})
    assert_refused(response, 'the form field "task"')
    assert response["Content-Type"].startswith("text/html")


def test_it_names_a_nested_json_field_and_a_list_item(client):
    body = {"task": "ha", "spectrum_ids": [1], "policy": {"kind": "rule-based", "name": NUL}}
    response = client.post(reverse("api_run_create"), body, content_type="application/json")
    assert_refused(response, 'the field "policy.name" of the JSON body')
    body = {"raters": ["a", f"b{NUL}"]}
    response = client.post(
        reverse("api_rating_campaign_create"), body, content_type="application/json"
    )
    assert_refused(response, 'the field "raters[1]" of the JSON body')


def test_it_refuses_nul_in_a_json_key_and_in_a_multipart_field(client):
    response = client.post(
        reverse("api_curation_drafts"), {f"ta{NUL}sk": "x"}, content_type="application/json"
    )
    assert_refused(response, 'the field "task" of the JSON body')
    response = client.post(reverse("api_curation_drafts"), {"task": f"ha{NUL}"})  # multipart
    assert_refused(response, 'the form field "task"')


def test_it_answers_a_path_holding_nul_with_404(client):
    response = client.get("/api/calibration/ha%00/")
    assert response.status_code == 404
    assert "NUL character" in response.json()["detail"]
    assert client.get("/spectra/%00/").status_code == 404


def test_it_still_reads_a_backslash_u_that_is_not_a_nul(client):
    """A JSON string holding the six characters \\u0000 (an escaped backslash) is no NUL."""
    body = json.dumps({"task": "\\u0000"})
    assert "\\\\u0000" in body
    response = client.post(reverse("api_curation_drafts"), body, content_type="application/json")
    assert response.status_code == 404  # read, and no task has that code
    assert "NUL" not in response.content.decode()
    assert response.json()["detail"].startswith("task: ")


# Every named URL, GET with a NUL in the query: whatever the view, 400 before it runs.
@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if not p[0].startswith("admin:")]
)
def test_it_refuses_nul_in_the_query_of_every_url(client, name, params, integers):
    # "1" matches every converter here (ids, slugs, names) but a hash's.
    values = {param: "a" * 64 if param in {"sha256", "content_hash"} else "1" for param in params}
    url = reverse(name, kwargs=values)
    response = client.get(url, {"q": NUL})
    assert_refused(response, 'the query parameter "q"')
