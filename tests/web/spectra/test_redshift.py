"""The redshift fit on the spectrum page, the expert's accepted or typed redshift (service, page,
API, audit) and the list navigation of the spectrum page (issue 26)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agent.redshift_templates import TemplateSet, synthetic_templates
from annotation.core.models import AuditLog
from annotation.spectra import selectors, services
from annotation.spectra.models import RedshiftDecision
from tests.factories import make_galaxy_spectrum, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _synthetic_template_set(monkeypatch):
    """The synthetic set, whether or not this machine has the real-data cache."""
    fixed = TemplateSet(synthetic_templates(), "synthetic", "synthetic templates (tests)")
    monkeypatch.setattr(selectors, "redshift_template_set", lambda: fixed)


def _plot_data(body: str) -> dict:
    marker = '<script id="plot-data" type="application/json">'
    start = body.index(marker) + len(marker)
    return json.loads(body[start : body.index("</script>", start)])


def test_it_fits_a_stored_galaxy_and_ships_the_alternatives_to_the_viewer(client, expert):
    row = make_galaxy_spectrum(z=0.2345)
    client.force_login(expert)
    body = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    fit = _plot_data(body)["viewer"]["redshift_fit"]
    best = fit["candidates"][0]
    assert best["template_text"] == "synthetic emission-line galaxy"
    assert abs(best["z"] - 0.2345) < 3 * best["z_err"] + 1e-5
    assert [c["rank"] for c in fit["candidates"]] == list(range(1, len(fit["candidates"]) + 1))
    assert [c["chi2"] for c in fit["candidates"]] == sorted(c["chi2"] for c in fit["candidates"])
    assert fit["spectype"] == "GALAXY" and best["spectype"] == "GALAXY"
    assert best["quality"] == 4 and best["quality_label"] == "great"
    template = fit["templates"][best["template_index"]]
    assert len(template["wavelength"]) <= selectors.REDSHIFT_TEMPLATE_MAX_POINTS
    assert best["scale"] == pytest.approx(1.0, rel=0.05)  # the factory's galaxy is the template x1
    assert fit["n_templates"] == 5 and fit["n_pixels"] > 3000
    assert fit["class_delta_chi2"] > 25
    assert 'data-key="a"' in body  # an expert may accept


def test_it_stores_the_accepted_alternative_from_the_servers_fit_and_audits_it(client, expert):
    row = make_galaxy_spectrum(z=0.31)
    client.force_login(expert)
    response = client.post(
        reverse("spectrum_redshift_decide", args=[row.pk]),
        {"rank": "1", "z": "9.9"},  # a forged z beside the rank is ignored
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    decision = RedshiftDecision.objects.get(spectrum=row)
    assert decision.source == "fit" and decision.rank == 1
    assert decision.template == "synthetic emission-line galaxy"
    assert abs(decision.z - 0.31) < 3 * decision.z_err + 1e-5
    assert decision.decided_by == expert
    assert "Vetted redshift" in response.content.decode()
    entry = AuditLog.objects.get(action="spectrum_redshift")
    assert entry.from_state == "z=0.000000 (file)"
    assert entry.to_state == f"z={decision.z:.6f}"
    assert entry.data["rank"] == 1


def test_it_stores_a_typed_override_and_shows_the_newest(client, expert):
    row = make_galaxy_spectrum(z=0.31)
    client.force_login(expert)
    url = reverse("spectrum_redshift_decide", args=[row.pk])
    client.post(url, {"rank": "1"})
    client.post(url, {"z": "0.3105", "z_err": "0.0002"})
    current = selectors.spectrum_redshift_current(row)
    assert current is not None and current.source == "override"
    assert (current.z, current.z_err) == (0.3105, 0.0002)
    assert RedshiftDecision.objects.filter(spectrum=row).count() == 2
    assert AuditLog.objects.filter(action="spectrum_redshift").count() == 2
    page = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert "z = 0.31050" in page and "typed" in page


@pytest.mark.parametrize("z", ["-1", "11", "nan"])
def test_it_refuses_a_redshift_out_of_range(client, expert, z):
    row = make_galaxy_spectrum(z=0.1)
    client.force_login(expert)
    response = client.post(
        reverse("spectrum_redshift_decide", args=[row.pk]), {"z": z}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    assert not RedshiftDecision.objects.exists()


def test_it_refuses_the_service_a_z_below_minus_one_hundredth(expert):
    row = make_galaxy_spectrum(z=0.1)
    with pytest.raises(services.WorkflowError):
        services.spectrum_redshift_decide(spectrum=row, actor=expert, z=-1.0, source="override")


def test_it_lets_only_experts_decide(client, viewer, ml_engineer):
    row = make_galaxy_spectrum(z=0.1)
    for user in (viewer, ml_engineer):
        client.force_login(user)
        response = client.post(reverse("spectrum_redshift_decide", args=[row.pk]), {"rank": "1"})
        assert response.status_code == 403
        page = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
        assert 'data-workbench="fit-accept"' not in page
    assert not RedshiftDecision.objects.exists()


def test_it_answers_the_fit_and_takes_a_decision_through_the_api(client, expert):
    row = make_galaxy_spectrum(z=0.42)
    client.force_login(expert)
    fit = client.get(reverse("api_spectrum_redshift", args=[row.pk])).json()
    assert fit["current"] is None
    assert fit["candidates"][0]["template"] == "synthetic emission-line galaxy"
    url = reverse("api_spectrum_redshift_decide", args=[row.pk])
    assert client.post(url, {"rank": 9}, content_type="application/json").status_code == 400
    made = client.post(url, {"rank": 1}, content_type="application/json")
    assert made.status_code == 201 and made.json()["source"] == "fit"
    after = client.get(reverse("api_spectrum_redshift", args=[row.pk])).json()
    assert after["current"]["z"] == pytest.approx(fit["candidates"][0]["z"])
    assert after["current"]["decided_by"] == expert.username


def test_it_escapes_template_names_in_the_plot_data(client, expert, monkeypatch):
    templates = synthetic_templates()
    hostile = type(templates[0])(
        "<img src=x onerror=alert(1)> galaxy", "galaxy", templates[0].wavelength, templates[0].flux
    )
    fixed = TemplateSet((hostile, *templates[1:]), "synthetic", "")
    monkeypatch.setattr(selectors, "redshift_template_set", lambda: fixed)
    row = make_galaxy_spectrum(z=0.2)
    client.force_login(expert)
    body = client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert "<img src=x" not in body
    best = _plot_data(body)["viewer"]["redshift_fit"]["candidates"][0]
    assert "<" not in best["template"]  # inert for Plotly
    assert best["template_text"].startswith("<img")  # raw, for textContent only


# --- compare -------------------------------------------------------------------------------------


def test_it_offers_the_same_object_and_sky_neighbours_and_overlays_one_scaled(client, expert):
    row = make_galaxy_spectrum(z=0.1, object_id="J1", ra=150.0, dec=2.0, dataset="a")
    again = make_galaxy_spectrum(z=0.1, object_id="J1", scale=4.0, seed=3, dataset="b")
    near = make_galaxy_spectrum(z=0.3, object_id="J2", ra=150.001, dec=2.0005, seed=4)
    make_galaxy_spectrum(z=0.3, object_id="J3", ra=170.0, dec=2.0, seed=5)  # far away
    choices = selectors.spectrum_compare_choices(row)
    assert [(c["id"], c["relation"].split()[0]) for c in choices] == [
        (again.pk, "same"),
        (near.pk, "neighbour"),
    ]
    client.force_login(expert)
    part = client.get(reverse("api_spectrum_overlay", args=[row.pk]), {"other": again.pk}).json()
    assert part["scale"] == pytest.approx(0.25, rel=0.05)
    assert "\u00d7" in part["name_text"]


def test_it_ships_the_files_sky_spectrum_and_none_without_one(client, expert):
    with_sky = make_galaxy_spectrum(z=0.1, object_id="SKY", sky=True)
    without = make_galaxy_spectrum(z=0.1, object_id="NOSKY", seed=2)
    client.force_login(expert)
    sky = _plot_data(client.get(reverse("spectrum_detail", args=[with_sky.pk])).content.decode())
    assert max(sky["viewer"]["sky_spectrum"]["flux"]) == 40.0
    none = _plot_data(client.get(reverse("spectrum_detail", args=[without.pk])).content.decode())
    assert none["viewer"]["sky_spectrum"] is None


# --- the list a spectrum page was opened from ------------------------------------------------------


def test_it_links_the_previous_and_next_spectra_of_the_filtered_list(client, expert):
    rows = [make_spectrum(object_id=f"NAV-{i}", seed=i, dataset="nav") for i in range(3)]
    make_spectrum(object_id="OTHER", seed=9, dataset="elsewhere")
    client.force_login(expert)
    listing = client.get(reverse("spectrum_list"), {"dataset": "nav"}).content.decode()
    assert f"/spectra/{rows[0].pk}/?list=dataset%3Dnav" in listing
    page = client.get(reverse("spectrum_detail", args=[rows[1].pk]), {"list": "dataset=nav"})
    body = page.content.decode()
    assert f'href="/spectra/{rows[0].pk}/?list=dataset%3Dnav" rel="prev" data-key="k"' in body
    assert f'href="/spectra/{rows[2].pk}/?list=dataset%3Dnav" rel="next" data-key="j"' in body
    assert "2 of 3" in body
    last = client.get(reverse("spectrum_detail", args=[rows[2].pk]), {"list": "dataset=nav"})
    assert 'rel="next"' not in last.content.decode()
    assert (
        'rel="prev"'
        not in client.get(reverse("spectrum_detail", args=[rows[2].pk])).content.decode()
    )


def test_it_overlays_a_template_at_a_redshift_scaled_to_the_flux(client, expert):
    row = make_galaxy_spectrum(z=0.25, scale=2.0)
    client.force_login(expert)
    url = reverse("api_spectrum_overlay", args=[row.pk])
    part = client.get(url, {"template": 0, "z": 0.25}).json()
    assert part["id"] == "template-0"
    assert part["scale"] == pytest.approx(2.0, rel=0.05)
    assert "synthetic emission-line galaxy at z = 0.25000" in part["name_text"]
    # rest 5008.2 Å ([O III]) lands at 1.25 x on the observed-frame axis of this z = 0 file
    assert min(part["wavelength"]) == pytest.approx(900.0 * 1.25, rel=1e-3)
    assert client.get(url, {"template": 99, "z": 0.1}).status_code == 404
    assert client.get(url, {"template": 0, "other": row.pk}).status_code == 400
    assert client.get(url, {"template": 0, "z": -1}).status_code == 400
