from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent import evaluation
from agent.policies import build_policy
from agent.trajectory import Trajectory
from annotation.core import endpoints
from training.inputs import (
    DATASET,
    INPUT_DISTRIBUTIONS,
    SPECVET,
    InputDistributionError,
    evaluation_distribution,
)


class Command(BaseCommand):
    help = (
        "Run a policy over a labelled benchmark split and print the paper Table 1 report "
        "(per-task Acc and F1, macro averages, tool use). Results are written as JSON."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--policy",
            default="rule-based",
            choices=["rule-based", "transformers", "openai", "vllm"],
        )
        parser.add_argument("--model-path", help="checkpoint directory (transformers, vllm)")
        parser.add_argument(
            "--checkpoint",
            help="name of a checkpoint registered as a policy (Training page); implies "
            "--policy transformers with its folder, or --policy vllm when given",
        )
        parser.add_argument(
            "--endpoint",
            help="registered model endpoint (openai; default: the endpoint 'default' of the "
            "OPENAI_* settings); staff register others on the Model endpoints page",
        )
        parser.add_argument("--benchmark", default="specvi-mini", choices=evaluation.BENCHMARKS)
        parser.add_argument("--split", default="test")
        parser.add_argument("--tasks", default="CV,CS,SS,MG,WD")
        parser.add_argument("--seed", type=int, default=20260, help="SpecVI-mini seed")
        parser.add_argument("--scale", type=float, default=1.0, help="SpecVI-mini size factor")
        parser.add_argument("--data-dir", type=Path, help="SpecVI-Bench parquet folder")
        parser.add_argument(
            "--input-distribution",
            choices=INPUT_DISTRIBUTIONS,
            help="SpecVI-Bench: 'dataset' shows each row's own prompt and I0 (scores compare "
            "with published Spec-o3 ones), 'specvet' specvet's prompt and rendering of I0. "
            "Default: what the checkpoint was trained on (its lineage), else 'dataset'; a choice "
            "other than the checkpoint's is refused",
        )
        parser.add_argument(
            "--rerender",
            action="store_true",
            help="the same as --input-distribution specvet",
        )
        parser.add_argument("--manifest", type=Path, help="a labelled set's manifest.json")
        parser.add_argument("--max-tool-calls", type=int, default=8)
        parser.add_argument("--no-tool", action="store_true", help="ablation: I0 only")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1,
            help="episodes per turn-synchronous batch (vllm: one generate call per turn)",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=1,
            help="episodes in flight at once (openai: bounded concurrent requests)",
        )
        parser.add_argument(
            "--no-real",
            action="store_true",
            help="skip the real-data figures (the policy on the real corpus's development and "
            "validation parts, printed per task beside the benchmark's)",
        )
        parser.add_argument("--out", type=Path, help="JSON report path")
        parser.add_argument("--save-trajectories", type=Path, help="folder for trajectory JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        tasks = [code.strip().upper() for code in options["tasks"].split(",") if code.strip()]
        policy = _policy(options)
        samples = _samples(options, tasks)
        if not samples:
            raise CommandError(f"no samples for split {options['split']!r} and tasks {tasks}")
        _refuse_trained_on(options, samples)
        trajectories_dir: Path | None = options["save_trajectories"]
        if trajectories_dir:
            trajectories_dir.mkdir(parents=True, exist_ok=True)

        def progress(done: int, total: int, result: Any, trajectory: Trajectory) -> None:
            if trajectories_dir:
                (trajectories_dir / f"{result.sample_id}.json").write_text(trajectory.to_json())
            if done % 10 == 0 or done == total:
                sys.stderr.write(f"\r{done}/{total} spectra")
                sys.stderr.flush()

        report = evaluation.evaluate(
            samples,
            policy,
            benchmark=options["benchmark"],
            split=options["split"],
            use_tool=not options["no_tool"],
            max_tool_calls=options["max_tool_calls"],
            on_result=progress,
            batch_size=options["batch_size"],
            concurrency=options["concurrency"],
        )
        sys.stderr.write("\n")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        out = options["out"] or (
            settings.BASE_DIR
            / "var"
            / "evaluations"
            / f"{options['policy']}-{options['benchmark']}-{options['split']}-{stamp}.json"
        )
        report.write_json(out)
        self.stdout.write(evaluation.format_table(report))
        self.stdout.write(f"\nreport: {out}")
        if not options["no_real"]:
            self.stdout.write("\n" + _real_figures(policy, tasks, report, options, out))


def _real_figures(
    policy: Any,
    tasks: list[str],
    benchmark_report: evaluation.EvaluationReport,
    options: dict[str, Any],
    out: Path,
) -> str:
    """The same policy on the real corpus (development: tuned on; validation: never tuned on),
    per task beside the benchmark's figures; the reports go next to ``out``."""
    from agent import real_evaluation as real_bench
    from agent.real_corpus import SPLITS, CorpusUnavailable

    try:
        parts = {split: real_bench.real_eval_samples(split, tasks) for split in SPLITS}
    except CorpusUnavailable as error:
        return f"Real data: not evaluated ({error})."
    benchmark = options["benchmark"]
    label = "synthetic" if benchmark == "specvi-mini" else benchmark
    results = {label: benchmark_report.samples}
    for split, samples in parts.items():
        sys.stderr.write(f"real corpus, {split}: {len(samples)} spectrum-task pairs\n")
        real = evaluation.evaluate(
            samples,
            policy,
            benchmark="real-corpus",
            split=split,
            use_tool=not options["no_tool"],
            max_tool_calls=options["max_tool_calls"],
            batch_size=options["batch_size"],
            concurrency=options["concurrency"],
        )
        path = out.with_name(f"{out.stem}-real-{split}.json")
        real.write_json(path)
        results[split] = real.samples
    title = (
        f"{benchmark_report.policy.get('name', 'policy')} per task: "
        + ("SpecVI-mini (SYNTHETIC)" if label == "synthetic" else benchmark)
        + f" / {options['split']} beside real spectra (development: the part the rule-based "
        "inspector is tuned on; validation: never tuned on)"
    )
    table = real_bench.side_by_side(results, tasks)
    reports = out.with_name(f"{out.stem}-real-*.json")
    return real_bench.format_table(table, title) + f"\nreal-data reports: {reports}"


def _input_distribution(options: dict[str, Any]) -> str:
    """One input distribution for the checkpoint's training and this evaluation
    (training.inputs): the one asked for, else the checkpoint's; a mix is refused."""
    chosen = options.get("input_distribution")
    if options.get("rerender"):
        if chosen == DATASET:
            raise CommandError("--rerender is --input-distribution specvet, not dataset")
        chosen = SPECVET
    spec = _policy_spec(options)
    try:
        return evaluation_distribution(checkpoint=spec.get("model_path"), chosen=chosen)
    except InputDistributionError as error:
        raise CommandError(str(error)) from None


def _refuse_trained_on(options: dict[str, Any], samples: list[evaluation.EvalSample]) -> None:
    """CommandError naming the samples' spectra the checkpoint trained on (issue 33 item 6)."""
    from agent.splits import (
        SplitMembers,
        SplitOverlap,
        TrainingSpectraError,
        check_evaluation_disjoint,
    )

    name = f"the {options['benchmark']} {options['split']} split"
    members = SplitMembers.of_spectra(name, (sample.spectrum for sample in samples))
    try:
        check_evaluation_disjoint(_policy_spec(options), members)
    except (SplitOverlap, TrainingSpectraError) as error:
        raise CommandError(
            f"{error}; evaluate this checkpoint on spectra it was not trained on"
        ) from None


def _policy_spec(options: dict[str, Any]) -> dict[str, Any]:
    kind = options["policy"]
    if options.get("checkpoint"):
        from annotation.training_runs.models import PolicyCheckpoint

        checkpoint = PolicyCheckpoint.objects.filter(name=options["checkpoint"]).first()
        if checkpoint is None:
            names = ", ".join(PolicyCheckpoint.objects.values_list("name", flat=True)[:20])
            raise CommandError(
                f"no checkpoint named {options['checkpoint']!r} is registered "
                f"(registered: {names or 'none'})"
            )
        return {"kind": "vllm" if kind == "vllm" else "transformers", "model_path": checkpoint.path}
    if kind == "rule-based":
        return {"kind": kind}
    if kind in ("transformers", "vllm"):
        if not options["model_path"]:
            raise CommandError(f"--policy {kind} needs --model-path")
        return {"kind": kind, "model_path": options["model_path"]}
    return {"kind": kind, "endpoint": options.get("endpoint") or endpoints.DEFAULT_ENDPOINT}


def _policy(options: dict[str, Any]) -> Any:
    """The policy to evaluate; an ``openai`` one calls a registered endpoint with its own key."""
    spec = _policy_spec(options)
    if spec["kind"] != "openai":
        return build_policy(spec)
    try:
        return endpoints.endpoint_policy(endpoints.find_usable(spec["endpoint"]))
    except endpoints.EndpointError as error:
        raise CommandError(str(error)) from None


def _samples(options: dict[str, Any], tasks: list[str]) -> list[evaluation.EvalSample]:
    benchmark = options["benchmark"]
    if benchmark == "specvi-mini":
        return evaluation.specvi_mini_samples(
            split=options["split"], tasks=tasks, seed=options["seed"], scale=options["scale"]
        )
    if benchmark == "specvi-bench":
        if not options["data_dir"]:
            raise CommandError("--benchmark specvi-bench needs --data-dir")
        return evaluation.specvi_bench_samples(
            data_dir=options["data_dir"],
            split=options["split"],
            tasks=tasks,
            rerender=_input_distribution(options) == SPECVET,
        )
    if not options["manifest"]:
        raise CommandError("--benchmark manifest needs --manifest")
    return evaluation.manifest_samples(
        manifest=options["manifest"], split=options["split"], tasks=tasks
    )
