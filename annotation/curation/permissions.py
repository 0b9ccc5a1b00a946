"""Who may act on a trajectory, and which actions a page offers this user."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.curation import selectors, services
from annotation.curation.models import (
    Curation,
    CurationState,
)


def standardize_run_check(curation: Curation, user: AbstractBaseUser) -> None:
    """Who may (re)run standardization, and when (the runner skips non-approved ones)."""
    if not getattr(user, "is_staff", False):
        raise core_errors.NotAllowed("only staff can run standardization")
    if curation.state != CurationState.APPROVED:
        raise core_errors.WrongState(
            f"cannot standardize: the trajectory is {curation.get_state_display()}, not approved"
        )


def actions_for(curation: Curation, user: AbstractBaseUser) -> dict[str, bool]:
    """Which actions to offer (a hint for the page; the services enforce the rules)."""
    state, uid = curation.state, user.pk
    is_reviser = curation.reviser_id == uid
    is_auditor = uid in (curation.auditor_1_id, curation.auditor_2_id)
    audited = curation.audits.filter(round=curation.audit_round, auditor_id=uid).exists()
    may_audit = not audited and uid not in selectors.revision_authors(curation)
    voted = curation.votes.filter(voter_id=uid).exists()
    is_staff = permissions.CURATION_MANAGE.allows(user)
    workflow = {
        "screen": state == CurationState.SCREENING,
        "claim_revision": state in EDITABLE_STATES
        and curation.reviser_id is None
        and not is_auditor,
        "revise": state in EDITABLE_STATES and is_reviser,
        "submit": state == CurationState.IN_REVISION and is_reviser,
        "claim_audit": state == CurationState.IN_AUDIT
        and not (is_reviser or is_auditor)
        and may_audit
        and (curation.auditor_1_id is None or curation.auditor_2_id is None),
        "audit": state == CurationState.IN_AUDIT and is_auditor and may_audit,
        "vote": state == CurationState.IN_VOTE
        and uid in (curation.reviser_id, curation.auditor_1_id, curation.auditor_2_id)
        and not voted,
    }
    if not permissions.CURATE.allows(user):  # the workflow's actions are the experts'
        workflow = dict.fromkeys(workflow, False)
    return workflow | {
        "standardize": is_staff and state == CurationState.APPROVED,
        "reassign": is_staff,
    }


def roles_of(curation: Curation, user: AbstractBaseUser) -> list[str]:
    return [role for role in services.ROLES if getattr(curation, f"{role}_id") == user.pk]


EDITABLE_STATES = (CurationState.IN_REVISION, CurationState.CHANGES_REQUESTED)
