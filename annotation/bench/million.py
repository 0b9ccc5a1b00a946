"""A million rows through the loop (issue 34, goal 5): the catalog, the vetting queue, the
calibration refit and the exports of one run, timed and measured at each size given.

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_bench
    .venv/bin/python -m annotation.bench.million --rows 100000 1000000

For each size it bulk-loads (COPY on PostgreSQL, bulk_create elsewhere) one run of a task of its
own: N spectra (tiny arrays), N finished candidates (verdict, confidence, triage as a run with a
0.7 threshold leaves them), N catalog entries and vetted labels for 1 % of the spectra. Then,
per operation: the wall time (the median of ``--repeats`` after one warm-up for the reads, one
pass for the rest) and the peak of Python allocations during a second pass (tracemalloc), and
verifies the result against a reference computed here from the generated arrays, never from
the code under test:

- the catalog's first page (default sort, and a task / verdict filter sorted by confidence):
  the ids equal the reference order; the count the page shows;
- the run's exact row count;
- the vetting queue's next item (what ``/api/vetting/next/`` reads: queue, gold, the ranking,
  the remaining count): the reference ranking's best;
- the calibration refit: labels used, positives, slope and intercept as a direct fit of the
  same labelled rows; the re-routing after it (triage): candidates with experts as the fitted
  rule gives;
- each export (CSV, VOTable, FITS) of the run: the rows written equal the database's count
  (the FITS header's NAXIS2, the VOTable's rows decoded).

Any mismatch aborts before a figure is printed. The rows are deleted at the end of each size.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import numpy as np

THRESHOLD = 0.7  # the run's confidence threshold: below it a verdict goes to experts
LABELLED_SHARE = 0.01
AUDIT_STRIDE = 100  # every 100th candidate (from the 4th) is in the audit sample the bench opens
TARGET_PURITY = 0.9
START = datetime(2025, 1, 1, tzinfo=UTC)
STEP_SECONDS = 30


@dataclass
class Generated:
    """The bench's rows as arrays, in insertion order (index i: spectrum, candidate, entry)."""

    verdict: np.ndarray  # "YES" | "NO" | ""
    confidence: np.ndarray
    labelled: np.ndarray  # bool: the spectrum has a vetted label for the task
    label_yes: np.ndarray  # bool: that label is YES
    entry_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    candidate_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    spectrum_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def needs_expert(self) -> np.ndarray:
        return (self.verdict == "") | (self.confidence < THRESHOLD)

    @property
    def audited(self) -> np.ndarray:
        return np.arange(len(self.verdict)) % AUDIT_STRIDE == 3


def generate(rows: int, seed: int) -> Generated:
    rng = np.random.default_rng(seed)
    verdict = rng.choice(np.array(["YES", "NO", ""]), rows, p=[0.2, 0.78, 0.02])
    confidence = np.round(np.clip(0.5 + 0.5 * rng.beta(4.0, 1.5, rows), 0.5, 1.0), 4)
    confidence[verdict == ""] = 0.0
    labelled = (rng.random(rows) < LABELLED_SHARE) & (verdict != "")
    # the label agrees with the verdict as often as the confidence says, a little less
    agree = rng.random(rows) < 0.9 * confidence
    label_yes = np.where(agree, verdict == "YES", verdict != "YES")
    return Generated(verdict=verdict, confidence=confidence, labelled=labelled, label_yes=label_yes)


def _at(i: int | np.integer[Any]) -> datetime:
    return START + timedelta(seconds=STEP_SECONDS * int(i))


# --- loading ---------------------------------------------------------------------------------------


def _ids_in_order(rows_of: Any, rows: int) -> np.ndarray:
    """The ids of the rows just loaded, in insertion (id) order."""
    return np.fromiter(
        rows_of.order_by("id").values_list("id", flat=True), dtype=np.int64, count=rows
    )


def _load(model: Any, columns: Sequence[str], rows: Iterator[tuple[Any, ...]]) -> None:
    from django.db import connection

    if connection.vendor == "postgresql":
        statement = f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN"
        with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
        return
    batch: list[Any] = []
    for row in rows:
        batch.append(model(**dict(zip(columns, row, strict=True))))
        if len(batch) >= 5000:
            model.objects.bulk_create(batch)
            batch = []
    model.objects.bulk_create(batch)


