"""The quality flag of a vetting decision (issue 26): a 0-4 quality, issue flags and a comment,
stored, audit-logged, in the API, the catalog list and detail, every export and the label's
provenance."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest
from astropy.io import fits
from astropy.io.votable import parse_single_table
from django.urls import reverse

from annotation.core.models import AuditLog
from annotation.inspections import decisions, services
from annotation.inspections.models import CatalogEntry, ExpertDecision
from annotation.inspections.quality import COMMENT_MAX_CHARS, ISSUE_FLAGS, QUALITY_VALUES
from annotation.spectra.models import SpectrumLabel
from tests.web.catalog import test_vetting

HOSTILE = test_vetting.HOSTILE
run_candidates = test_vetting.run_candidates  # the fixture

pytestmark = pytest.mark.django_db


def decide(client, candidate, decision, **extra):
    return client.post(
        reverse("vetting_decide"), {"candidate": candidate.pk, "decision": decision, **extra}
    )


def test_it_stores_quality_issues_and_comment_and_logs_them(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    response = decide(
        expert_client,
        candidate,
        "YES",
        quality="3",
        issues=["low_snr", "sky"],
        comment="broad H-alpha",
    )
    assert response.status_code == 302
    record = ExpertDecision.objects.get(candidate=candidate)
    assert (record.quality, record.issues, record.comment) == (
        3,
        ["sky", "low_snr"],
        "broad H-alpha",
    )
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.expert_quality, entry.expert_issues) == (3.0, "sky,low_snr")
    log = AuditLog.objects.get(action="expert_decision", object_pk=str(candidate.pk))
    assert log.data["quality"] == 3
    assert log.data["issues"] == ["sky", "low_snr"]


def test_it_averages_the_experts_qualities_and_joins_their_flags(run_candidates, expert, outsider):
    (candidate,) = run_candidates([0.6])
    services.expert_decision_record(
        candidate=candidate, expert=expert, decision="YES", quality=4, issues=["artefact"]
    )
    services.expert_decision_record(
        candidate=candidate, expert=outsider, decision="YES", quality=1, issues=["sky"]
    )
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.expert_quality, entry.expert_issues) == (2.5, "sky,artefact")
    decisions.expert_decision_withdraw(candidate=candidate, expert=outsider)
    entry.refresh_from_db()
    assert (entry.expert_quality, entry.expert_issues) == (4.0, "artefact")


def test_it_leaves_quality_empty_when_none_is_given(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    decide(expert_client, candidate, "NO")
    assert ExpertDecision.objects.get(candidate=candidate).quality is None
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.expert_quality, entry.expert_issues) == (None, "")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quality": "5"}, "quality must be 0-4; got 5"),
        ({"quality": "-1"}, "quality must be a whole number 0-4"),
        ({"issues": ["sky", "ghost"]}, "issues must be among"),
        ({"comment": "x" * (COMMENT_MAX_CHARS + 1)}, f"at most {COMMENT_MAX_CHARS:,} characters"),
    ],
)
def test_it_refuses_a_bad_quality_flag_with_a_clear_message_and_stores_nothing(
    expert_client, run_candidates, extra, message
):
    (candidate,) = run_candidates([0.6])
    response = decide(expert_client, candidate, "YES", **extra)
    assert not ExpertDecision.objects.exists()
    page = expert_client.get(response["Location"]).content.decode()
    assert message in page


def test_it_offers_a_key_for_each_quality_and_flag_without_clashing(expert_client, run_candidates):
    run_candidates([0.6])
    body = expert_client.get(reverse("vetting_queue")).content.decode()
    keys = re.findall(r'data-key="([^"]+)"', body)
    assert len(keys) == len(set(keys)), keys
    for value in QUALITY_VALUES:
        assert f'name="quality" value="{value}" data-key="{value}"' in body
    for flag in ISSUE_FLAGS:
        assert f'value="{flag.code}" data-key="{flag.key}"' in body
    assert {"y", "n", "u", "s"} <= set(keys)
    # the scale is defined where the keys are listed (the "?" sheet reads these titles)
    assert "quality 4, confident: two or more secure features decide it" in body


def test_it_shows_the_quality_flag_in_the_catalog_list_detail_and_label_provenance(
    expert_client, run_candidates, expert, outsider
):
    (candidate,) = run_candidates([0.6])
    services.expert_decision_record(
        candidate=candidate, expert=outsider, decision="YES", quality=2, issues=["extraction"]
    )
    decide(expert_client, candidate, "YES", quality="4", comment=HOSTILE)
    entry = CatalogEntry.objects.get(candidate=candidate)
    listing = expert_client.get(reverse("catalog_list")).content.decode()
    assert "q3.0" in listing and "⚑ extraction" in listing
    detail = expert_client.get(reverse("catalog_detail", args=[entry.pk])).content.decode()
    assert HOSTILE not in detail and "&lt;script&gt;" in detail
    provenance = detail.split('class="table label-provenance"')[1]
    assert re.search(r'<td class="num">2</td>\s*<td class="small">extraction</td>', provenance)
    assert re.search(r'<td class="num">4</td>', provenance)
    label = SpectrumLabel.objects.get(spectrum_id=candidate.spectrum_id)
    assert sorted((d["quality"], tuple(d["issues"])) for d in label.decisions) == [
        (2, ("extraction",)),
        (4, ()),
    ]


def test_it_exports_the_quality_flag_in_csv_votable_and_fits(expert_client, run_candidates):
    first, second = run_candidates([0.6, 0.6])
    decide(expert_client, first, "YES", quality="3", issues=["calibration", "other"])
    wanted = {first.pk: (3.0, "calibration,other"), second.pk: (None, "")}
    entries = {e.pk: e.candidate_id for e in CatalogEntry.objects.all()}

    body = b"".join(expert_client.get(reverse("catalog_export_csv")).streaming_content)
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    got = {
        entries[int(r["id"])]: (
            float(r["expert_quality"]) if r["expert_quality"] else None,
            r["expert_issues"],
        )
        for r in rows
    }
    assert got == wanted

    def as_python(quality, issues):
        # NaN (FITS) or masked (VOTable reads NaN as a null) means no quality was given
        missing = np.ma.is_masked(quality) or np.isnan(quality)
        return (None if missing else float(quality), str(issues))

    response = expert_client.get(reverse("catalog_export_votable"))
    table = parse_single_table(io.BytesIO(b"".join(response.streaming_content))).to_table()
    got = {entries[int(r["id"])]: as_python(r["expert_quality"], r["expert_issues"]) for r in table}
    assert got == wanted

    response = expert_client.get(reverse("catalog_export_fits"))
    with fits.open(io.BytesIO(b"".join(response.streaming_content))) as hdus:
        data = hdus[1].data
        got = {
            entries[int(r["id"])]: as_python(r["expert_quality"], r["expert_issues"]) for r in data
        }
    assert got == wanted


def test_it_takes_and_gives_the_quality_flag_through_the_api(api_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    url = reverse("api_expert_decision_create")
    refused = api_client.post(
        url, {"candidate": candidate.pk, "decision": "YES", "quality": 7}, format="json"
    )
    assert refused.status_code == 400
    refused = api_client.post(
        url,
        {"candidate": candidate.pk, "decision": "YES", "comment": "x" * (COMMENT_MAX_CHARS + 1)},
        format="json",
    )
    assert refused.status_code == 400
    assert "at most" in refused.json()["detail"]
    created = api_client.post(
        url,
        {"candidate": candidate.pk, "decision": "YES", "quality": 2, "issues": ["low_snr"]},
        format="json",
    )
    assert created.status_code == 201
    assert (created.json()["quality"], created.json()["issues"]) == (2, ["low_snr"])
    entry = CatalogEntry.objects.get(candidate=candidate)
    detail = api_client.get(reverse("api_catalog_detail", args=[entry.pk])).json()
    assert (detail["expert_quality"], detail["expert_issues"]) == (2.0, "low_snr")
    assert detail["expert_decisions"][0]["quality"] == 2


def test_it_puts_the_quality_flag_in_the_entrys_html_report(expert_client, run_candidates):
    (candidate,) = run_candidates([0.6])
    decide(expert_client, candidate, "NO", quality="1", issues=["sky"], comment=HOSTILE)
    entry = CatalogEntry.objects.get(candidate=candidate)
    report = expert_client.get(reverse("catalog_report", args=[entry.pk])).content.decode()
    assert re.search(r"<td>NO</td><td>1</td><td>sky</td>", report)
    assert HOSTILE not in report
