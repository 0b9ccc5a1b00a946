"""Who may do what with inspection runs beyond the role rules in ``annotation.core.permissions``."""

from __future__ import annotations

from typing import Any

from annotation.core import permissions
from annotation.inspections.models import InspectionRun


def can_control(user: Any, run: InspectionRun) -> bool:
    """Cancel a run, retry its candidates: its owner or staff, with the control role."""
    return permissions.INSPECTION_CONTROL.allows(user) and permissions.is_owner_or_staff(
        user, run.created_by_id
    )


def can_reproduce(user: Any, run: InspectionRun) -> bool:
    """Re-run a candidate in-process: anyone who follows runs, for the rule-based inspector
    (milliseconds of this server's CPU); for a model, only who may control the run, since each
    reproduction sends the model every turn again."""
    if not permissions.INSPECTION_READ.allows(user):
        return False
    return run.policy_spec.get("kind") == "rule-based" or can_control(user, run)
