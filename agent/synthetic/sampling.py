"""Which objects are positives and hard negatives per task, drawing samples and splits, and the weak classifier behind the hard negatives."""

from __future__ import annotations

import dataclasses
import math
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

import numpy as np

from agent.inspection_tasks import SPECVI_BENCH_CODES, get_task
from agent.resolution import Resolution
from agent.spectra import Spectrum
from agent.synthetic.carbon import _carbon_ch, _carbon_n, _carbon_r, _dwarf_carbon
from agent.synthetic.cataclysmic import _cv_dwarf_nova, _cv_high_state, _cv_polar, _cv_wd_dominated
from agent.synthetic.contaminants import _planetary_nebula, _quasar
from agent.synthetic.lines import (
    DATA_SOURCE,
    GENERATOR_VERSION,
    HARD_NEGATIVE_TRIES,
    N_PIXELS,
    RESOLUTION_RANGE,
    SURVEY,
    WAVELENGTH,
)
from agent.synthetic.observing import _observe
from agent.synthetic.physics import _instrument, _log_uniform, _observed_with
from agent.synthetic.stars import (
    _a_star,
    _b_star,
    _be_star,
    _dme,
    _fgk_dwarf,
    _k_giant,
    _m_dwarf,
    _m_giant,
    _o_star,
    _Object,
    _rounded,
    _s_star_like,
)
from agent.synthetic.white_dwarfs import (
    _da_wd,
    _dah_wd,
    _db_wd,
    _dc_wd,
    _do_wd,
    _dq_wd,
    _dz_wd,
    _sda,
    _sdb,
    _sdo,
)

_KINDS: dict[str, Callable[[np.random.Generator], _Object]] = {
    "cv_dwarf_nova": _cv_dwarf_nova,
    "cv_polar": _cv_polar,
    "cv_high_state": _cv_high_state,
    "cv_wd_dominated": _cv_wd_dominated,
    "dme": _dme,
    "be_star": _be_star,
    "quasar": _quasar,
    "planetary_nebula": _planetary_nebula,
    "o_star": _o_star,
    "b_star": _b_star,
    "a_star": _a_star,
    "fgk_dwarf": _fgk_dwarf,
    "k_giant": _k_giant,
    "m_giant": _m_giant,
    "m_dwarf": _m_dwarf,
    "s_star": lambda rng: _s_star_like(rng, ms=False),
    "ms_star": lambda rng: _s_star_like(rng, ms=True),
    "carbon_n": _carbon_n,
    "carbon_r": _carbon_r,
    "carbon_ch": _carbon_ch,
    "dwarf_carbon": _dwarf_carbon,
    "da_wd": _da_wd,
    "dah_wd": _dah_wd,
    "db_wd": _db_wd,
    "do_wd": _do_wd,
    "dc_wd": _dc_wd,
    "dz_wd": _dz_wd,
    "dq_wd": _dq_wd,
    "sdb": _sdb,
    "sdo": _sdo,
    "sda": _sda,
}

# task -> (positive kinds with weights, negative kinds with weights)
TASK_MIXES: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    "CV": (
        {"cv_dwarf_nova": 0.45, "cv_polar": 0.15, "cv_high_state": 0.25, "cv_wd_dominated": 0.15},
        {
            "dme": 0.28, "be_star": 0.2, "quasar": 0.15, "planetary_nebula": 0.05, "da_wd": 0.1,
            "a_star": 0.04, "b_star": 0.04, "sdb": 0.04, "fgk_dwarf": 0.05, "m_dwarf": 0.05,
        },
    ),
    "CS": (
        {"carbon_n": 0.4, "carbon_r": 0.25, "carbon_ch": 0.2, "dwarf_carbon": 0.15},
        {
            "m_giant": 0.3, "s_star": 0.15, "ms_star": 0.05, "k_giant": 0.15, "dq_wd": 0.05,
            "fgk_dwarf": 0.1, "m_dwarf": 0.2,
        },
    ),
    "SS": (
        {"s_star": 0.65, "ms_star": 0.35},
        {
            "m_giant": 0.45, "carbon_n": 0.1, "carbon_r": 0.05, "k_giant": 0.1, "m_dwarf": 0.2,
            "fgk_dwarf": 0.1,
        },
    ),
    "MG": (
        {"m_giant": 1.0},
        {
            "m_dwarf": 0.35, "dme": 0.1, "k_giant": 0.25, "s_star": 0.08, "carbon_n": 0.07,
            "fgk_dwarf": 0.15,
        },
    ),
    "WD": (
        {
            "da_wd": 0.6, "dah_wd": 0.04, "db_wd": 0.12, "dc_wd": 0.1, "dz_wd": 0.05,
            "dq_wd": 0.05, "do_wd": 0.04,
        },
        {
            "a_star": 0.3, "b_star": 0.1, "sdb": 0.15, "sdo": 0.05, "sda": 0.15,
            "cv_wd_dominated": 0.05, "cv_high_state": 0.05, "fgk_dwarf": 0.1, "quasar": 0.05,
        },
    ),
    "O": (
        {"o_star": 1.0},
        {
            "b_star": 0.45, "a_star": 0.1, "sdb": 0.15, "sdo": 0.1, "do_wd": 0.05,
            "fgk_dwarf": 0.05, "be_star": 0.1,
        },
    ),
    "B": (
        {"b_star": 0.9, "be_star": 0.1},
        {"o_star": 0.25, "a_star": 0.35, "sdb": 0.15, "da_wd": 0.1, "db_wd": 0.05, "fgk_dwarf": 0.1},
    ),
    "A": (
        {"a_star": 1.0},
        {"b_star": 0.3, "fgk_dwarf": 0.3, "da_wd": 0.1, "sda": 0.15, "sdb": 0.05, "dz_wd": 0.1},
    ),
}  # fmt: skip


