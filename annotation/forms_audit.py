"""The audit log's filter form (staff page and API share the same fields)."""

from __future__ import annotations

from django import forms


class AuditLogFilterForm(forms.Form):
    object_type = forms.CharField(
        required=False, max_length=60, help_text="model name, e.g. Curation"
    )
    object_pk = forms.CharField(required=False, max_length=64, label="Object id")
    actor = forms.CharField(required=False, max_length=150, help_text="username")
    action = forms.CharField(required=False, max_length=60, help_text="e.g. audit_approve")
