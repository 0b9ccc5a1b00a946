"""Tests for the SpecVI-mini synthetic benchmark (agent/synthetic/).

Physics checks measure the arrays the way an inspector would (medians in windows, equivalent
widths, half-maximum widths); they never read the generator's drawn parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from agent.inspection_tasks import build_prompt, get_task
from agent.spectra import Spectrum, load_spectra
from agent.synthetic import (
    HARD_NEGATIVE_TRIES,
    N_PIXELS,
    RESOLUTION_RANGE,
    SyntheticSample,
    baseline_score,
    baseline_threshold,
    bench_code,
    default_split_sizes,
    generate_sample,
    generate_split,
    load_manifest,
    subtypes,
    task_codes,
    write_benchmark,
)

C_KMS = 299_792.458
SMALL_SIZES = {"train": {"n_pos": 2, "n_neg": 2}, "test": {"n_pos": 1, "n_neg": 3}}


# --- measurement helpers (what an inspector would compute from the arrays) -----------------------


def _sample(task: str, label: bool, subtype: str, seed: int, snr: float = 40.0) -> Spectrum:
    rng = np.random.default_rng(seed)
    return generate_sample(task, label, rng=rng, subtype=subtype, snr=snr).spectrum


def _spectra(task: str, label: bool, subtype: str, count: int = 12, snr: float = 40.0) -> list:
    return [_sample(task, label, subtype, 1000 + seed, snr) for seed in range(count)]


def _median_flux(spectrum: Spectrum, low: float, high: float) -> float:
    inside = spectrum.good & (spectrum.wavelength >= low) & (spectrum.wavelength <= high)
    return float(np.median(spectrum.flux[inside]))


def _normalised(
    spectrum: Spectrum, low: float, high: float, left: tuple, right: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """Flux / linear continuum through two side windows, inside [low, high]."""
    x1, x2 = np.mean(left), np.mean(right)
    y1, y2 = _median_flux(spectrum, *left), _median_flux(spectrum, *right)
    inside = spectrum.good & (spectrum.wavelength >= low) & (spectrum.wavelength <= high)
    wave = spectrum.wavelength[inside]
    return wave, spectrum.flux[inside] / (y1 + (y2 - y1) * (wave - x1) / (x2 - x1))


def _equivalent_width(spectrum: Spectrum, low: float, high: float, left: tuple, right: tuple):
    """Emission counts positive (A)."""
    wave, ratio = _normalised(spectrum, low, high, left, right)
    return float(np.sum((ratio - 1.0) * np.gradient(wave)))


def _fwhm_kms(
    spectrum: Spectrum, centre: float, half: float, left: tuple, right: tuple, *, emission: bool
) -> float:
    """Full width at half maximum of the strongest feature near ``centre`` (interpolated)."""
    wave, ratio = _normalised(spectrum, centre - half, centre + half, left, right)
    height = ratio - 1.0 if emission else 1.0 - ratio
    peak = int(np.argmax(height))
    level = height[peak] / 2.0
    low = peak
    while low > 0 and height[low] > level:
        low -= 1
    high = peak
    while high < height.size - 1 and height[high] > level:
        high += 1
    left_edge = np.interp(level, [height[low], height[low + 1]], [wave[low], wave[low + 1]])
    right_edge = np.interp(level, [height[high], height[high - 1]], [wave[high], wave[high - 1]])
    return float((right_edge - left_edge) / centre * C_KMS)


def _head_drop(spectrum: Spectrum, head: float, *, redward: bool) -> float:
    """Fractional flux drop across a band head, on the side the band absorbs."""
    blue, red = (
        _median_flux(spectrum, head - 25, head - 5),
        _median_flux(spectrum, head + 5, head + 25),
    )
    return 1.0 - (red / blue if redward else blue / red)


def _pixel_snr(spectrum: Spectrum, low: float, high: float) -> float:
    inside = spectrum.good & (spectrum.wavelength >= low) & (spectrum.wavelength <= high)
    return float(np.median(spectrum.flux[inside] * np.sqrt(spectrum.ivar[inside])))


def _median_of(measure: Callable[[Spectrum], float], spectra: list[Spectrum]) -> float:
    return float(np.median([measure(spectrum) for spectrum in spectra]))


# --- grid, noise and artifacts -------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_samples() -> list[SyntheticSample]:
    rng = np.random.default_rng(7)
    return [
        generate_sample(task, label, rng=rng, index=index)
        for index, (task, label) in enumerate(
            (task, label) for task in task_codes() for label in (True, False) for _ in range(3)
        )
    ]


def test_it_uses_the_lamost_log_linear_grid(mixed_samples: list[SyntheticSample]) -> None:
    wave = mixed_samples[0].spectrum.wavelength
    assert wave.shape == (N_PIXELS,) == (3908,)
    assert wave[0] == pytest.approx(10**3.5682, abs=1e-6)  # 3699.98 A, LAMOST COEFF0
    assert wave[-1] == pytest.approx(10 ** (3.5682 + 3907e-4), abs=1e-6)  # 9097.0 A
    assert np.allclose(np.diff(np.log10(wave)), 1e-4)


def test_it_gives_every_array_the_grid_length(mixed_samples: list[SyntheticSample]) -> None:
    for sample in mixed_samples:
        spectrum = sample.spectrum
        assert spectrum.flux.shape == spectrum.ivar.shape == spectrum.mask.shape == (N_PIXELS,)


def test_it_has_finite_positive_ivar_exactly_where_unmasked(
    mixed_samples: list[SyntheticSample],
) -> None:
    for sample in mixed_samples:
        spectrum = sample.spectrum
        good = ~spectrum.mask
        assert np.all(np.isfinite(spectrum.flux)) and np.all(np.isfinite(spectrum.ivar))
        assert np.all(spectrum.ivar[good] > 0)
        assert np.all(spectrum.ivar[spectrum.mask] == 0)
        assert np.all(spectrum.flux[spectrum.mask] == 0)


def test_it_masks_bad_pixels_in_every_spectrum(mixed_samples: list[SyntheticSample]) -> None:
    masked = [int(sample.spectrum.mask.sum()) for sample in mixed_samples]
    assert min(masked) >= 1
    assert max(masked) < N_PIXELS // 2


def test_it_labels_every_spectrum_synthetic(mixed_samples: list[SyntheticSample]) -> None:
    for sample in mixed_samples:
        spectrum = sample.spectrum
        assert spectrum.survey == "SpecVI-mini"
        assert spectrum.meta["synthetic"] is True
        assert spectrum.redshift == 0.0
        assert spectrum.object_id == f"SVM-{sample.task}-train-{sample.index:04d}"


def test_it_keeps_the_drawn_subtype_out_of_what_policies_see(
    mixed_samples: list[SyntheticSample],
) -> None:
    for sample in mixed_samples:
        visible = json.dumps(sample.spectrum.meta) + sample.spectrum.object_id
        assert sample.subtype not in visible
        assert "params" not in visible


def test_it_draws_survey_like_signal_to_noise(mixed_samples: list[SyntheticSample]) -> None:
    snrs = [sample.spectrum.snr for sample in mixed_samples]
    assert min(snrs) >= 3.0 and max(snrs) <= 100.0
    assert max(snrs) / min(snrs) > 4.0


@pytest.mark.parametrize("target", [8.0, 30.0, 70.0])
def test_it_reaches_a_requested_signal_to_noise(target: float) -> None:
    measured = [_sample("MG", False, "fgk_dwarf", seed, snr=target).snr for seed in range(6)]
    assert np.median(measured) == pytest.approx(target, rel=0.15)


def test_it_leaves_the_blue_end_with_the_signal_to_noise_of_real_lamost_spectra() -> None:
    # the two real LAMOST files have S/N(3750-3900 A) / S/N(6000-7000 A) = 0.020 (G7) and 0.076
    # (A2), and S/N(4500-5000 A) / S/N(6000-7000 A) = 0.40 and 0.59
    spectra = _spectra("MG", False, "fgk_dwarf", count=10)

    def ratio(low: float, high: float) -> Callable[[Spectrum], float]:
        return lambda s: _pixel_snr(s, low, high) / _pixel_snr(s, 6000, 7000)

    assert 0.02 <= _median_of(ratio(3750, 3900), spectra) <= 0.1
    assert 0.3 <= _median_of(ratio(4500, 5000), spectra) <= 0.9


def test_it_adds_oh_sky_lines_redward_of_6800() -> None:
    spectra = _spectra("WD", True, "dc_wd", count=6)

    def dips(spectrum: Spectrum, low: float, high: float) -> float:
        """Share of pixels whose ivar is well below the running median (sky-line variance)."""
        inside = (spectrum.wavelength >= low) & (spectrum.wavelength <= high) & spectrum.good
        ivar = spectrum.ivar[inside]
        baseline = np.median(np.lib.stride_tricks.sliding_window_view(ivar, 25), axis=1)
        return float(np.mean(ivar[12:-12] < 0.7 * baseline))

    assert (
        _median_of(lambda s: dips(s, 8280, 9000), spectra)
        > 3 * _median_of(lambda s: dips(s, 6400, 6800), spectra) + 0.01
    )


def test_it_is_noisier_at_the_dichroic() -> None:
    spectra = _spectra("MG", False, "fgk_dwarf", count=8)

    def dip(spectrum: Spectrum) -> float:
        sides = (_pixel_snr(spectrum, 5450, 5550) + _pixel_snr(spectrum, 6050, 6150)) / 2
        return _pixel_snr(spectrum, 5770, 5830) / sides

    assert _median_of(dip, spectra) < 0.85


def test_it_adds_sky_line_variance_at_5578() -> None:
    spectra = _spectra("WD", True, "dc_wd", count=8)

    def ivar_ratio(spectrum: Spectrum) -> float:
        line = spectrum.ivar[np.argmin(np.abs(spectrum.wavelength - 5578.9))]
        side = np.median(spectrum.ivar[(spectrum.wavelength > 5540) & (spectrum.wavelength < 5560)])
        return float(line / side)

    assert _median_of(ivar_ratio, spectra) < 0.8


def test_it_imprints_the_telluric_a_band() -> None:
    spectra = _spectra("WD", True, "dc_wd", count=8)

    def band(spectrum: Spectrum) -> float:
        sides = (_median_flux(spectrum, 7550, 7580) + _median_flux(spectrum, 7660, 7690)) / 2
        return _median_flux(spectrum, 7597, 7615) / sides

    assert _median_of(band, spectra) < 0.95


def test_it_adds_cosmic_ray_spikes() -> None:
    spectra = _spectra("MG", False, "fgk_dwarf", count=12)

    def spikes(spectrum: Spectrum) -> int:
        good = spectrum.good
        flux = spectrum.flux[good]
        baseline = np.median(np.lib.stride_tricks.sliding_window_view(flux, 9), axis=1)
        excess = (flux[4:-4] - baseline) * np.sqrt(spectrum.ivar[good][4:-4])
        return int(np.sum(excess > 10.0))

    assert sum(spikes(spectrum) > 0 for spectrum in spectra) >= 3


# --- physics, measured from the arrays -----------------------------------------------------------

_HALPHA = 6564.6
_HALPHA_SIDES = ((6440.0, 6480.0), (6700.0, 6740.0))


def _halpha_fwhm(spectrum: Spectrum) -> float:
    return _fwhm_kms(spectrum, _HALPHA, 90.0, *_HALPHA_SIDES, emission=True)


def test_it_leaves_dme_balmer_emission_at_the_instrumental_width() -> None:
    spectra = _spectra("CV", False, "dme", snr=60.0)
    # intrinsic 20-90 km/s in quadrature with each spectrum's own 120-250 km/s line-spread
    # function, then pixelised (69 km/s pixels)
    ratios = [
        _halpha_fwhm(spectrum) / spectrum.resolution.velocity_fwhm_at(_HALPHA)
        for spectrum in spectra
    ]
    assert 0.8 < np.median(ratios) < 1.6


def test_it_broadens_unresolved_lines_at_a_lower_resolving_power() -> None:
    def width(power: float, seed: int) -> float:
        rng = np.random.default_rng(seed)
        drawn = generate_sample(
            "CV", False, rng=rng, subtype="dme", snr=80.0, resolving_power=power
        )
        return _halpha_fwhm(drawn.spectrum)

    low = np.median([width(1250.0, 500 + seed) for seed in range(6)])
    high = np.median([width(2450.0, 500 + seed) for seed in range(6)])
    assert low > 1.3 * high


def test_it_makes_cv_disc_lines_much_broader_than_dme_lines() -> None:
    cv = _median_of(_halpha_fwhm, _spectra("CV", True, "cv_dwarf_nova"))
    dme = _median_of(_halpha_fwhm, _spectra("CV", False, "dme"))
    assert cv > 1000.0
    assert cv > 4.0 * dme


def test_it_gives_quiescent_cvs_strong_balmer_emission() -> None:
    def halpha_ew(spectrum: Spectrum) -> float:
        return _equivalent_width(spectrum, 6500, 6630, *_HALPHA_SIDES)

    widths = [halpha_ew(spectrum) for spectrum in _spectra("CV", True, "cv_dwarf_nova")]
    assert min(widths) > 5.0


def test_it_makes_carbon_stars_deeper_at_c2_heads_than_m_giants() -> None:
    def swan(spectrum: Spectrum) -> float:
        return np.mean([_head_drop(spectrum, head, redward=False) for head in (5166.4, 5637.6)])

    carbon = _median_of(swan, _spectra("CS", True, "carbon_n"))
    giants = _median_of(swan, _spectra("CS", False, "m_giant"))
    assert carbon > 0.2
    assert carbon > giants + 0.25


def test_it_shades_tio_to_the_red_in_m_giants() -> None:
    def tio(spectrum: Spectrum) -> float:
        return _head_drop(spectrum, 7055.9, redward=True)

    assert _median_of(tio, _spectra("MG", True, "m_giant")) > 0.2
    assert _median_of(tio, _spectra("CS", True, "carbon_r")) < 0.1


def test_it_gives_s_stars_stronger_zro_than_m_giants() -> None:
    def zro(spectrum: Spectrum) -> float:
        return _head_drop(spectrum, 6475.8, redward=True)

    s_stars = _median_of(zro, _spectra("SS", True, "s_star"))
    giants = _median_of(zro, _spectra("SS", False, "m_giant"))
    assert s_stars > giants + 0.15


def test_it_gives_m_giants_weaker_cah_than_m_dwarfs() -> None:
    def cah2(spectrum: Spectrum) -> float:  # Reid et al. CaH2 index, vacuum windows
        return _median_flux(spectrum, 6816, 6848) / _median_flux(spectrum, 7040, 7050)

    giants = _median_of(cah2, _spectra("MG", True, "m_giant"))
    dwarfs = _median_of(cah2, _spectra("MG", False, "m_dwarf"))
    assert giants > dwarfs + 0.1


def test_it_gives_m_dwarfs_stronger_na_i_8190_than_m_giants() -> None:
    def sodium(spectrum: Spectrum) -> float:
        return -_equivalent_width(spectrum, 8175, 8205, (8140, 8170), (8210, 8240))

    dwarfs = _median_of(sodium, _spectra("MG", False, "m_dwarf"))
    giants = _median_of(sodium, _spectra("MG", True, "m_giant"))
    assert dwarfs > 2.0 * giants


def test_it_gives_m_giants_stronger_calcium_triplet_than_m_dwarfs() -> None:
    def calcium(spectrum: Spectrum) -> float:
        return -_equivalent_width(spectrum, 8530, 8560, (8510, 8525), (8565, 8580))

    giants = _median_of(calcium, _spectra("MG", True, "m_giant"))
    dwarfs = _median_of(calcium, _spectra("MG", False, "m_dwarf"))
    assert giants > 1.3 * dwarfs


def test_it_makes_da_balmer_lines_much_broader_than_a_star_lines() -> None:
    def hbeta(spectrum: Spectrum) -> float:
        sides = ((4650.0, 4700.0), (5060.0, 5120.0))
        return _fwhm_kms(spectrum, 4862.7, 200.0, *sides, emission=False)

    white_dwarfs = _median_of(hbeta, _spectra("WD", True, "da_wd"))
    a_stars = _median_of(hbeta, _spectra("WD", False, "a_star"))
    assert white_dwarfs > 2.0 * a_stars


def test_it_gives_o_stars_he_ii_that_b_stars_lack() -> None:
    def he_ii(spectrum: Spectrum) -> float:
        wave, ratio = _normalised(spectrum, 5408, 5418, (5370, 5395), (5430, 5450))
        return float(1.0 - np.mean(ratio))

    o_stars = _median_of(he_ii, _spectra("O", True, "o_star", snr=80.0))
    b_stars = _median_of(he_ii, _spectra("O", False, "b_star", snr=80.0))
    assert o_stars > b_stars + 0.02


def test_it_puts_quasar_lines_away_from_rest_balmer_wavelengths() -> None:
    quasars = _spectra("CV", False, "quasar")
    cvs = _spectra("CV", True, "cv_dwarf_nova")

    def halpha_ew(spectrum: Spectrum) -> float:
        return _equivalent_width(spectrum, 6530, 6600, (6480, 6520), (6610, 6650))

    assert _median_of(halpha_ew, quasars) < 0.2 * _median_of(halpha_ew, cvs)


# --- resolution -----------------------------------------------------------------------------------


def test_it_records_a_resolving_power_drawn_per_spectrum(
    mixed_samples: list[SyntheticSample],
) -> None:
    powers = []
    for sample in mixed_samples:
        resolution = sample.spectrum.resolution
        assert resolution is not None and resolution.source == "file"
        power = resolution.resolving_power_at(6000.0)
        assert power == pytest.approx(sample.params["resolving_power"])
        assert resolution.resolving_power_at(4000.0) == pytest.approx(power)  # constant R
        powers.append(power)
    assert RESOLUTION_RANGE[0] <= min(powers) and max(powers) <= RESOLUTION_RANGE[1]
    assert max(powers) / min(powers) > 1.4


def test_it_refuses_an_impossible_resolving_power() -> None:
    with pytest.raises(ValueError, match="resolving_power"):
        generate_sample("CV", True, rng=np.random.default_rng(0), resolving_power=-5.0)


# --- hard negatives ------------------------------------------------------------------------------


def _best_single_threshold_balanced_accuracy(task: str, samples: list[SyntheticSample]) -> float:
    scores = np.array([baseline_score(task, sample.spectrum) for sample in samples])
    labels = np.array([sample.label for sample in samples])
    best = 0.0
    for threshold in np.unique(scores):
        said_yes = scores >= threshold
        best = max(best, (np.mean(said_yes[labels]) + np.mean(~said_yes[~labels])) / 2)
    return best


@pytest.mark.parametrize("task", ["SS", "MG"])
def test_it_keeps_negatives_the_weak_classifier_calls_positive(task: str) -> None:
    hard = generate_split(task, "test", n_pos=10, n_neg=20, seed=8)
    plain = generate_split(task, "test", n_pos=10, n_neg=20, seed=8, hard_negatives=False)
    negatives = [sample for sample in hard if not sample.label]
    passed = [
        baseline_score(task, sample.spectrum) >= baseline_threshold(task) for sample in negatives
    ]
    assert np.mean(passed) >= 0.5
    assert [s.params["baseline_positive"] for s in negatives] == passed
    assert max(s.params["draws"] for s in negatives) <= HARD_NEGATIVE_TRIES
    hard_separation = _best_single_threshold_balanced_accuracy(task, hard)
    assert hard_separation < _best_single_threshold_balanced_accuracy(task, plain) - 0.1


def test_it_leaves_positives_alone_when_negatives_are_rejection_sampled() -> None:
    hard = generate_split("SS", "test", n_pos=3, n_neg=3, seed=2)
    plain = generate_split("SS", "test", n_pos=3, n_neg=3, seed=2, hard_negatives=False)
    assert [s.spectrum.flux.tobytes() for s in hard if s.label] == [
        s.spectrum.flux.tobytes() for s in plain if s.label
    ]


# --- what the rendered image shows ---------------------------------------------------------------


def test_it_renders_exactly_as_the_same_arrays_from_a_survey_file(
    mixed_samples: list[SyntheticSample],
) -> None:
    from agent.tool import SpectralVisualizationTool

    synthetic = mixed_samples[0].spectrum
    survey_like = dataclasses.replace(
        synthetic, survey="LAMOST", object_id="123456789", meta={}, source="spec-x.fits"
    )
    for spectrum_view in (
        lambda tool: tool.render_full(),
        lambda tool: tool.render((6400.0, 6700.0), label="H-alpha"),
    ):
        synthetic_png = spectrum_view(SpectralVisualizationTool(synthetic)).png
        survey_png = spectrum_view(SpectralVisualizationTool(survey_like)).png
        assert synthetic_png is not None and synthetic_png == survey_png


# --- sampling, splits and reproducibility --------------------------------------------------------


def test_it_uses_balanced_train_and_one_to_five_test_sizes() -> None:
    assert default_split_sizes() == {
        "train": {"n_pos": 20, "n_neg": 20},
        "test": {"n_pos": 10, "n_neg": 50},
    }
    assert default_split_sizes(2.0)["test"] == {"n_pos": 20, "n_neg": 100}


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), "1"])
def test_it_refuses_a_bad_scale(scale: object) -> None:
    with pytest.raises(ValueError, match="scale"):
        default_split_sizes(scale)  # type: ignore[arg-type]


def test_it_builds_splits_with_the_requested_label_counts() -> None:
    samples = generate_split("SS", "test", n_pos=4, n_neg=20, seed=5)
    assert Counter(sample.label for sample in samples) == {True: 4, False: 20}
    assert [sample.index for sample in samples] == list(range(24))
    assert {sample.split for sample in samples} == {"test"}


def test_it_shuffles_labels_so_indices_do_not_reveal_them() -> None:
    samples = generate_split("CV", "test", n_pos=10, n_neg=50, seed=5)
    assert [sample.label for sample in samples[:10]] != [True] * 10


def test_it_reproduces_a_split_from_its_seed() -> None:
    first = generate_split("WD", "train", n_pos=3, n_neg=3, seed=11)
    second = generate_split("WD", "train", n_pos=3, n_neg=3, seed=11)
    assert [s.spectrum.flux.tobytes() for s in first] == [s.spectrum.flux.tobytes() for s in second]
    assert [s.subtype for s in first] == [s.subtype for s in second]


def test_it_changes_spectra_with_the_seed() -> None:
    first = generate_split("WD", "train", n_pos=2, n_neg=2, seed=11)
    other = generate_split("WD", "train", n_pos=2, n_neg=2, seed=12)
    assert [s.spectrum.flux.tobytes() for s in first] != [s.spectrum.flux.tobytes() for s in other]


def test_it_keeps_positives_when_the_negative_count_changes() -> None:
    def positives(n_neg: int) -> set[bytes]:
        split = generate_split("MG", "test", n_pos=3, n_neg=n_neg, seed=2)
        return {sample.spectrum.flux.tobytes() for sample in split if sample.label}

    assert positives(3) == positives(9)


def test_it_draws_only_the_task_mix_subtypes() -> None:
    samples = generate_split("CS", "train", n_pos=6, n_neg=6, seed=4)
    for sample in samples:
        assert sample.subtype in subtypes("CS", sample.label)


def test_it_covers_every_subtype_of_every_task_without_failing() -> None:
    rng = np.random.default_rng(9)
    for task in task_codes():
        for label in (True, False):
            for kind in subtypes(task, label):
                spectrum = generate_sample(task, label, rng=rng, subtype=kind).spectrum
                assert np.all(np.isfinite(spectrum.flux)), (task, kind)
                assert np.median(spectrum.flux[spectrum.good]) > 0, (task, kind)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "QSO"}, "unknown task code 'QSO'"),
        ({"subtype": "dme"}, "subtype 'dme' is not a positive of task CV"),
        ({"split": "Test set"}, "split must be"),
        ({"label": "yes"}, "label must be True or False"),
        ({"snr": -3.0}, "snr must be a positive"),
    ],
)
def test_it_rejects_bad_sample_requests(kwargs: dict, message: str) -> None:
    request = {"task": "CV", "label": True, "split": "train"} | kwargs
    with pytest.raises(ValueError, match=message):
        generate_sample(rng=np.random.default_rng(0), **request)


@pytest.mark.parametrize(("name", "value"), [("n_pos", -1), ("n_neg", 2.5), ("seed", True)])
def test_it_rejects_bad_split_sizes(name: str, value: object) -> None:
    request = {"n_pos": 1, "n_neg": 1, "seed": 0} | {name: value}
    with pytest.raises(ValueError, match=name):
        generate_split("CV", "train", **request)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("task", "code"),
    [("CV", "cv"), ("CS", "cc"), ("SS", "ss"), ("MG", "gm"), ("wd", "wd"), ("O", "o")],
)
def test_it_maps_tasks_to_specvi_bench_file_codes(task: str, code: str) -> None:
    assert bench_code(task) == code


# --- the written benchmark -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("specvi-mini")
    write_benchmark(out, seed=3, tasks=("CV", "MG"), sizes=SMALL_SIZES)
    return out


def _digests(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_it_writes_identical_bytes_for_the_same_seed(benchmark: Path, tmp_path: Path) -> None:
    write_benchmark(tmp_path, seed=3, tasks=("CV", "MG"), sizes=SMALL_SIZES)
    assert _digests(tmp_path) == _digests(benchmark)
    assert any(name.endswith(".parquet") for name in _digests(benchmark))


def test_it_lists_every_sample_in_the_manifest(benchmark: Path) -> None:
    entries = load_manifest(benchmark)
    assert len(entries) == 2 * (4 + 4)
    assert Counter((e["task"], e["split"], e["label"]) for e in entries) == {
        ("CV", "train", "YES"): 2,
        ("CV", "train", "NO"): 2,
        ("CV", "test", "YES"): 1,
        ("CV", "test", "NO"): 3,
        ("MG", "train", "YES"): 2,
        ("MG", "train", "NO"): 2,
        ("MG", "test", "YES"): 1,
        ("MG", "test", "NO"): 3,
    }
    for entry in entries:
        assert (benchmark / entry["file"]).is_file()
        assert entry["object_id"] == f"SVM-{entry['task']}-{entry['split']}-{entry['index']:04d}"
        assert entry["subtype"] in subtypes(entry["task"], entry["label"] == "YES")
        assert entry["snr"] > 0
        assert RESOLUTION_RANGE[0] <= entry["resolving_power"] <= RESOLUTION_RANGE[1]


def test_it_marks_the_manifest_synthetic(benchmark: Path) -> None:
    document = json.loads((benchmark / "manifest.json").read_text(encoding="utf-8"))
    assert document["synthetic"] is True
    assert document["seed"] == 3
    assert "synthetic" in document["description"].lower()
    assert "SYNTHETIC" in (benchmark / "README.md").read_text(encoding="utf-8")


def test_it_writes_lamost_fits_that_say_synthetic(benchmark: Path) -> None:
    entry = load_manifest(benchmark)[0]
    with fits.open(benchmark / entry["file"]) as hdus:
        header = hdus[0].header
        assert header["TELESCOP"] == "SpecVI-mini"
        assert header["SYNTHET"] is True
        assert header["OBJTYPE"] == "SYNTHETIC"
        assert entry["subtype"] not in repr(header)
        assert hdus["COADD"].data["FLUX"][0].size == N_PIXELS
    loaded = load_spectra(benchmark / entry["file"])[0]
    assert loaded.resolution is not None
    assert loaded.resolution.resolving_power_at(6000.0) == pytest.approx(entry["resolving_power"])


def test_it_writes_specvi_bench_parquet_rows(benchmark: Path) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(benchmark / "data" / "test_gm.parquet").to_pylist()
    labels = {
        e["index"]: e["label"]
        for e in load_manifest(benchmark)
        if e["task"] == "MG" and e["split"] == "test"
    }
    assert len(rows) == 4
    for row in rows:
        assert row["data_source"] == "specvi-mini"
        assert row["prompt"] == [{"role": "user", "content": build_prompt(get_task("MG"))}]
        assert row["images"][0]["bytes"].startswith(b"\x89PNG\r\n\x1a\n")
        assert row["reward_model"] == {
            "style": "rule",
            "ground_truth": labels[row["extra_info"]["index"]],
        }
        extra = row["extra_info"]
        assert extra["task"] == "gm" and extra["split"] == "test"
        create = extra["tools_kwargs"]["spectral_visualization_tool"]["create_kwargs"]
        assert len(create["wavelength"]) == len(create["flux"]) == N_PIXELS
        assert create["redshift"] == 0.0


def test_it_can_skip_the_parquet_files(tmp_path: Path) -> None:
    write_benchmark(
        tmp_path,
        seed=1,
        tasks=("WD",),
        sizes={"test": {"n_pos": 1, "n_neg": 1}},
        with_parquet=False,
    )
    assert not (tmp_path / "data").exists()
    assert len(load_manifest(tmp_path / "manifest.json")) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": ("CV", "cv")}, "tasks must not repeat"),
        ({"sizes": {"test": {"n_pos": 1}}}, r"sizes\['test'\]"),
        ({"tasks": ("XX",)}, "unknown task code 'XX'"),
    ],
)
def test_it_rejects_bad_benchmark_requests(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_benchmark(tmp_path, **kwargs)


def test_it_refuses_a_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be read"):
        load_manifest(tmp_path)


def test_it_refuses_a_manifest_that_is_not_synthetic(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"samples": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a synthetic benchmark manifest"):
        load_manifest(tmp_path)
