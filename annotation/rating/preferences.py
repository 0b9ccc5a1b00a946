"""DPO preference pairs from the loop (issue 25, training data from experts' decisions).

Two sources, each row in TRL's vision DPO format (agent.formats.dpo) with its provenance:

- Pairwise judgements of closed rating campaigns: for each pair, the side most of its raters
  judged better is chosen, the other rejected. Ties are excluded: a "tie" judgement counts for
  neither side, and a pair whose raters split evenly (or who all said tie) makes no row. Open
  campaigns are left out: their judgements are not final, and their raters must not see them.
- Draft versus revision: each expert revision that passed audit (annotation.curation.revised)
  is chosen over the draft or import it corrected.

Images travel in the archive (images/<sha256>.png), never as URLs; the archive is stored as a
DatasetExport of kind "preference", versioned and hashed like the SFT exports.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from agent.formats.dpo import NoPreferenceRow, PreferenceRow, preference_row
from agent.trajectory import Trajectory
from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.curation.datasets import export_save, files_digest, image_paths
from annotation.curation.models import DatasetExport, ExportKind
from annotation.curation.revised import expert_revisions
from annotation.curation.selectors import trajectory_from_stored
from annotation.inspections.models import Rollout
from annotation.rating.models import CampaignItem, PairItem, PairOutcome

PREFERENCE_MAX_ROWS = 20_000


@dataclass
class PreferenceSet:
    """The rows of one export, what they came from and what was left out (and why)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    excluded: Counter[str] = field(default_factory=Counter)
    curation_ids: set[int] = field(default_factory=set)
    run_ids: set[int] = field(default_factory=set)
    content_hashes: set[str] = field(default_factory=set)

    def add(
        self, row: PreferenceRow, *, task: str, provenance: dict[str, Any], spectrum: Any = None
    ) -> None:
        """``spectrum`` (the stored spectrum both trajectories inspected) gives the row its
        ``spectrum_object_id`` and ``spectrum_content_hash``: what ``training.dpo`` records
        beside the checkpoint, so an evaluation of it refuses spectra it trained on."""
        identity = (
            {
                "spectrum_object_id": spectrum.object_id,
                "spectrum_content_hash": spectrum.content_hash,
            }
            if spectrum is not None
            else {}
        )
        self.rows.append(
            {
                **row.as_trl(image_paths(row.images, self.files)),
                "task": task,
                **identity,
                **provenance,
            }
        )


def _item_sources(item: CampaignItem, found: PreferenceSet) -> None:
    """Record what an item shows for the blinding rule: its curation or its rollout's run."""
    kind, _, rest = item.source.partition(":")
    number = rest.split("@", 1)[0]
    if kind == "curation" and number.isdigit():
        found.curation_ids.add(int(number))
    if kind == "rollout" and number.isdigit():
        run_id = Rollout.objects.filter(pk=int(number)).values_list("candidate__run_id", flat=True)
        found.run_ids.update(run_id)
    if item.spectrum is not None:
        found.content_hashes.add(item.spectrum.content_hash)


def _winner(outcomes: Counter[str]) -> str | None:
    """ "left" or "right" when most non-tie judgements agree; None on a tie or an even split."""
    left, right = outcomes[PairOutcome.LEFT], outcomes[PairOutcome.RIGHT]
    if left == right:
        return None
    return PairOutcome.LEFT if left > right else PairOutcome.RIGHT


def _trajectory(item: CampaignItem) -> Trajectory:
    return trajectory_from_stored(item.data)


def add_judged_pairs(found: PreferenceSet, *, task: str = "") -> None:
    pairs = (
        PairItem.objects.filter(campaign__closed=True)
        .select_related("left__task", "right__task", "left__spectrum", "right__spectrum")
        .prefetch_related("judgements")
        .order_by("campaign_id", "id")
    )
    if task:
        pairs = pairs.filter(left__task__code__iexact=task)
    for pair in pairs:
        judged = [j for j in pair.judgements.all() if j.outcome]
        if not judged:
            found.excluded["pair not judged"] += 1
            continue
        outcomes = Counter(j.outcome for j in judged)
        side = _winner(outcomes)
        if side is None:
            found.excluded["pair judged a tie or split evenly"] += 1
            continue
        chosen, rejected = (
            (pair.left, pair.right) if side == PairOutcome.LEFT else (pair.right, pair.left)
        )
        try:
            row = preference_row(_trajectory(chosen), _trajectory(rejected))
        except NoPreferenceRow as reason:
            found.excluded[f"pair: {reason}"] += 1
            continue
        found.add(
            row,
            task=chosen.task.code,
            provenance={
                "source": "pair_judgement",
                "campaign_id": pair.campaign_id,
                "pair_id": pair.pk,
                "judgements": sorted(j.pk for j in judged),
                "outcomes": {key: outcomes[key] for key in PairOutcome.values},
                "chosen_item": chosen.source,
                "rejected_item": rejected.source,
                "chosen_policy": chosen.policy_name,
                "rejected_policy": rejected.policy_name,
                "spectrum_id": chosen.spectrum_id,
            },
            spectrum=chosen.spectrum,
        )
        _item_sources(chosen, found)
        _item_sources(rejected, found)


