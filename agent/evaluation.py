"""Run a policy over a labelled benchmark split and report paper Table 1 metrics plus tool use.

Per task: Acc and positive-class F1 (macro-averaged over tasks), confusion counts, mean tool
calls per trajectory, format-error rate, and SPECTRA's TER, TTAC, TSS and TIU (seed 002
eqs. 12-15). Specvet has a single tool, which makes TSS over tools identically 0; so tool "kinds"
are the task's diagnostic windows a call looked at (plus "other"), which measures whether a
policy goes to the informative windows. The single-tool values are reported too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent import metrics
from agent.inspection_tasks import Task, get_task
from agent.render import renderer_info
from agent.rollout import Opening, inspect, inspect_batch, trajectory_confidence
from agent.spectra import Spectrum
from agent.tool import IMAGE_SIZE
from agent.trajectory import Trajectory

OTHER_WINDOW = "other"
BENCHMARKS = ("specvi-mini", "specvi-bench", "manifest")


@dataclass
class EvalSample:
    sample_id: str
    task: str  # task code
    label: str  # "YES" | "NO"
    spectrum: Spectrum
    opening: Opening | None = None  # the dataset's own prompt and I0, shown instead of ours


@dataclass
class SampleResult:
    sample_id: str
    task: str
    label: str
    prediction: str | None
    confidence: float | None
    n_tool_calls: int
    format_ok: bool
    stop_reason: str | None
    call_kinds: list[str]
    call_outcomes: list[bool]
    seconds: float
    trajectory_id: str
    prompt_source: str = "specvet"  # "dataset" | "specvet"
    initial_image_source: str = "specvet"  # "dataset" | "specvet"

    @property
    def correct(self) -> bool:
        return self.prediction == self.label


@dataclass
class TaskReport:
    task: str
    n: int
    n_pos: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    confusion: dict[str, int]
    mean_tool_calls: float
    format_error_rate: float
    ter: float | None
    ttac: float
    tss: float
    tiu: float
    tss_single_tool: float
    tiu_single_tool: float


@dataclass
class EvaluationReport:
    benchmark: str
    split: str
    policy: dict[str, Any]
    use_tool: bool
    max_tool_calls: int
    tasks: dict[str, TaskReport]
    macro: dict[str, float]
    seconds: float
    samples: list[SampleResult] = field(default_factory=list)
    # Which prompts and first images the samples were shown (counts by source) and what drew
    # the rest: scores compare with published ones only when prompt and I0 are the dataset's.
    inputs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples"] = [asdict(sample) for sample in self.samples]
        return data

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))


# --- samples ---------------------------------------------------------------------------------


def specvi_mini_samples(
    *, split: str, tasks: Sequence[str], seed: int = 20260, scale: float = 1.0
) -> list[EvalSample]:
    """SpecVI-mini generated in memory, identical to what `make_benchmark` writes."""
    from agent import synthetic

    sizes = synthetic.default_split_sizes(scale)[split]
    samples = []
    for code in tasks:
        for item in synthetic.generate_split(
            code, split, seed=seed, n_pos=sizes["n_pos"], n_neg=sizes["n_neg"]
        ):
            samples.append(
                EvalSample(
                    sample_id=item.spectrum.object_id,
                    task=item.task,
                    label="YES" if item.label else "NO",
                    spectrum=item.spectrum,
                )
            )
    return samples


def specvi_bench_samples(
    *, data_dir: Path, split: str, tasks: Sequence[str], rerender: bool = False
) -> list[EvalSample]:
    """Rows of SpecVI-Bench parquet files `{split}_{code}.parquet` in `data_dir`.

    Each sample keeps its row's own prompt and I0, as Spec-o3 was scored on them, so figures
    compare with the published ones; ``rerender=True`` shows specvet's prompt and rendering.
    """
    from agent.formats import from_verl_row, read_verl_parquet
    from agent.synthetic import bench_code

    folder = Path(data_dir)
    if not any(folder.glob("*.parquet")) and (folder / "data").is_dir():
        folder = folder / "data"  # the SpecVI-Bench and SpecVI-mini layouts keep them in data/
    samples = []
    for code in tasks:
        path = folder / f"{split}_{bench_code(code)}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no {split} split for task {code} in {data_dir}")
        for row in read_verl_parquet(path):
            trajectory, spectrum, truth = from_verl_row(row, task=code)
            opening = None
            if not rerender:
                opening = Opening(
                    user_prompt=trajectory.user_prompt,
                    system_prompt=trajectory.system_prompt,
                    image=trajectory.initial_image,
                )
            samples.append(EvalSample(trajectory.id, code, truth, spectrum, opening))
    return samples


def manifest_samples(*, manifest: Path, split: str, tasks: Sequence[str]) -> list[EvalSample]:
    """A labelled set written as a SpecVI-mini style manifest.json beside its files."""
    from agent.spectra import load_spectra

    entries = json.loads(Path(manifest).read_text())["samples"]
    wanted = {code.upper() for code in tasks}
    samples = []
    for entry in entries:
        if entry["split"] != split or entry["task"].upper() not in wanted:
            continue
        for spectrum in load_spectra(Path(manifest).parent / entry["file"]):
            samples.append(
                EvalSample(entry["object_id"], entry["task"].upper(), entry["label"], spectrum)
            )
    return samples


# --- tool kinds --------------------------------------------------------------------------------


def window_kind(task: Task, wavelength_range: tuple[float, float] | None) -> str:
    """The diagnostic window a requested range looked at: the one it overlaps most, if that
    overlap covers at least half of the request; otherwise "other"."""
    if wavelength_range is None:
        return OTHER_WINDOW
    lo, hi = sorted(wavelength_range)
    width = max(hi - lo, 1e-9)
    best, best_overlap = OTHER_WINDOW, 0.0
    for window in task.windows:
        overlap = min(hi, window.rest_range[1]) - max(lo, window.rest_range[0])
        if overlap > best_overlap:
            best, best_overlap = window.name, overlap
    return best if best_overlap >= 0.5 * width else OTHER_WINDOW


def call_kinds_and_outcomes(trajectory: Trajectory, task: Task) -> tuple[list[str], list[bool]]:
    """One entry per attempted call: the window it targeted and whether it succeeded.

    A turn that contains a <tool_call> counts as an attempt even when it could not be parsed.
    """
    kinds: list[str] = []
    outcomes: list[bool] = []
    for step in trajectory.steps:
        if "<tool_call>" not in step.assistant_text:
            continue
        call = step.tool_call
        kinds.append(window_kind(task, call.wavelength_range if call else None))
        outcomes.append(
            bool(
                call is not None
                and call.executable
                and step.tool_result is not None
                and step.tool_result.ok
            )
        )
    return kinds, outcomes


# --- running -----------------------------------------------------------------------------------


def run_sample(
    sample: EvalSample, policy: Any, *, use_tool: bool, max_tool_calls: int
) -> tuple[SampleResult, Trajectory]:
    started = time.perf_counter()
    trajectory = inspect(
        sample.spectrum,
        get_task(sample.task),
        policy,
        max_tool_calls=max_tool_calls,
        use_tool=use_tool,
        meta={"sample_id": sample.sample_id},
        opening=sample.opening,
    )
    return sample_result(sample, trajectory, policy, time.perf_counter() - started), trajectory


def sample_result(
    sample: EvalSample, trajectory: Trajectory, policy: Any, seconds: float
) -> SampleResult:
    kinds, outcomes = call_kinds_and_outcomes(trajectory, get_task(sample.task))
    return SampleResult(
        sample_id=sample.sample_id,
        task=sample.task,
        label=sample.label,
        prediction=trajectory.answer.prediction if trajectory.answer else None,
        confidence=trajectory_confidence(trajectory),
        n_tool_calls=trajectory.n_tool_calls,
        format_ok=bool(trajectory.format_ok),
        stop_reason=trajectory.stop_reason,
        call_kinds=kinds,
        call_outcomes=outcomes,
        seconds=seconds,
        trajectory_id=trajectory.id,
        prompt_source=str(trajectory.meta.get("prompt_source", "specvet")),
        initial_image_source=str(trajectory.meta.get("initial_image_source", "specvet")),
    )


def run_batch(
    samples: Sequence[EvalSample],
    policy: Any,
    *,
    use_tool: bool,
    max_tool_calls: int,
    keep_going: Callable[[bool], bool] | None = None,
) -> list[tuple[SampleResult, Trajectory]]:
    """Turn-synchronous episodes through ``policy.generate_batch`` (``agent.rollout.inspect_batch``)."""
    started = time.perf_counter()
    trajectories = inspect_batch(
        [(sample.spectrum, get_task(sample.task)) for sample in samples],
        policy,
        max_tool_calls=max_tool_calls,
        use_tool=use_tool,
        metas=[{"sample_id": sample.sample_id} for sample in samples],
        keep_going=keep_going,
        openings=[sample.opening for sample in samples],
    )
    seconds = (time.perf_counter() - started) / max(len(samples), 1)
    return [
        (sample_result(sample, trajectory, None, seconds), trajectory)
        for sample, trajectory in zip(samples, trajectories, strict=True)
    ]


def task_report(task: Task, results: Sequence[SampleResult]) -> TaskReport:
    labels = [r.label for r in results]
    report = metrics.classification_report(labels, [r.prediction for r in results])
    outcomes = [ok for r in results for ok in r.call_outcomes]
    ter = metrics.tool_execution_reliability(outcomes)
    kinds = [window.name for window in task.windows] + [OTHER_WINDOW]
    success = [r.correct for r in results]
    usage = [set(r.call_kinds) for r in results]
    ttac = metrics.task_tool_alignment(usage, success, kinds)
    tss = metrics.tool_selectivity([k for r in results for k in r.call_kinds], kinds)
    single_usage = [{"tool"} if r.call_kinds else set() for r in results]
    ttac_single = metrics.task_tool_alignment(single_usage, success, ["tool"])
    tss_single = metrics.tool_selectivity(["tool"] * len(outcomes), ["tool"])
    n = len(results)
    return TaskReport(
        task=task.code,
        n=n,
        n_pos=labels.count("YES"),
        accuracy=report.accuracy,
        precision=report.precision,
        recall=report.recall,
        f1=report.f1,
        confusion=report.confusion.as_dict(),
        mean_tool_calls=sum(r.n_tool_calls for r in results) / n if n else 0.0,
        format_error_rate=sum(1 for r in results if not r.format_ok) / n if n else 0.0,
        ter=ter,
        ttac=ttac,
        tss=tss,
        tiu=metrics.tool_instrumental_utility(ter, ttac, tss),
        tss_single_tool=tss_single,
        tiu_single_tool=metrics.tool_instrumental_utility(ter, ttac_single, tss_single),
    )


ProgressCallback = Callable[[int, int, SampleResult, Trajectory], None]


def evaluate(
    samples: Iterable[EvalSample],
    policy: Any,
    *,
    benchmark: str,
    split: str,
    use_tool: bool = True,
    max_tool_calls: int = 8,
    on_result: ProgressCallback | None = None,
    batch_size: int = 1,
    concurrency: int = 1,
) -> EvaluationReport:
    """Inspect every sample with `policy` and aggregate per task and macro.

    ``batch_size`` > 1 runs that many episodes turn-synchronously through the policy's
    ``generate_batch`` (the offline vLLM and in-memory policies); ``concurrency`` > 1 runs that
    many whole episodes at once in threads, for policies marked ``concurrent_safe`` (the
    OpenAI-compatible one: each episode is a sequence of HTTP requests). Results keep the
    samples' order either way.
    """
    items = list(samples)
    if batch_size < 1 or concurrency < 1:
        raise ValueError(
            f"batch_size and concurrency must be >= 1; got {batch_size}, {concurrency}"
        )
    if batch_size > 1 and not callable(getattr(policy, "generate_batch", None)):
        raise ValueError(f"batch_size {batch_size} needs a policy with generate_batch")
    if concurrency > 1 and not getattr(policy, "concurrent_safe", False):
        raise ValueError(
            f"concurrency {concurrency} needs a policy safe to call from several threads "
            "(concurrent_safe); this one keeps per-episode state"
        )
    started = time.perf_counter()
    results: list[SampleResult] = []

    def record(result: SampleResult, trajectory: Trajectory) -> None:
        results.append(result)
        if on_result is not None:
            on_result(len(results), len(items), result, trajectory)

    if batch_size > 1:
        for first in range(0, len(items), batch_size):
            chunk = items[first : first + batch_size]
            for result, trajectory in run_batch(
                chunk, policy, use_tool=use_tool, max_tool_calls=max_tool_calls
            ):
                record(result, trajectory)
    elif concurrency > 1:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = [
                pool.submit(
                    run_sample, sample, policy, use_tool=use_tool, max_tool_calls=max_tool_calls
                )
                for sample in items
            ]
            for future in futures:
                record(*future.result())
    else:
        for sample in items:
            record(*run_sample(sample, policy, use_tool=use_tool, max_tool_calls=max_tool_calls))
    return build_report(
        results,
        benchmark=benchmark,
        split=split,
        policy=policy,
        use_tool=use_tool,
        max_tool_calls=max_tool_calls,
        seconds=time.perf_counter() - started,
    )


def build_report(
    results: Sequence[SampleResult],
    *,
    benchmark: str,
    split: str,
    policy: Any,
    use_tool: bool,
    max_tool_calls: int,
    seconds: float,
) -> EvaluationReport:
    """Per-task and macro metrics of finished samples (e.g. gathered from several ranks)."""
    by_task: dict[str, list[SampleResult]] = {}
    for result in results:
        by_task.setdefault(result.task, []).append(result)
    reports = {code: task_report(get_task(code), rows) for code, rows in by_task.items()}
    classification = {
        code: metrics.ClassificationReport(
            n=r.n,
            accuracy=r.accuracy,
            precision=r.precision,
            recall=r.recall,
            f1=r.f1,
            confusion=metrics.Confusion(**r.confusion),
        )
        for code, r in reports.items()
    }
    return EvaluationReport(
        benchmark=benchmark,
        split=split,
        policy=policy.info(),
        use_tool=use_tool,
        max_tool_calls=max_tool_calls,
        tasks=reports,
        macro=metrics.macro_average(classification),
        seconds=seconds,
        samples=list(results),
        inputs=report_inputs(results),
    )


def report_inputs(results: Sequence[SampleResult]) -> dict[str, Any]:
    """How many samples saw the dataset's or specvet's prompt and I0, and specvet's renderer."""

    def counts(name: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for result in results:
            found[getattr(result, name)] = found.get(getattr(result, name), 0) + 1
        return dict(sorted(found.items()))

    return {
        "prompt_source": counts("prompt_source"),
        "initial_image_source": counts("initial_image_source"),
        "renderer": renderer_info(IMAGE_SIZE),
    }


def _percent(value: float | None) -> str:
    return "   —" if value is None else f"{100 * value:5.1f}"


def format_table(report: EvaluationReport) -> str:
    """Paper Table 1 layout (Acc and F1 per task, then Avg), then tool-use columns."""
    codes = list(report.tasks)
    lines = [
        f"{report.policy.get('name', 'policy')} on {report.benchmark}"
        + (" (SYNTHETIC)" if report.benchmark == "specvi-mini" else "")
        + f" / {report.split}"
        + ("" if report.use_tool else " (no tool)")
        + f"  ({sum(r.n for r in report.tasks.values())} spectra, {report.seconds:.1f} s)",
        "",
        "task   n   pos    Acc     F1   prec    rec  TP  FP  TN  FN  noans  tools  fmt-err"
        "   TER   TTAC   TSS    TIU",
    ]
    for code in codes:
        r = report.tasks[code]
        c = r.confusion
        lines.append(
            f"{code:<4} {r.n:4d} {r.n_pos:4d} {_percent(r.accuracy)}  {_percent(r.f1)}  "
            f"{_percent(r.precision)}  {_percent(r.recall)} {c['tp']:3d} {c['fp']:3d} "
            f"{c['tn']:3d} {c['fn']:3d}  {c['no_answer_pos'] + c['no_answer_neg']:5d}  "
            f"{r.mean_tool_calls:5.2f}  {_percent(r.format_error_rate)}  {_percent(r.ter)} "
            f"{r.ttac:6.3f} {r.tss:5.2f}  {_percent(r.tiu)}"
        )
    lines.append(
        f"{'Avg':<14} {_percent(report.macro['accuracy'])}  {_percent(report.macro['f1'])}"
        "   (macro over tasks)"
    )
    if report.inputs:
        lines.append(inputs_line(report.inputs))
    return "\n".join(lines)


def inputs_line(inputs: dict[str, Any]) -> str:
    """e.g. "prompt: dataset 40 · I0: dataset 40 · tool plots: specvet-pillow-aa 2 (644x392)"."""

    def sources(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"

    renderer = inputs.get("renderer") or {}
    size = "x".join(str(side) for side in renderer.get("image_size", []))
    return (
        f"prompt: {sources(inputs.get('prompt_source', {}))} · "
        f"I0: {sources(inputs.get('initial_image_source', {}))} · "
        f"tool plots: {renderer.get('name', '?')} {renderer.get('version', '?')} ({size})"
    )


# --- data-parallel evaluation --------------------------------------------------------------------


class _Lockstep:
    """A policy wrapper for ``evaluate_shard``: each round, every rank makes the same number of
    ``generate`` calls (padding with a throwaway prompt), so generation that holds collective
    operations (ZeRO-3 or FSDP shards, ``synced_gpus``) stays matched across ranks."""

    def __init__(
        self, policy: Any, all_max: Callable[[int], int], dummy: list[dict[str, Any]]
    ) -> None:
        self.policy, self.all_max, self.dummy = policy, all_max, dummy

    def info(self) -> dict[str, Any]:
        return self.policy.info()

    def generate_batch(self, conversations: list[list[dict[str, Any]]]) -> list[str]:
        most = self.all_max(len(conversations))
        texts = [self.policy.generate(messages) for messages in conversations]
        for _ in range(most - len(conversations)):
            self.policy.generate(self.dummy)
        return texts


DUMMY_CONVERSATION = [{"role": "user", "content": [{"type": "text", "text": "Say OK."}]}]


def evaluate_shard(
    samples: Sequence[EvalSample],
    policy: Any,
    *,
    rank: int,
    world_size: int,
    all_max: Callable[[int], int],
    gather: Callable[[list[Any]], list[list[Any]]],
    benchmark: str,
    split: str,
    use_tool: bool = True,
    max_tool_calls: int = 8,
) -> EvaluationReport:
    """Every rank inspects ``samples[rank::world_size]`` in lockstep and all get the report.

    ``all_max(n)`` is the maximum of ``n`` over ranks and ``gather(items)`` the list of every
    rank's items (torch.distributed on a training run, threads in tests); every rank must call
    this function, which makes the same sequence of collective calls on each.
    """
    started = time.perf_counter()
    shard = list(samples)[rank::world_size]
    lockstep = _Lockstep(policy, all_max, DUMMY_CONVERSATION)
    results = run_batch(
        shard,
        lockstep,
        use_tool=use_tool,
        max_tool_calls=max_tool_calls,
        keep_going=lambda active: all_max(int(active)) > 0,
    )
    indexed = [
        (rank + world_size * position, result) for position, (result, _) in enumerate(results)
    ]
    merged = sorted((item for part in gather(indexed) for item in part), key=lambda item: item[0])
    return build_report(
        [result for _, result in merged],
        benchmark=benchmark,
        split=split,
        policy=policy,
        use_tool=use_tool,
        max_tool_calls=max_tool_calls,
        seconds=time.perf_counter() - started,
    )
