"""The form that starts an SFT or GRPO run from the app."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from annotation.curation.models import DatasetExport, ExportKind
from annotation.spectra.models import LabelExport, Spectrum, Task
from annotation.training_runs.models import PolicyCheckpoint, TrainingStage
from annotation.training_runs.selectors import lineage_summary

PRESET_CHOICES = [
    ("cpu-tiny", "CPU tiny: a smoke run of a few steps (training/configs/*_cpu_tiny.yaml)"),
    ("gpu", "GPU: the paper recipe (training/configs/*_gpu.yaml)"),
]
LORA_CHOICES = [("", "as the preset"), ("true", "LoRA adapters"), ("false", "all weights")]


class ExportChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        if obj.kind == ExportKind.PREFERENCE:
            count, noun = obj.manifest.get("rows", "?"), "pairs"
        else:
            count = obj.manifest.get("n_trajectories", "?")
            noun = "trajectory" if count == 1 else "trajectories"
        kind = "expert-revised · " if obj.kind == ExportKind.REVISED else ""
        return f"{kind}v{obj.version} · {count} {noun} · {obj.content_hash[:12]}"


class CheckpointChoiceField(forms.ModelChoiceField):
    """Registered checkpoints, each labelled with its lineage (stage, data, base, settings)."""

    def label_from_instance(self, obj: Any) -> str:
        return checkpoint_label(obj)


def checkpoint_label(checkpoint: PolicyCheckpoint) -> str:
    summary = lineage_summary(checkpoint.lineage)
    parts = [checkpoint.name, summary["stage"].upper(), f"data {summary['dataset_version']}"]
    export = summary["dataset_export"]
    if export:
        parts.append(f"export v{export.get('version')}")
    parts.append(f"base {summary['base_model']}")
    if summary["learning_rate"] is not None:
        parts.append(f"lr {summary['learning_rate']:g}")
    if summary["use_lora"]:
        parts.append(f"LoRA r{summary['lora_r']}")
    return " · ".join(parts)


class TrainingRunForm(forms.Form):
    stage = forms.ChoiceField(choices=TrainingStage.choices, initial=TrainingStage.SFT)
    name = forms.CharField(max_length=120, required=False)
    preset = forms.ChoiceField(choices=PRESET_CHOICES, initial="cpu-tiny")
    # The model to start from.
    base_checkpoint = CheckpointChoiceField(
        queryset=PolicyCheckpoint.objects.order_by("-id"),
        required=False,
        empty_label="none: use the folder below",
        help_text="a registered checkpoint, e.g. an SFT result to start GRPO from",
    )
    base_model = forms.CharField(
        max_length=500,
        required=False,
        help_text="Qwen2.5-VL checkpoint folder on the training worker; "
        "empty: the preset's (the CPU preset uses the tiny model of python -m training.tiny_model)",
    )
    # SFT data.
    dataset_export = ExportChoiceField(
        queryset=DatasetExport.objects.filter(
            kind__in=[ExportKind.ACCEPTED, ExportKind.REVISED]
        ).order_by("kind", "-version"),
        required=False,
        empty_label="choose an export",
        help_text="accepted trajectories (Datasets page) or expert revisions (Training data page)",
    )
    # DPO data.
    preference_export = ExportChoiceField(
        queryset=DatasetExport.objects.filter(kind=ExportKind.PREFERENCE).order_by("-version"),
        required=False,
        empty_label="choose an export",
        label="Preference export",
        help_text="preference pairs exported on the Training data page",
    )
    # GRPO data: a vetted-label export, or label-only spectra already loaded.
    label_export = forms.ModelChoiceField(
        queryset=LabelExport.objects.order_by("-version"),
        to_field_name="version",
        required=False,
        empty_label="none: use a data set below",
        label="Vetted-label export",
        help_text="labels from expert vetting (the checkpoint records the decisions behind them)",
    )
    rl_dataset = forms.ChoiceField(choices=[], required=False, label="Data set")
    rl_split = forms.CharField(max_length=16, required=False, label="Split", initial="train")
    rl_tasks = forms.ModelMultipleChoiceField(
        queryset=Task.objects.all(),
        to_field_name="code",
        required=False,
        label="Tasks",
        widget=forms.CheckboxSelectMultiple,
    )
    rl_limit = forms.IntegerField(
        min_value=1, max_value=100000, initial=200, required=False, label="At most"
    )
    # Overrides of the preset.
    learning_rate = forms.FloatField(min_value=1e-12, max_value=1.0, required=False)
    num_train_epochs = forms.FloatField(min_value=0.01, max_value=1000, required=False)
    max_steps = forms.IntegerField(min_value=1, max_value=10_000_000, required=False)
    use_lora = forms.TypedChoiceField(
        choices=LORA_CHOICES,
        required=False,
        coerce=lambda value: value == "true",
        empty_value=None,
        label="Weights trained",
    )
    lora_r = forms.IntegerField(min_value=1, max_value=1024, required=False, label="LoRA rank")

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if user is not None:  # the exports this user may read (annotation/blinding.py)
            from annotation.blinding import dataset_exports_visible_to, label_exports_visible_to

            for name in ("dataset_export", "preference_export"):
                field = cast(ExportChoiceField, self.fields[name])
                field.queryset = dataset_exports_visible_to(user=user, rows=field.queryset)
            labels = cast(forms.ModelChoiceField, self.fields["label_export"])
            labels.queryset = label_exports_visible_to(user=user, rows=labels.queryset)
        datasets = (
            Spectrum.objects.exclude(label="")
            .order_by("dataset")
            .values_list("dataset", flat=True)
            .distinct()
        )
        cast(forms.ChoiceField, self.fields["rl_dataset"]).choices = [("", "choose a data set")] + [
            (name, name) for name in datasets
        ]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("stage") == TrainingStage.SFT and not data.get("dataset_export"):
            self.add_error("dataset_export", "SFT trains on a dataset export; choose one")
        if data.get("stage") == TrainingStage.DPO and not data.get("preference_export"):
            self.add_error("preference_export", "DPO trains on a preference export; choose one")
        if data.get("stage") == TrainingStage.GRPO and not data.get("label_export"):
            if not data.get("rl_dataset"):
                self.add_error("rl_dataset", "GRPO needs labelled spectra; choose their data set")
            if not data.get("rl_tasks"):
                self.add_error("rl_tasks", "choose at least one task")
        return data

    def export(self) -> DatasetExport | None:
        """The export the chosen stage trains on (GRPO: none)."""
        data = self.cleaned_data
        if data.get("stage") == TrainingStage.DPO:
            return data.get("preference_export")
        if data.get("stage") == TrainingStage.SFT:
            return data.get("dataset_export")
        return None

    def overrides(self) -> dict[str, Any]:
        data = self.cleaned_data
        names = ("learning_rate", "num_train_epochs", "max_steps", "use_lora", "lora_r")
        return {name: data[name] for name in names if data.get(name) is not None}

    def label_source(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data.get("label_export") is not None:
            return {"label_export": data["label_export"].version}
        return {
            "dataset": data.get("rl_dataset") or "",
            "split": data.get("rl_split") or "",
            "tasks": [task.code for task in data.get("rl_tasks") or []],
            "limit": data.get("rl_limit") or 200,
        }
