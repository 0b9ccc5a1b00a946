"""Forms of the core pages: roles, audit-log filters, model endpoints."""

from __future__ import annotations

from typing import Any

from django import forms

from annotation.core import endpoints
from annotation.core.models import ModelEndpoint
from annotation.core.roles import Role

ROLE_LABELS = {
    Role.EXPERT: "expert: screen, revise, audit, vote, vet",
    Role.RATER: "rater: rate the campaigns they are assigned",
    Role.ML_ENGINEER: "ML engineer: drafts, inspections, training, exports",
    Role.VIEWER: "viewer: catalog and spectra, read-only",
    Role.STAFF: "staff: accounts, roles, model endpoints, campaigns",
}


class UserRolesForm(forms.Form):
    roles = forms.MultipleChoiceField(
        choices=[(role.value, ROLE_LABELS[role]) for role in Role],
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def chosen(self) -> set[Role]:
        return {Role(value) for value in self.cleaned_data["roles"]}


class AuditLogFilterForm(forms.Form):
    object_type = forms.CharField(
        required=False, max_length=60, help_text="model name, e.g. Curation"
    )
    object_pk = forms.CharField(required=False, max_length=64, label="Object id")
    actor = forms.CharField(required=False, max_length=150, help_text="username")
    action = forms.CharField(required=False, max_length=60, help_text="e.g. audit_approve")


class EndpointChoiceField(forms.ModelChoiceField):
    """Pick an enabled, registered model endpoint by name: the only way to choose a model server."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("empty_label", "choose a registered endpoint")
        kwargs.setdefault("help_text", "registered by staff; the server's key goes only there")
        super().__init__(
            queryset=ModelEndpoint.objects.filter(enabled=True).order_by("name"),
            to_field_name="name",
            **kwargs,
        )

    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} · {obj.model}"


def _checked(check: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return check(*args, **kwargs)
    except endpoints.EndpointError as error:
        raise forms.ValidationError(str(error)) from None


class ModelEndpointForm(forms.Form):
    """Register or change an endpoint. The credential is named, never typed in."""

    name = forms.CharField(max_length=60, help_text="how users choose it, e.g. gpu-1-qwen")
    base_url = forms.CharField(
        max_length=500, label="Base URL", help_text="OpenAI-compatible, e.g. http://gpu-1:8000/v1"
    )
    model = forms.CharField(max_length=200, help_text="the model name the server serves")
    credential_env = forms.CharField(
        max_length=100,
        required=False,
        label="Key in environment variable",
        help_text="the variable's name (ending in _API_KEY), not the key",
    )
    credential_file = forms.CharField(
        max_length=500,
        required=False,
        label="Key in secret file",
        help_text="an absolute path inside the secret folders, not the key",
    )
    timeout = forms.FloatField(
        min_value=endpoints.TIMEOUT_RANGE[0],
        max_value=endpoints.TIMEOUT_RANGE[1],
        initial=60.0,
        help_text="seconds per request",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, endpoint: ModelEndpoint | None = None, **kwargs: Any) -> None:
        if endpoint is not None:
            kwargs.setdefault(
                "initial",
                {
                    field: getattr(endpoint, field)
                    for field in ("name", *ModelEndpointForm.changeable())
                },
            )
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        if endpoint is not None:
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "an endpoint keeps its name"

    @staticmethod
    def changeable() -> tuple[str, ...]:
        return ("base_url", "model", "credential_env", "credential_file", "timeout", "enabled")

    def clean_name(self) -> str:
        name = _checked(endpoints.check_name, self.cleaned_data["name"])
        if self.endpoint is None and ModelEndpoint.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a model endpoint named {name!r} exists already")
        return str(name)

    def clean_base_url(self) -> str:
        return str(_checked(endpoints.check_base_url, self.cleaned_data["base_url"]))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        try:
            endpoints.check_credential(
                env=data.get("credential_env", ""), file=data.get("credential_file", "")
            )
        except endpoints.EndpointError as error:
            self.add_error(
                "credential_file" if data.get("credential_file") else "credential_env", str(error)
            )
        return data

    def values(self) -> dict[str, Any]:
        return {field: self.cleaned_data[field] for field in self.changeable()}
