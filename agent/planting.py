"""Known errors planted into a copy of an approved trajectory, to measure auditors' catch rate.

A planted copy goes to auditors like any other audit; whether they ask for changes (and where)
is scored against the error planted here. Each kind changes one thing, named by ``PlantedCopy``:

- ``wrong_window``: one tool call zooms to another range of the same width, away from the one
  its reasoning and label are about (the image is re-rendered for the new range by whoever
  applies the edit, so the plot matches the call and contradicts the text).
- ``misread_line``: one step's reasoning names a line (or a wavelength) that its window cannot
  show: a line named in the text is swapped for one whose rest wavelength lies outside the
  window, or such a claim is added when the text names none.
- ``flipped_answer``: the final YES/NO is flipped; the reasoning and justification stay, so
  they argue for the other answer.
- ``contradicting_step``: one step's reasoning says the opposite of what it saw (emission and
  absorption, broad and narrow, strong and weak, present and absent swapped); a step naming
  none of these gets a sentence contradicting the trajectory's own conclusion.

Everything works on the editor's structured form (``agent.editing.EditedStep`` and
``EditedAnswer``) and is deterministic given the seed; no Django, no images. The catch rates
use ``wilson_interval`` (plain Python, so the pages that show them need no scipy).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.editing import EditedAnswer, EditedStep

Z_95 = 1.959963984540054  # the standard normal quantile of 0.975

WRONG_WINDOW = "wrong_window"
MISREAD_LINE = "misread_line"
FLIPPED_ANSWER = "flipped_answer"
CONTRADICTING_STEP = "contradicting_step"

# Kind -> what staff and the docs call it.
KINDS: dict[str, str] = {
    WRONG_WINDOW: "wrong wavelength window",
    MISREAD_LINE: "misread line",
    FLIPPED_ANSWER: "flipped final answer",
    CONTRADICTING_STEP: "step contradicts its tool image",
}

# Lines a step may name, with a rest wavelength in Angstrom (air, rounded): what
# ``misread_line`` recognises in the text and what it names instead.
LINES: dict[str, float] = {
    "H-alpha": 6563.0,
    "H-beta": 4861.0,
    "H-gamma": 4340.0,
    "H-delta": 4102.0,
    "He I 5876": 5876.0,
    "He I 6678": 6678.0,
    "He II 4686": 4686.0,
    "Ca II K": 3934.0,
    "Ca II H": 3968.0,
    "Na D": 5893.0,
    "Mg b": 5175.0,
    "[O III] 5007": 5007.0,
    "[N II] 6584": 6584.0,
    "Ca II 8542": 8542.0,
}
_LINE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("H-alpha", re.compile(r"\bH[\s-]?(?:alpha|α)\b|\bHα", re.IGNORECASE)),
    ("H-beta", re.compile(r"\bH[\s-]?(?:beta|β)\b|\bHβ", re.IGNORECASE)),
    ("H-gamma", re.compile(r"\bH[\s-]?(?:gamma|γ)\b|\bHγ", re.IGNORECASE)),
    ("H-delta", re.compile(r"\bH[\s-]?(?:delta|δ)\b|\bHδ", re.IGNORECASE)),
    ("He II 4686", re.compile(r"\bHe\s?II(?:\s?4686)?\b")),
    ("He I 5876", re.compile(r"\bHe\s?I\s?5876\b")),
    ("Na D", re.compile(r"\bNa\s?(?:I\s?)?D\b")),
    ("Mg b", re.compile(r"\bMg\s?b\b")),
    ("[O III] 5007", re.compile(r"\[O\s?III\](?:\s?5007)?")),
]
_WAVELENGTH = re.compile(r"(?<![\d.])([3-9]\d{3})(?:\.\d+)?(?![\d.])")

# Word pairs a contradiction swaps, both ways, whole words only.
_OPPOSITES = (
    ("emission", "absorption"),
    ("broad", "narrow"),
    ("strong", "weak"),
    ("present", "absent"),
    ("visible", "invisible"),
    ("clear", "doubtful"),
)


class PlantError(ValueError):
    """This kind cannot be planted in this trajectory (e.g. it has no tool step)."""


@dataclass(frozen=True)
class PlantedCopy:
    kind: str
    steps: list[EditedStep]
    answer: EditedAnswer
    target: int  # the index of the changed turn: a tool step, or len(steps) for the answer
    description: str  # what was changed, for staff (never shown to auditors)


def applicable(kind: str, steps: Sequence[EditedStep]) -> bool:
    """Whether ``kind`` can be planted in a trajectory with these tool steps."""
    if kind not in KINDS:
        raise PlantError(f"unknown error kind {kind!r}; known: {', '.join(KINDS)}")
    return kind == FLIPPED_ANSWER or bool(steps)


def plant(
    kind: str,
    steps: Sequence[EditedStep],
    answer: EditedAnswer,
    *,
    seed: int,
    coverage: tuple[float, float] | None = None,
) -> PlantedCopy:
    """A copy of (steps, answer) with one error of ``kind``; the input is not changed.

    ``coverage`` is the spectrum's wavelength range, so a wrong window stays on the spectrum.
    """
    if not applicable(kind, steps):
        raise PlantError(f"{KINDS[kind]} needs a tool step; this trajectory has none")
    rng = random.Random(f"{seed}:{kind}")
    steps = list(steps)
    if kind == FLIPPED_ANSWER:
        flipped = "NO" if answer.prediction == "YES" else "YES"
        return PlantedCopy(
            kind,
            steps,
            replace(answer, prediction=flipped),
            len(steps),
            f"final answer flipped from {answer.prediction} to {flipped}",
        )
    index = rng.randrange(len(steps))
    step = steps[index]
    if kind == WRONG_WINDOW:
        low, high = wrong_window(step.wavelength_range, coverage=coverage, rng=rng)
        changed = replace(step, wavelength_range=(low, high))
        what = (
            f"step {index + 1} zooms to [{low:g}, {high:g}] instead of "
            f"[{step.wavelength_range[0]:g}, {step.wavelength_range[1]:g}]"
        )
    elif kind == MISREAD_LINE:
        think, what = misread_line(step.think, step.wavelength_range, rng=rng)
        changed = replace(step, think=think)
        what = f"step {index + 1}: {what}"
    else:
        think, what = contradict(step.think, answer.prediction)
        changed = replace(step, think=think)
        what = f"step {index + 1}: {what}"
    steps[index] = changed
    return PlantedCopy(kind, steps, answer, index, what)


def wrong_window(
    window: tuple[float, float],
    *,
    coverage: tuple[float, float] | None,
    rng: random.Random,
) -> tuple[float, float]:
    """A window of the same width (narrower when the spectrum is short) that does not overlap
    ``window``, a gap of at least one width away, inside ``coverage`` when it is given."""
    low, high = sorted(float(value) for value in window)
    width = high - low
    start, end = coverage if coverage is not None else (max(low - 4 * width, 1.0), high + 4 * width)
    if (end - start) < 3 * width:  # too wide to move by a clear gap: narrow it first
        width = (end - start) / 4
        low, high = low + (high - low - width) / 2, low + (high - low + width) / 2
    options = []
    for side in (-1, 1):
        for gap in (1.0, 2.0, 3.0):
            new_low = high + gap * width if side > 0 else low - (gap + 1) * width
            new_high = new_low + width
            if new_low >= start and new_high <= end and (new_high <= low or new_low >= high):
                options.append((round(new_low, 1), round(new_high, 1)))
    if not options:  # the window fills the middle: take the far end of the coverage
        far_low = start if (low - start) > (end - high) else end - width
        options.append((round(far_low, 1), round(far_low + width, 1)))
    return rng.choice(options)


def _outside(window: tuple[float, float], rng: random.Random, avoid: str = "") -> tuple[str, float]:
    low, high = sorted(window)
    margin = max(high - low, 50.0)
    names = [
        name
        for name, rest in LINES.items()
        if name != avoid and (rest < low - margin or rest > high + margin)
    ]
    name = rng.choice(sorted(names))
    return name, LINES[name]


def misread_line(think: str, window: tuple[float, float], *, rng: random.Random) -> tuple[str, str]:
    """(new reasoning, what changed): a named line or wavelength swapped for one the window
    cannot show, or such a claim added when the text names none."""
    for name, pattern in _LINE_PATTERNS:
        found = pattern.search(think)
        if found:
            other, _ = _outside(window, rng, avoid=name)
            new = think[: found.start()] + other + think[found.end() :]
            return new, f"names {other} where it read {found.group(0)!r}"
    number = _WAVELENGTH.search(think)
    if number:
        other, rest = _outside(window, rng)
        new = think[: number.start()] + f"{rest:.0f}" + think[number.end() :]
        return new, f"names {rest:.0f} A ({other}) where it read {number.group(0)} A"
    other, rest = _outside(window, rng)
    claim = f" The peak in this window is {other} ({rest:.0f} A)."
    return think.rstrip() + claim, f"claims {other} ({rest:.0f} A), outside the window"


def contradict(think: str, prediction: str) -> tuple[str, str]:
    """(new reasoning, what changed): each word of ``_OPPOSITES`` swapped for its opposite;
    a text with none of them gets a sentence denying (or, for a NO, asserting) a line here."""
    swaps: dict[str, str] = {}
    for first, second in _OPPOSITES:
        swaps[first], swaps[second] = second, first
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, swaps)) + r")\b", re.IGNORECASE)
    swapped: list[str] = []

    def swap(found: re.Match[str]) -> str:
        word = found.group(0)
        other = swaps[word.lower()]
        swapped.append(f"{word} -> {other}")
        return other.capitalize() if word[0].isupper() else other

    new = pattern.sub(swap, think)
    if swapped:
        return new, "reasoning inverted (" + ", ".join(swapped) + ")"
    if prediction == "NO":
        claim = " A strong, broad emission line stands out in this window."
    else:
        claim = " The window shows only flat continuum: no line is visible here."
    return think.rstrip() + claim, "added a sentence the plot contradicts"


def wilson_interval(successes: int, total: int, *, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95 % by default, no continuity correction, as
    scipy's ``binomtest(...).proportion_ci(method="wilson")``); (0, 1) with no trial."""
    if total <= 0:
        return 0.0, 1.0
    share = successes / total
    scale = 1 + z * z / total
    centre = (share + z * z / (2 * total)) / scale
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)
