"""Training exports share no spectrum with the validation and test splits (issue 33 item 6): by
object id and by content hash, with a refusal naming what is shared."""

from __future__ import annotations

import pytest

from annotation.core.errors import WorkflowError
from annotation.curation import datasets
from annotation.curation.models import Curation, CurationState
from annotation.spectra.held_out import held_out_overlap
from annotation.spectra.models import Spectrum
from tests.factories import make_curation, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def accepted(training_dirs) -> Curation:
    curation = make_curation(object_id="ACCEPTED-B", seed=0)
    Curation.objects.filter(pk=curation.pk).update(state=CurationState.ACCEPTED)
    return Curation.objects.get(pk=curation.pk)


def held_out(split: str, **kwargs) -> Spectrum:
    row = make_spectrum(dataset="benchmark", **kwargs)
    Spectrum.objects.filter(pk=row.pk).update(split=split)
    return Spectrum.objects.get(pk=row.pk)


def test_it_exports_training_data_that_shares_nothing_with_the_held_out_splits(accepted):
    held_out("test", object_id="BENCH-1", seed=5)
    export = datasets.dataset_export_create(actor=None)
    assert export.curation_ids == [accepted.pk]


def test_it_refuses_an_sft_export_holding_a_test_spectrum_under_another_name(accepted):
    twin = held_out("test", object_id="BENCH-TWIN", seed=0)  # the same arrays, renamed
    assert twin.content_hash == accepted.spectrum.content_hash
    with pytest.raises(WorkflowError) as refusal:
        datasets.dataset_export_create(actor=None)
    message = str(refusal.value)
    assert "the SFT export and held-out spectra (splits validation, test) share" in message
    assert twin.content_hash[:16] in message
    assert "object id" not in message


def test_it_refuses_an_sft_export_sharing_an_object_id_with_validation(accepted):
    held_out("validation", object_id="ACCEPTED-B", seed=9)  # other arrays, the same name
    with pytest.raises(WorkflowError, match=r"1 object id\(s\) ACCEPTED-B"):
        datasets.dataset_export_create(actor=None)


def test_it_names_held_out_rows_picked_for_training_by_key(accepted):
    row = held_out("test", object_id="BENCH-2", seed=3)
    assert held_out_overlap("GRPO rows", spectrum_ids=[accepted.spectrum_id]) is None
    sentence = held_out_overlap("GRPO rows", spectrum_ids=[accepted.spectrum_id, row.pk])
    assert sentence is not None and "BENCH-2" in sentence
    assert held_out_overlap("a preference export", content_hashes=[row.content_hash])


def test_it_refuses_a_grpo_run_whose_rows_hold_a_test_spectrum(
    owner, expert, outsider, ml_engineer, tiny_model_path, training_dirs, tmp_path
):
    from annotation.inspections import services as inspection_services
    from annotation.spectra.services import label_export_create
    from annotation.training_runs import jobs as training_jobs
    from annotation.training_runs import services as training_runs_services
    from tests.factories import make_inspected

    spectra = [make_spectrum(object_id=f"GRPO-{i}", seed=20 + i) for i in range(2)]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for row in spectra:
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=run.candidates.get(spectrum=row), expert=user, decision="YES"
            )
    export = label_export_create(actor=owner)
    training = training_runs_services.training_run_create(
        stage="grpo",
        preset="cpu-tiny",
        base_model=str(tiny_model_path),
        label_source={"label_export": export.version},
        created_by=ml_engineer,
    )
    held_out("test", object_id="GRPO-1", seed=77)  # the benchmark's spectrum of that name
    with pytest.raises(
        WorkflowError, match=r"the GRPO run's rows .* share 1 object id\(s\) GRPO-1"
    ):
        training_jobs.prepare_data(training, tmp_path)
