"""Forms of the rating pages: new campaign, a 0-5 score, a pairwise outcome, a new LLM judge."""

from __future__ import annotations

from typing import Any

from django import forms

from agent.agreement import RUBRIC
from agent.judges import JUDGE_RUBRIC_PROMPT
from annotation.core.forms import EndpointChoiceField
from annotation.core.roles import Role, users_holding
from annotation.curation import selectors
from annotation.inspections.models import InspectionRun
from annotation.rating.models import Judge, PairOutcome


class CampaignForm(forms.Form):
    name = forms.CharField(max_length=120)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    raters = forms.ModelMultipleChoiceField(
        queryset=users_holding(Role.RATER).order_by("username"),
        help_text="accounts with the rater role (staff grant it on the Roles page)",
        widget=forms.SelectMultiple(attrs={"size": 8}),
    )
    raters_per_item = forms.IntegerField(min_value=1, max_value=50, initial=2)
    runs = forms.ModelMultipleChoiceField(
        queryset=InspectionRun.objects.select_related("task"),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text="inspection runs to sample from (rollout 1 of each finished candidate)",
    )
    rollouts_per_run = forms.IntegerField(
        min_value=1, max_value=100000, initial=50, help_text="sampled at random per run"
    )
    curations = forms.ModelMultipleChoiceField(
        queryset=selectors.accepted_curations(),
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text="accepted curated trajectories (their latest version)",
    )
    pair_run_a = forms.ModelChoiceField(
        queryset=InspectionRun.objects.all(), required=False, label="Pairwise: run A"
    )
    pair_run_b = forms.ModelChoiceField(
        queryset=InspectionRun.objects.all(), required=False, label="Pairwise: run B"
    )
    raters_per_pair = forms.IntegerField(min_value=1, max_value=50, initial=1, required=False)
    seed = forms.IntegerField(
        min_value=0, max_value=2**62, required=False, help_text="empty: drawn at random"
    )

    # The page's fieldsets, by exact field name (each field appears in exactly one).
    FIELDSETS: dict[str, tuple[str, ...]] = {
        "campaign": ("name", "description", "raters", "raters_per_item", "seed"),
        "trajectories": ("runs", "rollouts_per_run", "curations"),
        "pairwise": ("pair_run_a", "pair_run_b", "raters_per_pair"),
    }

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        """Runs and curations are offered as ``user`` may read them: staff who rate in an open
        campaign do not see the runs or curations behind its items (not even their names)."""
        from annotation.blinding import curations_visible_to, runs_visible_to

        super().__init__(*args, **kwargs)
        runs = runs_visible_to(user=user).select_related("task")
        self.fields["runs"].queryset = runs  # type: ignore[attr-defined]
        self.fields["pair_run_a"].queryset = runs  # type: ignore[attr-defined]
        self.fields["pair_run_b"].queryset = runs  # type: ignore[attr-defined]
        self.fields["curations"].queryset = curations_visible_to(  # type: ignore[attr-defined]
            user=user, rows=selectors.accepted_curations()
        )

    def fieldset(self, name: str) -> list[forms.BoundField]:
        return [self[field] for field in self.FIELDSETS[name]]

    @property
    def campaign_fields(self) -> list[forms.BoundField]:
        return self.fieldset("campaign")

    @property
    def trajectory_fields(self) -> list[forms.BoundField]:
        return self.fieldset("trajectories")

    @property
    def pairwise_fields(self) -> list[forms.BoundField]:
        return self.fieldset("pairwise")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        pair_a, pair_b = data.get("pair_run_a"), data.get("pair_run_b")
        if bool(pair_a) != bool(pair_b):
            self.add_error("pair_run_b", "pairwise comparisons need two runs, A and B")
        elif pair_a and pair_a == pair_b:
            self.add_error("pair_run_b", "choose two different runs to compare")
        if not (data.get("runs") or data.get("curations") or pair_a):
            self.add_error(None, "choose at least one inspection run or accepted curation")
        n_raters = len(data.get("raters") or [])
        for field in ("raters_per_item", "raters_per_pair"):
            wanted = data.get(field)
            if n_raters and wanted and wanted > n_raters:
                self.add_error(field, f"at most the number of raters chosen ({n_raters})")
        return data


class ScoreForm(forms.Form):
    assignment = forms.IntegerField(widget=forms.HiddenInput)
    score = forms.TypedChoiceField(
        choices=[(score, str(score)) for score in RUBRIC],
        coerce=int,
        error_messages={"invalid_choice": "a score is a whole number from 0 to 5; got %(value)s"},
    )
    comment = forms.CharField(max_length=5000, required=False)


class PairForm(forms.Form):
    judgement = forms.IntegerField(widget=forms.HiddenInput)
    outcome = forms.ChoiceField(
        choices=PairOutcome.choices,
        error_messages={"invalid_choice": "the outcome is left, tie or right; got %(value)s"},
    )


class JudgeForm(forms.Form):
    name = forms.CharField(max_length=80)
    endpoint = EndpointChoiceField(
        help_text="a registered model endpoint; it decides the model and gets its own key"
    )
    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 18}),
        initial=JUDGE_RUBRIC_PROMPT,
        help_text="the rubric prompt (paper Table 7); the reply must end with 'Score: N'",
    )
    include_images = forms.BooleanField(required=False, initial=True)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if Judge.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a judge named {name!r} exists already")
        return name
