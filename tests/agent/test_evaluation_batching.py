"""Batched evaluation: turn-synchronous generate_batch rounds, bounded concurrent episodes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent.bench.eval_concurrency import run_eval_concurrency
from agent.evaluation import evaluate, specvi_mini_samples
from agent.inspection_tasks import get_task
from agent.rollout import inspect_batch

CALL = (
    '<think>zoom</think><tool_call>{"name": "spectral_visualization_tool", '
    '"arguments": {"wavelength_range": [6500, 6630], "label": "H-alpha"}}</tool_call>'
)
ANSWER = "<think>done</think><answer>\\boxed{YES} broad H-alpha.</answer><|im_end|>"


def reply(messages: list[dict[str, Any]]) -> str:
    turn = sum(1 for message in messages if message["role"] == "assistant")
    return CALL if turn == 0 else ANSWER


class BatchPolicy:
    """Answers every conversation by its turn number; records the batch sizes it was sent."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def info(self) -> dict[str, Any]:
        return {"name": "batch"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return reply(messages)

    def generate_batch(self, conversations: list[list[dict[str, Any]]]) -> list[str]:
        self.batches.append(len(conversations))
        return [reply(messages) for messages in conversations]


class ThreadedPolicy(BatchPolicy):
    concurrent_safe = True

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def generate(self, messages: list[dict[str, Any]]) -> str:
        self.threads.add(threading.get_ident())
        return reply(messages)


@pytest.fixture(scope="module")
def samples():
    return specvi_mini_samples(split="test", tasks=["CV"], seed=3, scale=0.2)[:5]


def summary(report) -> list[tuple[str, str | None, int, bool]]:
    return [(r.sample_id, r.prediction, r.n_tool_calls, r.format_ok) for r in report.samples]


def test_it_batches_every_unfinished_episode_into_one_call_per_turn(samples):
    policy = BatchPolicy()
    batched = evaluate(samples, policy, benchmark="specvi-mini", split="test", batch_size=4)
    sequential = evaluate(samples, BatchPolicy(), benchmark="specvi-mini", split="test")
    assert policy.batches == [4, 4, 1, 1]
    assert summary(batched) == summary(sequential)
    assert batched.macro["f1"] == sequential.macro["f1"]


def test_it_runs_concurrent_episodes_in_sample_order(samples):
    policy = ThreadedPolicy()
    report = evaluate(samples, policy, benchmark="specvi-mini", split="test", concurrency=3)
    sequential = evaluate(samples, BatchPolicy(), benchmark="specvi-mini", split="test")
    assert summary(report) == summary(sequential)
    assert len(policy.threads) > 1


def test_it_refuses_concurrency_for_a_policy_with_episode_state(samples):
    with pytest.raises(ValueError, match="concurrent_safe"):
        evaluate(samples, BatchPolicy(), benchmark="specvi-mini", split="test", concurrency=2)


def test_it_keeps_calling_generate_batch_while_other_ranks_are_busy(samples):
    policy = BatchPolicy()
    rounds = iter([True, True, True, True, False])  # the other ranks need two more rounds
    trajectories = inspect_batch(
        [(samples[0].spectrum, get_task("CV"))],
        policy,
        keep_going=lambda local_active: next(rounds),
    )
    assert policy.batches == [1, 1, 0, 0]
    assert [t.stop_reason for t in trajectories] == ["answer"]


def test_it_never_keeps_the_end_of_turn_token_in_a_parsed_answer(samples):
    report = evaluate(samples[:1], BatchPolicy(), benchmark="specvi-mini", split="test")
    assert report.samples[0].format_ok is True


def test_it_measures_evaluation_throughput_at_each_concurrency():
    summary = run_eval_concurrency(4, latency_ms=5, levels=[1, 4])
    assert [row["concurrency"] for row in summary["rows"]] == [1, 4]
    assert [row["answered"] for row in summary["rows"]] == [4, 4]
    assert summary["rows"][0]["ratio"] == 1.0


class ThreadGroup:
    """torch.distributed's all-reduce(max) and all_gather_object, for ranks that are threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.slots: list[Any] = [None] * size

    def exchange(self, rank: int, value: Any) -> list[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values


class CountingPolicy(BatchPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def generate(self, messages: list[dict[str, Any]]) -> str:
        self.calls += 1
        return reply(messages)


def test_it_shards_validation_over_ranks_that_generate_in_lockstep(samples):
    from agent.evaluation import evaluate_shard

    group = ThreadGroup(2)
    policies = [CountingPolicy(), CountingPolicy()]
    reports: list[Any] = [None, None]

    def rank_main(rank: int) -> None:
        reports[rank] = evaluate_shard(
            samples,
            policies[rank],
            rank=rank,
            world_size=2,
            all_max=lambda n: max(group.exchange(rank, n)),
            gather=lambda items: group.exchange(rank, items),
            benchmark="specvi-mini",
            split="validation",
        )

    threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    single = evaluate(samples, BatchPolicy(), benchmark="specvi-mini", split="validation")
    assert summary(reports[0]) == summary(reports[1]) == summary(single)
    # 5 samples: rank 0 has 3 episodes, rank 1 has 2 and pads with throwaway calls
    assert policies[0].calls == policies[1].calls == 6


def test_it_aborts_the_concurrency_benchmark_when_answers_cross_spectra(monkeypatch) -> None:
    """A concurrent path that answers one spectrum with another's gets no speed printed."""
    import agent.evaluation as evaluation

    run_sample = evaluation.run_sample
    spectra: list[Any] = []

    def crossed(sample, policy, **kwargs):
        spectra.append(sample.spectrum)
        if threading.current_thread() is not threading.main_thread() and len(spectra) > 1:
            sample = type(sample)(**{**vars(sample), "spectrum": spectra[-2]})
        return run_sample(sample, policy, **kwargs)

    monkeypatch.setattr(evaluation, "run_sample", crossed)
    with pytest.raises(RuntimeError, match="got another answer than at concurrency 1"):
        run_eval_concurrency(6, latency_ms=1.0, levels=[1, 3])
