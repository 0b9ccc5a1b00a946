from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

logger = logging.getLogger(__name__)


def register_default_endpoint(**kwargs: Any) -> None:
    """Register (or update) the model endpoint "default" from the OPENAI_* settings.

    After migrate rather than at first use: every deployment runs migrate, and reads never
    write. A bad OPENAI_BASE_URL must not stop the migration; it is logged instead.
    """
    from annotation.core import errors as core_errors
    from annotation.core import services as core_services

    migrated = kwargs.get("apps")
    try:
        if migrated is not None:
            migrated.get_model("annotation", "ModelEndpoint")
    except LookupError:
        return  # migrated back to before endpoints existed
    try:
        core_services.model_endpoint_sync_default()
    except core_errors.WorkflowError as error:
        logger.warning("the OPENAI_* settings do not make a model endpoint: %s", error)


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "specvet annotation"

    def ready(self) -> None:
        # The job runners of each domain register with core's registry on import; core itself
        # imports no domain.
        # Blinding spans the domains; core's job pages and audit log ask it through these hooks.
        from annotation.blinding import hidden_audit_entries, hidden_jobs
        from annotation.core.selectors import register_audit_read_rule, register_job_read_rule
        from annotation.core.sql import session_settings
        from annotation.curation import jobs as curation_jobs  # noqa: F401
        from annotation.inspections import evaluations  # noqa: F401
        from annotation.inspections import jobs as inspections_jobs  # noqa: F401
        from annotation.inspections.triage import (
            register_calibration_sets,
            register_confidence_rules,
        )
        from annotation.learning import jobs as learning_jobs  # noqa: F401
        from annotation.learning.selectors import calibration_set_for, confidence_rules_for
        from annotation.rating import jobs as rating_jobs  # noqa: F401

        register_confidence_rules(confidence_rules_for)
        register_calibration_sets(calibration_set_for)
        register_job_read_rule(hidden_jobs)
        register_audit_read_rule(hidden_audit_entries)

        connection_created.connect(session_settings, dispatch_uid="specvet_session_settings")
        post_migrate.connect(
            register_default_endpoint, sender=self, dispatch_uid="specvet_default_endpoint"
        )
