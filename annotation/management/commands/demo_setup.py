"""Demo data so a new user can walk every workflow in the browser in a few minutes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from agent.editing import apply_edit, edit_from_trajectory
from agent.real_corpus import LAMOST_DIR
from agent.spectra import SpectrumFormatError
from annotation.core import services as core_services
from annotation.core.roles import Role, has_role
from annotation.curation import datasets as curation_datasets
from annotation.curation import selectors as curation_selectors
from annotation.curation import services as curation_services
from annotation.curation.models import Curation
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, InspectionRun, Rollout
from annotation.rating import services as rating_services
from annotation.rating.models import CampaignItem, RatingAssignment, RatingCampaign
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task

DEMO_PASSWORD = "specvet-demo"
DEMO_EXPERTS = [
    # (user name, full name, roles)
    ("cannon", "Annie Jump Cannon", {Role.STAFF, Role.EXPERT, Role.ML_ENGINEER}),
    ("payne", "Cecilia Payne", {Role.EXPERT, Role.RATER}),
    ("leavitt", "Henrietta Leavitt", {Role.EXPERT, Role.RATER}),
]
DEMO_VIEWER = ("viewer", "Catalog Viewer", {Role.VIEWER})


def _reasoning(data: dict[str, Any]) -> list[Any]:
    """What a rater compares: every turn's text, tool call and the answer."""
    turns = [
        (step.get("assistant_text"), step.get("think"), step.get("tool_call"))
        for step in data.get("steps") or []
    ]
    return [*turns, data.get("answer")]


def comparable_pairs(rollouts: list[Any], others: list[Any]) -> list[tuple[Any, Any]]:
    """Rollouts of the same spectrum by the two runs, left out where both wrote the same
    trajectory (a short inspection is the same under either tool-call limit): a pair of
    identical twins asks the rater to choose between nothing."""
    return [
        (a, b)
        for a in rollouts
        for b in others
        if a.candidate.spectrum_id == b.candidate.spectrum_id
        and _reasoning(a.data) != _reasoning(b.data)
    ]


