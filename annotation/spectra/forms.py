"""Forms of the spectra pages: upload (with an optional resolution override) and filters."""

from __future__ import annotations

from django import forms

from agent.resolution import Resolution, ResolutionError, parse_user_value
from agent.spectra.declared import COLUMNS_HELP, DeclarationError, parse_columns
from annotation.spectra.models import Label, Task

RESOLUTION_HELP = (
    "Optional: the instrumental resolution, overriding what the file or the survey's default "
    "says. A resolving power (1800 or R=1800), an FWHM in Å (2.5 A) or in km/s (150 km/s)."
)


def _user_resolution(text: str) -> Resolution | None:
    """The user's resolution (source "user"), None when left blank."""
    if not text.strip():
        return None
    try:
        return parse_user_value(text)
    except ResolutionError as error:
        raise forms.ValidationError(str(error)) from None


# Django's own message speaks of a "slug", a word astronomers need not know (issue 26).
DATASET_NAME_INVALID = (
    "The data set name may hold only letters, digits, underscores (_) and hyphens (-), "
    "e.g. lamost-dr7; “%(value)s” has other characters (spaces or punctuation)."
)


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
    # The form metaclass moves declared fields into base_fields, so this does not replace
    # BaseForm.files (the uploaded files) at run time; the stubs see an override.
    files = MultipleFileField(  # type: ignore[assignment]
        help_text="LAMOST, SDSS spec-* and spSpec, DESI coadd-*, 1-D FITS images with a "
        "wavelength WCS (IRAF, stellar libraries), FITS FLUX/ERROR/WAVELENGTH extensions, FITS "
        "tables (ESO Phase 3, CALSPEC), SpecVI-Bench parquet, CSV/ASCII/NPZ tables; gzip is fine. "
        "The format is detected from the content."
    )
    dataset = forms.SlugField(
        label="Data set",
        max_length=80,
        initial="uploads",
        help_text="A name for this batch: letters, digits, _ and -, e.g. lamost-dr7",
        error_messages={"invalid": DATASET_NAME_INVALID},
    )
    task = forms.ModelChoiceField(queryset=Task.objects.all(), required=False, to_field_name="code")
    label = forms.ChoiceField(choices=[("", "unlabelled"), *Label.choices], required=False)
    resolution = forms.CharField(
        label="Resolving power R", max_length=40, required=False, help_text=RESOLUTION_HELP
    )

    columns = forms.CharField(
        label="Columns", max_length=200, required=False, help_text=COLUMNS_HELP
    )
    wavelength_frame = forms.ChoiceField(
        label="Wavelength frame",
        choices=[
            ("", "as the file says (else assumed vacuum)"),
            ("air", "air"),
            ("vacuum", "vacuum"),
        ],
        required=False,
        help_text="Declare it when the file does not say; a file that says otherwise is refused.",
    )

    def clean_resolution(self) -> Resolution | None:
        return _user_resolution(self.cleaned_data.get("resolution") or "")

    def clean_columns(self) -> tuple[str, ...] | None:
        try:
            return parse_columns(self.cleaned_data.get("columns") or "")
        except DeclarationError as error:
            raise forms.ValidationError(str(error)) from None


class RenderForm(forms.Form):
    """The tool's request as an expert types it. Validation of the range is the tool's job."""

    lo = forms.FloatField(label="from (Å)")
    hi = forms.FloatField(label="to (Å)")
    label = forms.CharField(max_length=60, required=False)


class RedshiftDecisionForm(forms.Form):
    """An expert's redshift: the fit's alternative ``rank`` (1 = best), or a typed ``z``;
    ``confirm`` stores one that contradicts the fit's class. The range is checked by the
    service, with its own message (not the browser's or Django's)."""

    rank = forms.IntegerField(required=False, min_value=1, max_value=20)
    z = forms.CharField(required=False, max_length=40)
    z_err = forms.CharField(required=False, max_length=40)
    confirm = forms.BooleanField(required=False)

    def _number(self, name: str) -> float | None:
        text = (self.cleaned_data.get(name) or "").strip()
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            raise forms.ValidationError(f"{name} must be a number, got {text[:40]!r}") from None

    def clean_z(self) -> float | None:
        return self._number("z")

    def clean_z_err(self) -> float | None:
        return self._number("z_err")

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if not data.get("rank") and data.get("z") is None and not self.errors:
            raise forms.ValidationError("Give the alternative to accept or a redshift z.")
        return data
