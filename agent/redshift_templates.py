"""Templates for the redshift fit (agent.redshift_fit, agent.redshift): real library spectra
of the corpus's development part, and synthetic ones where the corpus has none.

Stars (``STAR_TEMPLATES``): the Pickles (1998) composites of the development part, B5 to M7,
dwarfs, subgiants and giants, over their whole range (1150 A to 2.5 um) and turned from air into
vacuum wavelengths (their tables are in air: read as vacuum they put LAMOST and SDSS spectra 85
km/s off). Individual STELIB stars were tried first and fitted LAMOST's G7 star worse (chi2
28,028 for a G8 V against 26,065 for Pickles G8 V) and at velocities scattered by tens of km/s
(STELIB spectra are not at rest). Galaxies: an old stellar population (K0 III, G8 V, K3 III,
F5 V by their light at 5500 A) and a star-forming one (B5-7 V, A2 V, F5 V, K0 III with the
SpecVI-mini nebular lines), both Pickles composites (R ~ 500, about a galaxy's velocity
dispersion). Quasars: the synthetic quasar (no pinned wheel ships an observed one). The
validation part and the LAMOST and SDSS spectra the fit is measured on are never templates.
Without the real-data cache synthetic stars and galaxies stand in (and the viewer says so).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from agent.redshift import Template
from agent.synthetic.lines import (
    CA_H,
    CA_K,
    G_BAND,
    MG_B,
    NA_D,
    NEBULAR,
    QUASAR_LINES,
    _balmer,
)

_OII = 3728.48  # vacuum, the doublet's mean
_GRID = 10.0 ** np.arange(np.log10(900.0), np.log10(11000.0), 5e-5)  # rest vacuum Angstrom


@dataclass(frozen=True)
class TemplateSet:
    templates: tuple[Template, ...]
    source: str  # "corpus" or "synthetic"
    note: str

    @cached_property
    def fingerprint(self) -> str:
        """A digest of every template's name, kind and arrays: a fit stored under it is a fit
        against these very templates (a rebuilt cache with other spectra gets another)."""
        digest = hashlib.sha256()
        for template in self.templates:
            digest.update(f"{template.name}\x00{template.kind}\x00".encode())
            for values in (template.wavelength, template.flux):
                digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        return digest.hexdigest()[:20]


def _lines(centres_strengths: list[tuple[float, float]], fwhm_kms: float) -> np.ndarray:
    out = np.zeros_like(_GRID)
    for centre, strength in centres_strengths:
        sigma = centre * fwhm_kms / 299792.458 / 2.3548
        out += strength * np.exp(-0.5 * ((_GRID - centre) / sigma) ** 2)
    return out


def synthetic_quasar() -> Template:
    """A quasar: power-law continuum with the SpecVI-mini line list at mid equivalent widths
    (broad lines 4000 km/s FWHM, narrow 400 km/s) and a Lyman-alpha forest."""
    continuum = (_GRID / 3000.0) ** -1.5
    flux = continuum.copy()
    for centre, (low, high), broad in QUASAR_LINES:
        width = 4000.0 if broad else 400.0
        sigma = centre * width / 299792.458 / 2.3548
        peak = 0.5 * (low + high) / (sigma * np.sqrt(2.0 * np.pi))
        flux += np.interp(centre, _GRID, continuum) * _lines([(centre, peak)], width)
    # The Lyman-alpha forest: a mean transmission of about 0.7 blueward of the line.
    flux = np.where(_GRID < 1215.67, flux * 0.7, flux)
    return Template("synthetic quasar (SpecVI-mini lines)", "qso", _GRID.copy(), flux)


def synthetic_templates() -> tuple[Template, ...]:
    """Deterministic stand-ins: an emission-line galaxy, a passive galaxy, an A and a K star and
    the quasar, from the SpecVI-mini line lists."""
    balmer = [_balmer(n) for n in range(3, 12)]
    nebular = [(_OII, 3.0), *((w, 1.0) for w in NEBULAR.values())]
    nebular += [(NEBULAR["[O III] 5008"], 2.5), (balmer[0], 4.0), (balmer[1], 1.4)]
    metals = [(CA_K, 0.5), (CA_H, 0.45), (G_BAND, 0.25), (NA_D[0], 0.2), (NA_D[1], 0.2)]
    metals += [(w, 0.15) for w in MG_B]
    passive = (_GRID / 5000.0) ** 1.5 * (1.0 - _lines(metals, 500.0))
    emission = (_GRID / 5000.0) ** -0.5 * (1.0 - 0.5 * _lines(metals, 500.0))
    a_star = (_GRID / 5000.0) ** -2.5 * (1.0 - _lines([(w, 0.45) for w in balmer], 1500.0))
    k_star = (_GRID / 5000.0) ** 2.0 * (1.0 - _lines(metals, 150.0))
    return (
        Template(
            "synthetic emission-line galaxy",
            "galaxy",
            _GRID.copy(),
            emission + _lines(nebular, 250.0),
        ),
        Template("synthetic passive galaxy", "galaxy", _GRID.copy(), passive),
        Template("synthetic A star", "star", _GRID.copy(), a_star),
        Template("synthetic K star", "star", _GRID.copy(), k_star),
        synthetic_quasar(),
    )


# Pickles composites of the development part used as star templates: the part's MK types from
# B5 to M7, dwarfs, subgiants and giants (its O5 V and B0 V are left out: nearly featureless in
# the optical at R ~ 500, a flat template times the polynomial fitted any blue spectrum, as
# Redrock's star templates have no O type either). The validation part is never a template.
STAR_TEMPLATES = (
    "pickles-6", "pickles-10", "pickles-12", "pickles-14",
    "pickles-16", "pickles-23", "pickles-26", "pickles-30", "pickles-31", "pickles-36",
    "pickles-37", "pickles-42", "pickles-45", "pickles-51", "pickles-55", "pickles-66",
    "pickles-71", "pickles-73", "pickles-76", "pickles-78", "pickles-81", "pickles-87",
    "pickles-95", "pickles-99", "pickles-102",
)  # fmt: skip
# Pickles composites and their share of the light at 5500 A: an old stellar population, and a
# young one (with the SpecVI-mini nebular lines on it: a star-forming galaxy).
OLD_POPULATION = (("pickles-78", 0.45), ("pickles-30", 0.25), ("pickles-87", 0.15),
                  ("pickles-16", 0.15))  # fmt: skip
# Where the populations begin (rest Angstrom): bluer, a composite of stars is a smooth continuum
# that, times the polynomial, fitted blue spectra at z = 1.3-1.6 (no feature to match) better
# than anything at their true z. From these the fit reaches z ~ 0.7 (old) and 0.4 (young).
GALAXY_REST_FROM = {"old": 2500.0, "young": 3000.0}
YOUNG_POPULATION = (("pickles-6", 0.3), ("pickles-10", 0.3), ("pickles-16", 0.2),
                    ("pickles-78", 0.2))  # fmt: skip


def _pickles(keys: tuple[str, ...]) -> dict[str, tuple[str, np.ndarray]] | None:
    """Each Pickles composite's MK type and flux on _GRID (vacuum: the tables are in air),
    NaN outside its range; None without the cache."""
    from agent import real_corpus
    from agent.spectra import air_to_vacuum

    try:
        real_corpus.fetch(download=False, quiet=True)
        by_id = {entry.id: entry for entry in real_corpus.load_manifest()}
        archives: dict[str, Any] = {}
        try:
            found = {}
            for key in keys:
                spectrum = real_corpus.library_spectrum_full_range(by_id[key], archives)
                vacuum = np.asarray(air_to_vacuum(spectrum.wavelength), dtype=float)
                flux = np.interp(_GRID, vacuum, spectrum.flux, left=np.nan, right=np.nan)
                found[key] = (by_id[key].subclass, flux / np.interp(5500.0, _GRID, flux))
        finally:
            for archive in archives.values():
                archive.close()
    except real_corpus.CorpusUnavailable:
        return None
    return found


def _population(spectra: dict[str, tuple[str, np.ndarray]], mix: tuple[tuple[str, float], ...]
                ) -> tuple[str, np.ndarray]:  # fmt: skip
    label = " + ".join(f"{share:.0%} {spectra[key][0]}" for key, share in mix)
    return label, sum((share * spectra[key][1] for key, share in mix), np.zeros_like(_GRID))


def corpus_templates() -> tuple[Template, ...]:
    """The Pickles stars, an old stellar population and a star-forming galaxy (a young one
    with nebular lines); empty without the real-data cache."""
    keys = tuple(
        dict.fromkeys((*STAR_TEMPLATES, *(k for k, _ in OLD_POPULATION + YOUNG_POPULATION)))
    )
    spectra = _pickles(keys)
    if spectra is None:
        return ()
    stars = tuple(
        Template(f"Pickles {spectra[key][0]}", "star", _GRID.copy(), spectra[key][1])
        for key in STAR_TEMPLATES
    )
    old_label, old = _population(spectra, OLD_POPULATION)
    young_label, young = _population(spectra, YOUNG_POPULATION)
    nebular = [(_OII, 3.0), *((w, 1.0) for w in NEBULAR.values())]
    nebular += [(NEBULAR["[O III] 5008"], 2.5), (_balmer(3), 4.0), (_balmer(4), 1.4)]
    young = young + _lines(nebular, 250.0)
    return (
        *stars,
        Template(
            f"old stellar population (Pickles {old_label})",
            "galaxy",
            _GRID.copy(),
            np.where(GALAXY_REST_FROM["old"] <= _GRID, old, np.nan),
        ),
        Template(
            f"star-forming galaxy (Pickles {young_label}, synthetic nebular lines)",
            "galaxy",
            _GRID.copy(),
            np.where(GALAXY_REST_FROM["young"] <= _GRID, young, np.nan),
        ),
    )


def default_template_set() -> TemplateSet:
    """The corpus's Pickles stars, old and star-forming populations, and the synthetic quasar
    (no pinned wheel ships an observed one); all synthetic without the cache."""
    real = corpus_templates()
    if real:
        n_stars = sum(t.kind == "star" for t in real)
        note = (
            f"{n_stars} real Pickles stars, old and star-forming populations of Pickles "
            "composites (nebular lines synthetic) and a synthetic quasar"
        )
        return TemplateSet((*real, synthetic_quasar()), "corpus", note)
    note = "synthetic templates only: the real-data cache is not built (make real-data)"
    return TemplateSet(synthetic_templates(), "synthetic", note)
