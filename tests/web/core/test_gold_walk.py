"""A vetter with a gold item waiting learns nothing of its answer, on any URL of the role matrix.

Every named URL (the role matrix's walk, tests/web/core/test_url_access.py) is read by an expert
who is also an ML engineer (so they reach every page but staff's) while the world's candidate is
a gold item waiting for them, its path parameters pointing at the gold item's entry, candidate,
run and spectrum; list pages, APIs and exports are read again filtered on vetting and on the
gold item's task. Each response (pages, JSON, CSV, VOTable, FITS, HTML reports) is read in three
states of the same world:

- ``yes``: two experts said YES, so the spectrum is labelled YES (agreed): the gold answer;
  a vetted-label export (GRPO rows) holds it;
- ``no``: the same two experts said NO instead (labelled NO, agreed), and a second export;
- ``none``: they withdrew their decisions (no label at all, as on any other queued spectrum).

A URL leaks when what it answers differs between the states (times and CSRF tokens aside), or
when it shows the labelling experts' names or comment in any state. The figures (URLs tried,
leaks) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from annotation.inspections import decisions as inspection_decisions
from annotation.inspections import services as inspection_services
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.learning import queue
from annotation.learning import services as learning_services
from annotation.spectra.labels import LabelState
from annotation.spectra.services import label_export_create
from tests.factories import UserFactory
from tests.web.core.test_url_access import LOGOUT, PATTERNS, PUBLIC, url_for
from tests.web.security_world import World, world_rolled_back

pytestmark = pytest.mark.django_db

MARK = "gold-label-comment-7Q"  # the labelling experts' comment
LABELLERS = ("goldlabeller-ann", "goldlabeller-bob")

# Extra reads of the URLs whose query selects or counts on vetting (task code of the world: XSS).
VARIANTS: dict[str, list[str]] = {
    name: [
        "task=XSS",
        "task=XSS&label_state=agreed",
        "task=XSS&label_state=none",
        "task=XSS&expert_decision=YES",
        "task=XSS&expert_decision=NO",
        "task=XSS&expert_decision=none",
    ]
    for name in (
        "catalog_list",
        "api_catalog_list",
        "catalog_export_csv",
        "catalog_export_votable",
        "catalog_export_fits",
    )
}
VARIANTS["catalog_detail"] = ["task=XSS&label_state=agreed", "task=XSS&expert_decision=YES"]
VARIANTS["catalog_compare"] = ["task=XSS"]
VARIANTS["api_model_comparison"] = ["task=XSS"]
VARIANTS["calibration"] = ["task=XSS"]
VARIANTS["spectrum_list"] = ["task=XSS"]
VARIANTS["api_spectrum_list"] = ["task=XSS"]

_NOISE = (
    (re.compile(rb'name="csrfmiddlewaretoken" value="[^"]*"'), b"CSRF"),
    (re.compile(rb'(?i)(csrf[-_]?token["\']?\s*(?:content=|:|=)\s*["\'])[^"\']*'), rb"\1CSRF"),
    (
        re.compile(
            rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
        ),
        b"T",
    ),
    (re.compile(rb"\d{8}T\d{6}Z"), b"T"),
    (re.compile(rb'"seconds":\s*[0-9.e-]+'), b'"seconds":S'),  # the redshift fit's duration
    (re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), b"U"),  # Bokeh
    (re.compile(rb"\bp\d{4,}\b"), b"P"),  # Bokeh's model ids
)
# The pages that show a label to whoever may read it (URL name -> the query of the URL read).
FILTERED = ("catalog_list", "api_catalog_list", "catalog_compare", "api_model_comparison")
EXPORTS = ("catalog_export_csv", "catalog_export_votable", "catalog_export_fits")
ENTRY = ("catalog_detail", "api_catalog_detail", "catalog_report")
SHOWN = dict.fromkeys((*FILTERED, *EXPORTS), "?task=XSS") | dict.fromkeys(
    (*ENTRY, "duplicate_group", "evaluation_list"),
    "",  # "": the URL itself, without a query
)
# The vetter's own queue: with no label at all (state "none") the item's candidates wait there as
# any unlabelled one, which they may know; the other two states must still answer alike.
QUEUE = {"home", "vetting_queue", "api_vetting_next"}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        "plain text", django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


def _body(response: Any) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


def _normalized(body: bytes) -> bytes:
    for pattern, replacement in _NOISE:
        body = pattern.sub(replacement, body)
    return body


def _urls(world: World) -> list[tuple[str, str]]:
    """(name, URL) of every GET the walk makes: each named URL, and its variants."""
    urls = []
    for name, params, integers in PATTERNS:
        if name in PUBLIC | LOGOUT or name.startswith("admin:"):
            continue
        url = url_for(name, params, integers, world)
        urls.append((name, url))
        urls.extend((name, f"{url}?{query}") for query in VARIANTS.get(name, []))
    return urls


def _query(url: str) -> str:
    return url[url.index("?") :] if "?" in url else ""


def _read(client: Client, urls: list[tuple[str, str]]) -> dict[str, tuple[int, bytes]]:
    seen = {}
    for _, url in urls:
        response = client.get(url)
        seen[url] = (response.status_code, _normalized(_body(response)))
    return seen


def _decide(world: World, labellers: list[Any], decision: str | None) -> None:
    """The labellers' decisions, and, when they make a label, a vetted-label export of it."""
    for expert in labellers:
        if decision is None:
            inspection_decisions.expert_decision_withdraw(candidate=world.candidate, expert=expert)
        else:
            inspection_services.expert_decision_record(
                candidate=world.candidate,
                expert=expert,
                decision=decision,
                comment=MARK,
                quality=3,
                issues=["sky"],
            )
    if decision is not None:
        label_export_create(actor=world.users["outsider"])


