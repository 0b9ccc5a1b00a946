from __future__ import annotations

from django import forms

from annotation.models import Label, Task


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def clean(self, data: object, initial: object = None) -> list[object]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


class SpectrumUploadForm(forms.Form):
    files = MultipleFileField(
        help_text="LAMOST, SDSS spec-*, DESI coadd-*, SpecVI-Bench parquet, CSV/ASCII/NPZ tables; "
        "gzip is fine. The format is detected from the content."
    )
    dataset = forms.SlugField(max_length=80, initial="uploads")
    task = forms.ModelChoiceField(queryset=Task.objects.all(), required=False, to_field_name="code")
    label = forms.ChoiceField(choices=[("", "unlabelled"), *Label.choices], required=False)


class RenderForm(forms.Form):
    """The tool's request as an expert types it. Validation of the range is the tool's job."""

    lo = forms.FloatField(label="from (Å)")
    hi = forms.FloatField(label="to (Å)")
    label = forms.CharField(max_length=60, required=False)
