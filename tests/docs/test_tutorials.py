"""The tutorials and guides follow the app (issue 37 item 11): every app URL they name resolves,
every key they name is a key the page has, every project path they name exists, the workflow
states they describe are the states the services reach, and figures quoted in several places come
from one source."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from django.urls import Resolver404, resolve

from annotation.curation import services as curation_services
from annotation.curation.models import CurationState
from annotation.rating.views import OUTCOME_KEYS
from tests.factories import UserFactory, make_curation

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(
    [
        *(DOCS / "tutorials").glob("*.md"),
        *(DOCS / "guides").glob("*.md"),
        DOCS / "index.md",
        ROOT / "README.md",
    ]
)
# `/curation/drafts/new/`, `/rating/` ...: an app path in backticks (no placeholder in it).
APP_URL = re.compile(r"`(/[a-z0-9_\-/]*)`")
# `agent/data/lamost/`, `docs/...`: a path in the project, in backticks.
PROJECT_PATH = re.compile(
    r"`((?:agent|annotation|docs|tests|templates|static|training|webapp)/[\w.\-/]*)`"
)
FIGURES_SNIPPET = DOCS / "_snippets" / "inspector-figures.md"


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


FILESYSTEM = ("/usr/", "/srv/", "/etc/", "/var/", "/tmp/", "/home/", "/opt/", "/dev/", "//")


def _app_urls(page: Path) -> list[str]:
    """App paths in backticks; file-system paths (``/usr/bin/chromium``) are not URLs."""
    return [url for url in APP_URL.findall(page.read_text()) if not url.startswith(FILESYSTEM)]


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_it_names_only_urls_the_app_serves(page: Path) -> None:
    missing = []
    for url in _app_urls(page):
        try:
            resolve(url)
        except Resolver404:
            missing.append(url)
    assert missing == [], f"{_page_id(page)} names URLs the app does not serve"


def test_it_finds_the_urls_the_tutorials_name() -> None:
    """The URL check reads something: the tutorials name these pages."""
    named = {url for page in PAGES for url in _app_urls(page)}
    assert {"/evaluations/", "/rating/", "/curation/", "/vetting/", "/datasets/"} <= named


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_it_names_only_project_paths_that_exist(page: Path) -> None:
    missing = [
        path
        for path in PROJECT_PATH.findall(page.read_text())
        # generated at build time (docs reference pages, the built HTML) are not in a clone
        if "generated" not in path and "_build" not in path and not (ROOT / path).exists()
    ]
    assert missing == [], f"{_page_id(page)} names paths a fresh clone does not have"


@pytest.mark.django_db
def test_it_loads_the_first_ten_minutes_spectra_from_a_folder_a_clone_has() -> None:
    """ "the two real LAMOST spectra shipped in `agent/data/lamost/` (data set `lamost-examples`)":
    the demo's loader, run as `make demo` runs it, stores exactly those."""
    from annotation.management.commands.demo_setup import Command
    from annotation.spectra.models import Spectrum

    text = " ".join((DOCS / "tutorials" / "first-ten-minutes.md").read_text().split())
    assert "../shared" not in text
    assert "shipped in `agent/data/lamost/` (data set `lamost-examples`" in text
    Command(stdout=io.StringIO(), stderr=io.StringIO())._load_real_lamost()
    stored = Spectrum.objects.filter(dataset="lamost-examples")
    assert sorted(stored.values_list("survey", flat=True)) == ["LAMOST", "LAMOST"]


# --- keys ------------------------------------------------------------------------------------


def _pair_keys(text: str) -> dict[str, str]:
    """{symbol: meaning} of 'pairs ... `←` (left better) / `T` (tie) / `→` (right better)'."""
    return dict(re.findall(r"`([^`\s]{1,2})` \((left better|tie|right better)\)", text))


@pytest.mark.parametrize("page", ["tutorials/rating.md", "guides/rater.md"])
def test_it_names_the_pair_keys_the_pairs_page_uses(page: str) -> None:
    named = _pair_keys((DOCS / page).read_text())
    used = {key["symbol"]: key["label"] for key in OUTCOME_KEYS}
    assert named == used


def _data_keys(folder: str) -> set[str]:
    return {
        key.upper()
        for template in (ROOT / "templates" / folder).glob("*.html")
        for key in re.findall(r'data-key="(\w)"', template.read_text())
    }


def test_it_names_only_curation_keys_the_curation_pages_have() -> None:
    text = (DOCS / "tutorials" / "curating-trajectories.md").read_text()
    # "`K` keeps it", "`D` discards", "(`C`)", "`A`pprove", "`Y` / `N`": single capitals.
    named = set(re.findall(r"`([A-Z])`", text))
    assert named >= {"K", "D", "C", "S", "U", "A", "R", "Y", "N"}
    assert named - _data_keys("curation") == set()


# --- states ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_keeps_a_trajectory_in_audit_until_the_second_auditor_as_the_tutorial_says() -> None:
    """curating-trajectories.md, step 1: a request for changes does not send the trajectory back
    at once; it stays in audit until the second auditor has decided, then goes to the reviser."""
    text = " ".join((DOCS / "tutorials" / "curating-trajectories.md").read_text().split())
    assert "stays *in audit* until the second auditor has decided too" in text
    assert "goes back to the reviser (*changes requested*)" in text
    reviser, first, second = (UserFactory(roles=["expert"]) for _ in range(3))
    curation = make_curation()
    curation_services.curation_screen(curation=curation, user=first, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    curation.refresh_from_db()
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    for auditor in (first, second):
        curation_services.curation_claim_audit(curation=curation, user=auditor)
    curation_services.audit_submit(
        curation=curation,
        user=first,
        version_number=curation.head_number,
        verdict="request_changes",
        comment="Zoom on H-alpha.",
    )
    curation.refresh_from_db()
    assert curation.state == CurationState.IN_AUDIT
    curation_services.audit_submit(
        curation=curation, user=second, version_number=curation.head_number, verdict="approve"
    )
    curation.refresh_from_db()
    assert curation.state == CurationState.CHANGES_REQUESTED


# --- figures from one source -----------------------------------------------------------------


def _words(text: str) -> str:
    return " ".join(text.split())


def test_it_quotes_the_inspector_figures_from_one_source_in_the_readme_and_the_docs() -> None:
    snippet = _words(FIGURES_SNIPPET.read_text())
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- figures: .*? -->\n(.*?)<!-- /figures -->", readme, re.S)
    assert block, "README.md marks the figures it quotes from docs/_snippets/inspector-figures.md"
    assert _words(block.group(1)) == snippet, "README.md's figures differ from their source"
    index = (DOCS / "index.md").read_text()
    assert "```{include} _snippets/inspector-figures.md" in index


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_it_quotes_no_older_inspector_figures(page: Path) -> None:
    """The docs index gave v2's range (0.75-1.00, 9 wrong) while the README gave v3's."""
    text = _words(page.read_text())
    assert "0.75-1.00 per task" not in text
    assert "not met yet" not in text
