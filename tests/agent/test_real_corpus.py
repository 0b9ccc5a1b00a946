"""The real-data corpus (agent/real_corpus.py) and the inspector on it (agent/bench/real.py).

The session fixture builds the cache the way `make real-data` does (pip downloads the pinned
wheels); where that cannot happen the tests that need the spectra skip, saying why.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from agent.bench.real import fit_calibration, real_items, report, score_spectra
from agent.inspection_tasks import get_task
from agent.policies.rule_based import CALIBRATION_PATH, RuleBasedInspector, SpectrumView
from agent.policies.rule_based.scope import MAX_PULL
from agent.real_corpus import (
    SPLITS,
    TASKS,
    CorpusUnavailable,
    assign_split,
    fetch,
    label_rule,
    labels_of,
    load_corpus,
    load_manifest,
    object_key,
    parse_mk,
    parse_spectral_type,
)

# the validation figures of the rules alone that `python -m agent.bench.real calibrate` reported
# when the calibration was fitted (rule-based/v7's rules, 2026-11-29, corpus version 2, 1,295
# spectra; docs: calibration and real data)
REPORTED_VALIDATION_BALANCED_ACCURACY = {"MG": 0.99, "O": 0.92, "B": 0.89, "A": 0.88}
# wrong answers at confidence >= 0.9 over the validation answers of all tasks: 5 in 5,184,
# within issue 23's target of one in 1,000 (v2: 9; docs: calibration and real data)
REPORTED_VALIDATION_CONFIDENT_WRONG = 5
TOLERANCE = 0.05
MAX_VALIDATION_ECE = 0.05  # issue 23's target, per task


@pytest.fixture(scope="session")
def corpus() -> list:
    try:
        fetch(quiet=True)
    except CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache cannot be built here: {exc}")
    try:
        return load_corpus()
    except CorpusUnavailable as exc:
        pytest.skip(f"a real spectrum is missing: {exc}")


@pytest.fixture(scope="session")
def development_scores(corpus: list) -> list:
    return score_spectra(real_items("development"))


@pytest.fixture(scope="session")
def validation_scores(corpus: list) -> list:
    return score_spectra(real_items("validation"))


# --- the manifest (no download needed) ---------------------------------------------------------


def test_it_labels_every_spectrum_by_the_documented_rule() -> None:
    for entry in load_manifest():
        subclass = entry.subclass + "V" if entry.source == "shared-lamost" else entry.subclass
        expected = labels_of(entry.id, entry.spectral_class, subclass)
        if entry.id == "sdss-ngc3073":  # the galaxy the SDSS pipeline calls an A0 star
            expected["hard_negative_for"] = ("A",)
        assert entry.positive_for == expected["positive_for"], entry.id
        assert entry.hard_negative_for == expected["hard_negative_for"], entry.id
        assert entry.excluded_from == expected["excluded_from"], entry.id


def test_it_splits_by_the_documented_hash_rule() -> None:
    entries = load_manifest()
    split = assign_split((e.id, e.object, e.positive_for) for e in entries)
    assert {e.id: e.split for e in entries} == split
    assert {e.split for e in entries} == set(SPLITS)


def test_it_keeps_every_object_in_one_split() -> None:
    splits_of: dict[str, set[str]] = {}
    for entry in load_manifest():
        splits_of.setdefault(entry.object, set()).add(entry.split)
    assert all(len(splits) == 1 for splits in splits_of.values())


def test_it_records_a_source_resolution_and_reference_for_each_spectrum() -> None:
    entries = load_manifest()
    assert len({e.id for e in entries}) == len(entries)
    for entry in entries:
        assert entry.reference and entry.survey and entry.instrument
        assert entry.resolution["source"] in ("file", "survey default", "sampling estimate")
        assert all(task in TASKS for task in entry.positive_for + entry.hard_negative_for)


def test_it_parses_mk_types_of_the_libraries() -> None:
    assert parse_mk("B57V") == ("B", 5, "V")
    assert parse_mk("M2.5V") == ("M", 2, "V")
    assert parse_mk("K01II") == ("K", 0, "II")
    assert parse_mk("galaxy") is None


def test_it_parses_the_spectral_types_the_stellar_libraries_write() -> None:
    o7 = parse_spectral_type("07Ia")  # MILES writes O as a zero
    assert o7 is not None and (o7.letter, o7.digit, o7.luminosity) == ("O", 7, "I")
    g8 = parse_spectral_type("G8/K0IIIw.")
    assert g8 is not None and (g8.letter, g8.digit, g8.luminosity) == ("G", 8, "III")
    a3 = parse_spectral_type("A3 Ia")  # MILES' cluster stars put a space before the class
    assert a3 is not None and (a3.letter, a3.digit, a3.luminosity) == ("A", 3, "I")
    m1 = parse_spectral_type("M1Ia-ab")
    assert m1 is not None and m1.luminosity == "I"
    sd = parse_spectral_type("sdF5")
    assert sd is not None and sd.luminosity == "VI"
    assert getattr(parse_spectral_type("WNs..."), "kind", None) == "WR"
    assert getattr(parse_spectral_type("DC:"), "kind", None) == "WD"
    assert getattr(parse_spectral_type("R..."), "kind", None) == "carbon"
    s_star = parse_spectral_type("M6Svar")
    assert s_star is not None and s_star.kind == "S" and not s_star.uncertain
    assert getattr(parse_spectral_type("S?"), "uncertain", None) is True
    be = parse_spectral_type("B2Iave")
    assert be is not None and be.emission and be.luminosity == "I"
    for unknown in ("HB", "AGB", "GB", "III", "", "1"):
        assert parse_spectral_type(unknown) is None, unknown


def test_it_labels_the_classes_no_task_is_about_as_negatives_or_leaves_them_out() -> None:
    assert label_rule("STAR", "WN")["hard_negative_for"] == ("CV", "O")
    assert label_rule("STAR", "A0Ia")["positive_for"] == ("A",)  # a supergiant is an A star
    assert label_rule("STAR", "M2Iab")["excluded_from"] == ("MG",)
    assert label_rule("STAR", "M4")["excluded_from"] == ("MG",)  # no luminosity class
    assert label_rule("STAR", "M3Svar")["positive_for"] == ("SS",)
    assert label_rule("STAR", "S?")["excluded_from"] == ("SS", "MG")
    assert label_rule("STAR", "sdA2")["excluded_from"] == ("A",)
    assert "CV" in label_rule("STAR", "O7Ve")["hard_negative_for"]


def test_it_holds_over_a_thousand_observed_spectra_of_every_kind_the_issue_asks_for() -> None:
    entries = load_manifest()
    assert len(entries) >= 1000
    types = [parse_spectral_type(e.subclass) for e in entries if e.spectral_class == "STAR"]
    kinds = {t.kind for t in types if t is not None}
    assert {"MK", "WR", "WD", "carbon", "S"} <= kinds
    classes = {t.luminosity for t in types if t is not None and t.kind == "MK"}
    assert {"I", "II", "III", "IV", "V", "VI"} <= classes
    assert any(t is not None and t.emission and t.letter == "B" for t in types)
    letters = {t.letter for t in types if t is not None and t.kind == "MK"}
    assert letters == set("OBAFGKM")


def test_it_keys_one_object_the_same_across_libraries() -> None:
    assert object_key("HD 32537") == object_key("HD032537") == object_key("HD32537")
    assert object_key("BD+04 4551") == object_key("BD+044551")
    assert object_key("HD 32537") != object_key("HD 325370")


def test_it_stores_a_calibration_fitted_on_the_development_part_only() -> None:
    stored = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    development = Counter()
    for entry in load_manifest("development"):
        for task in entry.positive_for:
            development[task] += 1
    for task, fit in stored["tasks"].items():
        assert fit["positives"] == development[task], task


# --- the spectra --------------------------------------------------------------------------------


def test_it_reads_every_real_spectrum(corpus: list) -> None:
    assert len(corpus) == len(load_manifest())
    for entry, spectrum in corpus:
        good = ~spectrum.mask
        assert good.sum() > 300, entry.id  # BPGS: 10 Å pixels
        assert np.all(np.diff(spectrum.wavelength) > 0), entry.id
        assert np.isfinite(spectrum.flux[good]).all(), entry.id
        assert spectrum.resolution is not None, entry.id


def test_it_reads_each_library_image_from_its_own_header(corpus: list) -> None:
    """The wavelength of a MILES/STELIB 1-D image comes from its own WCS, in air, turned into
    vacuum; each spectrum is the file its entry names (swapped files would fail here)."""
    import io
    import warnings
    import zipfile

    from astropy.io import fits

    from agent.real_corpus import OPTICAL, wheel_path
    from agent.spectra import air_to_vacuum

    libraries = [(e, s) for e, s in corpus if e.source == "mangadap"]
    assert len(libraries) >= 1000
    with zipfile.ZipFile(wheel_path("mangadap")) as archive:
        for entry, spectrum in libraries[:: max(len(libraries) // 25, 1)]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with fits.open(io.BytesIO(archive.read(entry.member))) as hdus:
                    header, data = hdus[0].header, np.asarray(hdus[0].data, dtype=float)
            step = header.get("CDELT1", header.get("CD1_1"))
            air = header["CRVAL1"] + (np.arange(data.size) + 1 - header.get("CRPIX1", 1)) * step
            vacuum = np.asarray(air_to_vacuum(air))
            keep = (vacuum >= OPTICAL[0]) & (vacuum <= OPTICAL[1])
            np.testing.assert_allclose(spectrum.wavelength, vacuum[keep], rtol=0, atol=1e-6)
            good = (spectrum.flux != 0) & (data[keep] != 0)
            ratio = np.where(good, data[keep], 1.0) / np.where(good, spectrum.flux, 1.0)
            good &= np.isfinite(ratio)
            assert np.allclose(ratio[good], ratio[good][0], rtol=1e-9), entry.id
            assert spectrum.object_id == entry.object


def test_it_does_not_call_the_library_wolf_rayet_stars_cvs_with_confidence(corpus: list) -> None:
    """Issue 23: 5 of 6 Wolf-Rayet stars were called CVs at >= 0.95."""
    inspector = RuleBasedInspector()
    wolf_rayets = [(e, s) for e, s in corpus if e.subclass.startswith("W")]
    assert len(wolf_rayets) >= 5
    for entry, spectrum in wolf_rayets:
        decision = inspector.begin(spectrum=spectrum, task=get_task("CV"), use_tool=False).decision
        assert decision is not None
        wrong = decision["prediction"] != entry.label("CV")
        assert not (wrong and decision["confidence"] >= 0.9), entry.id


def test_it_inspects_every_kind_of_real_spectrum_for_every_task(corpus: list) -> None:
    """Whole episodes (with tool calls) on the original sources, every eighth library star and
    every library star that is not a plain MK type; `real_bench` scores all of them."""
    inspector = RuleBasedInspector()
    chosen = [
        (entry, spectrum)
        for position, (entry, spectrum) in enumerate(corpus)
        if entry.source != "mangadap"
        or position % 8 == 0
        or getattr(parse_spectral_type(entry.subclass), "kind", "MK") != "MK"
    ]
    for task in TASKS:
        definition = get_task(task)
        for entry, spectrum in chosen:
            episode = inspector.begin(spectrum=spectrum, task=definition, use_tool=True)
            assert episode.decision is not None
            assert episode.decision["prediction"] in ("YES", "NO"), entry.id
            answer = episode.generate([{"role": "user", "content": "go"}])
            assert answer.startswith("<think>"), entry.id


def test_it_does_not_call_the_lamost_dichroic_a_quasar_line(corpus: list) -> None:
    lamost = [spectrum for entry, spectrum in corpus if entry.source == "shared-lamost"]
    assert lamost
    inspector = RuleBasedInspector()
    for spectrum in lamost:
        bump = SpectrumView(spectrum).strongest_emission_bump()
        assert bump is None or not 5650.0 <= bump[0] * (1 + spectrum.redshift) <= 6100.0
        decision = inspector.begin(spectrum=spectrum, task=get_task("WD"), use_tool=False).decision
        assert decision is not None
        texts = " ".join(f["text"] for f in decision["evidence"]["findings"])
        assert "quasar line" not in texts


def test_it_does_not_read_a_low_resolution_a_star_as_a_white_dwarf(corpus: list) -> None:
    inspector = RuleBasedInspector()
    a_dwarfs = [s for e, s in corpus if "A" in e.positive_for and e.subclass.endswith("V")]
    assert len(a_dwarfs) >= 3
    for spectrum in a_dwarfs:
        decision = inspector.begin(spectrum=spectrum, task=get_task("A"), use_tool=False).decision
        assert decision is not None
        texts = " ".join(f["text"] for f in decision["evidence"]["findings"])
        assert "subdwarf or white dwarf" not in texts


def test_it_refits_the_stored_calibration_from_the_development_part(
    development_scores: list,
) -> None:
    stored = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))["tasks"]
    for task, fit in fit_calibration(development_scores).items():
        assert fit["method"] == stored[task]["method"], task
        for key in ("slope", "intercept", "a", "b", "c", "scope_pull"):
            if key in fit:
                assert fit[key] == pytest.approx(stored[task][key], abs=1e-3), (task, key)
        assert fit["scope_n"] == stored[task]["scope_n"], task


def test_it_reaches_the_reported_validation_figures(validation_scores: list) -> None:
    from agent.policies.rule_based import default_calibration
    from agent.policies.rule_based.inspector import default_scope_pull

    calibration, pulls = default_calibration(), default_scope_pull()
    confident_wrong = answers = 0
    for task in TASKS:
        rows = [s for s in validation_scores if s.task == task]
        result = report(rows, calibration, pulls)
        confident_wrong += result.confident_wrong
        answers += result.n
        assert result.ece <= MAX_VALIDATION_ECE, task
        if task in REPORTED_VALIDATION_BALANCED_ACCURACY:
            reported = REPORTED_VALIDATION_BALANCED_ACCURACY[task]
            assert math.isclose(result.balanced_accuracy, reported, abs_tol=TOLERANCE), task
    assert answers > 5000
    assert confident_wrong <= REPORTED_VALIDATION_CONFIDENT_WRONG, (confident_wrong, answers)


def test_it_tells_the_o_stars_from_the_b0_b1_stars_by_the_mk_ratio(corpus: list) -> None:
    """He II 4687/5412 persist into B0-B0.5; He II 4542 against He I 4471 decides. The Pickles
    B0 V of the validation part was answered O at 0.92 before this rule (issue 13)."""
    inspector = RuleBasedInspector()
    # the Pickles and BPGS stars of issue 13; the library stars are measured by real_bench
    hot = [
        (e, s)
        for e, s in corpus
        if e.source != "mangadap" and (e.subclass[:1] == "O" or e.subclass[:2] in ("B0", "B1"))
    ]
    assert {e.id for e, _ in hot} >= {"pickles-2", "pickles-60", "pickles-1", "pickles-3"}
    for entry, spectrum in hot:
        decision = inspector.begin(spectrum=spectrum, task=get_task("O"), use_tool=False).decision
        assert decision is not None
        assert decision["prediction"] == entry.label("O"), entry.id
        if entry.subclass[:1] == "B":  # and they stay B stars
            decision = inspector.begin(
                spectrum=spectrum, task=get_task("B"), use_tool=False
            ).decision
            assert decision is not None
            texts = " ".join(f["text"] for f in decision["evidence"]["findings"])
            if "4026/4471/4922 (not covered)" in texts:
                # BPGS' 10 Å pixels hold no measurable He I line: the answer says so and is
                # not confident (the scope pull's ceiling, MAX_PULL: below 0.9), whatever the
                # fitted pull (0.75 -> 0.78 since the development fits sat at the old limit)
                subjects = " ".join(note["subject"] for note in decision["evidence"]["scope"])
                assert "He I 4471 sampled too coarsely" in subjects, entry.id
                assert decision["confidence"] <= 0.5 + MAX_PULL / 2 < 0.9, entry.id
            else:
                assert decision["prediction"] == "YES", entry.id
