"""The form that starts an inspection run."""

from __future__ import annotations

from typing import Any

from django import forms

from annotation.core.forms import EndpointChoiceField
from annotation.spectra.models import Label, Task
from annotation.training_runs.forms import CheckpointChoiceField
from annotation.training_runs.models import PolicyCheckpoint

POLICY_CHOICES = [
    ("rule-based", "Rule-based inspector (measures the arrays)"),
    ("checkpoint", "Registered checkpoint (trained in specvet; lineage shown)"),
    ("transformers", "Local checkpoint (Hugging Face Qwen2.5-VL)"),
    ("openai", "Registered model endpoint (vLLM, SGLang, hosted)"),
]


class PolicyChoiceForm(forms.Form):
    """Which policy: the rule-based inspector, a registered checkpoint, a local checkpoint or a
    registered model endpoint (never a URL or key typed here)."""

    policy = forms.ChoiceField(choices=POLICY_CHOICES, initial="rule-based")
    checkpoint = CheckpointChoiceField(
        queryset=PolicyCheckpoint.objects.order_by("-id"),
        required=False,
        empty_label="choose a registered checkpoint",
        help_text="name · stage · dataset version · base model · settings",
    )
    model_path = forms.CharField(max_length=500, required=False, help_text="checkpoint folder")
    endpoint = EndpointChoiceField(required=False)

    # The fields that belong to one policy only (the page shows them for that policy).
    POLICY_FIELDS = {"checkpoint": "checkpoint", "model_path": "transformers", "endpoint": "openai"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, policy in self.POLICY_FIELDS.items():
            self.fields[name].widget.attrs["data-policy"] = policy

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        policy = data.get("policy")
        if policy == "checkpoint" and not data.get("checkpoint"):
            self.add_error("checkpoint", "choose one of the registered checkpoints")
        if policy == "transformers" and not data.get("model_path"):
            self.add_error("model_path", "a local checkpoint needs its folder")
        if policy == "openai" and not data.get("endpoint"):
            self.add_error("endpoint", "choose one of the registered model endpoints")
        return data

    def policy_spec(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data["policy"] == "checkpoint":
            return data["checkpoint"].policy_spec()
        spec: dict[str, Any] = {"kind": data["policy"]}
        if data["policy"] == "transformers":
            spec["model_path"] = data["model_path"]
        if data["policy"] == "openai":
            spec["endpoint"] = data["endpoint"].name
        return spec


class EvaluationForm(PolicyChoiceForm):
    field_order = ["tasks", "synthetic_per_task", "vetted_per_task", "max_tool_calls"]
    tasks = forms.MultipleChoiceField(
        choices=[], widget=forms.CheckboxSelectMultiple, help_text="tasks to score"
    )
    synthetic_per_task = forms.IntegerField(
        min_value=0,
        max_value=200,
        initial=40,
        help_text="SpecVI-mini test spectra per task beside the real ones (0: real only)",
    )
    vetted_per_task = forms.IntegerField(
        min_value=0,
        max_value=500,
        initial=200,
        required=False,
        help_text="spectra with a vetted label per task, newest labels first (0: none)",
    )
    max_tool_calls = forms.IntegerField(min_value=0, max_value=16, initial=8)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        codes = list(Task.objects.order_by("code").values_list("code", flat=True))
        self.fields["tasks"].choices = [(code, code) for code in codes]  # type: ignore[attr-defined]
        self.fields["tasks"].initial = codes


class InspectionRunForm(PolicyChoiceForm):
    field_order = [
        "name", "task", "dataset", "split", "survey", "label", "labelled_for_task", "limit",
        "policy", "checkpoint", "model_path", "endpoint",
    ]  # fmt: skip
    name = forms.CharField(max_length=120, required=False)
    task = forms.ModelChoiceField(queryset=Task.objects.all(), to_field_name="code")
    # Candidates: a filter over spectra already loaded.
    dataset = forms.CharField(max_length=80, required=False)
    split = forms.CharField(max_length=16, required=False)
    survey = forms.CharField(max_length=40, required=False)
    label = forms.ChoiceField(choices=[("", "any"), *Label.choices], required=False)
    labelled_for_task = forms.BooleanField(
        required=False, initial=True, help_text="only spectra labelled for this task"
    )
    limit = forms.IntegerField(min_value=1, max_value=100000, initial=60)
    # Sampling (the policy fields come from PolicyChoiceForm).
    temperature = forms.FloatField(min_value=0.0, max_value=2.0, initial=0.0)
    rollouts = forms.IntegerField(min_value=1, max_value=16, initial=1)
    max_tool_calls = forms.IntegerField(min_value=0, max_value=16, initial=8)
    confidence_threshold = forms.FloatField(min_value=0.0, max_value=1.0, initial=0.75)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("rollouts", 1) > 1 and data.get("policy") == "rule-based":
            self.add_error("rollouts", "the rule-based inspector is deterministic; use one rollout")
        return data

    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.cleaned_data["temperature"]}