# --- public API ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticSample:
    index: int
    task: str
    label: bool
    subtype: str  # the kind of object drawn: generator internals, for analysis only
    spectrum: Spectrum
    split: str
    params: dict[str, Any] = field(default_factory=dict)  # drawn parameters, analysis only


def task_codes() -> tuple[str, ...]:
    return tuple(TASK_MIXES)


def subtypes(task: str, label: bool) -> tuple[str, ...]:
    """The kinds of object that can be drawn as positives (label True) or negatives of ``task``."""
    return tuple(TASK_MIXES[_task_code(task)][0 if label else 1])


def object_id(task: str, split: str, index: int) -> str:
    return f"SVM-{_task_code(task)}-{split}-{index:04d}"


def generate_sample(
    task: str,
    label: bool,
    *,
    rng: np.random.Generator,
    index: int = 0,
    split: str = "train",
    subtype: str | None = None,
    snr: float | None = None,
    resolving_power: float | None = None,
) -> SyntheticSample:
    """One synthetic spectrum for ``task``: a positive (label True) or a negative drawn from the
    task's contaminant mix (:func:`draw_hard_negative` keeps only the confusable ones).

    ``subtype`` forces the kind of object (it must belong to that task and label); ``snr`` forces
    the S/N, otherwise drawn log-uniform in SNR_RANGE; ``resolving_power`` forces R, otherwise
    drawn log-uniform in RESOLUTION_RANGE.
    """
    code = _task_code(task)
    _check_split(split)
    if not isinstance(label, bool | np.bool_):
        raise ValueError(f"label must be True or False, got {label!r}")
    if snr is not None and not (math.isfinite(snr) and snr > 0):
        raise ValueError(f"snr must be a positive finite number, got {snr!r}")
    if resolving_power is not None and not (
        math.isfinite(resolving_power) and 300.0 <= resolving_power <= 20000.0
    ):
        raise ValueError(f"resolving_power must be in 300-20000, got {resolving_power!r}")
    mix = TASK_MIXES[code][0 if label else 1]
    if subtype is None:
        kinds, weights = zip(*mix.items(), strict=True)
        subtype = kinds[_weighted_choice(rng, weights)]
    elif subtype not in mix:
        side = "positive" if label else "negative"
        raise ValueError(f"subtype {subtype!r} is not a {side} of task {code}; use {sorted(mix)}")
    return _make_sample(
        code,
        bool(label),
        subtype,
        rng,
        index=index,
        split=split,
        snr=snr,
        resolving_power=resolving_power,
    )


def _make_sample(
    code: str,
    label: bool,
    subtype: str,
    rng: np.random.Generator,
    *,
    index: int = 0,
    split: str = "train",
    snr: float | None = None,
    resolving_power: float | None = None,
) -> SyntheticSample:
    power = (
        float(resolving_power)
        if resolving_power is not None
        else round(_log_uniform(rng, *RESOLUTION_RANGE), 1)
    )
    with _observed_with(_instrument(power)):
        drawn = _KINDS[subtype](rng)
        observation = _observe(drawn.flux, rng, snr)
    identifier = object_id(code, split, index)
    spectrum = Spectrum(
        wavelength=WAVELENGTH.copy(),
        flux=observation.flux,
        ivar=observation.ivar,
        mask=observation.mask,
        redshift=0.0,
        survey=SURVEY,
        object_id=identifier,
        snr=round(observation.snr, 2),
        meta={"synthetic": True, "generator": GENERATOR_VERSION},
        source=f"{DATA_SOURCE}:{identifier}",
        resolution=Resolution.constant_r(power, source="file", note="per-spectrum LSF"),
    )
    params = _rounded(drawn.params | observation.conditions) | {"resolving_power": power}
    return SyntheticSample(index, code, label, subtype, spectrum, split, params)


