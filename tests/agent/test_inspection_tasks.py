"""Tests for the task definitions (agent/inspection_tasks.py + agent/data/tasks.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agent.inspection_tasks import (
    SPECVI_BENCH_CODES,
    TASKS_PATH,
    Task,
    UnknownTaskError,
    all_tasks,
    build_prompt,
    get_task,
    load_task_definitions,
    system_prompt,
    task_from_dict,
    task_to_dict,
    tool_description,
)

EXPECTED_CODES = ["CV", "CS", "SS", "MG", "WD", "O", "B", "A"]
LAMOST_COVERAGE = (3600.0, 9200.0)


def _valid_task_dict() -> dict[str, Any]:
    return {
        "code": "XX",
        "name": "Example Stars (XX)",
        "question": 'Analyze the provided spectrum to determine if it is a "Example Stars (XX)".',
        "guideline": "- (Primary): a line.",
        "windows": [
            {
                "name": "H-alpha",
                "rest_range": [6500, 6630],
                "lines": [6564.6],
                "kind": "emission",
                "look_for": "Broad emission.",
            }
        ],
        "contaminants": ["something else"],
    }


def test_it_loads_all_eight_tasks_in_file_order() -> None:
    assert [task.code for task in all_tasks()] == EXPECTED_CODES


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_gives_every_task_four_to_eight_windows(task: Task) -> None:
    assert 4 <= len(task.windows) <= 8


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_keeps_every_window_inside_the_survey_coverage(task: Task) -> None:
    for window in task.windows:
        low, high = window.rest_range
        assert LAMOST_COVERAGE[0] <= low < high <= LAMOST_COVERAGE[1], window.name


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_keeps_every_window_line_inside_its_range(task: Task) -> None:
    for window in task.windows:
        low, high = window.rest_range
        assert all(low <= line <= high for line in window.lines), window.name


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_lists_contaminants_for_every_task(task: Task) -> None:
    assert len(task.contaminants) >= 3


def test_it_stores_h_alpha_in_vacuum() -> None:
    # Air 6562.80 A times the refractive index of air near 6563 A (n - 1 = 2.76e-4) is 6564.61 A.
    h_alpha = next(window for window in get_task("CV").windows if window.name == "H-alpha")
    assert h_alpha.lines == pytest.approx((6564.6,), abs=0.05)


def test_it_declares_the_vacuum_frame_in_the_definitions_file() -> None:
    document = json.loads(TASKS_PATH.read_text(encoding="utf-8"))
    assert document["wavelength_frame"] == "vacuum"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("cv", "CV"),
        ("Cv", "CV"),
        ("cc", "CS"),
        ("gm", "MG"),
        ("ss", "SS"),
        ("wd", "WD"),
        ("a", "A"),
    ],
)
def test_it_finds_tasks_case_insensitively_and_by_bench_code(code: str, expected: str) -> None:
    assert get_task(code).code == expected


def test_it_maps_every_bench_code_to_a_task() -> None:
    assert {code: get_task(code).code for code in SPECVI_BENCH_CODES} == SPECVI_BENCH_CODES


def test_it_names_the_unknown_code_in_the_error() -> None:
    with pytest.raises(ValueError, match="'QSO'"):
        get_task("QSO")


def test_it_raises_a_lookup_error_for_unknown_codes() -> None:
    with pytest.raises(LookupError):
        get_task("nope")
    assert issubclass(UnknownTaskError, ValueError)


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_builds_the_table6_prompt(task: Task) -> None:
    prompt = build_prompt(task)
    assert prompt.startswith("<image>\n" + task.question + "\n")
    assert "1. Overall Structure:" in prompt
    assert "2. Tool Usage Constraint: You may only make one tool call per turn." in prompt
    assert "3. Final Answer Format:" in prompt and "\\boxed{YES}" in prompt
    assert "call `spectral_visualization_tool` if needed" in prompt
    assert task.guideline.strip() in prompt


def test_it_writes_the_prompt_as_plain_text_without_html() -> None:
    prompt = build_prompt(get_task("CV"))
    for tag in ("<ul", "<li", "<code>", "<i>"):
        assert tag not in prompt


def test_it_puts_the_question_before_the_rules() -> None:
    prompt = build_prompt(get_task("WD"))
    assert prompt.index("White Dwarfs (WD)") < prompt.index("1. Overall Structure:")


def test_it_asks_for_a_single_image_placeholder() -> None:
    assert build_prompt(get_task("MG")).count("<image>") == 1


def test_it_describes_the_tool_with_a_required_range() -> None:
    description = tool_description()
    assert description["name"] == "spectral_visualization_tool"
    assert description["parameters"]["required"] == ["wavelength_range"]
    assert set(description["parameters"]["properties"]) == {"wavelength_range", "label"}


def test_it_states_the_exact_tool_call_syntax_in_the_system_prompt() -> None:
    prompt = system_prompt()
    call = prompt.split("<tool_call>")[1].split("</tool_call>")[0]
    assert json.loads(call) == {
        "name": "spectral_visualization_tool",
        "arguments": {"wavelength_range": [6500, 6650], "label": "H-alpha"},
    }


@pytest.mark.parametrize("task", all_tasks(), ids=lambda task: task.code)
def test_it_round_trips_tasks_through_dicts(task: Task) -> None:
    assert task_from_dict(json.loads(json.dumps(task_to_dict(task)))) == task


def test_it_builds_a_new_task_from_a_dict() -> None:
    task = task_from_dict(_valid_task_dict())
    assert task.code == "XX"
    assert task.windows[0].rest_range == (6500.0, 6630.0)
    assert "Example Stars (XX)" in build_prompt(task)


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_valid_task_dict())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("code",), _DELETE, "field 'code' is missing"),
        (("question",), _DELETE, "field 'question' is missing"),
        (("question",), "  ", "field 'question' must be a non-empty string"),
        (("code",), "C V!", "field 'code' must be"),
        (("windows", 0, "rest_range"), [6630, 6500], "'rest_range' must be increasing"),
        (("windows", 0, "rest_range"), [-10, 6500], "'rest_range' must be positive"),
        (("windows", 0, "rest_range"), [6500], r"'rest_range' must be \[min, max\]"),
        (("windows", 0, "rest_range"), [6500, float("nan")], "'rest_range' must hold finite"),
        (("windows", 0, "kind"), "sparkle", "field 'kind' must be one of"),
        (("windows", 0, "lines"), [4862.7], "outside rest_range"),
        (("windows", 0, "look_for"), _DELETE, "field 'look_for' is missing"),
        (("colour",), "red", "unknown fields \\['colour'\\]"),
        (("contaminants",), "dMe", "'contaminants' must be a list"),
    ],
)
def test_it_rejects_bad_task_dicts_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        task_from_dict(_broken(path, value))


def test_it_names_the_window_in_window_errors() -> None:
    with pytest.raises(ValueError, match=r"task XX, window #0 \(H-alpha\)"):
        task_from_dict(_broken(("windows", 0, "kind"), "sparkle"))


def test_it_loads_definitions_from_a_given_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    document = {"version": 1, "wavelength_frame": "vacuum", "tasks": [_valid_task_dict()]}
    path.write_text(json.dumps(document), encoding="utf-8")
    assert [task.code for task in load_task_definitions(path)] == ["XX"]


def test_it_refuses_definitions_in_air_wavelengths(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    document = {"version": 1, "wavelength_frame": "air", "tasks": [_valid_task_dict()]}
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match="'wavelength_frame' must be 'vacuum'"):
        load_task_definitions(path)


def test_it_refuses_duplicate_codes(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    twin = dict(_valid_task_dict(), code="xx")
    document = {"wavelength_frame": "vacuum", "tasks": [_valid_task_dict(), twin]}
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match="duplicate task codes"):
        load_task_definitions(path)


def test_it_names_the_file_and_task_position_in_load_errors(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    document = {"wavelength_frame": "vacuum", "tasks": [_broken(("code",), _DELETE)]}
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tasks\.json, task #0: task: field 'code' is missing"):
        load_task_definitions(path)
