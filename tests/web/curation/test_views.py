"""The curation pages: what each actor sees, keys, plots, the editor, diffs and blinding."""

from __future__ import annotations

import html
import io
import json
import re
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from agent.formats import write_sharegpt_file
from annotation.core.models import ImageBlob
from annotation.curation import datasets as curation_datasets
from annotation.curation import selectors
from annotation.curation import services as curation_services
from annotation.curation.models import Curation, CurationState, DatasetExport, RevisionDraft
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_curation, make_spectrum, make_trajectory
from tests.web.curation.test_services import approve_both, revise, to_audit

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviser(db):
    return UserFactory(username="reviser", roles=["expert"])


@pytest.fixture
def second_auditor(db):
    return UserFactory(username="second_auditor", roles=["expert"])


@pytest.fixture
def outsider_engineer(db):
    """No part in the curation; also an ML engineer, for drafts and imports."""
    return UserFactory(username="outsider", roles=["expert", "ml_engineer"])


@pytest.fixture
def curation(db):
    return make_curation()


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def in_revision(curation, reviser, auditor):
    curation_services.curation_screen(curation=curation, user=auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    curation.refresh_from_db()
    return curation


def in_vote(curation, reviser, auditor, second_auditor):
    to_audit(curation, reviser, auditor, second_auditor)
    approve_both(curation, auditor, second_auditor)
    from agent.editing import standardize

    approved = selectors.version_trajectory(selectors.head_version(curation))
    curation_services.curation_standardize(
        curation=curation, trajectory=standardize(approved), standardizer={"name": "normalizer"}
    )
    curation.refresh_from_db()
    return curation


def editor_post(curation, *, base_number, think="Zoom on the core.", lo="6540", hi="6590"):
    return {
        "base_number": str(base_number),
        "steps-count": "1",
        "step-0-think": think,
        "step-0-lo": lo,
        "step-0-hi": hi,
        "step-0-label": "H-alpha core",
        "final_think": "Broad emission.",
        "prediction": "YES",
        "justification": "Broad Balmer emission.",
        "action": "save",
    }


def plot_data(response) -> dict:
    match = re.search(
        r'<script id="plot-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page has no plot data"
    return json.loads(match.group(1))


# --- every page, for the actor it is for ---------------------------------------------------------

CURATION_PAGES = [
    ("curation_detail", "auditor"),
    ("curation_screen", "outsider"),
    ("curation_revise", "reviser"),
    ("curation_audit", "second_auditor"),
    ("curation_standardized", "auditor"),
    ("curation_vote", "reviser"),
]
OTHER_PAGES = [
    "curation_my_work",
    "curation_list",
    "curation_draft_new",
    "curation_import",
    "dataset_list",
    "job_list",
]


@pytest.mark.parametrize("url_name, actor", CURATION_PAGES)
def test_it_renders_each_curation_page_for_its_actor(
    curation, reviser, auditor, second_auditor, outsider_engineer, url_name, actor
):
    in_vote(curation, reviser, auditor, second_auditor)
    people = {"reviser": reviser, "auditor": auditor, "second_auditor": second_auditor}
    user = people.get(actor, outsider_engineer)
    response = client_for(user).get(reverse(url_name, args=[curation.pk]))
    assert response.status_code == 200
    assert f"Trajectory {curation.pk}".encode() in response.content


@pytest.mark.parametrize("url_name", OTHER_PAGES)
def test_it_renders_each_list_and_form_page(outsider_engineer, url_name):
    response = client_for(outsider_engineer).get(reverse(url_name))
    assert response.status_code == 200
    assert b"<main>" in response.content


# --- my work and lists -------------------------------------------------------------------------


def test_it_shows_what_waits_for_me_by_stage_with_counts(curation, reviser):
    response = client_for(reviser).get(reverse("curation_my_work"))
    sections = {section["key"]: section for section in response.context["sections"]}
    assert sections["screening"]["page"].paginator.count == 1
    assert sections["audit"]["page"].paginator.count == 0
    assert reverse("curation_screen", args=[curation.pk]) in response.content.decode()


def test_it_offers_a_claim_button_for_revisions_to_claim(curation, reviser, auditor):
    curation_services.curation_screen(curation=curation, user=auditor, keep=True)
    body = client_for(reviser).get(reverse("curation_my_work")).content.decode()
    assert f'action="{reverse("curation_claim_revision", args=[curation.pk])}"' in body


def test_it_filters_the_curation_list_by_state(curation, auditor):
    other = make_curation(object_id="CUR-2", seed=2)
    curation_services.curation_screen(
        curation=other, user=auditor, keep=False, reason="bad windows"
    )
    response = client_for(auditor).get(reverse("curation_list"), {"state": "discarded"})
    assert [row.pk for row in response.context["page"]] == [other.pk]


def test_it_answers_the_list_filters_with_the_results_partial_for_htmx(curation, auditor):
    response = client_for(auditor).get(reverse("curation_list"), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert 'id="results"' in body
    assert "<html" not in body


# --- detail, history, images -----------------------------------------------------------------


def test_it_renders_the_head_trajectory_on_the_detail_page(curation, outsider_engineer):
    body = client_for(outsider_engineer).get(reverse("curation_detail", args=[curation.pk])).content
    text = body.decode()
    step = selectors.head_version(curation).data["steps"][0]
    assert html.escape(step["think"]) in text
    assert "spectral_visualization_tool" in text
    assert reverse("curation_image", args=[step["tool_result"]["image"]["png_sha256"]]) in text
    assert "Broad Balmer emission with He I." in text


def test_it_lists_the_version_chain_and_the_audit_log_in_history(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    revise(curation, reviser)
    response = client_for(auditor).get(
        reverse("curation_detail", args=[curation.pk]), {"tab": "history"}
    )
    assert [v.number for v in response.context["versions_page"]] == [1, 2]
    actions = [entry.action for entry in response.context["log_page"]]
    assert actions[:2] == ["curation_created", "screening_opened"]
    assert "revision_saved" in actions


def test_it_shows_an_older_version(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    revise(curation, reviser, think="A rewritten analysis.")
    body = client_for(auditor).get(reverse("curation_version", args=[curation.pk, 1])).content
    assert b"Check the line." in body
    assert b"A rewritten analysis." not in body


def test_it_serves_a_tool_image_of_a_readable_trajectory(curation, outsider_engineer):
    sha = selectors.head_version(curation).data["steps"][0]["tool_result"]["image"]["png_sha256"]
    response = client_for(outsider_engineer).get(reverse("curation_image", args=[sha]))
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")


def test_it_hides_an_image_no_trajectory_holds(curation, outsider_engineer):
    stray = curation_services.image_blob_store(b"\x89PNG\r\n\x1a\nnot in any trajectory")
    response = client_for(outsider_engineer).get(reverse("curation_image", args=[stray]))
    assert response.status_code == 404
    assert ImageBlob.objects.filter(sha256=stray).exists()


def test_it_sends_anonymous_visitors_to_the_login_page(curation, client):
    response = client.get(reverse("curation_detail", args=[curation.pk]))
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


# --- screening ---------------------------------------------------------------------------------


def test_it_shades_every_inspected_window_on_the_screening_plot(outsider_engineer):
    task = Task.objects.get(code="CV")
    row = make_spectrum(object_id="TWO-WINDOWS", task=task, label="YES")
    from tests.factories import answer_turn, tool_call_turn

    trajectory = make_trajectory(
        row,
        turns=[
            tool_call_turn(6500, 6630, "H-alpha"),
            tool_call_turn(4800, 4920, "H-beta"),
            answer_turn(),
        ],
    )
    curation = curation_services.curation_create(
        spectrum=row, task=task, trajectory=trajectory, ground_truth="YES"
    )
    response = client_for(outsider_engineer).get(reverse("curation_screen", args=[curation.pk]))
    assert plot_data(response)["inspected"] == [[6500.0, 6630.0], [4800.0, 4920.0]]


@pytest.mark.parametrize("key", ["k", "d"])
def test_it_gives_each_screening_decision_one_key(curation, outsider_engineer, key):
    body = client_for(outsider_engineer).get(reverse("curation_screen", args=[curation.pk])).content
    assert f'data-key="{key}"'.encode() in body


def test_it_keeps_a_draft_and_moves_on_to_the_next_one(curation, outsider_engineer):
    following = make_curation(object_id="CUR-2", seed=2)
    response = client_for(outsider_engineer).post(
        reverse("curation_screen", args=[curation.pk]), {"decision": "keep"}
    )
    assert response["Location"] == reverse("curation_screen", args=[following.pk])
    curation.refresh_from_db()
    assert curation.state == CurationState.IN_REVISION


def test_it_refuses_a_discard_without_a_reason(curation, outsider_engineer):
    response = client_for(outsider_engineer).post(
        reverse("curation_screen", args=[curation.pk]), {"decision": "discard", "reason": " "}
    )
    assert response.status_code == 400
    assert b"discarding a draft needs a reason" in response.content
    curation.refresh_from_db()
    assert curation.state == CurationState.SCREENING


def test_it_names_a_state_clash_in_plain_words(curation, reviser, auditor, outsider_engineer):
    in_revision(curation, reviser, auditor)  # screened by another expert in the meantime
    response = client_for(outsider_engineer).post(
        reverse("curation_screen", args=[curation.pk]),
        {"decision": "discard", "reason": "too noisy"},
    )
    text = re.sub(r"<[^>]+>", " ", response.content.decode())  # what the page reads
    assert response.status_code == 409
    assert "cannot discard this draft: the trajectory is in revision, not screening" in text
    assert "in_revision" not in text and "screened discard" not in text


# --- revision editor --------------------------------------------------------------------------


def test_it_fills_the_editor_from_the_head(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content
    assert b'name="step-0-lo" value="6500"' in body
    assert b'name="step-0-hi" value="6630"' in body
    assert b"Check the line.</textarea>" in body


def test_it_shows_an_edit_error_next_to_its_step(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = editor_post(curation, base_number=1, think="Sneaky <answer>YES</answer>")
    response = client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), data)
    assert response.status_code == 400
    match = re.search(r'id="step-0-error">([^<]*)<', response.content.decode())
    assert match and "step 1 reasoning must not contain" in match.group(1)
    assert curation.versions.count() == 1


def test_it_shows_a_bad_range_next_to_its_step(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = editor_post(curation, base_number=1, lo="6590", hi="6540")
    response = client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), data)
    assert response.status_code == 400
    assert b'id="step-0-error"' in response.content
    assert b"0 &lt; min &lt; max" in response.content


def test_it_saves_the_edit_as_a_new_version(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = editor_post(curation, base_number=1, think="The core is broad.")
    response = client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), data)
    assert response.status_code == 302
    curation.refresh_from_db()
    head = selectors.head_version(curation)
    assert head.number == 2
    assert head.data["steps"][0]["think"] == "The core is broad."
    assert head.data["steps"][0]["tool_call"]["wavelength_range"] == [6540.0, 6590.0]


def test_it_warns_the_reviser_when_the_text_cites_the_window_before_narrowing(
    curation, reviser, auditor
):
    in_revision(curation, reviser, auditor)
    stale = editor_post(curation, base_number=1, think="Zoom on 6500-6630 A for the wings.")
    client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), stale)
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content.decode()
    assert 'id="step-0-range-warning"' in body
    assert "the reasoning cites 6500–6630 Å but the tool call shows 6540–6590 Å" in body
    fixed = editor_post(curation, base_number=2, think="Zoom on 6540-6590 A for the wings.")
    client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), fixed)
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content.decode()
    assert 'id="step-0-range-warning"' not in body


