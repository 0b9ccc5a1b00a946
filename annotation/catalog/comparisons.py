"""Comparing two models' verdicts on the same spectra for one task, with vetted labels as truth.

Each model's verdict on a spectrum is its newest catalog entry for the task. On the spectra both
models answered:

- flipped: the verdicts differ (an answer where there was none counts too);
- fixed / broken (spectra with a vetted label): the old verdict was wrong and the new one is
  right / the old one was right and the new one is wrong;
- newly uncertain: the new verdict is sent to experts (low confidence or no answer) where the
  old one was not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from annotation import blinding
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.inspections.selectors import current_models
from annotation.spectra.models import Task

ROWS_SHOWN = 500  # flipped rows listed on the page; the counts cover every spectrum


@dataclass(frozen=True)
class Verdict:
    entry_id: int
    object_id: str
    verdict: str
    confidence: float | None
    uncertain: bool
    label: str


@dataclass(frozen=True)
class ComparedRow:
    spectrum_id: int
    object_id: str
    old: Verdict
    new: Verdict
    label: str
    outcome: str  # "fixed" | "broken" | "flipped" (no label) | "unchanged"
    newly_uncertain: bool


@dataclass
class Comparison:
    task: str
    old_key: str
    new_key: str
    shared: int = 0
    flipped: int = 0
    fixed: int = 0
    broken: int = 0
    newly_uncertain: int = 0
    labelled: int = 0
    old_correct: int = 0
    new_correct: int = 0
    rows: list[ComparedRow] = field(default_factory=list)  # changed ones, at most ROWS_SHOWN

    def as_dict(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in (
                "task",
                "old_key",
                "new_key",
                "shared",
                "flipped",
                "fixed",
                "broken",
                "newly_uncertain",
                "labelled",
                "old_correct",
                "new_correct",
            )
        }


def _newest_by_spectrum(rows: QuerySet[CatalogEntry]) -> dict[int, Verdict]:
    verdicts: dict[int, Verdict] = {}
    values = rows.order_by("-id").values_list(
        "pk",
        "candidate__spectrum_id",
        "object_id",
        "verdict",
        "confidence",
        "candidate__needs_expert",
        "vetted_label",
    )
    for pk, spectrum, object_id, verdict, confidence, uncertain, label in values.iterator(
        chunk_size=5000
    ):
        if spectrum is not None and spectrum not in verdicts:
            verdicts[spectrum] = Verdict(
                entry_id=pk,
                object_id=object_id,
                verdict=verdict,
                confidence=confidence,
                uncertain=bool(uncertain) or not verdict,
                label=label,
            )
    return verdicts


def compare_models(
    *, entries: QuerySet[CatalogEntry], task: str, old_key: str, new_key: str
) -> Comparison:
    """``old_key``'s and ``new_key``'s verdicts on ``task`` compared spectrum by spectrum, over
    ``entries`` (the catalog entries the reader may see)."""
    rows = entries.filter(task_code=task)
    old = _newest_by_spectrum(rows.filter(model_key=old_key))
    new = _newest_by_spectrum(rows.filter(model_key=new_key))
    comparison = Comparison(task=task, old_key=old_key, new_key=new_key)
    for spectrum in sorted(set(old) & set(new)):
        _add(comparison, spectrum, old[spectrum], new[spectrum])
    return comparison


def _add(comparison: Comparison, spectrum: int, old: Verdict, new: Verdict) -> None:
    comparison.shared += 1
    label = new.label or old.label
    flipped = old.verdict != new.verdict
    newly_uncertain = new.uncertain and not old.uncertain
    outcome = "unchanged"
    if label:
        comparison.labelled += 1
        comparison.old_correct += old.verdict == label
        comparison.new_correct += new.verdict == label
        if old.verdict != label and new.verdict == label:
            outcome = "fixed"
        elif old.verdict == label and new.verdict != label:
            outcome = "broken"
    if outcome == "unchanged" and flipped:
        outcome = "flipped"
    comparison.flipped += flipped
    comparison.fixed += outcome == "fixed"
    comparison.broken += outcome == "broken"
    comparison.newly_uncertain += newly_uncertain
    if (flipped or newly_uncertain) and len(comparison.rows) < ROWS_SHOWN:
        comparison.rows.append(
            ComparedRow(
                spectrum_id=spectrum,
                object_id=new.object_id,
                old=old,
                new=new,
                label=label,
                outcome=outcome,
                newly_uncertain=newly_uncertain,
            )
        )


def models_on_task(runs: QuerySet[InspectionRun], task: str) -> list[tuple[str, str]]:
    """(key, label) of the models behind ``runs`` (those the reader may see) on ``task``,
    newest first."""
    seen: dict[str, str] = {}
    rows = runs.filter(task__code=task).exclude(model_key="").order_by("-id")
    for key, label in rows.values_list("model_key", "model_label"):
        seen.setdefault(key, label or key)
    return list(seen.items())


def default_baseline(
    *, models: Iterable[tuple[str, str]], new_key: str, current: str | None
) -> str | None:
    """What a new model is compared with: the task's current model, else the newest other."""
    if current and current != new_key:
        return current
    return next((key for key, _ in models if key != new_key), None)


