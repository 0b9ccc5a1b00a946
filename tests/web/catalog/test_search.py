"""Finding work in the catalog (issue 37 items 6 and 7): search by designation or object id, by
position (a cone search checked against astropy's angular separation), and by data set; the
page, the API and every export obey the same filters."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from django.core.cache import cache
from django.urls import reverse

from annotation.catalog import search
from annotation.catalog import selectors as catalog
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.spectra.models import Task

pytestmark = pytest.mark.django_db

# A real LAMOST row: designation J220848.54-020324.3 is RA 332.202250, Dec -2.056750.
G7_RA, G7_DEC = 332.20225, -2.05675


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()  # the survey and data-set choices are cached between requests


@pytest.fixture
def run(db) -> InspectionRun:
    return InspectionRun.objects.create(
        name="run", task=Task.objects.get(code="CV"), policy_spec={"kind": "rule-based"}
    )


def make_entry(run: InspectionRun, object_id: str, **fields) -> CatalogEntry:
    values = {
        "survey": "LAMOST",
        "task_code": "CV",
        "verdict": "YES",
        "confidence": 0.9,
        "snr": 30.0,
        "policy_name": "rule-based",
        **fields,
    }
    return CatalogEntry.objects.create(run=run, object_id=object_id, **values)


@pytest.fixture
def rows(run) -> dict[str, CatalogEntry]:
    return {
        "g7": make_entry(
            run,
            "spec-55859-F5902_sp01-001",
            designation="J220848.54-020324.3",
            ra=G7_RA,
            dec=G7_DEC,
            dataset="lamost-examples",
        ),
        "a2": make_entry(
            run,
            "spec-55859-F5902_sp01-013",
            designation="J220917.16-020719.2",
            ra=332.32150,
            dec=-2.12200,
            dataset="lamost-examples",
        ),
        "bench": make_entry(
            run,
            "J2208-synthetic",  # an object id that starts like the designations
            designation="J101010.00+101010.0",
            ra=152.541667,
            dec=10.169444,
            dataset="specvi-mini",
        ),
        "nowhere": make_entry(run, "no-position", dataset="specvi-mini"),
    }


def page_ids(client, params: dict[str, str]) -> list[str]:
    response = client.get(reverse("catalog_list"), params)
    assert response.status_code == 200, response.content.decode()[:500]
    return sorted(entry.object_id for entry in response.context["page"].entries)


def api_ids(client, params: dict[str, str]) -> list[str]:
    response = client.get(reverse("api_catalog_list"), params)
    assert response.status_code == 200, response.json()
    return sorted(row["object_id"] for row in response.json()["results"])


def csv_ids(client, params: dict[str, str]) -> list[str]:
    response = client.get(reverse("catalog_export_csv"), params)
    assert response.status_code == 200
    text = b"".join(response.streaming_content).decode()
    return sorted(row["object_id"] for row in csv.DictReader(io.StringIO(text)))


# --- designation and object id -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("J2208", ["J2208-synthetic", "spec-55859-F5902_sp01-001"]),
        ("J22084", ["spec-55859-F5902_sp01-001"]),
        ("j220917", ["spec-55859-F5902_sp01-013"]),
        ("LAMOST J220848.54-020324.3", ["spec-55859-F5902_sp01-001"]),
        ("J220848.54-020324.3", ["spec-55859-F5902_sp01-001"]),
        ("spec-55859", ["spec-55859-F5902_sp01-001", "spec-55859-F5902_sp01-013"]),
        ("J1010", ["J2208-synthetic"]),  # by its designation, not its id
        ("J0000", []),
    ],
)
def test_it_finds_rows_by_designation_or_object_id(expert_client, rows, term, expected):
    assert page_ids(expert_client, {"object_id": term}) == expected


def test_it_finds_the_row_the_issue_could_not_find(expert_client, rows, api_client):
    """``/catalog/?object_id=J2208`` gave 0 rows; the G7 star's designation starts so."""
    assert "spec-55859-F5902_sp01-001" in page_ids(expert_client, {"object_id": "J2208"})
    assert "spec-55859-F5902_sp01-001" in api_ids(api_client, {"object_id": "J2208"})


def test_it_refuses_a_name_longer_than_the_limit(expert_client, rows):
    response = expert_client.get(reverse("catalog_list"), {"object_id": "J" * 121})
    assert response.status_code == 400
    assert "object_id must be at most 120 characters" in response.content.decode()


# --- cone search -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ra", "dec", "radius", "expected"),
    [
        (str(G7_RA), str(G7_DEC), "2", ["spec-55859-F5902_sp01-001"]),
        ("22:08:48.54", "-02:03:24.3", "1", ["spec-55859-F5902_sp01-001"]),
        ("22h08m48.54s", "-2d03m24.3s", "1", ["spec-55859-F5902_sp01-001"]),
        # The A2 star is 8.5 arcmin away: inside 600", outside 400".
        (
            str(G7_RA),
            str(G7_DEC),
            "600",
            ["spec-55859-F5902_sp01-001", "spec-55859-F5902_sp01-013"],
        ),
        (str(G7_RA), str(G7_DEC), "400", ["spec-55859-F5902_sp01-001"]),
        ("0", "0", "10", []),
    ],
)
def test_it_finds_rows_near_a_position(expert_client, rows, ra, dec, radius, expected):
    assert page_ids(expert_client, {"ra": ra, "dec": dec, "radius": radius}) == expected