def add_revision_pairs(found: PreferenceSet, *, task: str = "") -> None:
    for item in expert_revisions(task=task):
        try:
            row = preference_row(
                trajectory_from_stored(item.revision.data),
                trajectory_from_stored(item.original.data),
            )
        except NoPreferenceRow as reason:
            found.excluded[f"revision: {reason}"] += 1
            continue
        found.add(
            row,
            task=item.curation.task.code,
            provenance={"source": "draft_revision", **item.provenance()},
            spectrum=item.curation.spectrum,
        )
        found.curation_ids.add(item.curation.pk)
        found.content_hashes.add(item.curation.spectrum.content_hash)


def preference_set(*, task: str = "") -> PreferenceSet:
    found = PreferenceSet()
    add_judged_pairs(found, task=task)
    add_revision_pairs(found, task=task)
    if len(found.rows) > PREFERENCE_MAX_ROWS:
        raise WorkflowError(
            f"{len(found.rows)} preference pairs; an export holds at most "
            f"{PREFERENCE_MAX_ROWS}: choose one task"
        )
    return found


@transaction.atomic
def preference_export_create(
    *,
    actor: User | None,
    task: str = "",
    hidden_curations: frozenset[int] = frozenset(),
    hidden_runs: frozenset[int] = frozenset(),
    hidden_hashes: frozenset[str] = frozenset(),
) -> DatasetExport:
    """Export the preference pairs as the next version of the DPO data set (or the latest, if
    equal). ``hidden_*``: what the actor may not read (annotation/blinding.py); an export that
    holds any of it is refused to them."""
    found = preference_set(task=task)
    if not found.rows:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(found.excluded.items()))
        raise WrongState(
            "no preference pair to export yet: pairs need a closed campaign's judgements or an "
            "expert revision that passed audit" + (f" (left out: {reasons})" if reasons else "")
        )
    if (
        hidden_curations & found.curation_ids
        or hidden_runs & found.run_ids
        or hidden_hashes & found.content_hashes
    ):
        raise NotAllowed(
            "you rate an open campaign showing these trajectories, their runs or their spectra; "
            "an export would show you their sources: export after the campaign closes, or ask "
            "an ML engineer who does not rate it"
        )
    files = dict(found.files)
    lines = [json.dumps(row, ensure_ascii=False, sort_keys=True) for row in found.rows]
    files["dpo.jsonl"] = ("\n".join(lines) + "\n").encode()
    content_hash, file_hashes = files_digest(files)
    by_source = Counter(row["source"] for row in found.rows)
    body: dict[str, Any] = {
        "name": "specvet preference pairs (DPO)",
        "rows": len(found.rows),
        "by_source": dict(sorted(by_source.items())),
        "per_task": dict(sorted(Counter(row["task"] for row in found.rows).items())),
        "excluded": dict(sorted(found.excluded.items())),
        "decisions": {
            "pair_judgements": sorted(pk for row in found.rows for pk in row.get("judgements", [])),
            "audits": sorted(pk for row in found.rows for pk in row.get("audits", [])),
            "revisions": [
                [row["curation_id"], row["revision_version"]]
                for row in found.rows
                if row["source"] == "draft_revision"
            ],
        },
        "formats": {
            "trl_dpo": "dpo.jsonl (TRL vision DPO: prompt, chosen, rejected as messages; images "
            "are archive paths filling the prompt's image placeholders in order)",
        },
        "rule": "pairwise judgements of closed campaigns: the side most raters preferred is "
        "chosen; ties and even splits are excluded. Draft versus revision: the revision that "
        "passed audit is chosen. Each row is the turn where the two trajectories' decisions "
        "(verdict or tool window) part.",
        "files": file_hashes,
        "content_hash": content_hash,
    }
    return export_save(
        kind=ExportKind.PREFERENCE,
        files=files,
        body=body,
        actor=actor,
        curation_ids=found.curation_ids,
        run_ids=found.run_ids,
        content_hashes=found.content_hashes,
        task=task,
    )
