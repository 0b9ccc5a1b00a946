"""Round trips between Trajectory and the TRL, ShareGPT and verl layouts, read from files on disk."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agent.formats import (
    DatasetFormatError,
    cold_start_warnings,
    from_sharegpt_row,
    from_trl_example,
    from_verl_row,
    load_sharegpt_file,
    read_verl_parquet,
    specvi_code,
    task_code,
    to_sharegpt_row,
    to_trl_example,
    to_verl_row,
    write_sharegpt_file,
    write_verl_parquet,
)
from agent.spectra import Spectrum, SpectrumFormatError
from agent.trajectory import ImageRef, SpectrumRef, Step, ToolResponse, Trajectory
from tests.agent.test_trajectory import (
    ANSWER,
    FIRST_CALL,
    HALPHA_PNG,
    I0_PNG,
    MISSING_WINDOW,
    PROMPT,
    SYSTEM,
    make_png,
    make_trajectory,
)

HALPHA_TEXT = "Showing 6500-6650 A (rest frame), H-alpha marked."


def content(trajectory: Trajectory) -> dict[str, Any]:
    """What every layout must carry: texts, calls, ranges, labels, image bytes, the answer."""
    return {
        "task": trajectory.task,
        "system": trajectory.system_prompt,
        "prompt": trajectory.user_prompt,
        "images": trajectory.images(),
        "steps": [
            (
                step.assistant_text,
                step.think,
                step.tool_call,
                None
                if step.tool_result is None
                else (
                    step.tool_result.ok,
                    step.tool_result.text,
                    None if step.tool_result.image is None else step.tool_result.image.png,
                ),
            )
            for step in trajectory.steps
        ],
        "answer": trajectory.answer,
        "format": (trajectory.format_ok, trajectory.format_reasons),
        "counts": (trajectory.n_tool_calls, trajectory.n_tool_errors),
    }


def make_spectrum(object_id: str = "LAMOST J0001+0001") -> Spectrum:
    wavelength = np.linspace(3700.0, 9000.0, 40)
    flux = 1.0 + 0.25 * np.sin(wavelength / 300.0)
    mask = np.zeros(40, dtype=bool)
    mask[7] = True
    return Spectrum(
        wavelength=wavelength,
        flux=flux,
        ivar=np.full(40, 4.0),
        mask=mask,
        redshift=0.0012,
        survey="LAMOST",
        object_id=object_id,
        ra=10.5,
        dec=-2.25,
        snr=31.5,
        meta={"OBSID": 123, "CLASS": "STAR"},
        source="spec-55859-F5902_sp01-001.fits",
    )


def prompt_only(trajectory: Trajectory) -> Trajectory:
    return Trajectory.new(
        task=trajectory.task,
        spectrum=trajectory.spectrum,
        system_prompt=trajectory.system_prompt,
        user_prompt=trajectory.user_prompt,
        initial_image=trajectory.initial_image,
    )


# --- task codes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "task"),
    [
        ("cc", "CS"),
        ("CS", "CS"),
        ("gm", "MG"),
        ("mg", "MG"),
        ("cv", "CV"),
        (" wd ", "WD"),
        ("o", "O"),
    ],
)
def test_it_maps_benchmark_codes_to_task_codes(code: str, task: str) -> None:
    assert task_code(code) == task


@pytest.mark.parametrize(("task", "code"), [("CS", "cc"), ("MG", "gm"), ("CV", "cv"), ("XR", "xr")])
def test_it_maps_task_codes_to_benchmark_codes(task: str, code: str) -> None:
    assert specvi_code(task) == code


def test_it_refuses_a_garbage_task_code() -> None:
    with pytest.raises(DatasetFormatError, match="task code must be"):
        task_code("c v")


# --- TRL -----------------------------------------------------------------------------------------


def test_it_writes_trl_messages_with_image_placeholders() -> None:
    example = to_trl_example(make_trajectory())
    messages = example["messages"]
    assert [message["role"] for message in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert messages[1]["content"] == [
        {"type": "image"},
        {"type": "text", "text": PROMPT.removeprefix("<image>")},
    ]
    assert messages[2]["content"] == [{"type": "text", "text": FIRST_CALL}]
    assert messages[3]["content"] == [
        {"type": "text", "text": "<tool_response>\n"},
        {"type": "image"},
        {"type": "text", "text": HALPHA_TEXT + "\n</tool_response>"},
    ]
    assert messages[5]["content"] == [
        {"type": "text", "text": f"<tool_response>\n{MISSING_WINDOW}\n</tool_response>"}
    ]
    assert example["images"] == [I0_PNG, HALPHA_PNG]


def test_it_round_trips_a_trajectory_through_trl() -> None:
    original = make_trajectory()
    restored = from_trl_example(to_trl_example(original), task="CV", spectrum_ref=original.spectrum)
    assert content(restored) == content(original)
    assert restored.stop_reason == "answer"


def test_it_round_trips_a_trl_example() -> None:
    example = to_trl_example(make_trajectory())
    trajectory = from_trl_example(
        copy.deepcopy(example), task="CV", spectrum_ref=make_trajectory().spectrum
    )
    assert to_trl_example(trajectory) == example


def test_it_gives_pil_images_that_decode_to_the_same_pixels() -> None:
    original = make_trajectory()
    example = to_trl_example(original, images_as="pil")
    assert [image.getpixel((0, 0)) for image in example["images"]] == [
        (255, 255, 255),
        (200, 30, 30),
    ]
    restored = from_trl_example(example, task="CV", spectrum_ref=original.spectrum)
    assert [Image.open(io.BytesIO(png)).getpixel((3, 3)) for png in restored.images()] == [
        (255, 255, 255),
        (200, 30, 30),
    ]


def test_it_reads_tool_role_messages_as_tool_responses() -> None:
    example = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "Is it a CV?"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": FIRST_CALL}]},
            {"role": "tool", "content": [{"type": "image"}, {"type": "text", "text": HALPHA_TEXT}]},
            {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
        ],
        "images": [I0_PNG, {"bytes": HALPHA_PNG}],
    }
    trajectory = from_trl_example(example, task="CV", spectrum_ref=make_trajectory().spectrum)
    assert trajectory.user_prompt == "<image>Is it a CV?"
    assert trajectory.steps[0].tool_result == ToolResponse(True, HALPHA_TEXT, ImageRef(HALPHA_PNG))
    assert trajectory.answer is not None and trajectory.answer.prediction == "YES"


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([I0_PNG], "more image placeholders than images"),
        ([I0_PNG, HALPHA_PNG, I0_PNG], "1 images left over"),
    ],
)
def test_it_refuses_trl_images_that_do_not_match_the_placeholders(
    images: list[bytes], message: str
) -> None:
    example = to_trl_example(make_trajectory())
    example["images"] = images
    with pytest.raises(DatasetFormatError, match=message):
        from_trl_example(example, task="CV", spectrum_ref=make_trajectory().spectrum)


def test_it_refuses_an_unknown_image_type_for_trl() -> None:
    with pytest.raises(ValueError, match="images_as must be"):
        to_trl_example(make_trajectory(), images_as="jpeg")


# --- ShareGPT ------------------------------------------------------------------------------------


def write_row(trajectory: Trajectory, directory: Path) -> dict[str, Any]:
    return to_sharegpt_row(trajectory, image_dir=directory / "images", image_prefix="images")


def test_it_writes_a_sharegpt_row_in_the_public_layout(tmp_path: Path) -> None:
    trajectory = make_trajectory()
    row = write_row(trajectory, tmp_path)
    assert set(row) == {"conversations", "images", "source_name", "sample_index", "ground_truth"}
    assert [turn["from"] for turn in row["conversations"]] == [
        "system",
        "human",
        "gpt",
        "human",
        "gpt",
        "human",
        "gpt",
    ]
    assert row["conversations"][1]["value"] == PROMPT
    assert (
        row["conversations"][3]["value"]
        == f"<tool_response>\n<image>{HALPHA_TEXT}\n</tool_response>"
    )
    assert (
        row["conversations"][5]["value"] == f"<tool_response>\n{MISSING_WINDOW}\n</tool_response>"
    )
    assert row["images"] == [f"images/{trajectory.id}-00.png", f"images/{trajectory.id}-01.png"]
    assert [(tmp_path / path).read_bytes() for path in row["images"]] == [I0_PNG, HALPHA_PNG]
    assert (row["source_name"], row["sample_index"], row["ground_truth"]) == (
        "specvet_cv",
        0,
        "YES",
    )


def test_it_round_trips_a_trajectory_through_sharegpt(tmp_path: Path) -> None:
    original = make_trajectory()
    restored = from_sharegpt_row(write_row(original, tmp_path), base_dir=tmp_path)
    assert content(restored) == content(original)


def test_it_round_trips_a_sharegpt_row(tmp_path: Path) -> None:
    row = write_row(make_trajectory(), tmp_path / "first")
    trajectory = from_sharegpt_row(copy.deepcopy(row), base_dir=tmp_path / "first")
    again = write_row(trajectory, tmp_path / "second")
    assert again == row
    assert [(tmp_path / "second" / path).read_bytes() for path in again["images"]] == [
        I0_PNG,
        HALPHA_PNG,
    ]


@pytest.mark.parametrize(
    "tool_turn",
    ["<tool_response><image></tool_response>", "<tool_response>\n<image>\n</tool_response>\n"],
)
def test_it_reads_other_tool_response_spacings(tmp_path: Path, tool_turn: str) -> None:
    (tmp_path / "a.png").write_bytes(I0_PNG)
    (tmp_path / "b.png").write_bytes(HALPHA_PNG)
    row = {
        "conversations": [
            {"from": "human", "value": PROMPT},
            {"from": "gpt", "value": FIRST_CALL},
            {"from": "human", "value": tool_turn},
            {"from": "gpt", "value": ANSWER},
        ],
        "images": ["a.png", "b.png"],
        "source_name": "train_cv",
        "sample_index": 3,
        "ground_truth": "YES",
    }
    trajectory = from_sharegpt_row(row, base_dir=tmp_path)
    assert trajectory.steps[0].tool_result == ToolResponse(True, "", ImageRef(HALPHA_PNG))
    assert trajectory.format_ok is True


def public_row(source_name: str, directory: Path) -> dict[str, Any]:
    (directory / "i0.png").write_bytes(I0_PNG)
    return {
        "conversations": [
            {"from": "human", "value": PROMPT},
            {"from": "gpt", "value": ANSWER},
        ],
        "images": ["i0.png"],
        "source_name": source_name,
        "sample_index": 0,
        "ground_truth": "YES",
    }


@pytest.mark.parametrize(
    ("source_name", "task", "expected"),
    [
        ("train_cv", None, "CV"),
        ("SpecVI-cc-coldstart", None, "CS"),
        ("gm/sample.parquet", None, "MG"),
        ("cold_start", "wd", "WD"),
        ("train_ss", "SS", "SS"),
    ],
)
def test_it_finds_the_task_of_a_sharegpt_row(
    tmp_path: Path, source_name: str, task: str | None, expected: str
) -> None:
    row = public_row(source_name, tmp_path)
    assert from_sharegpt_row(row, base_dir=tmp_path, task=task).task == expected


@pytest.mark.parametrize(
    ("source_name", "task", "message"),
    [
        ("cold_start", None, "no task code in source_name; pass task="),
        ("train_cv", "WD", "source_name names task CV but task='WD'"),
        ("cv_vs_wd", None, "names several tasks ['CV', 'WD']"),
    ],
)
def test_it_refuses_a_sharegpt_row_without_one_clear_task(
    tmp_path: Path, source_name: str, task: str | None, message: str
) -> None:
    with pytest.raises(DatasetFormatError, match=re.escape(message)):
        from_sharegpt_row(public_row(source_name, tmp_path), base_dir=tmp_path, task=task)


def test_it_names_a_missing_image_file(tmp_path: Path) -> None:
    row = public_row("train_cv", tmp_path)
    row["images"] = ["gone.png"]
    with pytest.raises(DatasetFormatError, match="cannot read image .*gone.png"):
        from_sharegpt_row(row, base_dir=tmp_path)


def test_it_refuses_images_that_do_not_match_the_placeholders(tmp_path: Path) -> None:
    row = public_row("train_cv", tmp_path)
    row["images"] = ["i0.png", "i0.png"]
    with pytest.raises(DatasetFormatError, match="1 <image> placeholders but 2 images"):
        from_sharegpt_row(row, base_dir=tmp_path)


def test_it_refuses_a_human_turn_that_is_not_a_tool_response(tmp_path: Path) -> None:
    row = public_row("train_cv", tmp_path)
    row["conversations"][1:1] = [
        {"from": "gpt", "value": FIRST_CALL},
        {"from": "human", "value": "Please answer now."},
    ]
    with pytest.raises(DatasetFormatError, match="must be a tool response"):
        from_sharegpt_row(row, base_dir=tmp_path)


def test_it_converts_a_non_png_image_to_png(tmp_path: Path) -> None:
    row = public_row("train_cv", tmp_path)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 20, 30)).save(buffer, format="BMP")
    (tmp_path / "i0.png").write_bytes(buffer.getvalue())
    png = from_sharegpt_row(row, base_dir=tmp_path).initial_image.png
    assert Image.open(io.BytesIO(png)).getpixel((1, 1)) == (10, 20, 30)


def test_it_refuses_to_export_a_trajectory_ending_with_a_tool_response(tmp_path: Path) -> None:
    trajectory = make_trajectory(finalize=False)
    del trajectory.steps[2]
    with pytest.raises(DatasetFormatError, match="end with a gpt turn"):
        write_row(trajectory, tmp_path)


def test_it_refuses_to_export_two_assistant_turns_in_a_row(tmp_path: Path) -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps[0].tool_result = None
    with pytest.raises(DatasetFormatError, match="alternate"):
        write_row(trajectory, tmp_path)


def test_it_never_overwrites_a_different_image(tmp_path: Path) -> None:
    trajectory = make_trajectory()
    write_row(trajectory, tmp_path)
    trajectory.initial_image = ImageRef(make_png((0, 0, 255)))
    with pytest.raises(DatasetFormatError, match="already holds a different image"):
        write_row(trajectory, tmp_path)


def test_it_writes_and_loads_a_sharegpt_file(tmp_path: Path) -> None:
    first = make_trajectory()
    second = make_trajectory()
    second.steps = [Step.from_output(0, ANSWER.replace("YES", "NO"))]
    second.finalize("answer")
    path = tmp_path / "data" / "train_sharegpt.json"
    path.parent.mkdir()
    write_sharegpt_file([first, second], path)
    rows = json.loads(path.read_text(encoding="utf-8"))
    assert [row["sample_index"] for row in rows] == [0, 1]
    assert len(list((path.parent / "images").iterdir())) == 3
    loaded = load_sharegpt_file(path)
    assert [content(trajectory) for trajectory in loaded] == [content(first), content(second)]
    assert loaded[1].answer is not None and loaded[1].answer.prediction == "NO"


# --- verl parquet --------------------------------------------------------------------------------


def make_verl_row(index: int = 0) -> dict[str, Any]:
    return to_verl_row(
        prompt_only(make_trajectory()),
        spectrum=make_spectrum(),
        ground_truth="yes",
        index=index,
        split="test",
        data_source="specvi-mini",
    )


def test_it_writes_a_verl_row_in_the_benchmark_layout() -> None:
    row = make_verl_row(index=4)
    assert row["data_source"] == "specvi-mini"
    assert row["prompt"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": PROMPT},
    ]
    assert row["images"] == [{"bytes": I0_PNG}]
    assert row["ability"] == "spectral_inspection"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "YES"}
    extra = row["extra_info"]
    assert (extra["index"], extra["name"], extra["split"], extra["task"]) == (
        4,
        "LAMOST J0001+0001",
        "test",
        "cv",
    )
    create_kwargs = extra["tools_kwargs"]["spectral_visualization_tool"]["create_kwargs"]
    assert create_kwargs["wavelength"][:2] == [3700.0, 3700.0 + 5300.0 / 39]
    assert len(create_kwargs["flux"]) == 40
    assert create_kwargs["redshift"] == 0.0012


def test_it_reads_back_a_verl_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "test_cv.parquet"
    write_verl_parquet([make_verl_row(0), make_verl_row(1)], path)
    rows = read_verl_parquet(path)
    trajectory, spectrum, ground_truth = from_verl_row(rows[1])
    expected = make_spectrum()
    assert ground_truth == "YES"
    assert (trajectory.task, trajectory.system_prompt, trajectory.user_prompt) == (
        "CV",
        SYSTEM,
        PROMPT,
    )
    assert trajectory.initial_image == make_trajectory().initial_image
    assert trajectory.steps == [] and trajectory.spectrum == make_trajectory().spectrum
    for name in ("wavelength", "flux", "ivar", "mask"):
        np.testing.assert_array_equal(getattr(spectrum, name), getattr(expected, name))
    for name in ("redshift", "survey", "object_id", "ra", "dec", "snr", "meta", "source"):
        assert getattr(spectrum, name) == getattr(expected, name), name


def test_it_round_trips_a_verl_row_through_parquet(tmp_path: Path) -> None:
    path = tmp_path / "test_cv.parquet"
    write_verl_parquet([make_verl_row(7)], path)
    row = read_verl_parquet(path)[0]
    trajectory, spectrum, ground_truth = from_verl_row(row)
    again = to_verl_row(
        trajectory,
        spectrum=spectrum,
        ground_truth=ground_truth,
        index=7,
        split="test",
        data_source="specvi-mini",
    )
    assert again == row == make_verl_row(7)


def test_it_writes_the_same_bytes_for_the_same_rows(tmp_path: Path) -> None:
    rows = [make_verl_row(0), make_verl_row(1)]
    write_verl_parquet(rows, tmp_path / "a.parquet")
    write_verl_parquet(rows, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def benchmark_row() -> dict[str, Any]:
    """A row as the public SpecVI-Bench files hold it: no specvet extras, unknown redshift."""
    return {
        "data_source": "specvi_bench",
        "prompt": [{"role": "user", "content": PROMPT}],
        "images": [{"bytes": I0_PNG, "path": None}],
        "ability": "spectral_inspection",
        "reward_model": {"style": "rule", "ground_truth": "NO"},
        "extra_info": {
            "index": 12,
            "name": "J101010.10+101010.1",
            "split": "train",
            "task": "cc",
            "tools_kwargs": {
                "spectral_visualization_tool": {
                    "create_kwargs": {
                        "wavelength": [4000.0, 4001.5, 4003.0],
                        "flux": [1.0, float("nan"), 0.5],
                        "redshift": None,
                    }
                }
            },
        },
    }


def test_it_reads_a_public_benchmark_row(tmp_path: Path) -> None:
    path = tmp_path / "train_cc.parquet"
    write_verl_parquet([benchmark_row(), make_verl_row()], path)
    trajectory, spectrum, ground_truth = from_verl_row(read_verl_parquet(path)[0])
    assert (trajectory.task, ground_truth) == ("CS", "NO")
    assert (spectrum.redshift, trajectory.spectrum.redshift) == (0.0, None)
    assert (spectrum.survey, spectrum.object_id) == ("SpecVI-Bench", "J101010.10+101010.1")
    assert spectrum.mask.tolist() == [False, True, False]
    assert spectrum.ivar is None


def test_it_keeps_an_unknown_redshift_unknown_when_writing_back() -> None:
    trajectory, spectrum, ground_truth = from_verl_row(benchmark_row())
    row = to_verl_row(
        trajectory,
        spectrum=spectrum,
        ground_truth=ground_truth,
        index=12,
        split="train",
        data_source="x",
    )
    create_kwargs = row["extra_info"]["tools_kwargs"]["spectral_visualization_tool"][
        "create_kwargs"
    ]
    assert create_kwargs["redshift"] is None
    assert row["extra_info"]["task"] == "cc"


def test_it_derives_the_same_id_for_the_same_row() -> None:
    assert from_verl_row(benchmark_row())[0].id == from_verl_row(benchmark_row())[0].id


def _set_create(row: dict[str, Any], **values: Any) -> None:
    row["extra_info"]["tools_kwargs"]["spectral_visualization_tool"]["create_kwargs"].update(values)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda r: r["reward_model"].update(ground_truth="maybe"), DatasetFormatError, "YES or NO"),
        (lambda r: r["images"].append({"bytes": I0_PNG}), DatasetFormatError, "exactly I0; got 2"),
        (lambda r: r["extra_info"].pop("task"), DatasetFormatError, "no task; pass task="),
        (
            lambda r: r["prompt"][0].update(content="Analyze."),
            DatasetFormatError,
            "exactly one <image>",
        ),
        (
            lambda r: _set_create(r, wavelength=[4003.0, 4001.5, 4000.0]),
            SpectrumFormatError,
            "strictly increasing",
        ),
        (lambda r: _set_create(r, flux=[1.0, 2.0]), SpectrumFormatError, "equal-length"),
        (
            lambda r: r["extra_info"].pop("tools_kwargs"),
            DatasetFormatError,
            "create_kwargs is missing",
        ),
    ],
    ids=[
        "ground truth",
        "two images",
        "no task",
        "no placeholder",
        "decreasing",
        "lengths",
        "no tool",
    ],
)
def test_it_refuses_a_broken_verl_row(change, error: type[Exception], message: str) -> None:
    row = benchmark_row()
    change(row)
    with pytest.raises(error, match=re.escape(message)):
        from_verl_row(row)


def test_it_needs_drop_steps_to_export_a_trajectory_with_steps() -> None:
    with pytest.raises(DatasetFormatError, match="drop_steps=True"):
        to_verl_row(
            make_trajectory(),
            spectrum=make_spectrum(),
            ground_truth="YES",
            index=0,
            split="test",
            data_source="x",
        )


def test_it_refuses_a_spectrum_of_another_object() -> None:
    with pytest.raises(DatasetFormatError, match="but the spectrum given is 'other'"):
        to_verl_row(
            prompt_only(make_trajectory()),
            spectrum=make_spectrum("other"),
            ground_truth="YES",
            index=0,
            split="test",
            data_source="x",
        )


def test_it_refuses_to_write_no_rows(tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError, match="no rows"):
        write_verl_parquet([], tmp_path / "empty.parquet")


def test_it_keeps_a_prompt_only_trajectory_without_steps_through_json() -> None:
    trajectory = from_verl_row(benchmark_row())[0]
    assert Trajectory.from_json(trajectory.to_json()) == trajectory
    assert isinstance(trajectory.spectrum, SpectrumRef)


def test_it_keeps_a_literal_image_tag_in_model_output_through_trl() -> None:
    original = make_trajectory(finalize=False)
    original.steps[2] = Step.from_output(2, ANSWER.replace("Broad", "See <image> 1: broad"))
    original.finalize("answer")
    restored = from_trl_example(to_trl_example(original), task="CV", spectrum_ref=original.spectrum)
    assert content(restored) == content(original)


def test_it_refuses_a_literal_image_tag_in_model_output_for_sharegpt(tmp_path: Path) -> None:
    trajectory = make_trajectory(finalize=False)
    trajectory.steps[2] = Step.from_output(2, ANSWER.replace("Broad", "See <image>"))
    with pytest.raises(DatasetFormatError, match="literal <image>"):
        write_row(trajectory, tmp_path)


# --- cold-start imports against what training and inference use --------------------------------


def test_it_warns_when_imported_rows_differ_from_specvets_prompt_and_image_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "train_sharegpt.json"
    write_sharegpt_file([make_trajectory(), make_trajectory()], path)
    loaded = load_sharegpt_file(path)
    warnings = cold_start_warnings(loaded)
    assert len(warnings) == 2
    assert warnings[0].startswith("2 of 2 rows have a system prompt that differs")
    assert "at character 4: theirs 'inspect spectra." in warnings[0]
    assert warnings[1].startswith("2 of 2 rows show I0 at 8x6 pixels")
    assert "specvet renders 644x392" in warnings[1]


def test_it_has_no_warning_for_rows_made_with_specvets_prompt_and_renderer() -> None:
    from agent.inspection_tasks import system_prompt
    from agent.tool import IMAGE_SIZE

    trajectory = make_trajectory()
    trajectory.system_prompt = system_prompt()
    trajectory.initial_image = ImageRef(make_png((255, 255, 255), IMAGE_SIZE))
    assert cold_start_warnings([trajectory]) == []