def test_it_uses_the_default_radius_when_none_is_given(expert_client, rows):
    # 5 arcsec north of the G7 star: inside the 10" default.
    north = G7_DEC + 5.0 / 3600
    assert page_ids(expert_client, {"ra": str(G7_RA), "dec": str(north)}) == [
        "spec-55859-F5902_sp01-001"
    ]


def test_it_agrees_with_astropy_on_which_rows_are_inside_the_cone(run):
    """Random positions around centres at the equator, near a pole and across RA 0: the SQL
    distance keeps exactly the rows astropy's separation puts inside the radius."""
    rng = np.random.default_rng(37)
    centres = [(10.0, 0.0), (359.9, 1.0), (0.05, -30.0), (120.0, 89.9), (200.0, -89.95)]
    radius = 360.0  # arcsec
    for n, (ra0, dec0) in enumerate(centres):
        for i in range(60):
            # Distances between 0.5 and 1.5 radii, so that many sit close to the edge.
            distance = radius * rng.uniform(0.5, 1.5) / 3600.0
            angle = rng.uniform(0.0, 2.0 * math.pi)
            dec = max(-90.0, min(90.0, dec0 + distance * math.cos(angle)))
            cos_dec = max(math.cos(math.radians(dec)), 1e-6)
            ra = (ra0 + distance * math.sin(angle) / cos_dec) % 360.0
            make_entry(run, f"c{n}-{i}", ra=ra, dec=dec)
    for ra0, dec0 in centres:
        filters = catalog.filters_from_query(
            {"ra": str(ra0), "dec": str(dec0), "radius": str(radius)}
        )
        found = set(catalog.catalog_rows(filters).values_list("object_id", flat=True))
        expected = {
            entry.object_id
            for entry in CatalogEntry.objects.all()
            if search.separation_arcsec(ra0, dec0, entry.ra, entry.dec) <= radius
        }
        assert expected, "the test needs rows inside each cone"
        assert found == expected, (ra0, dec0)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"ra": "332.2"}, "a cone search needs both ra and dec; dec is missing"),
        ({"dec": "-2"}, "a cone search needs both ra and dec; ra is missing"),
        ({"radius": "5"}, "radius needs a position: give ra and dec too"),
        ({"ra": "east", "dec": "-2"}, "ra must be an angle in degrees or sexagesimal"),
        ({"ra": "12:60:00", "dec": "-2"}, "ra must be an angle in degrees or sexagesimal"),
        ({"ra": "332", "dec": "-95"}, "dec must be between -90 and 90 degrees; got -95"),
        ({"ra": "400", "dec": "0"}, "ra must be between 0 and 360 degrees"),
        ({"ra": "1", "dec": "0", "radius": "0"}, "radius must be above 0 and at most 36000"),
        ({"ra": "1", "dec": "0", "radius": "nan"}, "radius must be above 0 and at most 36000"),
        ({"ra": "1", "dec": "0", "radius": "wide"}, "radius must be a number of arcseconds"),
    ],
)
def test_it_explains_a_position_it_cannot_read(expert_client, api_client, rows, params, message):
    page = expert_client.get(reverse("catalog_list"), params)
    assert page.status_code == 400
    assert message in page.content.decode()
    api = api_client.get(reverse("api_catalog_list"), params)
    assert api.status_code == 400
    assert message in str(api.json())


def test_it_never_puts_a_row_without_a_position_in_a_cone(expert_client, rows):
    ids = page_ids(expert_client, {"ra": "0", "dec": "0", "radius": "36000"})
    assert "no-position" not in ids


# --- data set ----------------------------------------------------------------------------------


def test_it_filters_by_data_set(expert_client, rows):
    assert page_ids(expert_client, {"dataset": "lamost-examples"}) == [
        "spec-55859-F5902_sp01-001",
        "spec-55859-F5902_sp01-013",
    ]
    assert page_ids(expert_client, {"dataset": "nothing-here"}) == []


def test_it_offers_the_data_sets_on_the_page(expert_client, rows):
    body = expert_client.get(reverse("catalog_list")).content.decode()
    assert '<option value="lamost-examples"' in body
    assert '<option value="specvi-mini"' in body


@pytest.mark.parametrize(
    "params",
    [
        {"dataset": "specvi-mini"},
        {"object_id": "J2208"},
        {"ra": str(G7_RA), "dec": str(G7_DEC), "radius": "600"},
        {"dataset": "lamost-examples", "object_id": "J2209"},
    ],
)
def test_it_gives_the_same_rows_on_the_page_the_api_and_the_export(
    expert_client, api_client, rows, params
):
    page = page_ids(expert_client, params)
    assert page, "each case selects some rows"
    assert page != sorted(entry.object_id for entry in rows.values())
    assert api_ids(api_client, params) == page
    assert csv_ids(expert_client, params) == page


def test_it_keeps_the_search_in_the_page_links(expert_client, rows):
    filters = catalog.filters_from_query({"dataset": "x", "ra": "22:08:48.54", "dec": "-2"})
    query = filters.as_query()
    assert query["dataset"] == "x"
    assert float(query["ra"]) == pytest.approx(G7_RA, abs=1e-6)
    assert catalog.filters_from_query(query) == filters
