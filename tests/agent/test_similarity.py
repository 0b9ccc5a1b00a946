"""The spectral embedding behind "find more like this" (agent.similarity) and its index
(agent.vector_index): what must come out alike does, what must not does not, and the FAISS
index agrees with the exact numpy search it is checked against."""

from __future__ import annotations

import numpy as np
import pytest

from agent import similarity, vector_index
from agent.resolution import Resolution
from agent.spectra import Spectrum

LINES = {"H-alpha": 6564.61, "H-beta": 4862.68, "[O III]": 5008.24}


def line_spectrum(
    center: float,
    *,
    z: float = 0.0,
    fwhm_kms: float = 150.0,
    slope: float = 0.0,
    scale: float = 1.0,
    seed: int = 0,
) -> Spectrum:
    """A continuum (with a slope, in any flux unit) and one emission line of FWHM 100 km/s
    seen through an instrument of ``fwhm_kms``, observed at z."""
    rng = np.random.default_rng(seed)
    wave = np.logspace(np.log10(3600.0), np.log10(9200.0), 4000)
    rest = wave / (1.0 + z)
    sigma = center * np.hypot(100.0, fwhm_kms) * similarity.SIGMA_PER_FWHM / similarity.C_KMS
    peak = 6.0 * 100.0 / np.hypot(100.0, fwhm_kms)  # the instrument keeps the line's flux
    flux = (1.0 + slope * (rest - 5000.0) / 5000.0) + peak * np.exp(
        -0.5 * ((rest - center) / sigma) ** 2
    )
    flux = scale * (flux + rng.normal(0.0, 0.01, wave.size))
    resolution = Resolution.constant_r(similarity.C_KMS / fwhm_kms, source="user")
    return Spectrum(wavelength=wave, flux=flux, redshift=z, survey="TEST", resolution=resolution)


def distance(a: Spectrum, b: Spectrum, basis: similarity.Basis) -> float:
    return float(np.linalg.norm(similarity.embed(a, basis) - similarity.embed(b, basis)))


@pytest.fixture(scope="module")
def basis() -> similarity.Basis:
    return similarity.cosine_basis()


def test_it_puts_the_same_object_at_another_redshift_unit_and_resolution_nearer_than_another_line(
    basis,
):
    reference = line_spectrum(LINES["H-alpha"])
    same = line_spectrum(LINES["H-alpha"], z=0.05, fwhm_kms=300.0, slope=0.3, scale=1e-17, seed=1)
    other = line_spectrum(LINES["H-beta"], seed=2)
    assert distance(reference, same, basis) < 0.25 * distance(reference, other, basis)


def test_it_uses_the_rest_frame_it_is_given(basis):
    """Embedded at the wrong redshift, the same spectrum no longer matches (the control)."""
    reference = line_spectrum(LINES["[O III]"])
    shifted = line_spectrum(LINES["[O III]"], z=0.1)
    right = distance(reference, shifted, basis)
    wrong = float(
        np.linalg.norm(
            similarity.embed(reference, basis) - similarity.embed(shifted, basis, redshift=0.0)
        )
    )
    assert right < 0.25 * wrong


def test_it_matches_resolution_by_smoothing_to_the_common_width():
    sharp = similarity.normalised(line_spectrum(LINES["H-alpha"], fwhm_kms=60.0))
    broad = similarity.normalised(line_spectrum(LINES["H-alpha"], fwhm_kms=450.0))
    # after matching, both peaks sit at the same height (within noise); as observed, the
    # sharper one is (100^2 + 450^2)^0.5 / (100^2 + 60^2)^0.5 ~ 4 times higher
    assert sharp.values.max() == pytest.approx(broad.values.max(), rel=0.1)


def test_it_refuses_a_spectrum_that_barely_covers_the_grid_and_says_how_much():
    spectrum = line_spectrum(LINES["H-alpha"], z=0.6)  # 3600-9200 observed is 2250-5750 rest
    spectrum = Spectrum(
        wavelength=spectrum.wavelength[3500:],
        flux=spectrum.flux[3500:],
        redshift=0.6,
        survey="TEST",
    )
    with pytest.raises(similarity.EmbeddingError, match=r"covers \d+% of the rest-frame grid"):
        similarity.normalised(spectrum)


