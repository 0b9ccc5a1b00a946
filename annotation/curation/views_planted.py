"""Staff pages of planted-error audits (annotation.curation.planted) and the curation analysis."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from annotation.core import errors as core_errors
from annotation.core import permissions
from annotation.core.errors import http_status
from annotation.core.http import _expert
from annotation.core.permissions import require_role
from annotation.core.roles import Role, users_holding
from annotation.curation import analysis, planted
from annotation.curation.models import PlantedErrorKind


class PlantForm(forms.Form):
    kinds = forms.MultipleChoiceField(
        choices=PlantedErrorKind.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=PlantedErrorKind.values,
    )
    count = forms.IntegerField(min_value=1, max_value=planted.MAX_PER_ROUND, initial=4)
    seed = forms.IntegerField(
        min_value=0,
        max_value=planted.MAX_SEED,
        initial=0,
        help_text="the same seed picks the same copies",
    )
    auditors = forms.ModelMultipleChoiceField(
        queryset=users_holding(Role.EXPERT).order_by("username"),
        to_field_name="username",
        required=False,
        help_text="none: the copies wait in the audits-to-claim queue like any audit",
    )
    note = forms.CharField(max_length=200, required=False)

    def clean_auditors(self) -> Any:
        auditors = self.cleaned_data["auditors"]
        if len(auditors) > 2:
            raise forms.ValidationError("choose at most two auditors")
        return auditors


def _planted_context(form: PlantForm, error: str = "") -> dict[str, Any]:
    return {
        "form": form,
        "error": error,
        "rates": planted.catch_rates(),
        "rounds": planted.plant_rounds()[:20],
        "kinds": PlantedErrorKind.choices,
        "sources": planted.plant_sources().count(),
    }


@require_role(permissions.CURATION_MANAGE)
@require_http_methods(["GET", "POST"])
def planted_audits(request: HttpRequest) -> HttpResponse:
    form = PlantForm(request.POST or None)
    error, status = "", 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                plant_round = planted.plant_round_create(
                    actor=_expert(request),
                    kinds=data["kinds"],
                    count=data["count"],
                    seed=data["seed"],
                    auditors=list(data["auditors"]),
                    note=data["note"],
                )
            except core_errors.WorkflowError as problem:
                error, status = str(problem), http_status(problem)
            else:
                messages.success(
                    request,
                    f"Planted {plant_round.errors.count()} errors (round {plant_round.pk}).",
                )
                return redirect("curation_planted")
        else:
            error, status = form.errors.as_text(), 400
    return render(request, "curation/planted.html", _planted_context(form, error), status=status)


@require_role(permissions.CURATION_MANAGE)
@require_GET
def curation_analysis(request: HttpRequest) -> HttpResponse:
    return render(request, "curation/analysis.html", analysis.curation_analysis())
