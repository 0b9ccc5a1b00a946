"""Splits that cannot leak (issue 33 item 6): spectra known by object id and content hash, and
a refusal that names what two sets share."""

from __future__ import annotations

import dataclasses

import pytest

from agent.splits import (
    TRAINING_SPECTRA_FILE,
    SplitMembers,
    SplitOverlap,
    TrainingSpectraError,
    check_disjoint,
    check_evaluation_disjoint,
    content_hash,
    load_training_spectra,
    save_training_spectra,
    with_base_spectra,
)
from agent.synthetic import generate_split


@pytest.fixture(scope="module")
def spectra():
    return [sample.spectrum for sample in generate_split("CV", "train", n_pos=2, n_neg=2, seed=3)]


def test_it_hashes_the_arrays_not_the_name(spectra):
    renamed = dataclasses.replace(spectra[0], object_id="SOMEONE-ELSE")
    assert content_hash(renamed) == content_hash(spectra[0])
    assert content_hash(spectra[0]) != content_hash(spectra[1])


def test_it_passes_disjoint_sets(spectra):
    check_disjoint(
        SplitMembers.of_spectra("training", spectra[:2]),
        SplitMembers.of_spectra("validation", spectra[2:]),
    )


def test_it_names_a_spectrum_shared_under_another_object_id(spectra):
    renamed = dataclasses.replace(spectra[0], object_id="SVM-CV-validation-0042")
    with pytest.raises(SplitOverlap) as refusal:
        check_disjoint(
            SplitMembers.of_spectra("GRPO data", spectra[:2]),
            SplitMembers.of_spectra("evaluation", [renamed]),
        )
    message = str(refusal.value)
    assert "GRPO data and evaluation share" in message
    assert content_hash(spectra[0])[:16] in message
    assert "object id" not in message


def test_it_names_an_object_id_shared_with_other_arrays(spectra):
    other = dataclasses.replace(spectra[1], object_id=spectra[0].object_id)
    with pytest.raises(SplitOverlap, match=f"1 object id\\(s\\) {spectra[0].object_id}"):
        check_disjoint(
            SplitMembers.of_spectra("SFT data", spectra[:1]),
            SplitMembers.of_spectra("validation", [other]),
        )


def test_it_matches_a_trajectory_by_the_digest_its_rollout_recorded(spectra):
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect

    class Answer:
        def info(self):
            return {"name": "scripted"}

        def generate(self, messages):
            return "<answer>\\boxed{YES} emission.</answer>"

    trajectory = inspect(spectra[0], get_task("CV"), Answer())
    renamed = dataclasses.replace(spectra[0], object_id="ELSEWHERE")
    trained = SplitMembers.of_trajectories("SFT data", [trajectory])
    assert trained.object_ids == {spectra[0].object_id}
    with pytest.raises(SplitOverlap, match="SFT data and validation share 1 content hash"):
        check_disjoint(trained, SplitMembers.of_spectra("validation", [renamed]))


# --- a checkpoint's training spectra (evaluations are checked against them) ----------------------


def test_it_reads_back_the_training_spectra_written_beside_a_checkpoint(spectra, tmp_path):
    trained = SplitMembers.of_spectra("SFT data", spectra[:2])
    save_training_spectra(tmp_path, trained)
    loaded = load_training_spectra(tmp_path)
    assert loaded is not None
    assert (loaded.object_ids, loaded.content_hashes) == (
        trained.object_ids,
        trained.content_hashes,
    )
    assert load_training_spectra(tmp_path / "elsewhere") is None


def test_it_keeps_the_base_checkpoint_s_spectra_in_a_chain(spectra, tmp_path):
    base = tmp_path / "sft"
    base.mkdir()
    save_training_spectra(base, SplitMembers.of_spectra("SFT data", spectra[:1]))
    grpo = with_base_spectra(SplitMembers.of_spectra("GRPO data", spectra[1:2]), base)
    assert grpo.name == "GRPO data"
    assert grpo.object_ids == {spectra[0].object_id, spectra[1].object_id}
    assert with_base_spectra(grpo, tmp_path / "not-a-checkpoint") == grpo


def test_it_refuses_to_evaluate_a_checkpoint_on_a_spectrum_it_trained_on(spectra, tmp_path):
    save_training_spectra(tmp_path, SplitMembers.of_spectra("SFT data", spectra[:2]))
    spec = {"kind": "transformers", "model_path": str(tmp_path)}
    renamed = dataclasses.replace(spectra[1], object_id="EVAL-ONLY-7")
    with pytest.raises(SplitOverlap) as refusal:
        check_evaluation_disjoint(spec, SplitMembers.of_spectra("evaluation", [renamed]))
    message = str(refusal.value)
    assert f"checkpoint {tmp_path.name} and evaluation share" in message
    assert content_hash(spectra[1])[:16] in message and "object id" not in message
    check_evaluation_disjoint(spec, SplitMembers.of_spectra("evaluation", spectra[2:]))
    # Policies that load no local checkpoint record nothing to check.
    check_evaluation_disjoint({"kind": "rule-based"}, SplitMembers.of_spectra("e", spectra))


def test_it_refuses_a_training_spectra_file_it_cannot_read(tmp_path):
    (tmp_path / TRAINING_SPECTRA_FILE).write_text('{"schema": 99}')
    with pytest.raises(TrainingSpectraError, match="schema"):
        load_training_spectra(tmp_path)
