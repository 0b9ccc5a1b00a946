"""Role rules of the vetting loop's pages and APIs (see ``annotation.core.permissions``)."""

from __future__ import annotations

from annotation.core.permissions import BROWSE, rule
from annotation.core.roles import Role

CALIBRATION_READ = BROWSE  # every role but raters, as the catalog
CALIBRATE = rule(Role.ML_ENGINEER, Role.STAFF, action="refit confidence calibrations")
TRIAGE_MANAGE = rule(Role.STAFF, action="set target purities and draw audit samples")
GOLD_MANAGE = rule(Role.STAFF, action="mark gold items and see vetters' accuracy on them")
