"""The typed outside set (issue 36): its manifest, its label rule, the fetch from a pinned source
archive, and (where the cache holds it) every listed spectrum read as a user would read it."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import tarfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent import outside_set
from agent.outside_set import (
    OutsideSetUnavailable,
    entries_of,
    fetch,
    load_entry,
    load_manifest,
    manifest_problems,
)
from agent.real_corpus import load_manifest as corpus_manifest
from agent.real_corpus import object_key
from agent.spectra import SpectrumFormatError, load_spectra

SHIPPED = json.loads(outside_set.MANIFEST_PATH.read_text(encoding="utf-8"))
ROOT = "pkg-1.0/pkg/data/standards/"
# the first rows of Hamuy et al.'s table of HR 718 as pypeit ships it (wavelength, flux in
# 1e-16 erg/s/cm2/A, flux in mJy, bin)
HAMUY_ROWS = "".join(
    f"      {3300.0 + 16 * i:.4f}     0.{83983 - 40 * i}E+06     0.30507E+05            16.0\n"
    for i in range(60)
)


def star(name: str, mk_type: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": mk_type,
        "type_source": "literature",
        "reference": "a reference",
        "aliases": [],
        "excluded_from": [],
        "note": "",
        **extra,
    }


def document(stars: list[dict[str, Any]], spectra: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "sources": {
            "pkg": {
                "package": "pkg",
                "version": "1.0",
                "file": "pkg-1.0.tar.gz",
                "kind": "sdist",
                "sha256": "0" * 64,
                "root": ROOT,
            }
        },
        "stars": stars,
        "spectra": spectra,
        "left_out": [],
    }


def spectrum_row(identifier: str, name: str, member: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": identifier,
        "star": name,
        "member": member,
        "instrument": "x",
        "columns": None,
        "frame": None,
        **extra,
    }


def test_it_finds_nothing_wrong_in_the_shipped_manifest() -> None:
    assert manifest_problems(SHIPPED) == []


def test_it_names_what_is_wrong_in_a_manifest() -> None:
    broken = document(
        [star("A", "DA", type_source="guess"), star("B", "B2IV", excluded_from=["B"])],
        [
            spectrum_row("one", "A", "calspec/a_mod_005.fits"),
            spectrum_row("one", "C", "../b.fits"),
            spectrum_row("two", "B", "t.dat", columns=["wavelength", "ignore"]),
        ],
    )
    problems = "\n".join(manifest_problems(broken))
    assert "A: type_source" in problems
    assert "B: a task left out needs its reason" in problems
    assert "spectrum id 'one' twice" in problems
    assert "star 'C' is not listed" in problems
    assert "leaves the source's root" in problems
    assert "a_mod_005.fits is a model" in problems
    assert "two:" in problems  # a declaration without a flux or ab_mag column


@pytest.mark.parametrize(
    ("mk_type", "excluded", "expected"),
    [
        ("DA1", [], {"WD": "YES", "O": "NO", "B": "NO", "A": "NO", "MG": "NO"}),
        ("DO2", [], {"WD": "YES", "O": "NO", "B": "NO"}),
        # a hot subdwarf is no normal O star and no white dwarf
        ("sdO", [], {"O": None, "WD": "NO", "B": "NO"}),
        ("O9Vp", [], {"O": "YES", "B": "NO", "WD": "NO"}),
        ("B9.5Vn", [], {"B": "YES", "A": "NO"}),
        ("B2IV", ["B"], {"B": None, "O": "NO", "WD": "NO"}),
        ("M7V", [], {"MG": "NO"}),
        ("M", [], {"MG": None}),
        ("L3.5", [], {"O": "NO", "B": "NO", "A": "NO", "MG": "NO", "WD": "NO"}),
    ],
)
def test_it_labels_a_star_by_the_corpus_rule_and_its_own_exclusions(
    mk_type: str, excluded: list[str], expected: dict[str, str | None]
) -> None:
    note = "why" if excluded else ""
    (entry,) = entries_of(
        document(
            [star("S", mk_type, excluded_from=excluded, note=note)],
            [spectrum_row("s", "S", "s.fits")],
        )
    )
    assert {task: entry.label(task) for task in expected} == expected


def test_it_does_not_take_the_readme_op_of_a_hot_subdwarf_for_an_o_star() -> None:
    entries = {e.star.name: e for e in load_manifest()}
    assert entries["BD+28 4211"].label("O") is None
    assert entries["BD+75 325"].label("O") is None
    assert entries["HD 93521"].label("O") == "YES"


def test_it_keeps_every_shipped_star_typed_with_a_reference_and_five_positives_where_targeted() -> (
    None
):
    entries = load_manifest()
    for task in ("WD", "B", "A"):
        stars = {e.star.name for e in entries if e.label(task) == "YES"}
        assert len(stars) >= 5, task
    assert all(e.star.reference.strip() for e in entries)


def test_it_lists_the_hd_numbers_of_stars_the_corpus_also_holds() -> None:
    corpus = {object_key(entry.object) for entry in corpus_manifest()}
    shared = {e.star.name for e in load_manifest() if set(e.star.object_keys) & corpus}
    # theta Vir and eps Aqr are MILES stars; the benchmark leaves them out of the comparison
    assert {"HR 4963", "HR 7950"} <= shared


def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sha: str | None = None) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = HAMUY_ROWS.encode()
        info = tarfile.TarInfo(ROOT + "esofil/fhr718.dat")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    archive = cache / "wheels" / "pkg-1.0.tar.gz"
    archive.write_bytes(raw.getvalue())
    doc = document(
        [star("HR 718", "B9III")],
        [
            spectrum_row(
                "hamuy-hr718",
                "HR 718",
                "esofil/fhr718.dat",
                columns=["wavelength", "flux", "ignore", "ignore"],
                frame="air",
            )
        ],
    )
    doc["sources"]["pkg"]["sha256"] = sha or hashlib.sha256(archive.read_bytes()).hexdigest()
    monkeypatch.setenv("SPECVET_DATA_CACHE", str(cache))
    monkeypatch.setattr(outside_set, "_manifest", lambda: copy.deepcopy(doc))
    return cache


def test_it_extracts_the_listed_files_of_a_cached_source_and_reads_them_as_declared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = fake_source(tmp_path, monkeypatch)
    (path,) = fetch(download=False, quiet=True)
    assert path == cache / "extracted" / "outside" / "pkg" / "esofil" / "fhr718.dat"
    spectrum = load_entry(load_manifest()[0])
    assert spectrum.meta["outside_id"] == "hamuy-hr718"
    assert spectrum.meta["wavelength_frame"] == "air"
    # the flux column, not the mJy one: 0.83983E+06 at the first row
    assert spectrum.flux[0] == pytest.approx(0.83983e6)
    with pytest.raises(SpectrumFormatError, match="4 columns"):
        load_spectra(path)  # undeclared, the headerless table is refused, not guessed


def test_it_refuses_a_source_archive_whose_hash_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_source(tmp_path, monkeypatch, sha="f" * 64)
    with pytest.raises(OutsideSetUnavailable, match="SHA-256"):
        fetch(download=False, quiet=True)


def test_it_says_how_to_fetch_when_the_source_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = fake_source(tmp_path, monkeypatch)
    (cache / "wheels" / "pkg-1.0.tar.gz").unlink()
    with pytest.raises(OutsideSetUnavailable, match="make outside-data"):
        fetch(download=False, quiet=True)


# --- the real set, where the cache holds it -----------------------------------------------------


@pytest.fixture(scope="module")
def cached() -> list[Any]:
    try:
        fetch(download=False, quiet=True)
    except OutsideSetUnavailable as exc:
        pytest.skip(f"the outside set is not in the cache here (`make outside-data`): {exc}")
    return load_manifest()


def test_it_reads_every_listed_spectrum_with_optical_pixels_to_inspect(cached: list[Any]) -> None:
    short = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CALSPEC's float TNULLn cards
        for entry in cached:
            spectrum = load_entry(entry)
            wave = np.asarray(spectrum.wavelength)
            good = np.isfinite(np.asarray(spectrum.flux)) & (wave > 3800) & (wave < 7000)
            if spectrum.ivar is not None:
                good &= np.asarray(spectrum.ivar) > 0
            if spectrum.mask is not None:
                good &= ~np.asarray(spectrum.mask)
            if good.sum() < 30:  # 50 Å bins, fewer where the table skips lines
                short.append(entry.id)
    assert short == []


def test_it_refuses_every_ab_magnitude_table_of_the_set_as_a_bare_two_column_table(
    cached: list[Any], tmp_path: Path
) -> None:
    tables = [e for e in cached if e.columns and "ab_mag" in e.columns]
    assert tables
    for entry in tables:
        rows = np.loadtxt(outside_set.extracted_path(entry))[:, :2]
        bare = tmp_path / f"{entry.id}.dat"
        np.savetxt(bare, rows)
        with pytest.raises(SpectrumFormatError, match="looks like magnitudes"):
            load_spectra(bare)