@dataclass
class Bench:
    token: str
    task: Any
    run: Any
    user: Any
    data: Generated
    audit: Any = None  # the open audit sample, once an operation opened it


def load(rows: int, seed: int) -> tuple[Bench, float]:
    """The run, its spectra, candidates, catalog entries and labels; seconds taken."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from annotation.core.roles import Role
    from annotation.inspections.models import InspectionRun
    from annotation.spectra.models import Task

    started = time.perf_counter()
    data = generate(rows, seed)
    token = uuid4().hex[:8]
    task = Task.objects.create(code=f"BM{token}", name="bench million", question="?", guideline="")
    model_key = f"bench:million-{token}"
    run = InspectionRun.objects.create(
        name=f"bench_million {token}",
        task=task,
        policy_spec={"kind": "rule-based"},
        policy_info={"name": "bench_million"},
        confidence_threshold=THRESHOLD,
        model_key=model_key,
        model_label="bench million",
    )
    user = get_user_model().objects.create_user(username=f"bench-million-{token}")
    Group.objects.get_or_create(name=Role.EXPERT.value)[0].user_set.add(user)
    bench = Bench(token=token, task=task, run=run, user=user, data=data)
    try:
        _fill(bench, rows)
    except BaseException:
        remove(bench)
        raise
    return bench, time.perf_counter() - started


def _fill(bench: Bench, rows: int) -> None:
    from django.db import connection

    from annotation.inspections.models import (
        Candidate,
        CandidateState,
        CatalogEntry,
        TriageReason,
    )
    from annotation.spectra.labels import LabelState
    from annotation.spectra.models import Spectrum, SpectrumLabel

    token, task, run, data = bench.token, bench.task, bench.run, bench.data
    model_key = run.model_key
    dataset = f"bench-million-{token}"
    ra = np.round(np.arange(rows) * (360.0 / max(rows, 1)), 6)
    _load(
        Spectrum,
        ("object_id", "survey", "ra", "dec", "snr", "redshift", "n_pixels", "wavelength_min",
         "wavelength_max", "arrays", "content_hash", "meta", "source_name", "resolution_source",
         "dataset", "split", "label", "synthetic", "created_at"),
        (
            (f"BM{token}-{i:07d}", "LAMOST", float(ra[i]), 10.0, 20.0, 0.0, 0, 3800.0, 9000.0,
             b"", f"{token}{i:056d}", "{}", "", "", dataset, "", "", False, _at(i))
            for i in range(rows)
        ),
    )  # fmt: skip
    data.spectrum_ids = _ids_in_order(Spectrum.objects.filter(dataset=dataset), rows)
    needs = data.needs_expert
    _load(
        Candidate,
        ("run_id", "spectrum_id", "state", "verdict", "confidence", "needs_expert",
         "triage_reason", "queue_closed_reason", "error", "attempts", "finished_at"),
        (
            (run.pk, int(data.spectrum_ids[i]), CandidateState.DONE.value, str(data.verdict[i]),
             float(data.confidence[i]), bool(needs[i]),
             (TriageReason.NO_VERDICT.value if not data.verdict[i]
              else TriageReason.LOW_CONFIDENCE.value if needs[i] else ""),
             "", "", 1, _at(i))
            for i in range(rows)
        ),
    )  # fmt: skip
    data.candidate_ids = _ids_in_order(Candidate.objects.filter(run=run), rows)
    labelled = data.labelled
    value = np.where(data.label_yes, "YES", "NO")
    _load(
        CatalogEntry,
        ("candidate_id", "run_id", "spectrum_id", "object_id", "survey", "ra", "dec", "task_code",
         "verdict", "confidence", "snr", "policy_name", "expert_decision", "model_key",
         "model_label", "vetted_label", "label_state", "expert_issues", "synthetic", "shifted",
         "evidence_outcome", "dataset", "designation", "content_hash", "created_at"),
        (
            (int(data.candidate_ids[i]), run.pk, int(data.spectrum_ids[i]), f"BM{token}-{i:07d}",
             "LAMOST", float(ra[i]), 10.0, task.code, str(data.verdict[i]),
             float(data.confidence[i]), 20.0, "bench", "", model_key, "bench million",
             str(value[i]) if labelled[i] else "",
             LabelState.AGREED if labelled[i] else "", "", False, False, "", dataset, "",
             f"{token}{i:056d}", _at(i))
            for i in range(rows)
        ),
    )  # fmt: skip
    data.entry_ids = _ids_in_order(CatalogEntry.objects.filter(run=run), rows)
    _load(
        SpectrumLabel,
        ("spectrum_id", "task_id", "state", "value", "decisions", "labelled_at", "updated_at"),
        (
            (int(data.spectrum_ids[i]), task.pk, LabelState.AGREED, str(value[i]), "[]", _at(i),
             _at(i))
            for i in np.flatnonzero(labelled)
        ),
    )  # fmt: skip
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            for model in (Spectrum, Candidate, CatalogEntry, SpectrumLabel):
                cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
        else:
            cursor.execute("ANALYZE")


def remove(bench: Bench) -> None:
    """The bench's rows, in foreign-key order, with plain DELETEs (no ORM collector over 10^6)."""
    from django.db import connection

    from annotation.inspections.models import Candidate, CatalogEntry, InspectionRun, ShiftCheck
    from annotation.learning.models import (
        AuditSample,
        CalibrationFit,
        TriageTarget,
        TriageThreshold,
    )
    from annotation.spectra.models import Spectrum, SpectrumLabel

    TriageThreshold.objects.filter(task=bench.task).delete()
    TriageTarget.objects.filter(task=bench.task).delete()
    AuditSample.objects.filter(task=bench.task).delete()
    CalibrationFit.objects.filter(task=bench.task).delete()
    ShiftCheck.objects.filter(run=bench.run).delete()
    with connection.cursor() as cursor:
        for model, where, value in (
            (CatalogEntry, "run_id", bench.run.pk),
            (Candidate, "run_id", bench.run.pk),
            (SpectrumLabel, "task_id", bench.task.pk),
            (Spectrum, "dataset", f"bench-million-{bench.token}"),
        ):
            cursor.execute(f"DELETE FROM {model._meta.db_table} WHERE {where} = %s", [value])
    InspectionRun.objects.filter(pk=bench.run.pk).delete()
    bench.task.delete()
    bench.user.delete()


