"""Validation F1 during training: which labelled set it runs on, and the name it is logged under."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from training.callbacks import Collectives, ValidationF1Callback
from training.config import RunArguments
from training.run import validation_samples


class Sink:
    def __init__(self) -> None:
        self.records = []

    def write(self, record) -> None:
        self.records.append(record)


def unavailable(*args, **kwargs):
    from agent.real_corpus import CorpusUnavailable

    raise CorpusUnavailable("no cache")


def test_it_falls_back_to_specvi_mini_without_the_real_corpus(monkeypatch):
    monkeypatch.setattr("agent.real_corpus.load_corpus", unavailable)
    samples, source = validation_samples(RunArguments(validation_tasks=["CV"]))
    assert source == "synthetic"
    assert {sample.label for sample in samples} == {"YES", "NO"}


def test_it_refuses_a_real_validation_it_cannot_load(monkeypatch):
    monkeypatch.setattr("agent.real_corpus.load_corpus", unavailable)
    with pytest.raises(ValueError, match="make real-data"):
        validation_samples(RunArguments(validation_tasks=["CV"], validation_source="real"))


def test_it_uses_the_real_validation_split_when_it_is_there(monkeypatch, cv_spectrum):
    entry = SimpleNamespace(id="hd-1", label=lambda task: "YES")
    monkeypatch.setattr("agent.real_corpus.load_corpus", lambda split: [(entry, cv_spectrum)])
    samples, source = validation_samples(RunArguments(validation_tasks=["CV"]))
    assert (source, [(s.sample_id, s.label) for s in samples]) == ("real", [("hd-1", "YES")])


@pytest.mark.parametrize("source", ["real", "synthetic"])
def test_it_names_the_validation_set_in_the_metric(source, cv_item):
    from agent.evaluation import EvalSample

    sample = EvalSample("s", "CV", "YES", cv_item.spectrum)
    sink = Sink()
    callback = ValidationF1Callback(
        [sample],
        processor=None,
        sink=sink,
        stage="grpo",
        every_steps=1,
        source=source,
        collectives=lambda device: Collectives(0, 1, lambda n: n, lambda items: [items]),
    )
    report = SimpleNamespace(
        macro={"f1": 0.5, "accuracy": 0.75}, samples=[SimpleNamespace(n_tool_calls=2)], seconds=1.0
    )
    callback.evaluate = lambda model: report
    state = SimpleNamespace(global_step=4, epoch=1.0, is_world_process_zero=True)
    callback.on_step_end(None, state, None, model=None)
    (record,) = sink.records
    assert record.metrics[f"val_f1_{source}"] == record.metrics["val_f1"] == 0.5


def test_it_evaluates_on_every_rank_but_records_on_the_first(cv_item):
    from agent.evaluation import EvalSample

    sink, calls = Sink(), []
    callback = ValidationF1Callback(
        [EvalSample("s", "CV", "YES", cv_item.spectrum)], None, sink, stage="sft", every_steps=2
    )
    report = SimpleNamespace(macro={"f1": 1.0, "accuracy": 1.0}, samples=[], seconds=0.0)
    callback.evaluate = lambda model: calls.append(model) or report
    state = SimpleNamespace(global_step=2, epoch=1.0, is_world_process_zero=False)
    callback.on_step_end(None, state, None, model="rank-1 model")
    assert (calls, sink.records) == (["rank-1 model"], [])


class FakeModel:
    """The bits of a model ``ValidationF1Callback.evaluate`` touches before decoding."""

    def __init__(self, name: str) -> None:
        import torch

        self.name, self.training = name, True
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def parameters(self):
        return iter([self.weight])

    def eval(self) -> None:
        self.training = False

    def train(self, mode: bool) -> None:
        self.training = mode


def zero3_trainer(stage: int, engine: str = "engine") -> SimpleNamespace:
    plugin = SimpleNamespace(zero_stage=stage)
    return SimpleNamespace(
        is_deepspeed_enabled=True,
        accelerator=SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin)),
        model_wrapped=engine,
    )


def recorded_evaluation(monkeypatch, callback, model, world_size: int = 2):
    """Run ``callback.evaluate`` with the policy and the shard evaluation replaced by recorders;
    returns (model decoded with, synced_gpus, models TRL was asked to unwrap)."""
    from contextlib import contextmanager

    seen: dict = {"unwrapped": []}
    gathered_model = FakeModel("gathered")

    @contextmanager
    def unwrap(engine, accelerator, gather_deepspeed3_params=True):
        seen["unwrapped"].append((engine, gather_deepspeed3_params))
        yield gathered_model

    class Policy:
        def __init__(self, model, processor, *, sampling, synced_gpus):
            seen["model"], seen["synced"] = model, synced_gpus

    monkeypatch.setattr("trl.models.utils.unwrap_model_for_generation", unwrap)
    monkeypatch.setattr("training.callbacks.InMemoryPolicy", Policy)
    monkeypatch.setattr("agent.evaluation.evaluate_shard", lambda *args, **kwargs: "report")
    callback.collectives = lambda device: Collectives(0, world_size, max, lambda items: [items])
    assert callback.evaluate(model) == "report"
    return seen["model"].name, seen["synced"], seen["unwrapped"]


def test_it_gathers_zero3_weights_once_per_validation_pass_instead_of_per_token(
    monkeypatch, cv_item
):
    """Under ZeRO-3 the old callback decoded the partitioned model with synced_gpus, gathering
    every layer for every token; now TRL gathers the engine's weights once for the pass."""
    from agent.evaluation import EvalSample
    from training.callbacks import attach_trainer

    callback = ValidationF1Callback(
        [EvalSample("s", "CV", "YES", cv_item.spectrum)], None, Sink(), stage="grpo", every_steps=1
    )
    trainer = zero3_trainer(3)
    trainer.callback_handler = SimpleNamespace(callbacks=[object(), callback])
    assert attach_trainer(trainer) is trainer and callback.trainer is trainer
    model = FakeModel("partitioned")
    assert recorded_evaluation(monkeypatch, callback, model) == (
        "gathered",
        False,
        [("engine", True)],
    )
    assert model.training  # back in training mode after the pass


