"""Spectral embedding for "find more like this": every spectrum becomes a short vector whose
Euclidean distance says how alike two spectra look, whatever their survey, redshift, flux unit
or resolution.

    python -m agent.similarity fit      # fit the PCA basis on the real library's development part

What a spectrum goes through (``normalised``), and why:

1. Rest frame: the wavelengths divided by 1 + z (the vetted redshift when there is one), so a
   galaxy at z = 0.1 and a star compare line by line.
2. A common grid: GRID_PIXELS pixels uniform in log-wavelength over REST_RANGE (rest vacuum
   Angstrom). Log-wavelength makes a line's width a fixed number of pixels at any wavelength.
   3800-7000 A is what the optical surveys (SDSS, LAMOST, DESI) and the real libraries (MILES,
   STELIB, Pickles) all cover for nearby objects: the Balmer series from H-epsilon to H-alpha,
   Ca II H&K, the G band, Mg b, Na D, TiO bands.
3. Resolution matched: each spectrum is smoothed with a Gaussian to TARGET_FWHM_KMS (R ~ 500),
   the coarsest resolution in the corpus (Pickles); finer spectra (SDSS, LAMOST R ~ 1800-2000,
   MILES R ~ 2000) are broadened to it, so the same star seen by two instruments has the same
   line profiles. A spectrum already coarser than the target is left as it is.
4. Continuum normalised: divided by a running median over CONTINUUM_PIXELS pixels
   (~20 000 km/s, ~ 330 A at 5000 A) minus one. Flux calibration, reddening and the flux unit
   drop out; the lines and bands stay. Values are clipped to CLIP so that one saturated
   emission line does not outweigh the rest of the spectrum.
5. Projected on a PCA basis (BASIS_SIZE components) fitted on the real library's development
   part (``fit``): most of the spectral variance of observed stars and galaxies in 32 numbers,
   with pixel noise left in the discarded components. Pixels a spectrum does not cover count
   as the library mean (zero after centring), so partial coverage shrinks the vector rather
   than inventing structure. When no basis has been fitted (no corpus cache) a fixed cosine
   basis of the same size is used (``cosine_basis``): data-independent, a low-pass summary of
   the normalised spectrum; the basis id is stored with each embedding, so embeddings of two
   bases are never compared.

Plain Python (numpy, scipy): no Django import.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.ndimage import gaussian_filter1d, median_filter

from agent.spectra import Spectrum

REST_RANGE = (3800.0, 7000.0)
GRID_PIXELS = 768
OVERSAMPLE = 4
TARGET_FWHM_KMS = 600.0  # R = c / 600 km/s ~ 500
CONTINUUM_PIXELS = 61
CLIP = (-1.0, 4.0)
BASIS_SIZE = 32
MIN_COVERAGE = 0.3  # a spectrum must cover this fraction of the grid to be embedded
C_KMS = 299_792.458
SIGMA_PER_FWHM = 1.0 / (2.0 * np.sqrt(2.0 * np.log(2.0)))
BASIS_FILE = "similarity_basis.npz"


class EmbeddingError(ValueError):
    """A spectrum that cannot be embedded, with the reason."""


def log_grid(pixels: int = GRID_PIXELS) -> np.ndarray:
    return np.exp(np.linspace(np.log(REST_RANGE[0]), np.log(REST_RANGE[1]), pixels))


def pixel_kms(pixels: int = GRID_PIXELS) -> float:
    """The grid's step as a velocity."""
    return float(np.log(REST_RANGE[1] / REST_RANGE[0]) / (pixels - 1) * C_KMS)


@dataclass(frozen=True)
class Normalised:
    """A spectrum on the common grid: flux / continuum - 1, and where it has data."""

    values: np.ndarray  # float64, GRID_PIXELS; 0 where not covered
    covered: np.ndarray  # bool, GRID_PIXELS
    redshift: float

    @property
    def coverage(self) -> float:
        return float(self.covered.mean())


def _own_fwhm_kms(spectrum: Spectrum, redshift: float) -> float:
    """The spectrum's instrumental FWHM as a velocity near the grid's middle; its sampling sets
    a floor (a line cannot be narrower than about two pixels)."""
    observed = 5400.0 * (1.0 + redshift)
    wave = spectrum.wavelength
    at = int(np.clip(np.searchsorted(wave, observed), 1, wave.size - 1))
    sampling = float((wave[at] - wave[at - 1]) / wave[at] * C_KMS) * 2.0
    instrumental = 0.0
    if spectrum.resolution is not None:
        instrumental = spectrum.resolution.velocity_fwhm_at(observed)
    return max(instrumental, sampling)


