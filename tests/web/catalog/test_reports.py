"""The standalone HTML report of a catalog entry (annotation/catalog/reports.py): offline, escaped, with
the same read rules as the detail page."""

from __future__ import annotations

import base64
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.core.models import ImageBlob
from annotation.inspections import jobs, services
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.rating.models import CampaignItem, RatingCampaign
from annotation.spectra.models import Task
from tests.factories import (
    ScriptedPolicy,
    UserFactory,
    answer_turn,
    make_spectrum,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def entry(monkeypatch, expert, django_capture_on_commit_callbacks) -> CatalogEntry:
    """A finished candidate: an H-alpha call whose reasoning carries a script tag, then YES."""
    turns = [
        tool_call_turn(6500, 6630, "H-alpha", think=f"Look at H-alpha first {HOSTILE}."),
        answer_turn(),
    ]
    monkeypatch.setattr(jobs, "policy_for", lambda spec, sampling=None: ScriptedPolicy(turns))
    with django_capture_on_commit_callbacks(execute=True):
        run = services.inspection_run_create(
            task=Task.objects.get(code="CV"),
            spectrum_ids=[make_spectrum(object_id="REP-1").pk],
            policy_spec={"kind": "rule-based"},
            created_by=expert,
            name="report run",
        )
    InspectionRun.objects.filter(pk=run.pk).update(
        policy_spec={"kind": "openai", "model": "m", "api_key": "sk-SECRET", "base_url": "http://x"}
    )
    return CatalogEntry.objects.get(candidate__run=run)


def download(client: Client, entry: CatalogEntry):
    return client.get(reverse("catalog_report", args=[entry.pk]))


@pytest.mark.parametrize("role", ["viewer", "expert"])
def test_it_downloads_a_standalone_report(client, entry, role):
    client.force_login(UserFactory(username=f"reader-{role}", roles=[role]))
    response = download(client, entry)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert response["Content-Disposition"] == (
        f'attachment; filename="specvet-{entry.pk}-REP-1.html"'
    )
    body = response.content.decode()
    assert body.startswith("<!DOCTYPE html>") or "<!DOCTYPE html>" in body[:400]
    # BokehJS inlined, nothing fetched from a CDN or any server.
    assert "Bokeh" in body and "cdn.bokeh.org" not in body
    assert not re.search(r"<script[^>]*\bsrc=", body)
    assert not re.search(r"""<link[^>]*href=["']https?:""", body)
    assert "Bokeh.embed.embed_items" in body


def test_it_escapes_the_models_reasoning(expert_client, entry):
    body = download(expert_client, entry).content.decode()
    assert "Look at H-alpha first &lt;script&gt;alert(1)&lt;/script&gt;." in body
    assert HOSTILE not in body


def test_it_shows_the_steps_verdict_and_provenance(expert_client, entry):
    body = download(expert_client, entry).content.decode()
    rollout = entry.candidate.rollouts.get()
    shas = [rollout.data["steps"][0]["tool_result"]["image"]["png_sha256"]]
    shas.append(rollout.data["initial_image"]["png_sha256"])
    for sha in shas:
        png = bytes(ImageBlob.objects.get(sha256=sha).png)
        assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in body
    assert "spectral_visualization_tool" in body
    assert "Broad Balmer emission with He I." in body
    assert "agent: YES" in body
    assert entry.run.code_version and entry.run.code_version in body
    assert "sk-SECRET" not in body and "http://x" not in body
    provenance = body[body.index("<h2>Provenance</h2>") :]  # BokehJS itself names api_key
    assert "kind" in provenance and "api_key" not in provenance and "base_url" not in provenance
    # The site serves no image to the report: it must open without the site.
    assert reverse("catalog_image", args=[shas[0]]) not in body


def test_it_links_the_report_from_the_detail_page(expert_client, entry):
    body = expert_client.get(reverse("catalog_detail", args=[entry.pk])).content.decode()
    assert reverse("catalog_report", args=[entry.pk]) in body


def test_it_reports_an_entry_without_a_candidate(expert_client, entry):
    bare = CatalogEntry.objects.create(
        run=entry.run,
        object_id=f'BULK"1 {HOSTILE}',
        survey="LAMOST",
        task_code="CV",
        policy_name="p",
    )
    response = download(expert_client, bare)
    assert response.status_code == 200
    body = response.content.decode()
    assert "imported without its candidate" in body and HOSTILE not in body
    # The untrusted object id reaches the header only as safe characters.
    assert response["Content-Disposition"] == (
        f'attachment; filename="specvet-{bare.pk}-BULK_1_script_alert_1_script.html"'
    )


def test_it_hides_an_entry_whose_run_feeds_an_open_campaign(client, entry):
    erin = UserFactory(username="erin", roles=["expert", "rater"])
    campaign = RatingCampaign.objects.create(name="blind")
    campaign.raters.add(erin)
    rollout = entry.candidate.rollouts.get()
    CampaignItem.objects.create(
        campaign=campaign,
        blind_id="B1",
        data=rollout.data,
        policy_name="scripted",
        source=f"rollout:{rollout.pk}",
        task=Task.objects.get(code="CV"),
    )
    client.force_login(erin)
    assert download(client, entry).status_code == 404
    campaign.closed = True
    campaign.save()
    assert download(client, entry).status_code == 200


def test_it_refuses_a_role_without_browse(client, entry):
    client.force_login(UserFactory(username="maury", roles=["rater"]))
    assert download(client, entry).status_code == 403


def test_it_reports_a_trajectory_with_a_garbled_window(expert_client, entry):
    rollout = entry.candidate.rollouts.get()
    rollout.data["steps"][0]["tool_result"]["image"]["wavelength_range"] = ["red", None]
    rollout.save()
    response = download(expert_client, entry)
    assert response.status_code == 200
    assert "spectral_visualization_tool" in response.content.decode()