def default_task(*, user: Any, tasks: list[str]) -> str:
    """The task the page opens on: the first with two models ``user`` may read (something to
    compare), else the first with one, else the first task."""
    runs = blinding.runs_visible_to(user=user).exclude(model_key="").order_by()
    counts: dict[str, int] = {}
    for code, _ in runs.values_list("task__code", "model_key").distinct():
        counts[code] = counts.get(code, 0) + 1
    for wanted in (2, 1):
        for code in tasks:
            if counts.get(code, 0) >= wanted:
                return code
    return tasks[0] if tasks else ""


def tasks_with_models(*, user: Any) -> list[str]:
    """Codes of the tasks with a model ``user`` may read (for the page's empty state)."""
    runs = blinding.runs_visible_to(user=user).exclude(model_key="").order_by()
    return sorted(set(runs.values_list("task__code", flat=True)))


def models_readable(*, user: Any, task: str) -> list[tuple[str, str]]:
    """(key, label) of the models on ``task`` behind the runs ``user`` may read, newest first:
    what they may compare, and (staff) promote."""
    return models_on_task(blinding.runs_visible_to(user=user), task)


@dataclass
class ComparisonChoice:
    """Two models of a task to compare, as a reader asked for them (the page's form, the API's
    query), resolved the same way for both: defaults filled in, each key checked against the
    models the reader may read, and the comparison made when the two differ."""

    tasks: list[str]
    task: str
    models: list[tuple[str, str]] = field(default_factory=list)
    current: str | None = None
    new: str = ""
    old: str = ""
    error: str = ""  # why the choice was refused (answered with 400); "" when it was not
    comparison: Comparison | None = None

    def label(self, key: str | None) -> str:
        return dict(self.models).get(key or "", key or "")


def model_choice(*, user: Any, task: str, new: str, old: str) -> ComparisonChoice:
    """Resolve and compare: ``new`` defaults to the newest model on ``task``, ``old`` to the
    task's current model (else the newest other); each must have answered the task in a run
    ``user`` may read, and the verdicts compared are the catalog entries ``user`` may read."""
    tasks = list(Task.objects.values_list("code", flat=True))
    task = task.strip() or default_task(user=user, tasks=tasks)
    if task not in tasks:
        return ComparisonChoice(
            tasks=tasks,
            task=task,
            error=f"task must be one of {', '.join(tasks)}; got {task[:40]!r}",
        )
    models = models_readable(user=user, task=task)
    keys = [key for key, _ in models]
    current = current_models().get(task)
    new = new.strip() or (keys[0] if keys else "")
    old = old.strip() or (default_baseline(models=models, new_key=new, current=current) or "")
    choice = ComparisonChoice(
        tasks=tasks, task=task, models=models, current=current, new=new, old=old
    )
    for name, key in (("new", new), ("old", old)):
        if key and key not in keys:
            choice.error = f"{name}: no model with key {key[:200]!r} has answered task {task}"
            return choice
    if new and old and new != old:
        choice.comparison = compare_models(
            entries=blinding.catalog_entries_visible_to(user=user),
            task=task,
            old_key=old,
            new_key=new,
        )
    return choice