def draw_hard_negative(
    task: str, *, rng: np.random.Generator, index: int = 0, split: str = "train"
) -> SyntheticSample:
    """A negative the task's weak classifier calls positive (the paper's rejection sampling).

    The kind of contaminant is drawn from the task's negative mix first, so the mix keeps its
    weights; then objects of that kind are drawn until one's baseline score reaches the weak
    classifier's threshold, else the highest-scoring of HARD_NEGATIVE_TRIES is kept. The params
    record the baseline score, whether it passed and how many draws it took.
    """
    code = _task_code(task)
    baseline = _baseline(code)
    best: tuple[float, SyntheticSample, int] | None = None
    for draw in range(1, HARD_NEGATIVE_TRIES + 1):
        candidate = generate_sample(code, False, rng=rng, index=index, split=split)
        score = baseline.score(candidate.spectrum)
        if best is None or score > best[0]:
            best = (score, candidate, draw)
        if score >= baseline.threshold:
            break
    assert best is not None
    score, sample, draws = best
    extra = {"baseline_score": score, "baseline_positive": score >= baseline.threshold}
    return dataclasses.replace(sample, params=_rounded(sample.params | extra | {"draws": draws}))


def generate_split(
    task: str,
    split: str,
    *,
    n_pos: int,
    n_neg: int,
    seed: int,
    hard_negatives: bool = True,
) -> list[SyntheticSample]:
    """``n_pos`` positives and ``n_neg`` negatives in a seeded shuffled order (index = position).

    Each spectrum's random stream comes from (seed, task, split, label, k), so the k-th positive
    is the same spectrum whatever the split sizes, and other splits and tasks never change.
    Negatives are rejection-sampled (:func:`draw_hard_negative`) unless ``hard_negatives`` is
    False, which draws them straight from the contaminant mix.
    """
    code = _task_code(task)
    _check_split(split)
    for name, value in (("n_pos", n_pos), ("n_neg", n_neg), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    base = [int(seed), zlib.crc32(code.encode()), zlib.crc32(split.encode())]
    order = np.random.default_rng(np.random.SeedSequence([*base, 2, n_pos, n_neg]))
    members = [(True, k) for k in range(n_pos)] + [(False, k) for k in range(n_neg)]
    permutation = order.permutation(len(members))
    samples = []
    for index, member in enumerate(permutation):
        label, k = members[int(member)]
        rng = np.random.default_rng(np.random.SeedSequence([*base, int(label), k]))
        if label or not hard_negatives:
            samples.append(generate_sample(code, label, rng=rng, index=index, split=split))
        else:
            samples.append(draw_hard_negative(code, rng=rng, index=index, split=split))
    return samples


def default_split_sizes(scale: float = 1.0) -> dict[str, dict[str, int]]:
    """Per-task split sizes: train balanced 1:1, test 1:5 as SpecVI-Bench (paper Table 5)."""
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    base = {"train": (20, 20), "test": (10, 50)}
    return {
        split: {"n_pos": max(1, round(pos * scale)), "n_neg": max(1, round(neg * scale))}
        for split, (pos, neg) in base.items()
    }


_BASELINE_BINS = 128
_BASELINE_BIN_STARTS = np.linspace(0, N_PIXELS, _BASELINE_BINS + 1).astype(int)[:-1]
_BASELINE_CONTINUUM_BINS = 15
_BASELINE_TRAIN = 32  # plain draws per class the classifier is fitted on
_BASELINE_SEED = 20271
_BASELINE_RECALL = 0.5  # it calls positive whatever scores like the top 75 % of positives


@dataclass(frozen=True)
class _Baseline:
    """Nearest class means on coarse continuum-normalised flux: score = w . x - offset."""

    weights: np.ndarray
    offset: float
    threshold: float

    def score(self, spectrum: Spectrum) -> float:
        # SpecVI-mini draws carry ivar; without one numpy fails in _coarse_shape, as before.
        shape = _coarse_shape(spectrum.flux, cast(np.ndarray, spectrum.ivar))
        return float(np.sum(self.weights * shape)) - self.offset


def baseline_score(task: str, spectrum: Spectrum) -> float:
    """The task's weak-classifier score of a spectrum on the SpecVI-mini grid (>= the value of
    :func:`baseline_threshold` means the weak classifier calls it positive)."""
    if spectrum.flux.shape != (N_PIXELS,):
        raise ValueError(f"the weak classifier needs the {N_PIXELS}-pixel SpecVI-mini grid")
    return _baseline(_task_code(task)).score(spectrum)


def baseline_threshold(task: str) -> float:
    return _baseline(_task_code(task)).threshold


def _coarse_shape(flux: np.ndarray, ivar: np.ndarray) -> np.ndarray:
    """Flux in log-wavelength bins over a running median of neighbouring bins, minus 1: bands
    and strong lines without the continuum slope; 0 where a bin's S/N is below 3."""
    weight = np.add.reduceat(ivar, _BASELINE_BIN_STARTS)
    weighted = np.add.reduceat(ivar * flux, _BASELINE_BIN_STARTS)
    mean = weighted / np.where(weight > 0, weight, 1.0)
    reliable = (weight > 0) & (mean * np.sqrt(weight) >= 3.0)
    values = np.where(reliable, mean, np.nan)
    half = _BASELINE_CONTINUUM_BINS // 2
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(values, half, mode="edge"), _BASELINE_CONTINUUM_BINS
    )
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows at a dead blue end
        continuum = np.nanmedian(windows, axis=1)
        shape = values / continuum - 1.0
    usable = reliable & np.isfinite(shape) & (continuum > 0)
    return np.clip(np.where(usable, shape, 0.0), -1.0, 1.0)