# --- references ------------------------------------------------------------------------------------


def reference_page(data: Generated, *, sort: str, verdict: str = "") -> list[int]:
    """The first page's entry ids: default sort is newest first (created_at steps with the
    index), else by confidence descending; the id breaks ties the same way."""
    from annotation.catalog.selectors import PAGE_SIZE

    ids = data.entry_ids
    keep = np.ones(len(ids), dtype=bool) if not verdict else data.verdict == verdict
    if sort == "-created_at":
        order = np.flatnonzero(keep)[::-1]
    else:
        chosen = np.flatnonzero(keep)
        order = chosen[np.lexsort((-ids[chosen], -data.confidence[chosen]))]
    return [int(ids[i]) for i in order[:PAGE_SIZE]]


def reference_next(data: Generated, *, audit: bool = False) -> tuple[int, int]:
    """(candidate id, queue length) the ranking must give: the SCAN_LIMIT oldest waiting
    candidates (routed to experts, or with ``audit`` in the open audit sample; spectrum not
    labelled), best score first, oldest among equals. No fit yet, one model, no conflict:
    score = uncertainty + rarity."""
    from annotation.learning.queue import RARITY_SCALE, SCAN_LIMIT

    queued = data.needs_expert | data.audited if audit else data.needs_expert
    waiting = np.flatnonzero(queued & ~data.labelled)
    scanned = waiting[:SCAN_LIMIT]
    yes_labels = int((data.labelled & data.label_yes).sum())
    no_labels = int((data.labelled & ~data.label_yes).sum())
    best, best_score = -1, -1.0
    for i in scanned:
        verdict, confidence = str(data.verdict[i]), float(data.confidence[i])
        if verdict:
            p_yes = confidence if verdict == "YES" else 1.0 - confidence
            uncertainty = 1.0 - 2.0 * abs(p_yes - 0.5)
            known = yes_labels if verdict == "YES" else no_labels
        else:
            uncertainty, known = 1.0, min(yes_labels, no_labels)
        score = round(uncertainty + RARITY_SCALE / (RARITY_SCALE + known), 12)
        if score > best_score:
            best, best_score = int(i), score
    return int(data.candidate_ids[best]), len(waiting)


