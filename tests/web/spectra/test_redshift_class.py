"""The class comes first (issue 37, item 2): a star is fitted as a STAR with a velocity and MARZ's
quality 6; storing a redshift that contradicts the class asks first (page, API, service); an
accepted redshift can be undone; a typed z out of range is refused with our message."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agent.redshift import C_KMS
from agent.redshift_templates import TemplateSet, synthetic_templates
from annotation.core.models import AuditLog
from annotation.spectra import selectors, services
from annotation.spectra.models import RedshiftDecision
from tests.factories import make_galaxy_spectrum, make_star_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _synthetic_template_set(monkeypatch):
    fixed = TemplateSet(synthetic_templates(), "synthetic", "synthetic templates (tests)")
    monkeypatch.setattr(selectors, "redshift_template_set", lambda: fixed)


def _plot_data(body: str) -> dict:
    marker = '<script id="plot-data" type="application/json">'
    start = body.index(marker) + len(marker)
    return json.loads(body[start : body.index("</script>", start)])


def _other_class_rank(fit: dict) -> int:
    return next(c["rank"] for c in fit["candidates"] if c["spectype"] != fit["spectype"])


def test_it_fits_a_star_as_a_star_with_a_velocity_and_marz_quality_six(client, expert):
    row = make_star_spectrum(velocity_kms=30.0)
    client.force_login(expert)
    body = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    fit = _plot_data(body)["viewer"]["redshift_fit"]
    best = fit["candidates"][0]
    assert fit["spectype"] == "STAR" and best["spectype"] == "STAR"
    assert best["template_text"] == "synthetic K star"
    assert abs(best["velocity_kms"] - 30.0) < 3 * best["velocity_err_kms"] + 5.0
    assert best["velocity_kms"] == pytest.approx(best["z"] * C_KMS)
    assert best["quality"] == 6 and best["quality_label"] == "star"
    # the other classes' best fits are alternatives, rated below the star
    others = [c for c in fit["candidates"] if c["spectype"] != "STAR"]
    assert others and all(c["quality"] in (1, 2) for c in others)
    assert fit["class_delta_chi2"] >= 100


def test_it_asks_before_storing_another_class_alternative_for_a_star(client, expert):
    row = make_star_spectrum()
    client.force_login(expert)
    fit = selectors.spectrum_redshift_fit(row)
    rank = _other_class_rank(fit)
    url = reverse("spectrum_redshift_decide", args=[row.pk])
    asked = client.post(url, {"rank": str(rank)}, HTTP_HX_REQUEST="true")
    assert asked.status_code == 409
    page = asked.content.decode()
    assert "classes this spectrum as a STAR" in page and "confirm" in page
    assert 'data-workbench="redshift-confirm"' in page
    assert f'name="rank" value="{rank}"' in page
    assert not RedshiftDecision.objects.exists()
    stored = client.post(url, {"rank": str(rank), "confirm": "on"}, HTTP_HX_REQUEST="true")
    assert stored.status_code == 200
    decision = RedshiftDecision.objects.get(spectrum=row)
    assert decision.rank == rank
    audit = AuditLog.objects.get(action="spectrum_redshift")
    assert "STAR" in audit.data["confirmed_disagreement"]
    assert audit.data["fit_class"] == "STAR"


def test_it_stores_the_stars_own_alternative_without_asking(client, expert):
    row = make_star_spectrum()
    client.force_login(expert)
    url = reverse("spectrum_redshift_decide", args=[row.pk])
    assert client.post(url, {"rank": "1"}, HTTP_HX_REQUEST="true").status_code == 200
    assert RedshiftDecision.objects.get(spectrum=row).template == "synthetic K star"


@pytest.mark.parametrize(("typed", "asks"), [("1.29578", True), ("0.02", True), ("0.0001", False)])
def test_it_asks_before_storing_a_typed_z_no_star_has(client, expert, typed, asks):
    row = make_star_spectrum()
    client.force_login(expert)
    url = reverse("spectrum_redshift_decide", args=[row.pk])
    answer = client.post(url, {"z": typed}, HTTP_HX_REQUEST="true")
    assert answer.status_code == (409 if asks else 200)
    assert RedshiftDecision.objects.exists() is not asks
    if asks:
        assert f'name="z" value="{typed}"' in answer.content.decode()
        again = client.post(url, {"z": typed, "confirm": "on"}, HTTP_HX_REQUEST="true")
        assert again.status_code == 200
        assert RedshiftDecision.objects.get(spectrum=row).z == float(typed)


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("11", "z = 11 is out of range: a redshift here lies between -0.01 and 10"),
        ("-0.5", "z = -0.5 is out of range"),
        ("abc", "z must be a number, got &#x27;abc&#x27;"),
        ("nan", "z must be a finite number"),
    ],
)
def test_it_refuses_a_typed_z_out_of_range_with_its_own_message(client, expert, typed, message):
    row = make_galaxy_spectrum(z=0.1)
    client.force_login(expert)
    answer = client.post(
        reverse("spectrum_redshift_decide", args=[row.pk]), {"z": typed}, HTTP_HX_REQUEST="true"
    )
    assert answer.status_code == 400
    body = answer.content.decode()
    assert message in body and 'role="alert"' in body
    assert "Ensure this value" not in body  # Django's own wording
    assert not RedshiftDecision.objects.exists()


def test_it_leaves_the_range_check_to_the_server_not_the_browser(client, expert):
    row = make_galaxy_spectrum(z=0.1)
    client.force_login(expert)
    page = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    override = page[page.index("<legend>Override</legend>") :]
    assert "novalidate" in override[: override.index('data-workbench="override-z"')]


def test_it_undoes_the_experts_own_newest_redshift(client, expert):
    row = make_galaxy_spectrum(z=0.31)
    client.force_login(expert)
    decide = reverse("spectrum_redshift_decide", args=[row.pk])
    undo = reverse("spectrum_redshift_undo", args=[row.pk])
    client.post(decide, {"z": "0.3"})
    page = client.post(decide, {"z": "0.31"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-workbench="redshift-undo"' in page
    back = client.post(undo, HTTP_HX_REQUEST="true")
    assert back.status_code == 200 and "z = 0.30000" in back.content.decode()
    assert selectors.spectrum_redshift_current(row).z == 0.3
    client.post(undo, HTTP_HX_REQUEST="true")
    assert selectors.spectrum_redshift_current(row) is None
    none_left = client.post(undo, HTTP_HX_REQUEST="true")
    assert none_left.status_code == 409 and "no vetted redshift" in none_left.content.decode()
    entries = AuditLog.objects.filter(action="spectrum_redshift_undone").order_by("id")
    assert [e.from_state for e in entries] == ["z=0.310000", "z=0.300000"]
    assert entries[0].data["withdrawn"]["z"] == 0.31


def test_it_lets_only_the_expert_who_stored_it_undo_it(client, expert, auditor):
    row = make_galaxy_spectrum(z=0.31)
    services.spectrum_redshift_decide(spectrum=row, actor=expert, z=0.31, source="override")
    with pytest.raises(services.NotAllowed):
        services.spectrum_redshift_undo(spectrum=row, actor=auditor)
    client.force_login(auditor)
    page = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert 'data-workbench="redshift-undo"' not in page
    assert RedshiftDecision.objects.filter(spectrum=row).count() == 1


def test_it_refuses_the_service_a_star_redshift_against_the_class_unless_confirmed(expert):
    row = make_star_spectrum()
    with pytest.raises(services.RedshiftNeedsConfirmation, match="no star's"):
        services.spectrum_redshift_decide(
            spectrum=row, actor=expert, z=1.29578, source="fit", kind="qso",
            fit_class="STAR", class_delta_chi2=4000.0,
        )  # fmt: skip
    with pytest.raises(services.RedshiftNeedsConfirmation, match="GALAXY template"):
        services.spectrum_redshift_decide(
            spectrum=row, actor=expert, z=0.001, source="fit", kind="galaxy", fit_class="STAR"
        )
    decision = services.spectrum_redshift_decide(
        spectrum=row, actor=expert, z=1.29578, source="fit", kind="qso",
        fit_class="STAR", confirmed=True,
    )  # fmt: skip
    assert decision.z == 1.29578


def test_it_asks_through_the_api_and_undoes_there(client, expert):
    row = make_star_spectrum()
    client.force_login(expert)
    fit = client.get(reverse("api_spectrum_redshift", args=[row.pk])).json()
    assert fit["spectype"] == "STAR" and fit["candidates"][0]["quality"] == 6
    assert fit["candidates"][0]["velocity_kms"] == pytest.approx(fit["candidates"][0]["z"] * C_KMS)
    url = reverse("api_spectrum_redshift_decide", args=[row.pk])
    rank = _other_class_rank(selectors.spectrum_redshift_fit(row))
    asked = client.post(url, {"rank": rank}, content_type="application/json")
    assert asked.status_code == 409 and "STAR" in asked.json()["detail"]
    made = client.post(url, {"rank": rank, "confirm": True}, content_type="application/json")
    assert made.status_code == 201
    out = client.post(url, {"z": 11}, content_type="application/json")
    assert out.status_code == 400
    assert "z = 11 is out of range" in json.dumps(out.json())
    undone = client.post(reverse("api_spectrum_redshift_undo", args=[row.pk]))
    assert undone.status_code == 200 and undone.json() == {"current": None}
    assert not RedshiftDecision.objects.exists()
