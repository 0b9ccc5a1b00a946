"""The vetting queue's fast path (issue 34: the routed candidates walked on their partial index,
the others merged in, one per spectrum and task asked only of shared spectra, the count per
group) serves the same items in the same sequence, and counts the same, as the reference: one
query ordering the whole queue with one per spectrum and task in SQL, scored as before."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import Count, Exists, OuterRef

from agent.vetting_statistics import raw_p_yes
from annotation.catalog.queue import vetter_queue, vetter_queue_rows
from annotation.inspections import services as inspection_services
from annotation.inspections.decision_history import one_per_spectrum_task
from annotation.inspections.models import Candidate, CandidateState, CatalogEntry
from annotation.learning import queue, selectors, services
from annotation.spectra.labels import LabelState
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


def reference_ranked(rows: Any, limit: int) -> list[int]:
    """The queue's ranking as computed before issue 34, by one query over all of it."""
    conflict = Exists(
        CatalogEntry.objects.filter(candidate=OuterRef("pk"), label_state=LabelState.CONFLICT)
    )
    scanned = list(
        one_per_spectrum_task(rows)
        .annotate(active_conflict=conflict)
        .order_by("finished_at", "id")
        .values_list(
            "pk", "verdict", "confidence", "run__task_id", "run__model_key", "spectrum_id",
            "active_conflict",
        )[:limit]
    )  # fmt: skip
    disputed = set(
        Candidate.objects.filter(
            state=CandidateState.DONE, spectrum_id__in=rows.values("spectrum_id")
        )
        .exclude(verdict="")
        .values("run__task_id", "spectrum_id")
        .annotate(v=Count("verdict", distinct=True), m=Count("run__model_key", distinct=True))
        .filter(v__gt=1, m__gt=1)
        .values_list("run__task_id", "spectrum_id")
    )
    fits = selectors.latest_fits()
    labels = queue._label_counts()
    scored = []
    for pk, verdict, confidence, task_id, model_key, spectrum_id, in_conflict in scanned:
        q = selectors.recalibrated_p_yes(
            verdict=verdict, confidence=confidence, fit=fits.get((task_id, model_key))
        )
        q = raw_p_yes(verdict, confidence) if q is None else q
        counts = labels.get(task_id, {})
        known = (
            counts.get(verdict, 0) if verdict else min(counts.get("YES", 0), counts.get("NO", 0))
        )
        score = (
            (1.0 - 2.0 * abs(q - 0.5) if verdict else 1.0)
            + (1.0 if (task_id, spectrum_id) in disputed else 0.0)
            + queue.RARITY_SCALE / (queue.RARITY_SCALE + known)
        )
        scored.append((not in_conflict, -round(score, 12), pk))
    return [pk for *_, pk in sorted(scored, key=lambda row: row[:2])]


@pytest.fixture
def survey(owner, expert, outsider, staff):
    """Two models over shared spectra (the second's confident answers not routed, some of its
    spectra also in the first run: one candidate per spectrum and task, disagreements), three
    conflicts, two labels, an open audit sample, finished times shuffled with ties."""
    rng = random.Random(34)
    spectra = [make_spectrum(object_id=f"R-{i}", seed=5000 + i) for i in range(36)]
    first = make_inspected(
        spectra=spectra[:28],
        verdicts={
            s.pk: (rng.choice(["YES", "NO"]), round(rng.uniform(0.5, 1), 3)) for s in spectra
        },
        created_by=owner,
        threshold=0.999,
        model=("model:a", "model a"),
    )
    make_inspected(
        spectra=spectra[14:],
        verdicts={s.pk: (rng.choice(["YES", "NO", ""]), round(rng.uniform(0.5, 1), 3)) for s in spectra},
        created_by=owner,
        threshold=0.8,
        model=("model:b", "model b"),
    )  # fmt: skip
    ordered = list(first.candidates.order_by("pk"))
    for candidate, (a, b) in zip(
        ordered[:5], [("YES", "NO")] * 3 + [("YES", "YES")] * 2, strict=True
    ):
        inspection_services.expert_decision_record(candidate=candidate, expert=expert, decision=a)
        inspection_services.expert_decision_record(candidate=candidate, expert=outsider, decision=b)
    services.audit_sample_draw(task=first.task, model_key="model:b", per_stratum=4, actor=staff)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for candidate in Candidate.objects.order_by("pk"):
        at = start + timedelta(minutes=rng.randrange(12))  # ties, broken by id
        Candidate.objects.filter(pk=candidate.pk).update(finished_at=at)
    return first.task


def test_it_reads_the_oldest_and_counts_as_the_whole_queue_does(survey):
    vetter = UserFactory(username="vic", roles=["expert"])
    rows = vetter_queue_rows(vetter)
    served = one_per_spectrum_task(rows)
    assert Candidate.objects.filter(needs_expert=False, pk__in=served).exists()  # audit, conflict
    assert served.count() < rows.count()  # spectra two runs inspected
    for limit in (1, 2, 3, 5, 8, 13, 100):
        want = list(served.order_by("finished_at", "id").values_list("pk", flat=True)[:limit])
        assert [row[0] for row in queue.oldest(rows, limit)] == want, limit
        assert [r.pk for r in queue.ranked(rows, limit=limit)] == reference_ranked(rows, limit)
    assert queue.waiting_count(rows) == served.count() == vetter_queue(vetter).count()


def test_it_serves_the_reference_sequence_until_the_queue_is_empty(survey, staff):
    vetter = UserFactory(username="vic", roles=["expert"])
    services.recalibrate_task(task=survey, model_key="model:a", actor=staff, job=None)
    sequence = []
    while True:
        rows = vetter_queue_rows(vetter)
        want = reference_ranked(rows, queue.SCAN_LIMIT)
        candidate = queue.next_candidate(
            user=vetter, queue=rows, gold=Candidate.objects.none(), skipped=[]
        )
        assert (candidate.pk if candidate else None) == (want[0] if want else None)
        assert queue.waiting_count(rows) == len(want) == vetter_queue(vetter).count()
        if candidate is None:
            break
        sequence.append(candidate.pk)
        inspection_services.expert_decision_record(
            candidate=candidate, expert=vetter, decision="YES"
        )
    assert len(sequence) == len(set(sequence)) > 20