def reference_fit(data: Generated) -> tuple[int, int, Any]:
    """(labels used, positives, Platt scaling) fitted directly on the labelled rows."""
    from agent.vetting_statistics import recalibrate

    used = np.flatnonzero(data.labelled)  # one candidate per spectrum, in spectrum id order
    raw = [
        float(data.confidence[i]) if data.verdict[i] == "YES" else 1.0 - float(data.confidence[i])
        for i in used
    ]
    truth = [bool(data.label_yes[i]) for i in used]
    return len(used), sum(truth), recalibrate(raw, truth)


def reference_with_experts(data: Generated, slope: float, intercept: float) -> int:
    """Candidates with experts once the fitted rule re-routes: no verdict stays; a verdict
    goes when its recalibrated confidence in itself is under the run's threshold."""
    raw = np.where(data.verdict == "YES", data.confidence, 1.0 - data.confidence)
    from agent.vetting_statistics import CLIP

    raw = np.clip(raw, CLIP, 1.0 - CLIP)
    q = 1.0 / (1.0 + np.exp(-(slope * np.log(raw / (1.0 - raw)) + intercept)))
    own = np.where(data.verdict == "YES", q, 1.0 - q)
    return int(((data.verdict == "") | ((data.verdict != "") & (own < THRESHOLD))).sum())


def _labelled_raw(data: Generated) -> tuple[list[float], list[bool]]:
    """The labelled candidates' raw P(YES) as a fit stores them (6 decimals), and their labels,
    in spectrum order."""
    used = np.flatnonzero(data.labelled)
    raw = np.where(data.verdict[used] == "YES", data.confidence[used], 1.0 - data.confidence[used])
    return [round(float(p), 6) for p in raw], [bool(t) for t in data.label_yes[used]]


def reference_purity(data: Generated, *, seed: int) -> tuple[float | None, ...]:
    """(threshold, low, high) for TARGET_PURITY: each fit applied to every YES verdict's raw
    P(YES) and sorted again, as ``agent.vetting_statistics.purity_threshold`` documents it."""
    from agent.vetting_statistics import BOOTSTRAP_RESAMPLES, CLIP, INTERVAL, recalibrate

    raw, truth = _labelled_raw(data)
    population = np.clip(data.confidence[data.verdict == "YES"], CLIP, 1.0 - CLIP)
    scores = np.log(population / (1.0 - population))

    def threshold(fit: Any) -> float | None:
        q = np.sort(1.0 / (1.0 + np.exp(-np.clip(fit.slope * scores + fit.intercept, -40, 40))))
        running = np.cumsum(q[::-1]) / np.arange(1, q.size + 1)
        meets = np.nonzero(running >= TARGET_PURITY)[0]
        return float(q[::-1][meets[-1]]) if meets.size else None

    rng = np.random.default_rng(seed)
    found, missing = [], 0
    for _ in range(BOOTSTRAP_RESAMPLES):
        pick = rng.integers(0, len(truth), len(truth))
        value = threshold(recalibrate([raw[i] for i in pick], [truth[i] for i in pick]))
        found += [value] if value is not None else []
        missing += value is None
    tail = (1.0 - INTERVAL) / 2.0
    low = float(np.quantile(found, tail)) if found else None
    high = (
        None
        if missing > tail * BOOTSTRAP_RESAMPLES or not found
        else float(np.quantile(found, 1 - tail))
    )
    return threshold(recalibrate(raw, truth)), low, high


def reference_with_experts_at(data: Generated, fit: Any, yes_threshold: float | None) -> int:
    """Candidates with experts once the rule with a target re-routes: no verdict stays; a YES
    goes under ``yes_threshold`` (every YES without one), a NO under the run's threshold. Each
    distinct confidence's recalibrated P(YES) as ``apply_fit`` gives it (the comparison with
    the threshold is exact)."""
    from agent.vetting_statistics import apply_fit

    values, at = np.unique(data.confidence, return_inverse=True)
    yes_q = np.asarray([apply_fit(fit, float(c)) for c in values])[at]
    no_q = np.asarray([apply_fit(fit, 1.0 - float(c)) for c in values])[at]
    yes, no = data.verdict == "YES", data.verdict == "NO"
    low_yes = yes & (True if yes_threshold is None else yes_q < yes_threshold)
    return int((data.verdict == "").sum() + low_yes.sum() + (no & (1.0 - no_q < THRESHOLD)).sum())


class Mismatch(SystemExit):
    pass


