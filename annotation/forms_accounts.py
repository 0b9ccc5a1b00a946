"""The roles page's form: the roles one account should hold."""

from __future__ import annotations

from django import forms

from annotation.roles import Role

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
