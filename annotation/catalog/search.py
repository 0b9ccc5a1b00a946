"""Finding rows in the catalog: by name (object id or IAU designation), by position (a cone
search, as SkyPortal's ``ra``/``dec``/``radius``) and by data set.

- Name: ``?object_id=J2208`` matches an object id *or* a designation starting with the text
  (``J220848.54-020324.3``); a survey word before the designation (``LAMOST J2208``) and a
  lower-case ``j`` are accepted. Both are prefix matches an index serves (substring search would
  read every row of a million-row catalog).
- Position: ``?ra=&dec=`` in degrees or sexagesimal (``22:08:48.54`` is hours of RA,
  ``-02:03:24.3`` degrees of Dec), parsed by astropy's SkyCoord, and ``?radius=`` in arcseconds
  (default DEFAULT_RADIUS_ARCSEC, at most MAX_RADIUS_ARCSEC). A bounding box on (dec, ra) narrows
  the rows in SQL, index-backed; the exact great-circle distance (haversine, stable at arcsecond
  radii) then keeps those inside the cone, still in SQL, so pages, the API and every export stream
  the same rows lazily. Rows without a position never match a cone.
- Data set: ``?dataset=`` keeps the rows of spectra loaded into that data set (exact name).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from astropy import units as u
from astropy.coordinates import Angle, SkyCoord
from django.core.cache import cache
from django.db.models import ExpressionWrapper, F, FloatField, Q, QuerySet
from django.db.models.functions import Cos, Power, Radians, Sin

from annotation.inspections.models import CatalogEntry

DEFAULT_RADIUS_ARCSEC = 10.0
MAX_RADIUS_ARCSEC = 3600.0 * 10  # 10 degrees
NAME_MAX = 120
DATASET_CHOICES_SECONDS = 300
# "LAMOST J2208", "SDSS J220848.54-02": a survey word, then the designation.
_SURVEY_DESIGNATION = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*\s+([Jj]\d[\d.+\-]*)$")
_DESIGNATION = re.compile(r"^[Jj]\d[\d.+\-]*$")


class CatalogQueryError(ValueError):
    """A catalog filter, sort or paging parameter that cannot be read; names the parameter, the
    reason and the limit (defined here, re-exported by catalog.selectors)."""


@dataclass(frozen=True)
class Cone:
    ra: float  # degrees, ICRS, in [0, 360)
    dec: float  # degrees
    radius: float  # arcseconds


# --- name ----------------------------------------------------------------------------------


def name_filter(term: str) -> Q:
    """Rows whose object id, or whose IAU designation, starts with ``term``."""
    match = _SURVEY_DESIGNATION.match(term)
    designation = match.group(1) if match else term
    query = Q(object_id__startswith=term)
    if _DESIGNATION.match(designation):
        query |= Q(designation__startswith="J" + designation[1:])
    return query


def check_name(term: str) -> str:
    term = term.strip()
    if len(term) > NAME_MAX:
        raise CatalogQueryError(
            f"object_id must be at most {NAME_MAX} characters (an object id or designation "
            f"prefix); got {len(term)}"
        )
    return term


# --- position ------------------------------------------------------------------------------


def _angle(raw: str, name: str, hours: bool) -> float:
    """Degrees of ``raw``: a number is degrees; sexagesimal RA (``22:08:48.54``, ``22 08 48.5``,
    ``22h08m48.5s``) is hours unless it says ``d``; sexagesimal Dec is degrees."""
    text = raw.strip()
    try:
        try:
            return _finite(float(text), name, raw)
        except ValueError:
            pass
        in_hours = hours and not any(mark in text for mark in ("d", "°"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # astropy warns on 12:60:00 and reads it as 13:00
            angle = Angle(text, unit=u.hourangle if in_hours else u.deg)
    except (ValueError, u.UnitsError, Warning):
        example = "332.2023 or 22:08:48.54" if hours else "-2.0568 or -02:03:24.3"
        raise CatalogQueryError(
            f"{name} must be an angle in degrees or sexagesimal (e.g. {example}); got {raw!r}"
        ) from None
    return _finite(float(angle.to_value(u.deg)), name, raw)


def _finite(value: float, name: str, raw: str) -> float:
    if not math.isfinite(value):
        raise CatalogQueryError(f"{name} must be a finite angle; got {raw!r}")
    return value


def cone_from_params(params: Mapping[str, str]) -> Cone | None:
    """The cone of ``?ra=&dec=&radius=``; None when no position is given."""
    ra_raw = (params.get("ra") or "").strip()
    dec_raw = (params.get("dec") or "").strip()
    radius_raw = (params.get("radius") or "").strip()
    if not ra_raw and not dec_raw:
        if radius_raw:
            raise CatalogQueryError("radius needs a position: give ra and dec too")
        return None
    if not ra_raw or not dec_raw:
        missing = "ra" if not ra_raw else "dec"
        raise CatalogQueryError(f"a cone search needs both ra and dec; {missing} is missing")
    ra = _angle(ra_raw, "ra", hours=True)
    dec = _angle(dec_raw, "dec", hours=False)
    if not -90.0 <= dec <= 90.0:
        raise CatalogQueryError(f"dec must be between -90 and 90 degrees; got {dec:g}")
    if not 0.0 <= ra <= 360.0:
        raise CatalogQueryError(
            f"ra must be between 0 and 360 degrees (0 and 24 hours); got {ra:g}"
        )
    radius = DEFAULT_RADIUS_ARCSEC
    if radius_raw:
        try:
            radius = float(radius_raw)
        except ValueError:
            raise CatalogQueryError(
                f"radius must be a number of arcseconds; got {radius_raw!r}"
            ) from None
        if not math.isfinite(radius) or not 0.0 < radius <= MAX_RADIUS_ARCSEC:
            raise CatalogQueryError(
                f"radius must be above 0 and at most {MAX_RADIUS_ARCSEC:g} arcsec "
                f"({MAX_RADIUS_ARCSEC / 3600:g} degrees); got {radius_raw}"
            )
    # SkyCoord normalizes the position (RA wrapped into [0, 360)).
    position = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, frame="icrs")
    return Cone(ra=float(position.ra.deg), dec=float(position.dec.deg), radius=radius)


def _ra_box(cone: Cone) -> Q | None:
    """The RA range of the cone's bounding box (None: every RA, the cone holds a pole)."""
    radius = math.radians(cone.radius / 3600.0)
    cos_dec = math.cos(math.radians(cone.dec))
    if math.sin(radius) >= cos_dec:
        return None
    half = math.degrees(math.asin(math.sin(radius) / cos_dec)) + 1e-9
    low, high = cone.ra - half, cone.ra + half
    if low < 0.0:
        return Q(ra__gte=low + 360.0) | Q(ra__lte=high)
    if high >= 360.0:
        return Q(ra__gte=low) | Q(ra__lte=high - 360.0)
    return Q(ra__gte=low, ra__lte=high)