def check(name: str, got: Any, expected: Any) -> None:
    if got != expected:
        raise Mismatch(f"verification failed: {name}: got {got!r}, expected {expected!r}")


# --- operations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    name: str
    call: Callable[[Bench], Any]  # returns what verify checks
    verify: Callable[[Bench, Any], None]
    repeats: bool = True  # a read: timed as the median of --repeats after a warm-up


def _page(params: dict[str, str]) -> Callable[[Bench], Any]:
    def call(bench: Bench) -> Any:
        from annotation.catalog import selectors

        query = {"run": str(bench.run.pk), **params}
        filters = selectors.filters_from_query(query)
        page = selectors.catalog_page(selectors.catalog_rows(filters, query.get("sort") or ""))
        return [entry.pk for entry in page.entries], page.count_label

    return call


def _verify_page(sort: str, verdict: str = "") -> Callable[[Bench, Any], None]:
    def verify(bench: Bench, result: Any) -> None:
        from annotation.catalog.selectors import COUNT_CAP

        ids, label = result
        check(f"first page ({sort}, verdict={verdict or 'any'})", ids,
              reference_page(bench.data, sort=sort, verdict=verdict))  # fmt: skip
        total = int((bench.data.verdict == verdict).sum()) if verdict else len(bench.data.verdict)
        if total <= COUNT_CAP:
            check("count shown", label, f"{total:,}")
        elif not label.startswith("about") and label != f"{COUNT_CAP:,}+":
            check("count shown", label, f"an estimate or {COUNT_CAP:,}+")

    return verify


def _exact_count(bench: Bench) -> int:
    from annotation.inspections.models import CatalogEntry

    return CatalogEntry.objects.filter(run=bench.run).count()


def _vetting_next(bench: Bench) -> tuple[int, int]:
    """What ``/api/vetting/next/`` reads for the bench's expert."""
    from annotation.blinding import candidates_visible_to
    from annotation.catalog.queue import vetter_queue_rows
    from annotation.learning import queue as active_queue

    queue = vetter_queue_rows(bench.user)
    gold = candidates_visible_to(user=bench.user, rows=active_queue.gold_candidates(bench.user))
    candidate = active_queue.next_candidate(user=bench.user, queue=queue, gold=gold, skipped=[])
    return (candidate.pk if candidate else -1), active_queue.waiting_count(queue)


def _open_audit(bench: Bench) -> None:
    """An open audit sample of every AUDIT_STRIDE-th candidate (its confident ones join every
    expert's queue beside the routed ones)."""
    from annotation.learning.models import AuditSample, AuditSampleItem

    if bench.audit is not None:
        return
    bench.audit = AuditSample.objects.create(
        task=bench.task, model_key=bench.run.model_key, per_stratum=0, created_by=bench.user
    )
    AuditSampleItem.objects.bulk_create(
        (
            AuditSampleItem(sample=bench.audit, candidate_id=int(pk), stratum="bench")
            for pk in bench.data.candidate_ids[bench.data.audited]
        ),
        batch_size=5000,
    )


def _vetting_next_audit(bench: Bench) -> tuple[int, int]:
    _open_audit(bench)
    return _vetting_next(bench)


def _refit(bench: Bench) -> Any:
    from annotation.learning.services import calibration_refit

    fit = calibration_refit(task=bench.task, model_key=bench.run.model_key, actor=None)
    if fit is None:
        raise Mismatch("verification failed: the refit made no fit")
    return fit.n_labels, fit.positives, fit.params["slope"], fit.params["intercept"]


def _verify_refit(bench: Bench, result: Any) -> None:
    n, positives, slope, intercept = result
    want_n, want_positives, scaling = reference_fit(bench.data)
    check("refit labels used", n, want_n)
    check("refit positives", positives, want_positives)
    for name, got, want in (
        ("slope", slope, scaling.slope),
        ("intercept", intercept, scaling.intercept),
    ):
        if abs(got - want) > 1e-9 * max(1.0, abs(want)):
            check(f"refit {name}", got, want)


def _reroute(bench: Bench) -> int:
    from annotation.inspections.models import Candidate
    from annotation.learning import selectors
    from annotation.learning.services import triage_apply

    fit = selectors.fit_for(task_id=bench.task.pk, model_key=bench.run.model_key)
    if fit is None:
        raise Mismatch("verification failed: no fit to re-route with")
    triage_apply(task=bench.task, model_key=bench.run.model_key, fit=fit, actor=None)
    return Candidate.objects.filter(run=bench.run, needs_expert=True).count()


