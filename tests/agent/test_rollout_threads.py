"""Episodes on one shared policy from several threads give each spectrum its own trajectory
(issue 28): a worker's threads share one cached policy, so nothing of one episode may live on it.
"""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.inspection_tasks import get_task
from agent.policies.rule_based import RuleBasedInspector
from agent.rollout import inspect
from agent.spectra import Spectrum
from agent.synthetic import generate_split

TASK = get_task("CV")
POOL: list[Spectrum] = [
    drawn.spectrum for drawn in generate_split("CV", "test", n_pos=4, n_neg=4, seed=2028)
]


def signature(trajectory: Any) -> dict[str, Any]:
    """What an episode says about its spectrum: every turn, every observation, the answer and
    the confidence it reports."""
    return {
        "object": trajectory.spectrum.object_id,
        "turns": [step.assistant_text for step in trajectory.steps],
        "observations": [
            None if step.tool_result is None else step.tool_result.text for step in trajectory.steps
        ],
        "answer": None if trajectory.answer is None else trajectory.answer.prediction,
        "decision": trajectory.meta.get("decision"),
    }


REFERENCE = {
    spectrum.object_id: signature(inspect(spectrum, TASK, RuleBasedInspector()))
    for spectrum in POOL
}


def run_overlapping(shared: Any, lanes: list[list[Spectrum]]) -> list[Any]:
    """Each lane's spectra in its own thread on one shared policy; each episode waits at its
    first step until the other lane's episode has begun, so the two always overlap."""
    barrier = threading.Barrier(len(lanes), timeout=10)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def wait_for_the_other(step: Any, trajectory: Any) -> None:
        if step.index == 0:
            barrier.wait()

    def lane(spectra: list[Spectrum]) -> None:
        try:
            for spectrum in spectra:
                trajectory = inspect(spectrum, TASK, shared, on_step=wait_for_the_other)
                with lock:
                    results.append(trajectory)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=lane, args=(spectra,)) for spectra in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def test_it_gives_each_spectrum_its_own_answer_when_two_threads_share_one_inspector() -> None:
    shared = RuleBasedInspector()
    results = run_overlapping(shared, [POOL[0::2], POOL[1::2]])
    assert len(results) == len(POOL)
    for trajectory in results:
        assert signature(trajectory) == REFERENCE[trajectory.spectrum.object_id]


@settings(max_examples=10, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(POOL), st.sampled_from(POOL)), min_size=1))
def test_it_keeps_episodes_apart_whatever_spectra_overlap(pairs: list[tuple[Any, Any]]) -> None:
    """Any two spectra at once, the same one twice included."""
    shared = RuleBasedInspector()
    lanes = [[first for first, _ in pairs[:4]], [second for _, second in pairs[:4]]]
    for trajectory in run_overlapping(shared, lanes):
        assert signature(trajectory) == REFERENCE[trajectory.spectrum.object_id]
