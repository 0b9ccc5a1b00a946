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