def _verify_reroute(bench: Bench, result: Any) -> None:
    from annotation.learning import selectors

    fit = selectors.fit_for(task_id=bench.task.pk, model_key=bench.run.model_key)
    params = fit.params if fit is not None else {"slope": 0.0, "intercept": 0.0}
    check("candidates with experts after the re-route", result,
          reference_with_experts(bench.data, params["slope"], params["intercept"]))  # fmt: skip


def _reroute_target(bench: Bench) -> tuple[Any, ...]:
    """The re-route once staff set a target purity: the threshold bootstrapped over the YES
    verdicts, then every candidate routed by it."""
    from annotation.inspections.models import Candidate
    from annotation.learning import selectors
    from annotation.learning.models import TriageTarget
    from annotation.learning.services import triage_apply

    if not TriageTarget.objects.filter(task=bench.task).exists():
        TriageTarget.objects.create(task=bench.task, target_purity=TARGET_PURITY, set_by=bench.user)
    fit = selectors.fit_for(task_id=bench.task.pk, model_key=bench.run.model_key)
    if fit is None:
        raise Mismatch("verification failed: no fit to re-route with")
    done = triage_apply(task=bench.task, model_key=bench.run.model_key, fit=fit, actor=None)
    with_experts = Candidate.objects.filter(run=bench.run, needs_expert=True).count()
    return fit.pk, done.threshold, done.threshold_low, done.threshold_high, with_experts


def _verify_reroute_target(bench: Bench, result: Any) -> None:
    from annotation.learning import selectors

    fit_pk, threshold, low, high, with_experts = result
    for name, got, want in zip(
        ("threshold", "its low end", "its high end"),
        (threshold, low, high),
        reference_purity(bench.data, seed=fit_pk),
        strict=True,
    ):
        if got is None or want is None or abs(got - want) > 1e-12 * max(1.0, abs(want)):
            check(f"target purity {name}", got, want)
    fit = selectors.fit_for(task_id=bench.task.pk, model_key=bench.run.model_key)
    scaling = selectors.calibrator(fit)
    check("candidates with experts after the re-route with a target", with_experts,
          reference_with_experts_at(bench.data, scaling, threshold))  # fmt: skip


def _export(kind: str) -> Callable[[Bench], Any]:
    def call(bench: Bench) -> Any:
        from annotation.catalog import exports, selectors

        rows = selectors.catalog_rows(
            selectors.filters_from_query({"run": str(bench.run.pk)}), "id"
        )
        if kind == "CSV":
            lines = sum(chunk.count("\n") for chunk in exports.catalog_csv_chunks(rows))
            return lines - 1  # the header
        writer = exports.write_fits if kind == "FITS" else exports.write_votable
        done = writer(rows, limit=selectors.EXPORT_ROW_LIMIT)
        try:
            return done.rows, _rows_in_file(kind, done.file)
        finally:
            done.file.close()

    return call


def _rows_in_file(kind: str, file: Any) -> int:
    """The rows the written file itself declares (read back without loading the table)."""
    if kind != "FITS":
        return -1  # a binary VOTable states no row count: decoding 10^6 rows is the check's cost
    head = file.read(1 << 16)
    file.seek(0)
    at = head.find(b"NAXIS2  =")  # the primary header has no NAXIS2: the table's card
    return int(head[at + 10 : at + 30]) if at >= 0 else -1


def _verify_export(kind: str) -> Callable[[Bench, Any], None]:
    def verify(bench: Bench, result: Any) -> None:
        want = len(bench.data.verdict)
        if kind == "CSV":
            check("CSV rows", result, want)
            return
        written, declared = result
        check(f"{kind} rows written", written, want)
        if kind == "FITS" or declared >= 0:
            check(f"{kind} rows the file declares", declared, want)

    return verify