def _label(world: World) -> tuple[str, str]:
    entry = CatalogEntry.objects.get(pk=world.entry.pk)
    return entry.vetted_label, entry.label_state


def gold_walk(world: World) -> tuple[list[tuple[str, str]], list[str]]:
    """Walk every URL in the three states; return (URLs tried, leaks found)."""
    # The world's second run on the spectrum stands for another model, so /catalog/compare/
    # compares two models on the gold spectrum.
    second = InspectionRun.objects.exclude(pk=world.run.pk).get(candidates__spectrum=world.spectrum)
    for rows in (
        InspectionRun.objects.filter(pk=second.pk),
        CatalogEntry.objects.filter(run=second),
    ):
        rows.update(model_key="other-model@v2", model_label="other model v2")
    labellers = [UserFactory(username=name, roles=["expert"]) for name in LABELLERS]
    _decide(world, labellers, "YES")
    assert _label(world) == ("YES", LabelState.AGREED)
    gold = learning_services.gold_item_mark(candidate=world.candidate, actor=world.users["staff"])
    vetter = UserFactory(username="gold-vetter", roles=["expert", "ml_engineer"])
    assert list(queue.gold_candidates(vetter)) == [world.candidate]
    client = Client(raise_request_exception=False)
    client.force_login(vetter)
    # A viewer (who vets nothing) reads the pages that show labels: they do change with it.
    control = Client(raise_request_exception=False)
    control.force_login(UserFactory(username="gold-control", roles=["viewer"]))
    urls = _urls(world)
    shown = [(name, url) for name, url in urls if name in SHOWN and _query(url) == SHOWN[name]]
    states = {"yes": _read(client, urls)}
    controls = {"yes": _read(control, shown)}
    _decide(world, labellers, "NO")
    assert _label(world) == ("NO", LabelState.AGREED)
    states["no"] = _read(client, urls)
    controls["no"] = _read(control, shown)
    assert len(shown) == len(SHOWN)
    for _, url in shown:
        assert states["yes"][url][0] == controls["yes"][url][0] == 200, url
        assert controls["yes"][url] != controls["no"][url], url
    _decide(world, labellers, None)
    assert _label(world)[0] == ""
    states["none"] = _read(client, urls)
    assert list(queue.gold_candidates(vetter)) == [world.candidate] and gold.active
    leaks = []
    markers = [MARK.encode(), *(name.encode() for name in LABELLERS)]
    for name, url in urls:
        answers = {
            state: seen[url]
            for state, seen in states.items()
            if not (state == "none" and name in QUEUE)
        }
        if len(set(answers.values())) > 1:
            differ = sorted(state for state in answers if answers[state] != answers["yes"])
            leaks.append(f"{name} {url}: differs in state {', '.join(differ)}")
        elif any(marker in body for _, body in answers.values() for marker in markers):
            leaks.append(f"{name} {url}: shows the labelling experts' decisions")
    return urls, leaks


def test_it_shows_a_vetter_nothing_of_a_waiting_gold_item_s_label_on_any_url(world):
    urls, leaks = gold_walk(world)
    print(f"\ngold walk: {len(urls)} URLs tried ({len({n for n, _ in urls})} named), {len(leaks)}")
    print("\n".join(leaks))
    assert len(urls) > 200
    assert leaks == []