@cache
def _baseline(code: str) -> _Baseline:
    """Fitted on the task's positives against an archive-like background (every kind of object
    the generator makes that is not a positive, equally weighted), as the paper's weak
    classifier is fitted on catalogue members against the survey archive."""
    positive_kinds = TASK_MIXES[code][0]
    background = [kind for kind in _KINDS if kind not in positive_kinds]
    shapes: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for label in (True, False):
        for k in range(_BASELINE_TRAIN):
            key = [_BASELINE_SEED, zlib.crc32(code.encode()), int(label), k]
            rng = np.random.default_rng(np.random.SeedSequence(key))
            if label:
                kinds, weights = zip(*positive_kinds.items(), strict=True)
                kind = kinds[_weighted_choice(rng, weights)]
            else:
                kind = background[int(rng.integers(len(background)))]
            spectrum = _make_sample(code, label, kind, rng).spectrum
            shapes[label].append(_coarse_shape(spectrum.flux, cast(np.ndarray, spectrum.ivar)))
    positives, negatives = np.array(shapes[True]), np.array(shapes[False])
    weights = positives.mean(axis=0) - negatives.mean(axis=0)
    midpoint = (positives.mean(axis=0) + negatives.mean(axis=0)) / 2.0
    offset = float(np.sum(weights * midpoint))
    scores = np.sum(positives * weights, axis=1) - offset
    threshold = float(np.quantile(scores, 1.0 - _BASELINE_RECALL))
    return _Baseline(weights, offset, threshold)


def _task_code(task: str) -> str:
    code = get_task(task).code
    if code not in TASK_MIXES:
        raise ValueError(f"task {task!r} has no SpecVI-mini generator (have {list(TASK_MIXES)})")
    return code


def _check_split(split: str) -> None:
    if not isinstance(split, str) or not split.isidentifier() or not split.islower():
        raise ValueError(f"split must be a lower-case name like 'train' or 'test', got {split!r}")


def _weighted_choice(rng: np.random.Generator, weights: Sequence[float]) -> int:
    cumulative = np.cumsum(weights)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))


def _checked_sizes(sizes: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    checked = {}
    for split, size in sizes.items():
        _check_split(split)
        if not isinstance(size, Mapping) or set(size) != {"n_pos", "n_neg"}:
            raise ValueError(
                f"sizes[{split!r}] must be {{'n_pos': int, 'n_neg': int}}, got {size!r}"
            )
        checked[split] = {"n_pos": size["n_pos"], "n_neg": size["n_neg"]}
    return checked


def bench_code(task: str) -> str:
    """SpecVI-Bench file code of a task: cv, cc, ss, gm, wd (o, b, a for cross tasks)."""
    code = _task_code(task)
    return {value: key for key, value in SPECVI_BENCH_CODES.items()}.get(code, code.lower())
