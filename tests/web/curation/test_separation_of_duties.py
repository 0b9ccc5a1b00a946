"""Separation of duties survives reassignment (issue 11, "Workflow and audit trail").

An audit counts only while its author holds an auditor slot, on the head version, and never
when the author is the reviser or wrote a revision. Decided for re-assignment: an auditor freed
while a round is open does not come back in that round (claim or staff reassignment is refused;
their verdict stays on record without counting); from the next round on they may audit again.
"""

from __future__ import annotations

import pytest

from annotation.core import errors as core_errors
from annotation.curation import selectors
from annotation.curation import services as curation_services
from annotation.curation.models import CurationState
from annotation.curation.selectors import history_visible_to
from tests.factories import UserFactory, make_curation
from tests.web.curation.test_services import revise, to_audit

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db):
    names = ("reviser", "auditor", "second_auditor", "third", "fourth")
    found = {name: UserFactory(username=name, roles=["expert"]) for name in names}
    found["staff"] = UserFactory(username="staff", roles=["staff"])
    return found


@pytest.fixture
def curation(people):
    curation = make_curation()
    return to_audit(curation, people["reviser"], people["auditor"], people["second_auditor"])


def audit(curation, user, verdict="approve"):
    curation.refresh_from_db()
    comment = "Widen the window." if verdict == "request_changes" else ""
    curation_services.audit_submit(
        curation=curation,
        user=user,
        version_number=curation.head_number,
        verdict=verdict,
        comment=comment,
    )
    curation.refresh_from_db()


def reassign(curation, people, role, user):
    curation_services.curation_reassign(
        curation=curation, role=role, user=user, actor=people["staff"]
    )
    curation.refresh_from_db()


def test_it_does_not_approve_on_the_revisers_own_earlier_audit(curation, people):
    # The reproduced sequence: auditor approves, is freed, becomes the reviser, one other
    # auditor approves. Two approvals exist in the round, but one is the reviser's own.
    assert curation.auditor_1 == people["auditor"]
    audit(curation, people["auditor"])
    reassign(curation, people, "auditor_1", None)
    reassign(curation, people, "reviser", people["auditor"])
    audit(curation, people["second_auditor"])

    assert curation.state == CurationState.IN_AUDIT
    assert [a.auditor for a in selectors.deciding_audits(curation)] == [people["second_auditor"]]


def test_it_stops_counting_a_freed_auditors_audit(curation, people):
    audit(curation, people["auditor"])
    reassign(curation, people, "auditor_1", None)
    audit(curation, people["second_auditor"])
    assert curation.state == CurationState.IN_AUDIT

    curation_services.curation_claim_audit(curation=curation, user=people["third"])
    audit(curation, people["third"])
    assert curation.state == CurationState.APPROVED


def test_it_ignores_a_freed_auditors_request_for_changes(curation, people):
    audit(curation, people["auditor"], "request_changes")
    reassign(curation, people, "auditor_1", people["third"])
    audit(curation, people["second_auditor"])
    audit(curation, people["third"])
    assert curation.state == CurationState.APPROVED


def test_it_refuses_a_freed_auditor_back_in_the_same_round(curation, people):
    audit(curation, people["auditor"])
    reassign(curation, people, "auditor_1", None)
    with pytest.raises(core_errors.NotAllowed, match="already audited this round"):
        curation_services.curation_claim_audit(curation=curation, user=people["auditor"])
    with pytest.raises(core_errors.NotAllowed, match="already audited this round"):
        reassign(curation, people, "auditor_1", people["auditor"])


def test_it_lets_a_freed_auditor_audit_again_from_the_next_round(curation, people):
    audit(curation, people["auditor"], "request_changes")
    audit(curation, people["second_auditor"])
    assert curation.state == CurationState.CHANGES_REQUESTED
    reassign(curation, people, "auditor_1", None)
    reassign(curation, people, "auditor_1", people["auditor"])  # between rounds: allowed

    revise(curation, people["reviser"], window=(6480.0, 6650.0))
    curation_services.curation_submit_for_audit(
        curation=curation, user=people["reviser"], base_number=curation.head_number
    )
    audit(curation, people["auditor"])
    audit(curation, people["second_auditor"])
    assert curation.state == CurationState.APPROVED
    assert {a.round for a in selectors.deciding_audits(curation)} == {2}


