"""Who may do what, as one table: every role x every action, through the pages and the API.

A rule missing from the services shows up here as a forbidden role that succeeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent.editing import standardize
from annotation.core.models import Job
from annotation.curation import selectors, services
from annotation.curation.models import Curation, CurationState, DatasetExport
from tests.factories import UserFactory, make_curation

pytestmark = pytest.mark.django_db

EXPERTS = ("reviser", "auditor", "second_auditor", "outsider", "staff")
EVERYONE = frozenset(EXPERTS)


@pytest.fixture
def actors(db) -> dict[str, Any]:
    """Experts all; staff is also an expert (as in the demo) and the outsider an ML engineer."""
    people = {name: UserFactory(username=name, roles=["expert"]) for name in EXPERTS}
    people["staff"] = UserFactory(username="staff", roles=["expert", "staff"])
    people["outsider"] = UserFactory(username="outsider", roles=["expert", "ml_engineer"])
    people["spare"] = UserFactory(username="spare", roles=["expert"])
    return people


# --- the states each action needs -----------------------------------------------------------------


def screening(actors) -> Curation:
    return make_curation()


def in_revision(actors) -> Curation:
    curation = screening(actors)
    services.curation_screen(curation=curation, user=actors["outsider"], keep=True)
    services.curation_claim_revision(curation=curation, user=actors["reviser"])
    return curation


def in_audit_unclaimed(actors) -> Curation:
    curation = in_revision(actors)
    services.curation_submit_for_audit(
        curation=curation, user=actors["reviser"], base_number=curation.head_number
    )
    return curation


def in_audit(actors) -> Curation:
    curation = in_audit_unclaimed(actors)
    services.curation_claim_audit(curation=curation, user=actors["auditor"])
    services.curation_claim_audit(curation=curation, user=actors["second_auditor"])
    return curation


def changes_requested_without_reviser(actors) -> Curation:
    curation = in_audit(actors)
    for name, verdict in (("auditor", "request_changes"), ("second_auditor", "approve")):
        services.audit_submit(
            curation=curation,
            user=actors[name],
            version_number=curation.head_number,
            verdict=verdict,
            comment="Widen the window.",
        )
    services.curation_reassign(curation=curation, role="reviser", user=None, actor=actors["staff"])
    return curation


def approved(actors) -> Curation:
    curation = in_audit(actors)
    for name in ("auditor", "second_auditor"):
        services.audit_submit(
            curation=curation,
            user=actors[name],
            version_number=curation.head_number,
            verdict="approve",
        )
    return curation


def in_vote(actors) -> Curation:
    curation = approved(actors)
    head = selectors.version_trajectory(selectors.head_version(curation))
    services.curation_standardize(
        curation=curation, trajectory=standardize(head), standardizer={"name": "normalizer"}
    )
    return curation


def accepted(actors) -> Curation:
    curation = in_vote(actors)
    for name in ("reviser", "auditor", "second_auditor"):
        services.vote_cast(curation=curation, user=actors[name], value="accept")
    return curation


# --- the requests ------------------------------------------------------------------------------


def editor_form(curation: Curation) -> dict[str, str]:
    return {
        "action": "save",
        "base_number": str(curation.head_number),
        "steps-count": "1",
        "step-0-think": "Zoom on the core.",
        "step-0-lo": "6540",
        "step-0-hi": "6590",
        "step-0-label": "H-alpha core",
        "final_think": "Broad emission.",
        "prediction": "YES",
        "justification": "Broad Balmer emission.",
    }


def revision_body(curation: Curation) -> dict[str, Any]:
    return {
        "base_number": curation.head_number,
        "steps": [
            {
                "think": "Zoom on the core.",
                "wavelength_range": [6540, 6590],
                "label": "H-alpha core",
            }
        ],
        "answer": {
            "think": "Broad emission.",
            "prediction": "YES",
            "justification": "Broad Balmer emission.",
        },
    }


Request = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Rule:
    setup: Callable[[dict[str, Any]], Curation]
    allowed: frozenset[str]
    refusal: str  # the rule's message to everyone else
    page: Callable[[Curation], Request]
    api: Callable[[Curation], Request]
    observe: Callable[[Curation, Any], Any]  # what the action changes, seen from the database


# The role gate answers before the services' own rule (only staff reassign, ...) is reached.
STAFF_ONLY = (
    "Not allowed by your roles: to reassign curation roles or run standardization you need the "
    "staff role"
)


def _url(name: str, curation: Curation) -> str:
    return reverse(name, args=[curation.pk])


RULES: dict[str, Rule] = {
    "screen": Rule(
        setup=screening,
        allowed=EVERYONE,
        refusal="",
        page=lambda c: (_url("curation_screen", c), {"decision": "keep"}),
        api=lambda c: (_url("api_curation_screen", c), {"keep": True}),
        observe=lambda c, user: c.state == CurationState.IN_REVISION,
    ),
    "claim_revision": Rule(
        setup=changes_requested_without_reviser,
        allowed=frozenset({"reviser", "outsider", "staff"}),
        refusal="an auditor of this trajectory cannot also revise it",
        page=lambda c: (_url("curation_claim_revision", c), {}),
        api=lambda c: (_url("api_curation_claim_revision", c), {}),
        observe=lambda c, user: c.reviser_id == user.pk,
    ),
    "save_revision": Rule(
        setup=in_revision,
        allowed=frozenset({"reviser"}),
        refusal="only the reviser of this trajectory can save revisions",
        page=lambda c: (_url("curation_revise", c), editor_form(c)),
        api=lambda c: (_url("api_curation_save_revision", c), revision_body(c)),
        observe=lambda c, user: (c.head_number, c.versions.count()),
    ),
    "submit_for_audit": Rule(
        setup=in_revision,
        allowed=frozenset({"reviser"}),
        refusal="only the reviser can submit this trajectory for audit",
        page=lambda c: (_url("curation_submit", c), {"base_number": str(c.head_number)}),
        api=lambda c: (_url("api_curation_submit", c), {"base_number": c.head_number}),
        observe=lambda c, user: c.state == CurationState.IN_AUDIT,
    ),
    "claim_audit": Rule(
        setup=in_audit_unclaimed,
        allowed=frozenset({"auditor", "second_auditor", "outsider", "staff"}),
        refusal="nobody audits their own revision",
        page=lambda c: (_url("curation_claim_audit", c), {}),
        api=lambda c: (_url("api_curation_claim_audit", c), {}),
        observe=lambda c, user: user.pk in (c.auditor_1_id, c.auditor_2_id),
    ),
    "audit": Rule(
        setup=in_audit,
        allowed=frozenset({"auditor", "second_auditor"}),
        refusal="only the two assigned auditors can audit this trajectory",
        page=lambda c: (
            _url("curation_audit", c),
            {"version_number": str(c.head_number), "verdict": "approve"},
        ),
        api=lambda c: (
            _url("api_curation_audit", c),
            {"version_number": c.head_number, "verdict": "approve"},
        ),
        observe=lambda c, user: c.audits.filter(auditor=user).count(),
    ),
    "vote": Rule(
        setup=in_vote,
        allowed=frozenset({"reviser", "auditor", "second_auditor"}),
        refusal="only the reviser and the two auditors vote on this trajectory",
        page=lambda c: (_url("curation_vote", c), {"value": "accept"}),
        api=lambda c: (_url("api_curation_vote", c), {"value": "accept"}),
        observe=lambda c, user: c.votes.filter(voter=user).count(),
    ),
    "reassign": Rule(
        setup=in_revision,
        allowed=frozenset({"staff"}),
        refusal=STAFF_ONLY,
        page=lambda c: (_url("curation_reassign", c), {"role": "auditor_1", "user": "spare"}),
        api=lambda c: (
            _url("api_curation_reassign", c),
            {"role": "auditor_1", "username": "spare"},
        ),
        observe=lambda c, user: c.auditor_1 is not None and c.auditor_1.username == "spare",
    ),
    "standardize": Rule(
        setup=approved,
        allowed=frozenset({"staff"}),
        refusal=STAFF_ONLY,
        page=lambda c: (_url("curation_standardize_run", c), {}),
        api=lambda c: (_url("api_curation_standardize", c), {}),
        observe=lambda c, user: Job.objects.filter(kind="standardize", created_by=user).count(),
    ),
    "export": Rule(
        setup=accepted,
        allowed=frozenset({"outsider"}),
        refusal="Not allowed by your roles: to export SFT datasets you need the ml_engineer role",
        page=lambda c: (reverse("dataset_export"), {}),
        api=lambda c: (reverse("api_dataset_export"), {}),
        observe=lambda c, user: DatasetExport.objects.filter(created_by=user).count(),
    ),
}

CHANNELS = ("page", "api")
ALLOWED = [
    (action, role, channel)
    for action, rule in RULES.items()
    for role in sorted(rule.allowed)
    for channel in CHANNELS
]
REFUSED = [
    (action, role, channel)
    for action, rule in RULES.items()
    for role in EXPERTS
    if role not in rule.allowed
    for channel in CHANNELS
]
ANONYMOUS = [(action, channel) for action in RULES for channel in CHANNELS]


def send(channel: str, rule: Rule, curation: Curation, user: Any):
    url, data = (rule.page if channel == "page" else rule.api)(curation)
    if channel == "page":
        client = Client()
        if user is not None:
            client.force_login(user)
        return client.post(url, data)
    api = APIClient()
    if user is not None:
        api.force_authenticate(user)
    return api.post(url, data, format="json")


def test_it_covers_every_action_of_the_brief():
    expected = {
        "screen",
        "claim_revision",
        "save_revision",
        "submit_for_audit",
        "claim_audit",
        "audit",
        "vote",
        "reassign",
        "export",
    }
    assert expected <= set(RULES)


@pytest.mark.parametrize("action, role, channel", ALLOWED)
def test_it_lets_the_right_role_act(actors, action, role, channel):
    rule = RULES[action]
    curation = rule.setup(actors)
    before = rule.observe(curation, actors[role])
    response = send(channel, rule, curation, actors[role])
    assert response.status_code in ((302,) if channel == "page" else (200, 201, 202)), (
        response.content[:500]
    )
    curation.refresh_from_db()
    assert rule.observe(curation, actors[role]) != before


@pytest.mark.parametrize("action, role, channel", REFUSED)
def test_it_refuses_the_wrong_role_with_the_rule(actors, action, role, channel):
    rule = RULES[action]
    curation = rule.setup(actors)
    before = rule.observe(curation, actors[role])
    response = send(channel, rule, curation, actors[role])
    assert response.status_code == 403
    if channel == "api":
        assert response.json()["detail"].startswith(rule.refusal)
    else:
        assert rule.refusal in response.content.decode()
    curation.refresh_from_db()
    assert rule.observe(curation, actors[role]) == before


@pytest.mark.parametrize("action, channel", ANONYMOUS)
def test_it_turns_anonymous_visitors_away(actors, action, channel):
    rule = RULES[action]
    curation = rule.setup(actors)
    before = rule.observe(curation, actors["outsider"])
    response = send(channel, rule, curation, None)
    if channel == "page":
        assert response.status_code == 302
        assert reverse("login") in response["Location"]
    else:
        assert response.status_code in (401, 403)
    curation.refresh_from_db()
    assert rule.observe(curation, actors["outsider"]) == before
