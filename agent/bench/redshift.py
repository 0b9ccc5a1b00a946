"""The class-and-redshift fit (agent.redshift_fit) on the real LAMOST and SDSS spectra the
project ships, against the surveys' own answers (CLASS, SUBCLASS, Z, Z_ERR of the FITS headers).

    python -m agent.bench.redshift            # needs the real-data cache (make real-data)

Per spectrum: the survey's class, subclass, z (and c z for stars) with its error; ours: class
and its chi2 margin over the next class, z or velocity with its error, the template, MARZ's
quality; the difference in units of the two errors together. Controls that must fail: the
same spectra fitted with the star templates left out (a star cannot come out as a STAR), and
the LAMOST G7 star shifted to z = 0.3 (no STAR at a z no star has; where the galaxy templates put
it is printed: they are not the star).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.redshift import C_KMS, Template
from agent.redshift_fit import ClassFit, fit_class_and_redshift
from agent.redshift_templates import default_template_set
from agent.spectra import Spectrum, load_spectra

SHIPPED = ("lamost-001", "lamost-013", "sdss-ngc3073", "sdss-ngc3522")


@dataclass(frozen=True)
class Row:
    name: str
    survey_class: str
    survey_z: float
    survey_z_err: float
    fit: ClassFit
    seconds: float

    def line(self) -> str:
        best = self.fit.best
        if best is None:
            return f"{self.name:<22} {self.survey_class:<16} no fit ({self.fit.note})"
        ours = (
            f"v = {best.velocity_kms:8.1f} +- {best.z_err * C_KMS:4.1f} km/s"
            if best.spectype == "STAR"
            else f"z = {best.z:.5f} +- {best.z_err:.5f}"
        )
        theirs = (
            f"v = {self.survey_z * C_KMS:8.1f} +- {self.survey_z_err * C_KMS:4.1f} km/s"
            if self.survey_class.startswith("STAR")
            else f"z = {self.survey_z:.5f} +- {self.survey_z_err:.5f}"
        )
        error = math.hypot(best.z_err, self.survey_z_err)
        sigmas = abs(best.z - self.survey_z) / error if error > 0 else math.inf
        margin = self.fit.class_delta_chi2
        return (
            f"{self.name:<14} survey {self.survey_class:<16} {theirs:<30} | ours "
            f"{best.spectype:<6} (dchi2 {margin:9.0f}) {ours:<30} Q{best.quality} "
            f"[{best.template}] |dz| = {sigmas:.1f} sigma, dv = {(best.z - self.survey_z) * C_KMS:+.1f} "
            f"km/s, {self.seconds:.2f} s"
        )


def _fit(spectrum: Spectrum, templates: Sequence[Template]) -> tuple[ClassFit, float]:
    started = time.perf_counter()
    fit = fit_class_and_redshift(
        spectrum.wavelength,
        spectrum.flux,
        ivar=spectrum.ivar,
        mask=spectrum.mask,
        templates=templates,
    )
    return fit, time.perf_counter() - started


def shipped_spectra(lamost_dir: Path | None = None) -> list[tuple[str, Spectrum]]:
    """The corpus's LAMOST and SDSS spectra (their files as the project reads them); LAMOST
    from ``lamost_dir`` instead when given."""
    from agent import real_corpus

    by_id = {entry.id: entry for entry in real_corpus.load_manifest()}
    found = []
    for key in SHIPPED:
        entry = by_id[key]
        if lamost_dir is not None and entry.source == "shared-lamost":
            spectrum = load_spectra(lamost_dir / Path(entry.member).name)[0]
        else:
            spectrum = real_corpus.load_entry(entry)
        found.append((key, spectrum))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lamost-dir", type=Path, default=None, help="the LAMOST files' folder")
    args = parser.parse_args(argv)
    template_set = default_template_set()
    if template_set.source != "corpus":
        print(f"skipped: {template_set.note}")
        return 1
    print(f"templates: {template_set.note}")
    spectra = shipped_spectra(args.lamost_dir)
    print("\nThe fit against the surveys' own answers (FITS headers):")
    rows = []
    for name, spectrum in spectra:
        fit, seconds = _fit(spectrum, template_set.templates)
        meta = spectrum.meta
        survey_class = f"{meta.get('CLASS', '?')} {meta.get('SUBCLASS', '')}".strip()
        rows.append(
            Row(name, survey_class, spectrum.redshift, float(meta.get("Z_ERR", 0.0)), fit, seconds)
        )
        print(rows[-1].line())
    print("\nControl 1, star templates left out (a STAR answer is impossible):")
    no_stars = [t for t in template_set.templates if t.kind != "star"]
    for name, spectrum in spectra:
        fit, _ = _fit(spectrum, no_stars)
        best = fit.best
        print(
            f"{name:<14} {fit.spectype or '-':<6} class dchi2 {fit.class_delta_chi2:9.0f} "
            f"best chi2 {best.chi2 if best else math.nan:10.0f} (with stars: "
            f"{next(r.fit for r in rows if r.name == name).best_by_class.get('STAR', math.nan):10.0f})"
        )
    print("\nControl 2, the LAMOST G7 star moved to z = 0.3 (no star is at z = 0.3):")
    star = spectra[0][1]
    moved = Spectrum(
        wavelength=star.wavelength * 1.3,
        flux=star.flux,
        ivar=star.ivar,
        mask=star.mask,
        survey=star.survey,
        object_id="moved",
    )
    fit, _ = _fit(moved, template_set.templates)
    best = fit.best
    if best is not None:
        print(
            f"moved G7 star: {fit.spectype} z = {best.z:.5f} +- {best.z_err:.5f} "
            f"Q{best.quality} [{best.template}]; best STAR chi2 "
            f"{fit.best_by_class.get('STAR', math.nan):.0f} against {best.chi2:.0f}"
        )
    mean = float(np.mean([r.seconds for r in rows]))
    print(f"\nmean fit time {mean:.2f} s per spectrum ({len(template_set.templates)} templates)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
