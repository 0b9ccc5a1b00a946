"""The combined inspector on real development spectra (issue 36): a B star seen through dust is
not rejected as too cool, and the library's reddening is fitted, not read as temperature. Each
spectrum is compared with the library without its own object (as the benchmark scores the
development part); the tests skip where the real-data cache cannot be built."""

from __future__ import annotations

import numpy as np
import pytest

from agent.inspection_tasks import get_task
from agent.library_match import default_matcher, redden
from agent.policies.rule_based import RuleBasedInspector
from agent.real_corpus import CorpusUnavailable, fetch, load_entry, load_manifest, object_key


@pytest.fixture(scope="module")
def real() -> dict[str, object]:
    try:
        fetch(quiet=True)
    except CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache cannot be built here: {exc}")
    if default_matcher() is None:
        pytest.skip("the library could not be prepared from the real-data cache")
    return {entry.id: entry for entry in load_manifest()}


@pytest.mark.parametrize(
    "identifier",
    # B2 IV, B8 II-III, B0.5 II: rule-based/v3 answered each, reddened by E(B-V) = 1, "NO (0.94):
    # a continuum too cool for most B stars"
    ["miles-m0011", "miles-m0714", "stelib-HD040111"],
)
def test_it_does_not_reject_a_reddened_b_star_as_too_cool(real, identifier: str) -> None:
    entry = real[identifier]
    assert entry.split == "development" and "B" in entry.positive_for
    spectrum = load_entry(entry)
    matcher = default_matcher()
    assert matcher is not None
    before = matcher.match(spectrum, exclude_object=object_key(entry.object))
    spectrum.flux = redden(spectrum.rest_wavelength, spectrum.flux, 1.0)
    match = matcher.match(spectrum, exclude_object=object_key(entry.object))
    assert before is not None and match is not None
    decision = (
        RuleBasedInspector()
        .begin(spectrum=spectrum, task=get_task("B"), use_tool=False, match=match)
        .decision
    )
    assert decision is not None
    wrong_and_sure = decision["prediction"] == "NO" and decision["confidence"] >= 0.9
    assert not wrong_and_sure, decision["evidence"]
    assert decision["evidence"]["library"]["nearest_positive"] is not None
    # the dust is fitted, not read as type: against every library spectrum the fitted E(B-V)
    # grows by the one applied (the library stars carry their own reddening, so E(B-V) is
    # relative to each) and the distances, read on continuum-divided spectra, barely move
    compared = np.isfinite(before.distances) & np.isfinite(match.distances)
    shift = (match.ebv - before.ebv)[compared]
    assert np.median(shift) == pytest.approx(1.0, abs=0.05)
    ratio = match.distances[compared] / np.maximum(before.distances[compared], 1e-6)
    assert np.median(ratio) == pytest.approx(1.0, abs=0.1)
    assert np.argmin(match.distances) == np.argmin(before.distances)
