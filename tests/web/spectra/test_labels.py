"""The label rule: two agreeing experts make a label, a disagreement waits for a third expert
who is neither of the first two, and "unsure" never makes a label."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from annotation.spectra.labels import DecisionRecord, LabelState, label_from_decisions

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def record(expert_id: int, value: str, minute: int, *, decision_id: int | None = None, **extra):
    return DecisionRecord(
        decision_id=decision_id if decision_id is not None else 100 * expert_id + minute,
        expert_id=expert_id,
        expert=f"e{expert_id}",
        value=value,
        decided_at=T0 + timedelta(minutes=minute),
        candidate_id=1,
        run_id=1,
        **extra,
    )


def test_it_makes_a_label_when_the_first_two_experts_agree():
    outcome = label_from_decisions([record(1, "NO", 0), record(2, "NO", 1)])
    assert (outcome.state, outcome.value) == (LabelState.AGREED, "NO")
    assert [r.counted for r in outcome.decisions] == [True, True]


def test_it_waits_for_a_third_expert_when_the_first_two_disagree():
    outcome = label_from_decisions([record(1, "YES", 0), record(2, "NO", 1)])
    assert (outcome.state, outcome.value) == (LabelState.CONFLICT, "")
    assert not any(r.counted for r in outcome.decisions)


@pytest.mark.parametrize("third", ["YES", "NO"])
def test_it_takes_the_third_experts_answer_to_settle_a_conflict(third):
    outcome = label_from_decisions([record(1, "YES", 0), record(2, "NO", 1), record(3, third, 2)])
    assert (outcome.state, outcome.value) == (LabelState.RESOLVED, third)
    assert [r.expert_id for r in outcome.decisions if r.counted] == [1, 2, 3]


def test_it_never_counts_unsure_toward_a_label():
    only_unsure = label_from_decisions([record(1, "unsure", 0), record(2, "unsure", 1)])
    assert (only_unsure.state, only_unsure.value) == (LabelState.PENDING, "")
    one_sure = label_from_decisions([record(1, "YES", 0), record(2, "unsure", 1)])
    assert one_sure.state == LabelState.PENDING
    # An unsure second expert does not block: the next decisive expert is the second.
    outcome = label_from_decisions(
        [record(1, "YES", 0), record(2, "unsure", 1), record(3, "YES", 2)]
    )
    assert (outcome.state, outcome.value) == (LabelState.AGREED, "YES")
    assert {r.expert_id: r.counted for r in outcome.decisions} == {1: True, 2: False, 3: True}


def test_it_counts_each_expert_once_with_their_latest_answer_in_their_first_place():
    # Expert 1 answered YES on one run's candidate and later NO on another run's: NO counts,
    # and expert 1 stays first in line.
    later_no = record(1, "NO", 5, decision_id=7)
    outcome = label_from_decisions(
        [record(1, "YES", 0, decision_id=1), record(2, "YES", 1, decision_id=2), later_no]
    )
    assert [(r.expert_id, r.value) for r in outcome.decisions] == [(1, "NO"), (2, "YES")]
    assert (outcome.state, outcome.value) == (LabelState.CONFLICT, "")


def test_it_keeps_an_expert_who_changes_their_mind_in_their_place():
    changed = record(1, "NO", 0, changed_at=T0 + timedelta(minutes=9))
    outcome = label_from_decisions([changed, record(2, "NO", 1), record(3, "YES", 2)])
    # Experts 1 and 2 (the first two) now agree; expert 3 does not count.
    assert (outcome.state, outcome.value) == (LabelState.AGREED, "NO")
    assert [r.expert_id for r in outcome.decisions if r.counted] == [1, 2]


def test_it_keeps_what_each_expert_saw():
    outcome = label_from_decisions(
        [
            record(1, "YES", 0, model_key="m:a", verdict_seen="NO", confidence_seen=0.6),
            record(2, "YES", 1, model_key="m:b", verdict_seen="YES", confidence_seen=0.7),
        ]
    )
    kept = [r.as_dict() for r in outcome.decisions]
    assert [(d["expert"], d["model_key"], d["verdict_seen"]) for d in kept] == [
        ("e1", "m:a", "NO"),
        ("e2", "m:b", "YES"),
    ]