class Command(BaseCommand):
    help = (
        "Load demo data: tasks, expert accounts, SpecVI-mini (synthetic) and the real LAMOST "
        "examples, curation drafts at several stages, an inspection run and a rating campaign."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scale", type=float, default=0.5, help="SpecVI-mini size factor")

    def handle(self, *args: Any, **options: Any) -> None:
        spectra_services.tasks_seed_builtin()
        experts = self._experts()
        if not Spectrum.objects.filter(dataset="specvi-mini").exists():
            call_command(
                "make_benchmark", "--load", "--scale", str(options["scale"]), stdout=self.stdout
            )
        self._load_real_lamost()
        if not Curation.objects.exists():
            self._curation(experts)
        if not InspectionRun.objects.exists():
            self._inspection_runs(experts)
        if not RatingCampaign.objects.exists():
            self._campaign(experts)
        self._account(*DEMO_VIEWER)
        self.stdout.write("")
        self.stdout.write(f"Demo accounts (password {DEMO_PASSWORD!r}):")
        for username, _, roles in [*DEMO_EXPERTS, DEMO_VIEWER]:
            self.stdout.write(f"  {username}: {', '.join(sorted(r.value for r in roles))}")

    def _experts(self) -> dict[str, Any]:
        return {
            username: self._account(username, name, roles) for username, name, roles in DEMO_EXPERTS
        }

    def _account(self, username: str, full_name: str, roles: set[Role]) -> Any:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            first, _, last = full_name.rpartition(" ")
            user.first_name, user.last_name = first, last
            user.set_password(DEMO_PASSWORD)
            user.save()
        if not user.is_superuser:  # a superuser from an older demo holds every role already
            core_services.user_roles_set(user=user, roles=roles, actor=None)
        return user

    def _load_real_lamost(self) -> None:
        paths = sorted(LAMOST_DIR.glob("*.fits*")) if LAMOST_DIR.exists() else []
        if not paths:
            self.stdout.write(f"no real LAMOST examples at {LAMOST_DIR}; skipped")
            return
        for path in paths:
            try:
                result = spectra_services.spectra_import_path(path=path, dataset="lamost-examples")
            except SpectrumFormatError as error:
                self.stderr.write(f"could not read {path.name}: {error}")
                continue
            self.stdout.write(f"{path.name}: {len(result.created)} real LAMOST spectra stored")

    def _curation(self, experts: dict[str, Any]) -> None:
        """Six rule-based drafts: four to screen, one in audit, one accepted and exported."""
        cv = Task.objects.get(code="CV")
        ids = list(
            Spectrum.objects.filter(dataset="specvi-mini", task=cv, split="train")
            .order_by("label", "id")
            .values_list("pk", flat=True)
        )
        chosen = ids[:3] + ids[-3:]
        job = core_services.job_create(
            kind="draft",
            params={"spectrum_ids": chosen, "task": "CV", "teacher": {"kind": "rule-based"}},
            created_by=experts["cannon"],
            total=len(chosen),
        )
        from annotation.core import jobs as core_jobs

        if core_services.job_claim(job_id=job.pk):  # not run yet (a broker is configured): run here
            core_jobs.run(job.pk)
        curations = list(Curation.objects.order_by("id"))
        payne, leavitt, cannon = experts["payne"], experts["leavitt"], experts["cannon"]
        for curation, stage in zip(curations[-2:], ("audit", "accepted"), strict=False):
            curation_services.curation_screen(curation=curation, user=cannon, keep=True)
            curation_services.curation_claim_revision(curation=curation, user=payne)
            head = curation_selectors.head_version(curation)
            base = curation_selectors.version_trajectory(head)
            steps, answer = edit_from_trajectory(base)
            reviewed = replace(
                answer,
                justification=answer.justification
                + " Reviewed: the line widths rule out an emission-line M dwarf.",
            )
            edited = apply_edit(
                base,
                tool=spectra_selectors.spectrum_tool(curation.spectrum),
                steps=steps,
                answer=reviewed,
            )
            curation_services.curation_save_revision(
                curation=curation, user=payne, base_number=head.number, trajectory=edited
            )
            curation_services.curation_submit_for_audit(
                curation=curation, user=payne, base_number=curation.head_number
            )
            if stage == "audit":
                continue
            curation_services.curation_claim_audit(curation=curation, user=leavitt)
            curation_services.curation_claim_audit(curation=curation, user=cannon)
            for auditor in (leavitt, cannon):
                curation_services.audit_submit(
                    curation=curation,
                    user=auditor,
                    version_number=curation.head_number,
                    verdict="approve",
                    comment="Windows and measurements are right.",
                )
            curation.refresh_from_db()
            if curation.state == "approved":  # standardization runs on commit; do it now
                from agent.editing import standardize

                curation_services.curation_standardize(
                    curation=curation,
                    trajectory=standardize(
                        curation_selectors.version_trajectory(
                            curation_selectors.head_version(curation)
                        )
                    ),
                    standardizer={"name": "normalizer"},
                )
            for voter in (payne, leavitt, cannon):
                curation_services.vote_cast(curation=curation, user=voter, value="accept")
        curation_datasets.dataset_export_create(actor=cannon)
        self.stdout.write(f"{len(curations)} curation drafts (CV) at several stages")

    def _run(
        self, experts: dict[str, Any], *, name: str, ids: list[int], calls: int, threshold: float
    ) -> InspectionRun:
        """A rule-based CV run over ``ids``, run here and now."""
        from annotation.inspections import jobs as inspections_jobs

        run = inspections_services.inspection_run_create(
            task=Task.objects.get(code="CV"),
            spectrum_ids=ids,
            policy_spec={"kind": "rule-based"},
            created_by=experts["cannon"],
            name=name,
            max_tool_calls=calls,
            confidence_threshold=threshold,
        )
        for candidate_id in run.candidates.values_list("pk", flat=True):
            if inspections_services.candidate_claim(candidate_id=candidate_id):
                inspections_jobs.run_candidate(candidate_id)
        self.stdout.write(f"inspection run {run}: {len(ids)} candidates")
        return run

    def _inspection_runs(self, experts: dict[str, Any]) -> None:
        """The runs whose uncertain candidates wait for the experts' vetting."""
        ids = list(
            Spectrum.objects.filter(
                dataset="specvi-mini", task__code="CV", split="test"
            ).values_list("pk", flat=True)
        )
        for name, calls in (("8 tool calls", 8), ("2 tool calls", 2)):
            self._run(
                experts, name=f"Demo: rule-based, {name}", ids=ids, calls=calls, threshold=0.9
            )

    def _rated_spectra(self, most: int = 8) -> list[int]:
        """The spectra the rating campaign shows: up to ``most`` test spectra no candidate sent
        to experts (in a tiny demo with too few, at most half of them, those first).

        While the campaign is open, blinding hides from its raters (payne and leavitt, both
        experts) every candidate of the spectra it shows and of the runs that wrote its items;
        rated apart, on spectra nobody needs to vet, those two can vet everything else."""
        routed = set(
            Candidate.objects.filter(needs_expert=True).values_list("spectrum_id", flat=True)
        )
        rows = Spectrum.objects.filter(dataset="specvi-mini", task__code="CV", split="test")
        ids = sorted(rows.values_list("pk", flat=True), key=lambda pk: (pk in routed, pk))
        unrouted = sum(1 for pk in ids if pk not in routed)
        return sorted(ids[: min(most, max(unrouted, 1), max(len(ids) // 2, 1))])

    def _campaign(self, experts: dict[str, Any]) -> None:
        spectra = self._rated_spectra()
        # Runs of their own, which send nobody anything to vet (threshold 0): the campaign hides
        # the runs its items come from, and the vetting queue's runs must stay readable.
        runs = [
            self._run(
                experts,
                name=f"Demo rating: rule-based, {calls} tool calls",
                ids=spectra,
                calls=calls,
                threshold=0.0,
            )
            # With 2 calls the rule-based inspector writes the same trajectory as with 8 on
            # most spectra (it rarely zooms more), leaving no pair to compare; without the tool
            # every pair differs, as in the paper's tool ablation.
            for calls in (8, 0)
        ]
        rollouts = list(
            Rollout.objects.filter(candidate__run=runs[0], index=0)
            .select_related("candidate__run__task", "candidate__spectrum")
            .order_by("candidate__spectrum_id")
        )
        others = list(
            Rollout.objects.filter(candidate__run=runs[1], index=0).select_related(
                "candidate__run__task", "candidate__spectrum"
            )
        )
        campaign = rating_services.campaign_create(
            name="Demo: rule-based reasoning quality",
            description="Rate each trajectory's coherence and physical consistency (0-5).",
            raters=[user for user in experts.values() if has_role(user, Role.RATER)],
            raters_per_item=2,
            sources=rating_services.rating_sources_from_rollouts(rollouts + others),
            created_by=experts["cannon"],
            seed=2026,
        )
        items = {item.source: item for item in CampaignItem.objects.filter(campaign=campaign)}
        pairs = [
            (items[f"rollout:{a.pk}"], items[f"rollout:{b.pk}"])
            for a, b in comparable_pairs(rollouts, others)
        ]
        rating_services.campaign_add_pairs(
            campaign=campaign, pairs=pairs, raters_per_pair=2, actor=None
        )
        rng = np.random.default_rng(7)
        # In pk order (PostgreSQL has no default order), leaving each rater two to rate.
        assignments = list(
            RatingAssignment.objects.filter(item__campaign=campaign)
            .select_related("item", "rater")
            .order_by("pk")
        )
        open_ids = set()
        for rater_id in {assignment.rater_id for assignment in assignments}:
            mine = [a.pk for a in assignments if a.rater_id == rater_id]
            open_ids.update(mine[-2:])
        for assignment in assignments:
            if assignment.pk in open_ids:
                continue
            base = 4 if "8 tool" in assignment.item.policy_name else 3
            score = int(np.clip(base + rng.integers(-1, 2), 0, 5))
            rating_services.rating_submit(
                assignment=assignment, rater=assignment.rater, score=score
            )
        self.stdout.write(f"rating campaign with {len(items)} items and {len(pairs)} pairs")
