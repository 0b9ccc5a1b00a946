"""The policy: planning the windows and writing each turn of an episode."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from agent.calibration import Calibrator, calibrator_from_dict
from agent.inspection_tasks import DiagnosticWindow, Task
from agent.library_match import (
    LibraryMatcher,
    Match,
    TaskEvidence,
    decide,
    default_matcher,
    describe,
)
from agent.parsing import DEFAULT_MAX_TOOL_CALLS, TOOL_NAME
from agent.policies.base import PolicyError, code_version
from agent.policies.rule_based.findings import Assessment, Finding, _fmt_colour, _fmt_line
from agent.policies.rule_based.generic import _continuum_note, _window_measurements, scorer_for
from agent.policies.rule_based.library import (
    LIBRARY,
    Combined,
    combine,
    default_library_fits,
    missing_evidence,
    uses_mk_region,
    uses_type_regression,
)
from agent.policies.rule_based.scope import (
    COVERAGE,
    DEFAULT_PULL,
    MAX_PULL,
    OUT_OF_SCOPE,
    ScopeNote,
    scope_notes,
)
from agent.policies.rule_based.view import (
    _SHOWN,
    CALIBRATION_PATH,
    COVERED_FRACTION,
    MIN_PLANNED,
    MIN_WEIGHT,
    MODEL_NAME,
    POLICY_KIND,
    SpectrumView,
    _logistic,
)
from agent.spectra import Spectrum
from agent.type_regression import TypeEstimator, default_type_estimator, observed_features


@dataclass(frozen=True)
class PlannedWindow:
    window: DiagnosticWindow
    wavelength_range: tuple[float, float]  # the rest range clipped to the coverage
    value: float  # summed |weight| of its findings
    notes: tuple[str, ...]  # what was measured there, with numbers


@dataclass
class _Episode:
    task: Task
    view: SpectrumView
    use_tool: bool
    scorer: str
    assessment: Assessment
    probability: float
    prediction: str
    confidence: float
    plan: list[PlannedWindow]
    skipped: list[str]  # windows not inspected because the data do not cover them
    threshold: float
    scope: list[ScopeNote]  # why the answer is not confident: another class, missing windows
    library: str = ""  # what the comparison with real library spectra found


@cache
def default_calibration() -> dict[str, Calibrator]:
    """Per-task Platt scaling fitted on the real corpus' development part
    (``python -m agent.bench.real calibrate``); empty when the file is absent."""
    if not CALIBRATION_PATH.exists():
        return {}
    data = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    return {code: calibrator_from_dict(fit) for code, fit in data["tasks"].items()}


def pulled(probability: float, pull: float) -> float:
    """P(YES) pulled towards 0.5 by a scope note: 0.5 + pull * (P - 0.5), pull in [0, MAX_PULL]
    (1.0 leaves it as it is)."""
    if pull >= 1.0:
        return probability
    return 0.5 + min(max(pull, 0.0), MAX_PULL) * (probability - 0.5)


@cache
def default_scope_pull() -> dict[str, float]:
    """Per-task pull towards 0.5 of answers with a scope note, fitted with the calibration."""
    if not CALIBRATION_PATH.exists():
        return {}
    data = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    return {
        code: float(fit["scope_pull"]) for code, fit in data["tasks"].items() if "scope_pull" in fit
    }


class RuleBasedInspector:
    """Deterministic, honest inspector: measurements and physics rules, no labels.

    The inspector holds only its settings: ``begin`` measures one spectrum and returns a
    ``RuleBasedEpisode`` that writes that episode's turns and carries its decision, so one
    inspector serves any number of episodes at once (a worker's threads share it).

    ``calibration`` maps a task code to the Platt scaling that turns the evidence score into
    P(YES); "default" uses the fit on the real corpus' development part, None the raw
    ``logistic(score)``.
    """

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        max_windows: int | None = None,
        name: str = POLICY_KIND,
        calibration: dict[str, Calibrator] | str | None = "default",
        library: LibraryMatcher | str | None = "default",
        type_estimator: TypeEstimator | str | None = "default",
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError(f"threshold must be a number in (0, 1), got {threshold!r}")
        if not 0.0 < float(threshold) < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
        if max_windows is not None and (
            isinstance(max_windows, bool) or not isinstance(max_windows, int) or max_windows < 0
        ):
            raise ValueError(f"max_windows must be a non-negative int or None, got {max_windows!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if isinstance(library, str) and library != "default":
            raise ValueError(
                f"library must be 'default', None or a LibraryMatcher, got {library!r}"
            )
        if isinstance(calibration, str) and calibration != "default":
            raise ValueError(
                f"calibration must be 'default', None or a mapping, got {calibration!r}"
            )
        self.threshold = float(threshold)
        self.max_windows = max_windows
        self.name = name
        self.calibration: dict[str, Calibrator] = (
            default_calibration() if isinstance(calibration, str) else dict(calibration or {})
        )
        # the fitted pulls belong to the fitted calibration; otherwise DEFAULT_PULL
        self.scope_pull: dict[str, float] = (
            default_scope_pull() if isinstance(calibration, str) else {}
        )
        # the data-driven part: real library spectra of known type (None: the rules alone)
        self._library = library
        self.library_fits = default_library_fits() if isinstance(calibration, str) else {}
        # rule-based/v7's spectral-type regression (``agent.type_regression``): read where a
        # task's fitted combination has the "type" form ("default": fitted on the development
        # library on first use; None: such a task answers with v4's pool)
        self._type_estimator = type_estimator

    @property
    def library(self) -> LibraryMatcher | None:
        """The development library, loaded on first use (None without the real-data cache)."""
        if isinstance(self._library, str):
            self._library = default_matcher()
        return self._library

    @property
    def type_estimator(self) -> TypeEstimator | None:
        if isinstance(self._type_estimator, str):
            library = self.library
            self._type_estimator = (
                None if library is None else default_type_estimator(library.tiers)
            )
        return self._type_estimator

    @type_estimator.setter
    def type_estimator(self, estimator: TypeEstimator | None) -> None:
        self._type_estimator = estimator

    concurrent_safe = True

    # --- Policy protocol ---------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": POLICY_KIND,
            "model": MODEL_NAME,
            "threshold": self.threshold,
            "max_windows": self.max_windows,
            "calibrated_tasks": sorted(self.calibration),
            "library": "real library spectra (development part)"
            if self.library is not None
            else "none (the rules alone)",
            "code_version": code_version(),
        }

    def begin(
        self,
        *,
        spectrum: Spectrum,
        task: Task,
        use_tool: bool = True,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        view: SpectrumView | None = None,
        match: Match | None | str = "compute",
    ) -> RuleBasedEpisode:
        """Measure the spectrum, score it for ``task`` and plan the windows to inspect: the
        episode's turns come from the returned object, never from the inspector.

        ``view``: the measurements of this very spectrum from an earlier episode, so a caller
        scoring one spectrum for several tasks in one thread measures each line once."""
        if not isinstance(task, Task):
            raise TypeError(f"task must be an agent.inspection_tasks.Task, got {type(task)!r}")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int):
            raise ValueError(f"max_tool_calls must be an int, got {max_tool_calls!r}")
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        if view is None:
            view = SpectrumView(spectrum)
        elif view.spectrum is not spectrum:
            raise ValueError("view was measured on another spectrum than the one given")
        scorer_name, scorer = scorer_for(task)
        assessment = scorer(view, task)
        scope = scope_notes(view, task)
        absent = missing_evidence(assessment)
        if absent is not None and not any(note.kind == COVERAGE for note in scope):
            scope.append(absent)
        score = assessment.score
        code = task.code.upper()
        platt = self.calibration.get(code)
        calibrated = platt(score) if platt else _logistic(score)
        library = self.library if code in self.library_fits else None
        if library is not None and isinstance(match, str):
            match = library.match(spectrum, mk_region=uses_mk_region(self.library_fits, code))
        evidence = decide(match, code) if isinstance(match, Match) else None
        estimator = (
            self.type_estimator
            if evidence is not None and uses_type_regression(self.library_fits, code)
            else None
        )
        if evidence is not None and isinstance(match, Match) and estimator is not None:
            typed = estimator.probability(code, observed_features(match))
            evidence = dataclasses.replace(evidence, type_probability=typed)
        combined = combine(
            code,
            calibrated,
            scope,
            evidence,
            library_present=library is not None,
            fits=self.library_fits,
            rules_pull=self.scope_pull.get(code, DEFAULT_PULL),
            task_name=task.name,
        )
        scope = list(combined.notes)
        probability = pulled(combined.probability, combined.pull)
        prediction = "YES" if probability >= self.threshold else "NO"
        # A decision taken against the odds (a threshold away from 0.5) is a coin flip at best.
        confidence = max(probability if prediction == "YES" else 1.0 - probability, 0.5)
        limit = max_tool_calls if use_tool else 0
        if self.max_windows is not None:
            limit = min(limit, self.max_windows)
        plan, skipped = _plan(view, task, assessment, limit)
        episode = _Episode(
            task=task,
            view=view,
            use_tool=use_tool,
            scorer=scorer_name,
            assessment=assessment,
            probability=probability,
            prediction=prediction,
            confidence=confidence,
            plan=plan,
            skipped=skipped,
            threshold=self.threshold,
            scope=scope,
            library=_library_text(combined, evidence, task.name),
        )
        decision = {
            "prediction": prediction,
            "confidence": round(confidence, 4),
            "score": round(score, 4),
            "evidence": {
                "probability_before_scope": round(combined.probability, 4),
                "rules_probability": round(calibrated, 4),
                "library": _library_evidence(combined, evidence),
                "scope": [
                    {"kind": note.kind, "subject": note.subject, "text": note.text}
                    for note in scope
                ],
                "scorer": scorer_name,
                "probability_yes": round(probability, 4),
                "calibrated": platt is not None,
                "bias": assessment.bias,
                "findings": [
                    {"window": f.window, "text": f.text, "weight": round(f.weight, 3)}
                    for f in assessment.findings
                ],
                "planned_windows": [p.window.name for p in plan],
                "skipped_windows": list(skipped),
            },
        }
        return RuleBasedEpisode(episode, decision)

    def generate(self, messages: list[dict[str, Any]]) -> str:
        raise PolicyError(
            "RuleBasedInspector.generate has no spectrum to measure: call "
            "begin(spectrum=..., task=...) and generate with the episode it returns "
            "(agent.rollout.inspect does this)"
        )


class RuleBasedEpisode:
    """One episode of the rule-based inspector: its measurements, plan and decision."""

    def __init__(self, episode: _Episode, decision: dict[str, Any]) -> None:
        self._episode = episode
        self.decision: dict[str, Any] | None = decision

    def generate(self, messages: list[dict[str, Any]]) -> str:
        if not isinstance(messages, list):
            raise PolicyError(f"messages must be a list of dicts, got {type(messages).__name__}")
        step = sum(1 for message in messages if _role(message) == "assistant")
        feedback = _last_tool_text(messages)
        if step < len(self._episode.plan):
            return _tool_turn(self._episode, step, feedback)
        return _answer_turn(self._episode, feedback)


def _plan(
    view: SpectrumView, task: Task, assessment: Assessment, limit: int
) -> tuple[list[PlannedWindow], list[str]]:
    candidates: list[tuple[float, int, PlannedWindow]] = []
    skipped: list[str] = []
    usable: list[tuple[int, DiagnosticWindow, float, float]] = []
    for order, window in enumerate(task.windows):
        low = max(window.rest_range[0], view.coverage[0])
        high = min(window.rest_range[1], view.coverage[1])
        if high - low < 5.0 or view.covered_fraction(window.rest_range) < COVERED_FRACTION:
            skipped.append(window.name)
        else:
            usable.append((order, window, low, high))
    if limit <= 0:  # no window will be shown: measuring them for the plan would be wasted
        return [], skipped
    for order, window, low, high in usable:
        notes = [f.text for f in assessment.findings if f.window == window.name]
        value = sum(abs(f.weight) for f in assessment.findings if f.window == window.name)
        if not notes:
            notes = [_fmt_line(m) for m in _window_measurements(view, window)]
            if window.kind == "continuum" and (slope := _continuum_note(view, window)):
                notes.append(slope)
        if not notes:
            notes = [
                f"nothing measurable at {window.rest_range[0]:.0f}–{window.rest_range[1]:.0f} Å"
            ]
        # rounded inward so the request stays inside the coverage the tool checks against
        shown = (math.ceil(low * 10.0) / 10.0, math.floor(high * 10.0) / 10.0)
        planned = PlannedWindow(window, shown, value, tuple(notes))
        candidates.append((value, order, planned))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    # windows that carry evidence, strongest first; at least MIN_PLANNED so a look is taken
    chosen = [c for c in candidates if c[0] >= MIN_WEIGHT]
    if len(chosen) < MIN_PLANNED:
        chosen = candidates[: max(MIN_PLANNED, len(chosen))]
    return [planned for _, _, planned in chosen[:limit]], skipped


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part.get("text", "")
        for part in content
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _last_tool_text(messages: list[dict[str, Any]]) -> str | None:
    """The text of the tool response just before this turn, without the wrapper tags."""
    if not messages or _role(messages[-1]) != "user":
        return None
    text = _message_text(messages[-1]).strip()
    if not text.startswith("<tool_response>"):
        return None
    text = text.removeprefix("<tool_response>").removesuffix("</tool_response>")
    return " ".join(text.replace("<image>", " ").split())


def _sentences(notes: Sequence[str]) -> str:
    return " ".join(
        note[0].upper() + note[1:] + ("" if note.endswith(".") else ".") for note in notes
    )


def _tool_feedback(episode: _Episode, step: int, feedback: str | None) -> str:
    """What the previous tool response adds: a note when it did not show the window."""
    if feedback is None or step == 0:
        return ""
    shown = episode.plan[step - 1]
    shown_match = _SHOWN.match(feedback)
    if shown_match:
        text = f" The zoomed view shows {shown_match.group(1)}."
        extra = shown_match.group(2).strip()
        return text + (f" The tool noted: {extra}" if extra else "")
    return (
        f" The tool could not show {shown.window.name} as asked ({feedback}); "
        "I rely on the measured arrays for it."
    )


def _overview(episode: _Episode) -> str:
    view = episode.view
    snr = view.snr()
    frame = f"rest frame, z = {view.redshift:.4g}" if view.redshift else "observed = rest frame"
    parts = [
        f"The full view covers {view.coverage[0]:.0f}–{view.coverage[1]:.0f} Å ({frame})",
        f"median S/N {snr:.0f} at 6000–7000 Å" if snr is not None else "S/N unknown",
        _fmt_colour(view.colour()),
    ]
    text = "; ".join(parts) + "."
    if view.ivar_estimated:
        text += " The file has no inverse variance, so I estimate the noise from the scatter."
    if view.spikes.any():
        text += f" I ignore {int(np.count_nonzero(view.spikes))} spike pixel(s) that look like cosmic rays."
    if episode.skipped:
        text += " Not covered by good pixels: " + ", ".join(episode.skipped) + "."
    return text


def _next_window_text(planned: PlannedWindow, first: bool) -> str:
    low, high = planned.wavelength_range
    look_for = planned.window.look_for.rstrip(".")
    lead = "I start with" if first else "Next I check"
    return (
        f"{lead} {planned.window.name} ({low:.0f}–{high:.0f} Å). What to check there: {look_for}."
    )


def _tool_call_json(planned: PlannedWindow) -> str:
    low, high = planned.wavelength_range
    call = {
        "name": TOOL_NAME,
        "arguments": {"wavelength_range": [low, high], "label": planned.window.name},
    }
    return json.dumps(call, ensure_ascii=False)


def _tool_turn(episode: _Episode, step: int, feedback: str | None) -> str:
    planned = episode.plan[step]
    if step == 0:
        think = f"{_overview(episode)} {_next_window_text(planned, True)}"
    else:
        previous = episode.plan[step - 1]
        think = (
            f"{previous.window.name}: {_sentences(previous.notes)}"
            f"{_tool_feedback(episode, step, feedback)} {_next_window_text(planned, False)}"
        )
    return f"<think>{think}</think>\n<tool_call>{_tool_call_json(planned)}</tool_call>"


def _weighed(findings: Sequence[Finding], sign: int, count: int) -> list[Finding]:
    chosen = [f for f in findings if sign * f.weight >= MIN_WEIGHT]
    chosen.sort(key=lambda f: -abs(f.weight))
    return chosen[:count]


def _answer_turn(episode: _Episode, feedback: str | None) -> str:
    findings = episode.assessment.findings
    parts: list[str] = []
    if episode.plan:
        last = episode.plan[-1]
        step = len(episode.plan)
        parts.append(
            f"{last.window.name}: {_sentences(last.notes)}{_tool_feedback(episode, step, feedback)}"
        )
    else:
        parts.append(_overview(episode))
        if not episode.use_tool:
            parts.append("No tool in this run: I read the full view and the measured arrays.")
        ranked = sorted(findings, key=lambda f: -abs(f.weight))[:8]
        parts.append("Measured: " + _sentences([f.text for f in ranked]))
    name = episode.task.name
    supporting = _weighed(findings, +1, 4)
    opposing = _weighed(findings, -1, 4)
    parts.append(
        f"For {name}: " + ("; ".join(f.text for f in supporting) or "nothing of weight") + "."
    )
    parts.append("Against: " + ("; ".join(f.text for f in opposing) or "nothing of weight") + ".")
    contaminant = _contaminant_note(episode)
    if contaminant:
        parts.append(contaminant)
    if episode.library:
        parts.append(episode.library)
    limits = _scope_text(episode)
    if limits:
        parts.append(limits)
    parts.append(
        f"Weighing these (prior {episode.assessment.bias:+.1f}) gives a score of "
        f"{episode.assessment.score:+.1f}, P(YES) = {episode.probability:.2f}"
        + (" after the limits above pulled it towards 0.5" if episode.scope else "")
        + f", against a threshold of {episode.threshold:.2f}."
    )
    key = supporting if episode.prediction == "YES" else opposing
    reasons = "; ".join(f.text for f in key[:3]) or (
        "no diagnostic feature of the class stands above the noise"
    )
    if episode.scope:
        reasons += ". " + _scope_reason(episode)
    verdict = "matches" if episode.prediction == "YES" else "does not match"
    justification = (
        f'The spectrum {verdict} "{name}" (confidence {episode.confidence:.2f}, score '
        f"{episode.assessment.score:+.1f}): {reasons}."
    )
    think = " ".join(parts)
    return (
        f"<think>{think}</think>\n<answer>\\boxed{{{episode.prediction}}} {justification}</answer>"
    )


def _scope_text(episode: _Episode) -> str:
    """The scope notes as sentences of the reasoning."""
    sentences = []
    for note in episode.scope:
        if note.kind == OUT_OF_SCOPE:
            sentences.append(
                f"Outside what I know: the spectrum looks like {note.subject} ({note.text})."
            )
        elif note.kind == LIBRARY:
            sentences.append(f"Against real spectra: {note.text}.")
        else:
            sentences.append(f"Missing data: {note.text}.")
    return " ".join(sentences)


def _scope_reason(episode: _Episode) -> str:
    """Why the answer is not confident, for the justification an expert reads first."""
    outside = [n.subject for n in episode.scope if n.kind == OUT_OF_SCOPE]
    missing = [n.subject for n in episode.scope if n.kind == COVERAGE]
    library = [n.subject for n in episode.scope if n.kind == LIBRARY]
    parts = []
    if outside:
        parts.append(
            "outside what I know: it looks like "
            + " and ".join(outside)
            + ", a class the task's criteria do not describe"
        )
    if missing:
        parts.append("not decidable from these data: " + "; ".join(missing))
    if library:
        parts.append("compared with real spectra of known type: " + "; ".join(library))
    return "I do not answer confidently, " + "; ".join(parts)


def _contaminant_note(episode: _Episode) -> str:
    """The strongest contaminant-flavoured finding, stated as the alternative explanation."""
    alternatives = [f for f in episode.assessment.findings if f.alternative and f.weight < 0]
    if alternatives:
        strongest = min(alternatives, key=lambda f: f.weight)
        if strongest in _weighed(episode.assessment.findings, -1, 4):
            return f"The measurements point to {strongest.alternative} instead."
        return f"The measurements point to {strongest.alternative} instead: {strongest.text}."
    if episode.task.contaminants and episode.prediction == "YES":
        return (
            "No measured feature points to the usual contaminants ("
            + "; ".join(episode.task.contaminants[:3])
            + ")."
        )
    return ""


def _library_text(combined: Combined, evidence: TaskEvidence | None, name: str) -> str:
    """What the comparison with real library spectra found, for the reasoning."""
    if evidence is None:
        return ""
    text = "Compared with real library spectra of known type: " + describe(evidence, name)
    if combined.library_probability is not None:
        text += f"; from them alone P(YES) = {combined.library_probability:.2f}"
    return text + "."


def _library_evidence(combined: Combined, evidence: TaskEvidence | None) -> dict[str, Any]:
    return {
        "probability_yes": None
        if combined.library_probability is None
        else round(combined.library_probability, 4),
        "nearest_positive": None if evidence is None else evidence.nearest_positive,
        "nearest_negative": None if evidence is None else evidence.nearest_negative,
        "nearest_distance": None
        if evidence is None or not math.isfinite(evidence.nearest_distance)
        else round(evidence.nearest_distance, 3),
    }
