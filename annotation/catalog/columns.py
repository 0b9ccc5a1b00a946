"""The catalog's columns: what each holds, its unit and UCD (VOTable, FITS), and the
per-row values a list computes rather than stores (duplicates, the vetted redshift)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, FloatField, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce

from annotation.spectra.models import RedshiftDecision, Spectrum

# --- columns --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogColumn:
    name: str  # the name in every export
    source: str  # the CatalogEntry field it is read from
    kind: str  # "int" | "float" | "str" | "bool" | "time"
    unit: str  # FITS/VOUnit string; "" for dimensionless or not a quantity
    ucd: str
    description: str  # short enough for a FITS TCOMMn card (68 characters)

    @property
    def type_label(self) -> str:
        return {
            "int": "int64",
            "float": "float64",
            "str": "string",
            "bool": "boolean",
            "time": "string (ISO 8601 UTC)",
        }[self.kind]

    @property
    def unit_label(self) -> str:
        if self.unit:
            return self.unit
        return "dimensionless" if self.kind == "float" else ""


CATALOG_COLUMNS: tuple[CatalogColumn, ...] = (
    CatalogColumn("id", "id", "int", "", "meta.id", "Catalog entry id; its page is /catalog/<id>/"),
    CatalogColumn(
        "object_id", "object_id", "str", "", "meta.id;meta.main", "Survey object identifier"
    ),
    CatalogColumn("survey", "survey", "str", "", "meta.dataset", "Survey of the spectrum"),
    CatalogColumn(
        "ra", "ra", "float", "deg", "pos.eq.ra;meta.main", "Right ascension (ICRS); NaN if unknown"
    ),
    CatalogColumn(
        "dec", "dec", "float", "deg", "pos.eq.dec;meta.main", "Declination (ICRS); NaN if unknown"
    ),
    CatalogColumn("task", "task_code", "str", "", "meta.code", "Inspection task code, e.g. CV"),
    CatalogColumn(
        "verdict", "verdict", "str", "", "src.class", "Agent verdict YES or NO; empty: no answer"
    ),
    CatalogColumn(
        "confidence",
        "confidence",
        "float",
        "",
        "stat.probability",
        "Agent probability of its verdict, 0-1",
    ),
    CatalogColumn("snr", "snr", "float", "", "stat.snr", "Signal-to-noise ratio of the spectrum"),
    CatalogColumn(
        "policy", "policy_name", "str", "", "meta.software", "Policy that gave the verdict"
    ),
    CatalogColumn(
        "expert_decision",
        "expert_decision",
        "str",
        "",
        "src.class",
        "Expert vetting: YES, NO, unsure; empty: not vetted",
    ),
    CatalogColumn(
        "model",
        "model_label",
        "str",
        "",
        "meta.software",
        "Model that gave the verdict: rule-based version, checkpoint hash or endpoint and model",
    ),
    CatalogColumn(
        "model_key",
        "model_key",
        "str",
        "",
        "meta.id",
        "Stable key of that model (rule-based@version, checkpoint:sha256, endpoint:name/model)",
    ),
    CatalogColumn(
        "vetted_label",
        "vetted_label",
        "str",
        "",
        "src.class",
        "Label of the spectrum from expert vetting (two agree, or a third resolves); empty: none",
    ),
    CatalogColumn(
        "label_state",
        "label_state",
        "str",
        "",
        "meta.code",
        "Vetting label state: pending, conflict (awaiting a third expert), agreed, resolved",
    ),
    CatalogColumn(
        "synthetic",
        "synthetic",
        "bool",
        "",
        "meta.code",
        "True for a synthetic (simulated) spectrum",
    ),
    CatalogColumn(
        "shifted", "shifted", "bool", "", "meta.code", "True: its run shifted from calibration"
    ),
    CatalogColumn("run_id", "run_id", "int", "", "meta.id", "Inspection run that gave the verdict"),
    CatalogColumn(
        "created_at", "created_at", "time", "", "time.creation", "When the entry was written (UTC)"
    ),
    CatalogColumn(
        "designation", "designation", "str", "", "meta.id", "IAU name JHHMMSS.ss+DDMMSS.s (RA/Dec)"
    ),
    CatalogColumn("dataset", "dataset", "str", "", "meta.dataset", "Data set the spectrum is in"),
    CatalogColumn(
        "spectrum_id",
        "spectrum_id",
        "int",
        "",
        "meta.id",
        "Stored spectrum; /spectra/<id>/; 0: gone",
    ),
    CatalogColumn(
        "content_hash",
        "content_hash",
        "str",
        "",
        "meta.id",
        "SHA-256 of the spectrum content (same: same data)",
    ),
    CatalogColumn(
        "duplicates", "duplicates", "int", "", "meta.number", "Other spectra of the same content"
    ),
    CatalogColumn(
        "expert_quality",
        "expert_quality",
        "float",
        "",
        "meta.code.qual",
        "Mean expert quality 0-4 (4 confident); NaN: none given",
    ),
    CatalogColumn(
        "expert_issues",
        "expert_issues",
        "str",
        "",
        "meta.code.qual",
        "Expert issue flags, comma-separated: sky, low_snr, artefact, ...",
    ),
    CatalogColumn(
        "evidence",
        "evidence_outcome",
        "str",
        "",
        "meta.code.qual",
        "Own evidence masked: flips, weakens, insensitive, holds; empty: not tested",
    ),
    CatalogColumn(
        "vetted_z",
        "vetted_z",
        "float",
        "",
        "src.redshift",
        "Newest expert redshift of the spectrum; NaN: none",
    ),
    CatalogColumn(
        "vetted_z_err",
        "vetted_z_err",
        "float",
        "",
        "stat.error;src.redshift",
        "Uncertainty of vetted_z; NaN: none given",
    ),
)
COLUMN_NAMES = tuple(column.name for column in CATALOG_COLUMNS)
_SOURCES = tuple(column.source for column in CATALOG_COLUMNS)
# Computed per row by catalog_rows, not stored.
_ANNOTATED = frozenset({"duplicates", "vetted_z", "vetted_z_err"})
# Everything a list row shows; candidate_id is the only column a page never needs.
LIST_FIELDS = (*(s for s in _SOURCES if s not in _ANNOTATED), "candidate_id")


def duplicates_count() -> Coalesce:
    """How many other stored spectra hold the same content (the same file loaded into several
    data sets is several spectra): an index lookup on the content hash per row shown."""
    others = (
        Spectrum.objects.filter(content_hash=OuterRef("content_hash"))
        .exclude(content_hash="")
        .exclude(pk=OuterRef("spectrum_id"))
        .order_by()
        .values("content_hash")
        .annotate(n=Count("pk"))
        .values("n")[:1]
    )
    return Coalesce(Subquery(others, output_field=IntegerField()), 0)


def vetted_redshift(field: str) -> Subquery:
    """The newest expert redshift decision's ``field`` for the row's spectrum (NULL: none), an
    index lookup per row (``redshift_decision_latest``)."""
    newest = RedshiftDecision.objects.filter(spectrum_id=OuterRef("spectrum_id")).order_by(
        "-decided_at", "-id"
    )
    return Subquery(newest.values(field)[:1], output_field=FloatField())