@pytest.mark.parametrize(
    ("trainer", "gather"),
    [(None, True), (zero3_trainer(2), True), (zero3_trainer(3), False)],
    ids=["no-trainer", "zero2", "gather-off"],
)
def test_it_decodes_the_model_as_it_is_without_zero3_gathering(
    monkeypatch, cv_item, trainer, gather
):
    from agent.evaluation import EvalSample

    callback = ValidationF1Callback(
        [EvalSample("s", "CV", "YES", cv_item.spectrum)],
        None,
        Sink(),
        stage="sft",
        every_steps=1,
        gather_zero3=gather,
    )
    callback.trainer = trainer
    assert recorded_evaluation(monkeypatch, callback, FakeModel("as-is")) == ("as-is", True, [])


def test_it_passes_the_run_s_gathering_choice_to_the_callback(monkeypatch):
    from training.run import run_callbacks

    monkeypatch.setattr("training.run.validation_samples", lambda run_args: (["sample"], "real"))
    args = RunArguments(validation_tasks=["CV"], validation_gather_zero3=False)
    callbacks = run_callbacks(args, None, Sink(), stage="sft", run_name="r")
    (validation,) = [c for c in callbacks if isinstance(c, ValidationF1Callback)]
    assert validation.gather_zero3 is False


# --- splits that cannot leak (issue 33 item 6) ---------------------------------------------------


def test_it_draws_synthetic_validation_from_the_validation_split_not_the_test_one(monkeypatch):
    monkeypatch.setattr("agent.real_corpus.load_corpus", unavailable)
    samples, _ = validation_samples(RunArguments(validation_tasks=["CV"]))
    assert all("-validation-" in sample.sample_id for sample in samples)
    assert all(sample.spectrum.object_id.startswith("SVM-CV-validation-") for sample in samples)


def test_it_refuses_sft_data_holding_a_validation_spectrum(monkeypatch, tiny_model_path, tmp_path):
    """A demonstration on a validation spectrum renamed: caught by the digest its rollout kept."""
    import dataclasses

    from tests.training.conftest import ANSWER_YES, scripted_trajectory
    from training.data import TrainingDataError
    from training.sft import build_sft_run, parse_args

    monkeypatch.setattr("agent.real_corpus.load_corpus", unavailable)
    run_args = RunArguments(validation_tasks=["CV"], validation_samples_per_task=2)
    samples, _ = validation_samples(run_args)
    leaked = dataclasses.replace(samples[0].spectrum, object_id="LAMOST J0000+0000")
    trajectories = [scripted_trajectory(leaked, [ANSWER_YES])]
    args = parse_args(
        [
            "--config",
            "training/configs/sft_cpu_tiny.yaml",
            "--model_name_or_path",
            str(tiny_model_path),
            "--output_dir",
            str(tmp_path),
            "--validation_tasks",
            "CV",
            "--validation_samples_per_task",
            "2",
            "--validation_source",
            "synthetic",
        ]
    )
    with pytest.raises(TrainingDataError, match="SFT data and in-training validation") as refusal:
        build_sft_run(*args, trajectories=trajectories)
    assert leaked.digest()[:16] in str(refusal.value)


def test_it_refuses_grpo_rows_from_a_held_out_split():
    from training.config import DataArguments
    from training.data import TrainingDataError
    from training.grpo import collect_items

    for split in ("test", "validation"):
        data_args = DataArguments(specvi_mini_tasks=["CV"], specvi_mini_split=split)
        with pytest.raises(TrainingDataError, match=f"specvi_mini_split '{split}' is held out"):
            collect_items(data_args)


def test_it_refuses_grpo_rows_sharing_an_object_id_with_validation(monkeypatch):
    from agent.splits import SplitMembers
    from training.data import TrainingDataError
    from training.run import check_validation_disjoint

    monkeypatch.setattr("agent.real_corpus.load_corpus", unavailable)
    run_args = RunArguments(validation_tasks=["CV"], validation_samples_per_task=2)
    samples, _ = validation_samples(run_args)
    grpo = SplitMembers(
        "GRPO data", frozenset({samples[1].spectrum.object_id}), frozenset({"0" * 64})
    )
    with pytest.raises(TrainingDataError, match=samples[1].spectrum.object_id):
        check_validation_disjoint(run_args, grpo)
    check_validation_disjoint(RunArguments(), grpo)  # no validation tasks: nothing to check