def test_it_flags_a_stale_window_the_standardizer_cannot_fix_before_the_vote(
    curation, reviser, auditor, second_auditor
):
    from agent.editing import standardize

    curation_services.curation_screen(curation=curation, user=auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    revise(curation, reviser, think="First 6500-6630, then 6450-6700 around H-alpha.")
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    curation_services.curation_claim_audit(curation=curation, user=auditor)
    curation_services.curation_claim_audit(curation=curation, user=second_auditor)
    approve_both(curation, auditor, second_auditor)
    approved = selectors.version_trajectory(selectors.head_version(curation))
    curation_services.curation_standardize(
        curation=curation, trajectory=standardize(approved), standardizer={"name": "normalizer"}
    )
    expected = "step 1: the reasoning cites 6500–6630 Å, 6450–6700 Å but the tool call shows"
    for url_name in ("curation_vote", "curation_standardized"):
        page = client_for(reviser).get(reverse(url_name, args=[curation.pk])).content.decode()
        assert 'id="range-mismatches"' in page and expected in page, url_name


def test_it_refuses_a_stale_save_and_keeps_the_typed_text(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    revise(curation, reviser)
    data = editor_post(curation, base_number=1, think="My careful rewrite, not lost.")
    response = client_for(reviser).post(
        reverse("curation_revise", args=[curation.pk]), data, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 409
    body = response.content.decode()
    assert "based on version 1, but version 2 has been saved" in body
    assert "My careful rewrite, not lost.</textarea>" in body
    assert curation.versions.count() == 2


def test_it_redraws_a_step_image_for_a_new_range(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    response = client_for(reviser).get(
        reverse("curation_step_image", args=[curation.pk]),
        {"index": "0", "step-0-lo": "4800", "step-0-hi": "4920", "step-0-label": "H-beta"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert 'id="step-image-0"' in body
    src = re.search(r'<img[^>]+src="([^"]+)"', body).group(1)
    assert src.startswith(reverse("spectrum_render_png", args=[curation.spectrum_id]))
    assert "lo=4800" in src and "hi=4920" in src


def test_it_says_why_the_tool_cannot_show_a_range(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    response = client_for(reviser).get(
        reverse("curation_step_image", args=[curation.pk]),
        {"index": "0", "step-0-lo": "20000", "step-0-hi": "21000"},
    )
    assert b"<img" not in response.content
    assert b'class="error small"' in response.content


def test_it_adds_a_step_without_saving(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = {**editor_post(curation, base_number=1), "action": "add_step"}
    response = client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), data)
    assert len(response.context["rows"]) == 2
    assert curation.versions.count() == 1


def test_it_removes_a_step_without_saving(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = {**editor_post(curation, base_number=1), "remove": "0"}
    data.pop("action")
    response = client_for(reviser).post(reverse("curation_revise", args=[curation.pk]), data)
    assert response.context["rows"] == []
    assert curation.versions.count() == 1


def test_it_restores_the_autosave_when_the_page_is_reloaded(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    client = client_for(reviser)
    data = editor_post(curation, base_number=1, think="Half-written thought")
    response = client.post(reverse("curation_autosave", args=[curation.pk]), data)
    assert b"Autosaved at" in response.content
    body = client.get(reverse("curation_revise", args=[curation.pk])).content.decode()
    assert "Half-written thought</textarea>" in body
    assert "Restored your autosave" in body


def test_it_does_not_restore_an_autosave_made_on_an_older_version(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    curation_services.curation_autosave(
        curation=curation,
        user=reviser,
        base_number=1,
        data={"steps": [{"think": "Old buffer"}], "final_think": "", "prediction": "NO"},
    )
    revise(curation, reviser, think="Saved elsewhere.")
    RevisionDraft.objects.update_or_create(
        curation=curation, defaults={"author": reviser, "base_number": 1, "data": {"steps": []}}
    )
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content
    assert b"Saved elsewhere.</textarea>" in body
    assert b"was not restored" in body


def test_it_shows_earlier_rounds_comments_to_the_reviser(
    curation, reviser, auditor, second_auditor
):
    to_audit(curation, reviser, auditor, second_auditor)
    for user, verdict in ((auditor, "request_changes"), (second_auditor, "approve")):
        curation_services.audit_submit(
            curation=curation,
            user=user,
            version_number=curation.head_number,
            verdict=verdict,
            step_comments={"0": "Widen the window to the blue wing."} if user == auditor else {},
        )
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content
    assert body.count(b"Widen the window to the blue wing.") == 2  # in the list and on step 1


def test_it_puts_an_auditors_comment_on_the_final_answer_beside_the_answer(
    curation, reviser, auditor, second_auditor
):
    from annotation.curation.selectors import trajectory_view

    to_audit(curation, reviser, auditor, second_auditor)
    head = curation.versions.get(number=curation.head_number)
    view = trajectory_view(head.data)
    answer_key = str(view.answer.index)
    for user, verdict in ((auditor, "request_changes"), (second_auditor, "approve")):
        curation_services.audit_submit(
            curation=curation,
            user=user,
            version_number=curation.head_number,
            verdict=verdict,
            step_comments={"0": "Widen the window.", answer_key: "Name the He II line."}
            if user == auditor
            else {},
        )
    body = client_for(reviser).get(reverse("curation_revise", args=[curation.pk])).content.decode()
    assert 'Final answer: <span class="quote">Name the He II line.</span>' in body
    assert f"Step {len(view.steps) + 1}:" not in body
    answer_card = body[body.index('id="editor-answer"') :]
    assert "Name the He II line." in answer_card[: answer_card.index("</article>")]
    assert body.count("Name the He II line.") == 2  # in the list and on the answer, no step


def test_it_tells_a_non_reviser_who_edits(curation, reviser, auditor, outsider_engineer):
    in_revision(curation, reviser, auditor)
    body = client_for(outsider_engineer).get(reverse("curation_revise", args=[curation.pk])).content
    assert b"Only the reviser (reviser) edits" in body
    assert b'id="editor-form"' not in body


# --- audit -------------------------------------------------------------------------------------


def audit_page(curation, user):
    return client_for(user).get(reverse("curation_audit", args=[curation.pk]))


def test_it_marks_insertions_and_deletions_in_the_audit_diff(
    curation, reviser, auditor, second_auditor
):
    in_revision(curation, reviser, auditor)
    revise(curation, reviser, think="Zoom on the core.")
    curation_services.curation_submit_for_audit(curation=curation, user=reviser, base_number=2)
    curation_services.curation_claim_audit(curation=curation, user=auditor)
    body = audit_page(curation, auditor).content.decode()
    assert "<del>Check</del>" in body
    assert "<ins>Zoom on</ins>" in body
    assert '<span class="diff diff-old" title="v1">' in body  # side by side: old left, new right
    old = body.split('class="diff diff-old"')[1].split("</span>")[0]
    new = body.split('class="diff diff-new"')[1].split("</span>")[0]
    assert "<del>line</del>" in old and "<ins>" not in old
    assert "<ins>core</ins>" in new and "<del>" not in new


def test_it_escapes_markup_typed_into_the_reasoning(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    revise(curation, reviser, think='<script>alert("x")</script> Broad wings.')
    curation_services.curation_submit_for_audit(curation=curation, user=reviser, base_number=2)
    curation_services.curation_claim_audit(curation=curation, user=auditor)
    body = audit_page(curation, auditor).content.decode()
    assert "<script>alert" not in body
    assert "&lt;script&gt;" in body


@pytest.mark.parametrize("key", ["a", "r"])
def test_it_gives_each_verdict_one_key(curation, reviser, auditor, second_auditor, key):
    to_audit(curation, reviser, auditor, second_auditor)
    assert f'data-key="{key}"'.encode() in audit_page(curation, auditor).content


def test_it_records_a_verdict_with_step_comments(curation, reviser, auditor, second_auditor):
    to_audit(curation, reviser, auditor, second_auditor)
    response = client_for(auditor).post(
        reverse("curation_audit", args=[curation.pk]),
        {
            "version_number": str(curation.head_number),
            "verdict": "request_changes",
            "step-0-comment": "The window misses the blue wing.",
        },
    )
    assert response.status_code == 302
    audit = curation.audits.get()
    assert audit.step_comments == {"0": "The window misses the blue wing."}


def test_it_keeps_the_comments_when_a_verdict_is_refused(
    curation, reviser, auditor, second_auditor
):
    to_audit(curation, reviser, auditor, second_auditor)
    response = client_for(auditor).post(
        reverse("curation_audit", args=[curation.pk]),
        {"version_number": "1", "verdict": "approve", "step-0-comment": "Kept remark"},
    )
    assert response.status_code == 409  # the head moved on to version 2
    assert b"Kept remark</textarea>" in response.content


SECRET = "SECRET-REMARK-42"


def first_verdict_in(curation, reviser, auditor, second_auditor):
    to_audit(curation, reviser, auditor, second_auditor)
    curation_services.audit_submit(
        curation=curation,
        user=auditor,
        version_number=curation.head_number,
        verdict="request_changes",
        comment=SECRET,
    )


@pytest.mark.parametrize(
    "url_name, query",
    [
        ("curation_audit", {}),
        ("curation_detail", {}),
        ("curation_detail", {"tab": "history"}),
    ],
)
def test_it_hides_the_first_verdict_from_the_second_auditor(
    curation, reviser, auditor, second_auditor, url_name, query
):
    first_verdict_in(curation, reviser, auditor, second_auditor)
    body = client_for(second_auditor).get(reverse(url_name, args=[curation.pk]), query).content
    assert SECRET.encode() not in body
    assert b"audit_request_changes" not in body
    assert b"\xe2\x80\x94 request changes" not in body  # "— request changes", as verdicts show


def test_it_hides_the_first_verdict_from_the_second_auditor_in_the_api(
    curation, reviser, auditor, second_auditor
):
    from rest_framework.test import APIClient

    first_verdict_in(curation, reviser, auditor, second_auditor)
    api = APIClient()
    api.force_authenticate(second_auditor)
    detail = api.get(reverse("api_curation_detail", args=[curation.pk]))
    history = api.get(reverse("api_curation_history", args=[curation.pk]))
    assert detail.json()["audits"] == []
    assert SECRET not in detail.content.decode()
    assert SECRET not in history.content.decode()


def test_it_shows_both_verdicts_once_both_are_in(curation, reviser, auditor, second_auditor):
    first_verdict_in(curation, reviser, auditor, second_auditor)
    curation_services.audit_submit(
        curation=curation,
        user=second_auditor,
        version_number=curation.head_number,
        verdict="approve",
    )
    body = client_for(second_auditor).get(reverse("curation_audit", args=[curation.pk])).content
    assert SECRET.encode() in body


# --- standardization and vote --------------------------------------------------------------------


def test_it_shows_the_standardizer_and_the_tool_action_check(
    curation, reviser, auditor, second_auditor
):
    in_vote(curation, reviser, auditor, second_auditor)
    body = client_for(auditor).get(reverse("curation_standardized", args=[curation.pk])).content
    assert b"normalizer" in body
    assert b"Tool actions checked" in body


@pytest.mark.parametrize("key", ["y", "n"])
def test_it_gives_each_vote_one_key(curation, reviser, auditor, second_auditor, key):
    in_vote(curation, reviser, auditor, second_auditor)
    body = client_for(auditor).get(reverse("curation_vote", args=[curation.pk])).content
    assert f'data-key="{key}"'.encode() in body


def test_it_hides_votes_until_all_have_voted(curation, reviser, auditor, second_auditor):
    in_vote(curation, reviser, auditor, second_auditor)
    client_for(reviser).post(
        reverse("curation_vote", args=[curation.pk]), {"value": "reject", "comment": "VOTE-NOTE"}
    )
    body = client_for(auditor).get(reverse("curation_vote", args=[curation.pk])).content
    assert b"VOTE-NOTE" not in body
    assert b"Result:" not in body


def test_it_shows_each_vote_and_the_result_when_all_have_voted(
    curation, reviser, auditor, second_auditor
):
    in_vote(curation, reviser, auditor, second_auditor)
    client_for(reviser).post(
        reverse("curation_vote", args=[curation.pk]), {"value": "reject", "comment": "VOTE-NOTE"}
    )
    for user in (auditor, second_auditor):
        client_for(user).post(reverse("curation_vote", args=[curation.pk]), {"value": "accept"})
    body = client_for(auditor).get(reverse("curation_vote", args=[curation.pk])).content
    assert b"VOTE-NOTE" in body
    assert b"Result:" in body and b"rejected" in body


# --- drafts ------------------------------------------------------------------------------------


def test_it_counts_the_labelled_spectra_a_draft_job_would_take(outsider_engineer):
    task = Task.objects.get(code="CV")
    make_spectrum(object_id="POS", task=task, label="YES", seed=1)
    make_spectrum(object_id="NEG", task=task, label="NO", seed=2)
    make_spectrum(object_id="UNLABELLED", task=task, seed=3)
    response = client_for(outsider_engineer).get(
        reverse("curation_draft_new"), {"task": "CV", "label": "YES"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert body.strip().startswith('<p id="match-count"')
    assert "1 labelled spectrum matches" in body


def test_it_refuses_a_draft_job_when_no_spectrum_matches(outsider_engineer):
    response = client_for(outsider_engineer).post(
        reverse("curation_draft_new"),
        {"task": "CV", "limit": "5", "teacher": "rule-based", "max_tool_calls": "8"},
    )
    assert response.status_code == 400
    assert b"no labelled CV spectrum matches these filters" in response.content


def test_it_starts_a_draft_job_for_the_first_n_matches(outsider_engineer):
    task = Task.objects.get(code="CV")
    rows = [make_spectrum(object_id=f"S{i}", task=task, label="YES", seed=i) for i in range(3)]
    response = client_for(outsider_engineer).post(
        reverse("curation_draft_new"),
        {"task": "CV", "limit": "2", "teacher": "rule-based", "max_tool_calls": "4"},
    )
    from annotation.core.models import Job

    job = Job.objects.get()
    assert response["Location"] == reverse("job_detail", args=[job.pk])
    assert job.params["spectrum_ids"] == [rows[0].pk, rows[1].pk]
    assert job.params["teacher"] == {"kind": "rule-based"}
    assert job.total == 2


# --- import ------------------------------------------------------------------------------------


def upload(name: str, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data)


def test_it_imports_a_project_jsonl_and_reports_skipped_rows(outsider_engineer):
    task = Task.objects.get(code="CV")
    row = make_spectrum(object_id="KNOWN", task=task, label="YES")
    known = make_trajectory(row)
    orphan = make_trajectory(make_spectrum(object_id="ORPHAN", seed=5))
    orphan.spectrum = type(orphan.spectrum)("NOT-LOADED", "TEST", "nowhere", 0.0)
    data = (known.to_json() + "\n" + orphan.to_json() + "\n").encode()
    response = client_for(outsider_engineer).post(
        reverse("curation_import"), {"file": upload("drafts.jsonl", data)}
    )
    assert response.status_code == 200
    assert b"Created 1 trajectory" in response.content
    assert b"trajectory 2 (NOT-LOADED): its spectrum is not loaded" in response.content
    assert Curation.objects.get().source == "import:jsonl"


def test_it_stores_nothing_from_a_bad_jsonl(outsider_engineer):
    task = Task.objects.get(code="CV")
    good = make_trajectory(make_spectrum(object_id="KNOWN", task=task, label="YES"))
    data = (good.to_json() + "\n{not json\n").encode()
    response = client_for(outsider_engineer).post(
        reverse("curation_import"), {"file": upload("drafts.jsonl", data)}
    )
    assert response.status_code == 400
    assert b"Nothing was stored. drafts.jsonl line 2" in response.content
    assert not Curation.objects.exists()


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_it_imports_a_sharegpt_zip(outsider_engineer, tmp_path):
    task = Task.objects.get(code="CV")
    row = make_spectrum(object_id="SPECVI-7", task=task, label="YES")
    row.meta = {"index": 7, "task": "cv"}
    row.save(update_fields=["meta"])
    trajectory = make_trajectory(row)
    trajectory.meta = {"sample_index": 7, "ground_truth": "YES", "source_name": "train_cv"}
    write_sharegpt_file([trajectory], tmp_path / "train_sharegpt.json")
    files = {
        path.relative_to(tmp_path).as_posix(): path.read_bytes()
        for path in tmp_path.rglob("*")
        if path.is_file()
    }
    response = client_for(outsider_engineer).post(
        reverse("curation_import"), {"file": upload("cold_start.zip", zip_bytes(files))}
    )
    assert b"Created 1 trajectory" in response.content
    assert Curation.objects.get().spectrum == row


def test_it_warns_when_a_sharegpt_import_differs_from_specvets_prompt(outsider_engineer, tmp_path):
    task = Task.objects.get(code="CV")
    row = make_spectrum(object_id="SPECVI-8", task=task, label="YES")
    row.meta = {"index": 8, "task": "cv"}
    row.save(update_fields=["meta"])
    trajectory = make_trajectory(row)
    trajectory.system_prompt = "You are <b>Spec-o3</b>."
    trajectory.meta = {"sample_index": 8, "ground_truth": "YES", "source_name": "train_cv"}
    write_sharegpt_file([trajectory], tmp_path / "train_sharegpt.json")
    files = {
        path.relative_to(tmp_path).as_posix(): path.read_bytes()
        for path in tmp_path.rglob("*")
        if path.is_file()
    }
    response = client_for(outsider_engineer).post(
        reverse("curation_import"), {"file": upload("cold_start.zip", zip_bytes(files))}
    )
    assert b"Created 1 trajectory" in response.content
    text = response.content.decode()
    assert "1 of 1 rows have a system prompt that differs" in text
    assert "train_cv#8" in text
    assert "&lt;b&gt;Spec-o3" in text and "<b>Spec-o3" not in text


@pytest.mark.parametrize("member", ["../escape.json", "/abs/train.json"])
def test_it_refuses_a_zip_with_an_unsafe_member(outsider_engineer, member):
    response = client_for(outsider_engineer).post(
        reverse("curation_import"), {"file": upload("evil.zip", zip_bytes({member: b"[]"}))}
    )
    assert response.status_code == 400
    assert b"refusing the unsafe member name" in response.content
    assert not Curation.objects.exists()


# --- datasets ----------------------------------------------------------------------------------


def accept(curation, reviser, auditor, second_auditor):
    in_vote(curation, reviser, auditor, second_auditor)
    for user in (reviser, auditor, second_auditor):
        curation_services.vote_cast(curation=curation, user=user, value="accept")


def test_it_counts_accepted_trajectories_per_task_and_label(
    curation, reviser, auditor, second_auditor
):
    accept(curation, reviser, auditor, second_auditor)
    response = client_for(auditor).get(reverse("dataset_list"))
    assert response.context["accepted"] == [{"task": "CV", "YES": 1, "NO": 0, "total": 1}]


def test_it_exports_a_new_version_once_and_says_when_nothing_changed(
    curation, reviser, auditor, second_auditor
):
    accept(curation, reviser, auditor, second_auditor)
    client = client_for(auditor)
    first = client.post(reverse("dataset_export"), follow=True)
    second = client.post(reverse("dataset_export"), follow=True)
    assert b"Exported version 1." in first.content
    assert b"Nothing changed since version 1; no new version was made." in second.content
    assert DatasetExport.objects.count() == 1


def test_it_downloads_an_export_as_a_zip(curation, reviser, auditor, second_auditor):
    accept(curation, reviser, auditor, second_auditor)
    export = curation_datasets.dataset_export_create(actor=auditor)
    response = client_for(auditor).get(reverse("dataset_download", args=[export.pk]))
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["counts"] == {"CV": {"YES": 1, "NO": 0}}


def test_it_explains_an_export_with_nothing_accepted(auditor):
    response = client_for(auditor).post(reverse("dataset_export"))
    assert response.status_code == 400
    assert b"there is no accepted trajectory to export yet" in response.content


def test_it_diffs_round_two_from_the_version_audited_in_round_one(
    curation, reviser, auditor, second_auditor
):
    # Issue 26: round 2's diff started at v1; the auditors want what they audited (v2) vs v3.
    to_audit(curation, reviser, auditor, second_auditor)
    audited = curation.head_number
    for user, verdict in ((auditor, "request_changes"), (second_auditor, "approve")):
        curation_services.audit_submit(
            curation=curation,
            user=user,
            version_number=audited,
            verdict=verdict,
            comment="Widen the window." if verdict == "request_changes" else "",
        )
    curation.refresh_from_db()
    revise(curation, reviser, think="Widened to the blue wing.")
    curation_services.curation_submit_for_audit(
        curation=curation, user=reviser, base_number=curation.head_number
    )
    curation.refresh_from_db()
    assert curation.audit_round == 2 and curation.head_number == audited + 1
    body = audit_page(curation, auditor).content.decode()
    assert f'<span class="diff diff-old" title="v{audited}">' in body
    # the first version is still one click away
    assert 'title="v1"' in audit_page_with_base(curation, auditor, 1)


def audit_page_with_base(curation, user, base: int) -> str:
    url = reverse("curation_audit", args=[curation.pk])
    return client_for(user).get(url, {"base": base}).content.decode()