def cone_filter(rows: QuerySet[CatalogEntry], cone: Cone) -> QuerySet[CatalogEntry]:
    """The rows inside ``cone``: a (dec, ra) bounding box, then the haversine distance."""
    radius_deg = cone.radius / 3600.0
    rows = rows.filter(dec__gte=cone.dec - radius_deg - 1e-9, dec__lte=cone.dec + radius_deg + 1e-9)
    ra_box = _ra_box(cone)
    if ra_box is not None:
        rows = rows.filter(ra_box)
    # haversine: hav(d) = sin²(Δdec/2) + cos dec1 cos dec2 sin²(Δra/2) <= sin²(r/2)
    dec0 = math.radians(cone.dec)
    hav = Power(Sin((Radians(F("dec")) - dec0) / 2.0), 2) + Cos(Radians(F("dec"))) * math.cos(
        dec0
    ) * Power(Sin((Radians(F("ra")) - math.radians(cone.ra)) / 2.0), 2)
    limit = math.sin(math.radians(radius_deg) / 2.0) ** 2
    distance = ExpressionWrapper(hav, output_field=FloatField())
    return rows.alias(cone_hav=distance).filter(cone_hav__lte=limit)


def separation_arcsec(ra1: float, dec1: float, ra2: float, dec2: float) -> float:
    """astropy's angular separation (the reference the SQL distance is tested against)."""
    one = SkyCoord(ra=ra1 * u.deg, dec=dec1 * u.deg, frame="icrs")
    two = SkyCoord(ra=ra2 * u.deg, dec=dec2 * u.deg, frame="icrs")
    return float(one.separation(two).arcsec)


# --- data set ------------------------------------------------------------------------------


def dataset_choices() -> list[str]:
    """Distinct data sets in the catalog, cached briefly (as the survey choices)."""

    def distinct() -> list[str]:
        values = CatalogEntry.objects.order_by().values_list("dataset", flat=True).distinct()
        return sorted(value for value in values if value)

    return cast(list[str], cache.get_or_set("catalog:datasets", distinct, DATASET_CHOICES_SECONDS))