def normalised(spectrum: Spectrum, *, redshift: float | None = None) -> Normalised:
    """``spectrum`` in its rest frame on the common grid, at the common resolution, divided by
    its continuum (steps 1-4 of the module docstring); raises EmbeddingError naming the reason
    when it covers less than MIN_COVERAGE of the grid."""
    z = float(spectrum.redshift if redshift is None else redshift)
    if not np.isfinite(z) or z <= -0.99:
        raise EmbeddingError(f"redshift {z} cannot give a rest frame")
    good = spectrum.good & np.isfinite(spectrum.flux)
    if good.sum() < 10:
        raise EmbeddingError(f"{int(good.sum())} good pixels; at least 10 are needed")
    rest = spectrum.wavelength / (1.0 + z)
    fine = log_grid(GRID_PIXELS * OVERSAMPLE)
    inside = (fine >= rest[good][0]) & (fine <= rest[good][-1])
    # a fine pixel is covered when the pixels either side of it are good (masked runs stay out)
    goodness = np.interp(fine, rest, good.astype(np.float64), left=0.0, right=0.0)
    covered_fine = inside & (goodness > 0.5)
    flux = np.interp(fine, rest[good], spectrum.flux[good])
    # resolution matching in velocity (the grid is uniform in log-wavelength)
    own = _own_fwhm_kms(spectrum, z)
    extra = np.sqrt(max(TARGET_FWHM_KMS**2 - own**2, 0.0))
    if extra > 0:
        sigma_px = extra * SIGMA_PER_FWHM / pixel_kms(GRID_PIXELS * OVERSAMPLE)
        flux = gaussian_filter1d(flux, sigma_px, mode="nearest")
    coarse = flux.reshape(GRID_PIXELS, OVERSAMPLE).mean(axis=1)
    covered = covered_fine.reshape(GRID_PIXELS, OVERSAMPLE).mean(axis=1) > 0.5
    if covered.mean() < MIN_COVERAGE:
        raise EmbeddingError(
            f"covers {covered.mean():.0%} of the rest-frame grid {REST_RANGE[0]:.0f}-"
            f"{REST_RANGE[1]:.0f} A at z = {z:.4f}; at least {MIN_COVERAGE:.0%} is needed"
        )
    filled = np.where(covered, coarse, np.nan)
    index = np.arange(GRID_PIXELS)
    filled = np.interp(index, index[covered], filled[covered])
    continuum = median_filter(filled, size=CONTINUUM_PIXELS, mode="nearest")
    scale = float(np.median(np.abs(filled[covered]))) or 1.0
    continuum = np.where(continuum > 1e-3 * scale, continuum, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = filled / continuum - 1.0
    ok = covered & np.isfinite(values)
    values = np.where(ok, np.clip(values, *CLIP), 0.0)
    return Normalised(values=values, covered=ok, redshift=z)


# --- the basis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Basis:
    """Mean and components (BASIS_SIZE x GRID_PIXELS) the normalised spectra are projected on."""

    mean: np.ndarray
    components: np.ndarray
    name: str  # "pca:<n> development spectra" or "cosine"
    explained: np.ndarray  # variance fraction per component (zeros for the cosine basis)

    @property
    def id(self) -> str:
        """Names the basis exactly: embeddings are compared only under the same id."""
        digest = hashlib.sha256()
        digest.update(np.ascontiguousarray(self.mean, dtype=np.float32).tobytes())
        digest.update(np.ascontiguousarray(self.components, dtype=np.float32).tobytes())
        return f"{self.name.split(':')[0]}-{digest.hexdigest()[:16]}"

    @property
    def size(self) -> int:
        return int(self.components.shape[0])

    def project(self, spectrum: Normalised) -> np.ndarray:
        centred = np.where(spectrum.covered, spectrum.values - self.mean, 0.0)
        return (self.components @ centred).astype(np.float32)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            np.savez(
                handle,
                mean=self.mean,
                components=self.components,
                explained=self.explained,
                name=np.array(self.name),
            )

    @classmethod
    def load(cls, path: Path) -> Basis:
        with np.load(path, allow_pickle=False) as data:
            basis = cls(
                mean=data["mean"],
                components=data["components"],
                name=str(data["name"]),
                explained=data["explained"],
            )
        if basis.components.shape[1] != GRID_PIXELS or basis.mean.shape != (GRID_PIXELS,):
            raise EmbeddingError(f"{path}: a basis for another grid ({basis.components.shape})")
        return basis


def cosine_basis(size: int = BASIS_SIZE) -> Basis:
    """The DCT-II rows 1..size over the grid, orthonormal: the fallback without a fitted basis."""
    n = np.arange(GRID_PIXELS)
    rows = [np.cos(np.pi * (n + 0.5) * k / GRID_PIXELS) for k in range(1, size + 1)]
    components = np.array(rows) * np.sqrt(2.0 / GRID_PIXELS)
    return Basis(np.zeros(GRID_PIXELS), components, "cosine", np.zeros(size))


def fit_basis(spectra: Sequence[Normalised], *, size: int = BASIS_SIZE, name: str = "") -> Basis:
    """PCA of ``spectra`` (missing pixels filled with the per-pixel mean of those covering it)."""
    if len(spectra) <= size:
        raise EmbeddingError(f"{len(spectra)} spectra; more than {size} are needed for the basis")
    values = np.array([row.values for row in spectra])
    covered = np.array([row.covered for row in spectra])
    counts = np.maximum(covered.sum(axis=0), 1)
    mean = (values * covered).sum(axis=0) / counts
    centred = np.where(covered, values - mean, 0.0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    variance = singular**2
    explained = variance[:size] / variance.sum()
    return Basis(mean, vt[:size], name or f"pca:{len(spectra)} spectra", explained)


def basis_path() -> Path:
    root = os.environ.get("SPECVET_DATA_CACHE") or str(Path.home() / ".cache" / "specvet")
    return Path(root) / BASIS_FILE


def load_basis(path: Path | None = None) -> Basis:
    """The fitted basis when ``fit`` wrote one, else the cosine basis."""
    path = basis_path() if path is None else path
    return Basis.load(path) if path.exists() else cosine_basis()


def embed(spectrum: Spectrum, basis: Basis, *, redshift: float | None = None) -> np.ndarray:
    return basis.project(normalised(spectrum, redshift=redshift))


# --- the real library ------------------------------------------------------------------------


@dataclass(frozen=True)
class LibraryEmbedding:
    ids: list[str]
    splits: list[str]
    classes: list[str]  # the spectral letter (O, B, A, ... M, C, S, D) or GALAXY
    vectors: np.ndarray  # float32, n x size


def _letter(spectral_class: str, subclass: str) -> str:
    if spectral_class != "STAR":
        return spectral_class
    text = subclass.strip().lstrip("sd").upper()
    return text[:1] or "?"


def library_normalised(split: str | None = None) -> list[tuple[object, Normalised]]:
    """The corpus's spectra (``split``: development, validation or both) normalised; those that
    cannot be (too little rest-frame coverage) are left out."""
    from agent import real_corpus

    rows: list[tuple[object, Normalised]] = []
    for entry, spectrum in real_corpus.load_corpus(split):
        try:
            rows.append((entry, normalised(spectrum)))
        except EmbeddingError:
            continue
    return rows


def library_embeddings(basis: Basis, rows: Iterable[tuple[object, Normalised]]) -> LibraryEmbedding:
    ids, splits, classes, vectors = [], [], [], []
    for entry, row in rows:
        ids.append(str(getattr(entry, "id", "")))
        splits.append(str(getattr(entry, "split", "")))
        classes.append(_letter(str(entry.spectral_class), str(entry.subclass)))  # type: ignore[attr-defined]
        vectors.append(basis.project(row))
    return LibraryEmbedding(ids, splits, classes, np.array(vectors, dtype=np.float32))


def fit(path: Path | None = None) -> Basis:
    """Fit the basis on the development part of the real corpus and write it to the cache."""
    rows = library_normalised("development")
    basis = fit_basis([row for _, row in rows], name=f"pca:{len(rows)} development spectra")
    basis.save(basis_path() if path is None else path)
    return basis


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.similarity")
    parser.add_argument("command", choices=["fit"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    basis = fit(args.out)
    print(
        f"basis {basis.id} ({basis.name}): {basis.size} components explain "
        f"{basis.explained.sum():.1%} of the variance; written to {args.out or basis_path()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
