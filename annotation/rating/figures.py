"""The analysis figures of a campaign (paper Figure 4) as Plotly data and CSV."""

from __future__ import annotations

import csv
import io
from typing import Any

from agent.agreement import RUBRIC
from annotation.rating.models import (
    JudgeScore,
    RatingAssignment,
    RatingCampaign,
)

# --- shared with the API: analysis figures ------------------------------------------------------


def _pairwise_rows(pairwise: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    header = ["dataset", "reference", "others", "n", "wins", "ties", "losses", "win", "tie", "loss"]
    reference = pairwise.get("reference", "")
    others = ", ".join(p for p in pairwise.get("policies", []) if p != reference)
    rows = [
        [dataset, reference, others]
        + [s[key] for key in ("n", "wins", "ties", "losses", "win", "tie", "loss")]
        for dataset, s in sorted(pairwise.get("shares", {}).items())
    ]
    return header, rows


def _judge_score_rows(campaign: RatingCampaign) -> tuple[list[str], list[list[Any]]]:
    items = list(campaign.items.order_by("blind_id"))
    scores = JudgeScore.objects.filter(item__campaign=campaign).select_related("judge")
    by_judge: dict[str, dict[int, JudgeScore]] = {}
    for score in scores:
        by_judge.setdefault(score.judge.name, {})[score.item_id] = score
    human: dict[int, list[int]] = {}
    for item_id, human_score in RatingAssignment.objects.filter(
        item__campaign=campaign, score__isnull=False
    ).values_list("item_id", "score"):
        if human_score is not None:  # always (score__isnull=False); narrows the type
            human.setdefault(item_id, []).append(human_score)
    judges = sorted(by_judge)
    header = ["blind_id", "policy", "dataset", "human_mean", "n_human"]
    header += [f"{name} {what}" for name in judges for what in ("score", "reason")]
    rows: list[list[Any]] = []
    for item in items:
        values = human.get(item.pk, [])
        row: list[Any] = [item.blind_id, item.policy_name, item.dataset]
        row += [sum(values) / len(values) if values else None, len(values)]
        for name in judges:
            record = by_judge[name].get(item.pk)
            row += [record.score, record.reason] if record else [None, ""]
        rows.append(row)
    return header, rows


def analysis_figure(
    *, campaign: RatingCampaign, analysis: dict[str, Any], figure: str
) -> tuple[list[str], list[list[Any]]]:
    """One figure's data as a table: the CSV export and its API twin."""
    if figure in ("histograms", "cdfs"):
        series = analysis[figure]
        return ["score", *series], [[s, *(v[s] for v in series.values())] for s in RUBRIC]
    if figure == "spearman":
        names, matrix = analysis["spearman"]["names"], analysis["spearman"]["matrix"]
        return ["", *names], [[name, *row] for name, row in zip(names, matrix, strict=True)]
    if figure == "kappas":
        rows = [[k["a"], k["b"], k["n"], k["kappa"]] for k in analysis["kappas"]]
        return ["rater_a", "rater_b", "n_common", "kappa_quadratic"], rows
    if figure == "disagreement":
        policy = dict(campaign.items.values_list("blind_id", "policy_name"))
        rows = [[d["item"], policy[d["item"]], d["spread"], d["std"]] for d in analysis[figure]]
        return ["blind_id", "policy", "spread", "std"], rows
    if figure == "pairwise":
        return _pairwise_rows(analysis["pairwise"])
    if figure == "strengths":
        strengths = analysis["pairwise"].get("strengths", {})
        rows = [[name, s["estimate"], s["low"], s["high"]] for name, s in strengths.items()]
        return ["policy", "strength", "ci_low", "ci_high"], rows
    if figure == "policy_means":
        return ["policy", "human_mean"], [[p, m] for p, m in analysis["policy_means"].items()]
    if figure == "judge_scores":
        return _judge_score_rows(campaign)
    raise ValueError(f"unknown figure {figure!r}; one of {', '.join(FIGURES)}")


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


FIGURES = (
    "histograms",
    "cdfs",
    "spearman",
    "kappas",
    "disagreement",
    "pairwise",
    "strengths",
    "policy_means",
    "judge_scores",
)