def test_it_lets_a_former_auditor_revise_without_their_audits_counting(curation, people):
    audit(curation, people["auditor"], "request_changes")
    audit(curation, people["second_auditor"])
    reassign(curation, people, "auditor_1", people["third"])
    reassign(curation, people, "reviser", people["auditor"])
    revise(curation, people["auditor"], window=(6480.0, 6650.0))
    curation_services.curation_submit_for_audit(
        curation=curation, user=people["auditor"], base_number=curation.head_number
    )
    audit(curation, people["third"])
    assert curation.state == CurationState.IN_AUDIT
    audit(curation, people["second_auditor"])
    assert curation.state == CurationState.APPROVED
    assert people["auditor"] not in [a.auditor for a in selectors.deciding_audits(curation)]


def test_it_refuses_an_audit_from_anyone_who_wrote_a_revision(curation, people):
    # The original reviser wrote v2; freed from the reviser slot, they still may not audit it.
    reassign(curation, people, "auditor_2", None)
    reassign(curation, people, "reviser", people["fourth"])
    with pytest.raises(core_errors.NotAllowed, match="own revision"):
        curation_services.curation_claim_audit(curation=curation, user=people["reviser"])
    with pytest.raises(core_errors.NotAllowed, match="own revision"):
        reassign(curation, people, "auditor_2", people["reviser"])
    assert curation.pk not in {
        c.pk for c in selectors.curation_queues(user=people["reviser"])["claim_audit"]
    }


def test_it_keeps_verdicts_blind_while_the_round_is_open(curation, people):
    # A freed auditor's verdict plus one current one make two in the round, but the round is
    # still open: the newcomer must not see either before auditing.
    audit(curation, people["auditor"])
    reassign(curation, people, "auditor_1", None)
    audit(curation, people["second_auditor"])
    curation_services.curation_claim_audit(curation=curation, user=people["third"])
    curation.refresh_from_db()

    assert selectors.audits_visible_to(curation=curation, user=people["third"]) == []
    hidden = {"audit_approve", "audit_request_changes"}
    visible = history_visible_to(curation=curation, user=people["third"])
    assert not visible.filter(action__in=hidden).exists()

    audit(curation, people["third"])
    assert len(selectors.audits_visible_to(curation=curation, user=people["third"])) == 3


# --- who may be handed a role ------------------------------------------------------------------


@pytest.mark.parametrize("roles", [["viewer"], ["rater"], ["ml_engineer"], []])
def test_it_refuses_to_hand_a_role_to_an_account_that_cannot_curate(curation, people, roles):
    """A viewer once became a reviser and could do nothing."""
    account = UserFactory(username="bystander", roles=roles)
    for role in ("reviser", "auditor_1"):
        with pytest.raises(core_errors.NotAllowed, match="bystander is not an expert"):
            reassign(curation, people, role, account)
    assert curation.reviser == people["reviser"] and curation.auditor_1 == people["auditor"]


def test_it_refuses_a_deactivated_expert(curation, people):
    people["third"].is_active = False
    people["third"].save()
    with pytest.raises(core_errors.NotAllowed, match="third is deactivated"):
        reassign(curation, people, "auditor_1", people["third"])


def test_it_refuses_an_expert_rating_an_open_campaign_that_holds_the_trajectory(curation, people):
    from annotation.rating import services as rating_services

    rating_services.campaign_create(
        name="holds it",
        raters=[people["third"]],
        raters_per_item=1,
        sources=rating_services.rating_sources_from_curations([curation]),
        created_by=people["staff"],
        seed=1,
    )
    with pytest.raises(core_errors.NotAllowed, match="third rates an open campaign"):
        reassign(curation, people, "auditor_1", people["third"])
    reassign(curation, people, "auditor_1", people["fourth"])
    assert curation.auditor_1 == people["fourth"]


def test_it_offers_only_experts_in_the_reassign_form(people):
    from annotation.curation.forms import ReassignForm

    UserFactory(username="vera", roles=["viewer"])
    offered = {user.username for user in ReassignForm().fields["user"].queryset}
    assert "vera" not in offered and "staff" not in offered
    assert {"reviser", "auditor", "third"} <= offered