def test_it_fits_a_pca_basis_that_explains_the_variance_of_what_it_was_fitted_on():
    rng = np.random.default_rng(3)
    rows = [
        similarity.normalised(line_spectrum(center, seed=int(rng.integers(1 << 30))))
        for center in rng.uniform(4000.0, 6900.0, 60)
    ]
    basis = similarity.fit_basis(rows, size=8)
    assert basis.components.shape == (8, similarity.GRID_PIXELS)
    assert np.allclose(basis.components @ basis.components.T, np.eye(8), atol=1e-8)
    assert np.all(np.diff(basis.explained) <= 1e-12) and 0 < basis.explained.sum() <= 1
    assert basis.id.startswith("pca-") and basis.id != similarity.cosine_basis().id


def test_it_saves_and_loads_a_basis_under_the_same_id(tmp_path):
    basis = similarity.cosine_basis(size=4)
    path = tmp_path / "basis.npz"
    basis.save(path)
    assert similarity.Basis.load(path).id == basis.id
    assert similarity.load_basis(tmp_path / "missing.npz").id == similarity.cosine_basis().id


# --- the index -------------------------------------------------------------------------------


def clustered(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (50, dim))
    return (centres[rng.integers(0, 50, n)] + rng.normal(0.0, 0.5, (n, dim))).astype(np.float32)


def test_the_exact_search_is_a_sort_of_every_distance():
    vectors = clustered(3000)
    ids = np.arange(3000) * 7 + 5
    queries = vectors[:5] + 0.01
    found, dist = vector_index.exact_search(vectors, ids, queries, 10, chunk=700)
    for row, query in enumerate(queries):
        full = ((vectors - query) ** 2).sum(axis=1)
        assert found[row].tolist() == ids[np.argsort(full, kind="stable")[:10]].tolist()
        assert np.allclose(dist[row], np.sort(full)[:10], rtol=1e-4, atol=1e-4)


def test_the_ivf_index_finds_what_the_exact_search_finds():
    vectors = clustered(vector_index.IVF_MIN_VECTORS + 2000)
    ids = np.arange(len(vectors), dtype=np.int64) + 100
    params = vector_index.IndexParams.for_size(len(vectors))
    assert params.kind == "ivf" and params.nprobe < params.nlist
    index = vector_index.build_index(vectors, ids, params)
    queries = vectors[:100] + 0.05
    truth, _ = vector_index.exact_search(vectors, ids, queries, 10)
    found = np.array([vector_index.search(index, query, 10)[0] for query in queries])
    assert vector_index.recall_at(found, truth) >= 0.95
    # the control: a search that ignores the data agrees with nothing
    shuffled = np.random.default_rng(1).permutation(ids)[: 100 * 10].reshape(100, 10)
    assert vector_index.recall_at(shuffled, truth) < 0.05


@pytest.mark.parametrize("size", [50, vector_index.IVF_MIN_VECTORS + 10])
def test_it_replaces_and_removes_vectors_in_place(size):
    vectors = clustered(size)
    ids = np.arange(size, dtype=np.int64) + 1
    index = vector_index.build_index(vectors, ids, vector_index.IndexParams.for_size(size))
    query = vectors[3]
    assert vector_index.search(index, query, 1)[0].tolist() == [4]
    vector_index.replace(index, vectors[3:4] + 100.0, ids[3:4])
    assert index.ntotal == size
    assert 4 not in vector_index.search(index, query, 5)[0].tolist()
    assert vector_index.search(index, vectors[3] + 100.0, 1)[0].tolist() == [4]
    assert vector_index.remove(index, np.array([4, 5], np.int64)) == 2
    assert index.ntotal == size - 2
    assert not {4, 5} & set(vector_index.search(index, vectors[4], 20)[0].tolist())