OPERATIONS = (
    Operation("catalog page, default sort", _page({}), _verify_page("-created_at")),
    Operation(
        "catalog page, verdict=YES by confidence",
        _page({"verdict": "YES", "sort": "-confidence"}),
        _verify_page("-confidence", "YES"),
    ),
    Operation(
        "exact count of the run",
        _exact_count,
        lambda bench, got: check("exact count", got, len(bench.data.verdict)),
    ),  # fmt: skip
    Operation(
        "vetting queue: next + remaining",
        _vetting_next,
        lambda bench, got: check("next candidate, queue length", got, reference_next(bench.data)),
    ),
    Operation(
        "vetting queue, audit sample open: next + remaining",
        _vetting_next_audit,
        lambda bench, got: check(
            "next candidate, queue length (audit)", got, reference_next(bench.data, audit=True)
        ),
    ),
    Operation("calibration refit", _refit, _verify_refit, repeats=False),
    Operation("re-route after the refit", _reroute, _verify_reroute, repeats=False),
    Operation(
        f"re-route, target purity {TARGET_PURITY}",
        _reroute_target,
        _verify_reroute_target,
        repeats=False,
    ),
    Operation("export CSV", _export("CSV"), _verify_export("CSV"), repeats=False),
    Operation("export VOTable", _export("VOTable"), _verify_export("VOTable"), repeats=False),
    Operation("export FITS", _export("FITS"), _verify_export("FITS"), repeats=False),
)


@dataclass
class Figure:
    seconds: float
    peak_bytes: int


def measure(bench: Bench, operation: Operation, repeats: int) -> Figure:
    """Time (verified first), then the peak of Python allocations in a second pass."""
    started = time.perf_counter()
    result = operation.call(bench)
    first = time.perf_counter() - started
    operation.verify(bench, result)
    seconds = first
    if operation.repeats:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            operation.call(bench)
            times.append(time.perf_counter() - started)
        seconds = statistics.median(times)
    gc.collect()
    tracemalloc.start()
    try:
        operation.call(bench)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return Figure(seconds=seconds, peak_bytes=peak)


def run_size(rows: int, *, seed: int, repeats: int, out: Any) -> dict[str, Figure]:
    from django.db import connection

    bench, seconds = load(rows, seed)
    print(f"--- {rows:,} rows: loaded in {seconds:.1f} s on {connection.vendor}", file=out,
          flush=True)  # fmt: skip
    figures: dict[str, Figure] = {}
    try:
        for operation in OPERATIONS:
            figures[operation.name] = figure = measure(bench, operation, repeats)
            print(f"verified: {operation.name}: {figure.seconds * 1000:.1f} ms, "
                  f"peak {figure.peak_bytes / 2**20:.1f} MiB", file=out, flush=True)  # fmt: skip
    finally:
        remove(bench)
    return figures


def report(sizes: list[int], figures: dict[int, dict[str, Figure]], out: Any) -> None:
    """One line per operation: time at each size, the growth against the rows' growth, the
    peak Python allocations at each size."""
    low, high = sizes[0], sizes[-1]
    width = max(len(op.name) for op in OPERATIONS)
    head = "".join(f"{f'{n:,} s':>14}" for n in sizes)
    mem = "".join(f"{f'{n:,} MiB':>16}" for n in sizes)
    print(f"\n{'operation':<{width}}{head}{'time ratio':>12}{'rows ratio':>12}{mem}", file=out)
    for op in OPERATIONS:
        times = "".join(f"{figures[n][op.name].seconds:>14.3f}" for n in sizes)
        peaks = "".join(f"{figures[n][op.name].peak_bytes / 2**20:>16.1f}" for n in sizes)
        ratio = figures[high][op.name].seconds / max(figures[low][op.name].seconds, 1e-9)
        print(f"{op.name:<{width}}{times}{ratio:>12.2f}{high / low:>12.1f}{peaks}", file=out)
    print(f"peak resident set of this process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB", file=out)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m annotation.bench.million", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=5, help="timed calls of each read")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None, out: Any = None) -> dict[int, dict[str, Figure]]:
    out = out or sys.stdout
    options = parser().parse_args(argv)
    sizes = sorted(options.rows)
    if any(n < 200 for n in sizes) or options.repeats < 1:
        raise SystemExit("--rows must each be at least 200, --repeats at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from annotation.bench.candidates import conditions

    print(f"million: sizes {', '.join(f'{n:,}' for n in sizes)}; {options.repeats} timed reads "
          f"after a warm-up; conditions: {conditions()}", file=out, flush=True)  # fmt: skip
    figures = {n: run_size(n, seed=options.seed, repeats=options.repeats, out=out) for n in sizes}
    if len(sizes) > 1:
        report(sizes, figures, out)
    return figures


if __name__ == "__main__":
    main()
