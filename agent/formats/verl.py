"""SpecVI-Bench / verl parquet rows: a prompt, I0 and the spectrum arrays (common.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.formats.common import (
    _TRAJECTORY_NAMESPACE,
    VERL_ABILITY,
    VERL_TOOL_NAME,
    DatasetFormatError,
    _png,
    specvi_code,
    task_code,
)
from agent.parsing import PREDICTIONS
from agent.spectra import Spectrum, SpectrumFormatError
from agent.trajectory import (
    IMAGE_PLACEHOLDER,
    ImageRef,
    SpectrumRef,
    Trajectory,
)

# --- SpecVI-Bench / verl parquet ---------------------------------------------------------------


def to_verl_row(
    trajectory: Trajectory,
    *,
    spectrum: Spectrum,
    ground_truth: str,
    index: int,
    split: str,
    data_source: str,
    drop_steps: bool = False,
) -> dict[str, Any]:
    """A verl/SpecVI-Bench row for the trajectory's prompt and I0.

    The layout holds prompts only: a trajectory with steps needs ``drop_steps=True``.
    """
    where = f"trajectory {trajectory.id}"
    if trajectory.steps and not drop_steps:
        raise DatasetFormatError(
            f"{where} has {len(trajectory.steps)} steps; verl rows hold the prompt only "
            "(pass drop_steps=True to export just the prompt)"
        )
    if spectrum.object_id != trajectory.spectrum.object_id:
        raise DatasetFormatError(
            f"{where} is about {trajectory.spectrum.object_id!r} but the spectrum given is "
            f"{spectrum.object_id!r}"
        )
    prompt = []
    if trajectory.system_prompt:
        prompt.append({"role": "system", "content": trajectory.system_prompt})
    prompt.append({"role": "user", "content": trajectory.user_prompt})
    assert spectrum.mask is not None
    return {
        "data_source": data_source,
        "prompt": prompt,
        "images": [{"bytes": trajectory.initial_image.png}],
        "ability": VERL_ABILITY,
        "reward_model": {"style": "rule", "ground_truth": _ground_truth(ground_truth, where)},
        "extra_info": {
            "index": int(index),
            "name": spectrum.object_id,
            "split": split,
            "task": specvi_code(trajectory.task),
            "tools_kwargs": {
                VERL_TOOL_NAME: {
                    "create_kwargs": {
                        "wavelength": spectrum.wavelength.tolist(),
                        "flux": spectrum.flux.tolist(),
                        "redshift": _verl_redshift(trajectory.spectrum, spectrum),
                    }
                }
            },
            "specvet": {
                "task": trajectory.task,
                "survey": spectrum.survey,
                "source": spectrum.source,
                "ra": spectrum.ra,
                "dec": spectrum.dec,
                "snr": spectrum.snr,
                "meta_json": json.dumps(spectrum.meta, sort_keys=True, ensure_ascii=False),
                "ivar": None if spectrum.ivar is None else spectrum.ivar.tolist(),
                "mask": spectrum.mask.tolist(),
                "initial_image_range": None
                if trajectory.initial_image.wavelength_range is None
                else list(trajectory.initial_image.wavelength_range),
                "initial_image_label": trajectory.initial_image.label,
            },
        },
    }


def from_verl_row(
    row: dict[str, Any], *, task: str | None = None
) -> tuple[Trajectory, Spectrum, str]:
    """(prompt-only trajectory, spectrum, ground truth "YES"/"NO") from one verl row.

    The trajectory id is derived from data_source, split, index and task, so importing the
    same row twice gives the same id. A null redshift reads as 0 for the spectrum and stays
    None in the trajectory's spectrum reference.
    """
    extra = _mapping(row.get("extra_info"), "verl row extra_info")
    index = extra.get("index")
    data_source = str(row.get("data_source") or "")
    split = str(extra.get("split") or "")
    where = f"verl row {data_source}/{split}#{index}"
    ours = extra.get("specvet") or {}
    resolved = _verl_task(ours.get("task") or extra.get("task"), task, where)
    system, user_prompt = _verl_prompt(row.get("prompt"), where)
    images = row.get("images")
    if not isinstance(images, list) or len(images) != 1:
        count = len(images) if isinstance(images, list) else type(images).__name__
        raise DatasetFormatError(f"{where}: 'images' must hold exactly I0; got {count}")
    reward = _mapping(row.get("reward_model"), f"{where} reward_model")
    ground_truth = _ground_truth(reward.get("ground_truth"), where)
    spectrum = _verl_spectrum(extra, ours, data_source, split, index, where)
    create_kwargs = extra["tools_kwargs"][VERL_TOOL_NAME]["create_kwargs"]
    raw_redshift = create_kwargs.get("redshift")
    reference = SpectrumRef(
        object_id=spectrum.object_id,
        survey=spectrum.survey,
        source=spectrum.source,
        redshift=None if raw_redshift is None else float(raw_redshift),
    )
    initial_range = ours.get("initial_image_range")
    trajectory = Trajectory(
        id=str(uuid.uuid5(_TRAJECTORY_NAMESPACE, f"verl:{data_source}:{split}:{index}:{resolved}")),
        task=resolved,
        spectrum=reference,
        system_prompt=system,
        user_prompt=user_prompt,
        initial_image=ImageRef(
            _png(images[0], f"{where} image 0"),
            None if initial_range is None else tuple(initial_range),
            ours.get("initial_image_label"),
        ),
        meta={"imported_from": "verl", "data_source": data_source, "split": split, "index": index},
    )
    return trajectory, spectrum, ground_truth


def _verl_redshift(reference: SpectrumRef, spectrum: Spectrum) -> float | None:
    """None (the bench's "unknown") when the reference has none and the spectrum says 0."""
    if reference.redshift is None and spectrum.redshift == 0.0:
        return None
    return float(spectrum.redshift)


def _verl_task(recorded: Any, explicit: str | None, where: str) -> str:
    found = task_code(recorded) if recorded else None
    given = task_code(explicit) if explicit is not None else None
    if found and given and found != given:
        raise DatasetFormatError(f"{where}: the row is task {found} but task={explicit!r}")
    resolved = found or given
    if resolved is None:
        raise DatasetFormatError(f"{where}: extra_info has no task; pass task=")
    return resolved


def _verl_prompt(prompt: Any, where: str) -> tuple[str, str]:
    if not isinstance(prompt, list) or not prompt:
        raise DatasetFormatError(f"{where}: 'prompt' must be a non-empty list of messages")
    system, user = "", None
    for position, message in enumerate(prompt):
        message = _mapping(message, f"{where} prompt[{position}]")
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                IMAGE_PLACEHOLDER
                if _mapping(part, f"{where} prompt[{position}] part").get("type") == "image"
                else str(part.get("text", ""))
                for part in content
            )
        if not isinstance(content, str):
            raise DatasetFormatError(f"{where} prompt[{position}]: content must be text")
        role = message.get("role")
        if role == "system" and position == 0:
            system = content
        elif role == "user" and user is None:
            user = content
        else:
            raise DatasetFormatError(
                f"{where} prompt[{position}]: expected an optional system message then one "
                f"user message; got role {role!r}"
            )
    if user is None:
        raise DatasetFormatError(f"{where}: the prompt has no user message")
    if user.count(IMAGE_PLACEHOLDER) != 1:
        raise DatasetFormatError(
            f"{where}: the user prompt must hold exactly one {IMAGE_PLACEHOLDER}; "
            f"found {user.count(IMAGE_PLACEHOLDER)}"
        )
    return system, user


def _verl_spectrum(
    extra: dict[str, Any],
    ours: dict[str, Any],
    data_source: str,
    split: str,
    index: Any,
    where: str,
) -> Spectrum:
    try:
        create_kwargs = extra["tools_kwargs"][VERL_TOOL_NAME]["create_kwargs"]
    except (KeyError, TypeError) as error:
        raise DatasetFormatError(
            f"{where}: extra_info.tools_kwargs.{VERL_TOOL_NAME}.create_kwargs is missing"
        ) from error
    wavelength = _float_array(create_kwargs.get("wavelength"), f"{where} wavelength")
    flux = _float_array(create_kwargs.get("flux"), f"{where} flux")
    if wavelength.size < 2 or wavelength.shape != flux.shape:
        raise SpectrumFormatError(
            f"{where}: wavelength and flux must be equal-length lists of at least 2 values; "
            f"got {wavelength.size} and {flux.size}"
        )
    if not np.all(np.diff(wavelength) > 0):
        raise SpectrumFormatError(f"{where}: wavelength must be strictly increasing")
    ivar = ours.get("ivar")
    mask = ours.get("mask")
    redshift = create_kwargs.get("redshift")
    return Spectrum(
        wavelength=wavelength,
        flux=flux,
        ivar=None if ivar is None else _float_array(ivar, f"{where} ivar"),
        mask=None if mask is None else np.asarray(mask, dtype=bool),
        redshift=0.0 if redshift is None else float(redshift),
        survey=ours.get("survey") or "SpecVI-Bench",
        object_id=str(extra.get("name") or f"{data_source}#{index}"),
        ra=ours.get("ra"),
        dec=ours.get("dec"),
        snr=ours.get("snr"),
        meta=json.loads(ours["meta_json"]) if ours.get("meta_json") else {},
        source=ours.get("source") or f"{data_source}/{split}#{index}",
    )


def _float_array(values: Any, where: str) -> np.ndarray:
    if values is None:
        raise DatasetFormatError(f"{where} is missing")
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise SpectrumFormatError(f"{where} must be a list of numbers: {error}") from error


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DatasetFormatError(f"{where} must be an object; got {type(value).__name__}")
    return value


def _ground_truth(value: Any, where: str) -> str:
    label = value.strip().upper() if isinstance(value, str) else None
    if label not in PREDICTIONS:
        raise DatasetFormatError(f"{where}: ground truth must be YES or NO; got {value!r}")
    return label


def read_verl_parquet(path: Path) -> list[dict[str, Any]]:
    """The rows of a SpecVI-Bench/verl parquet file as plain dicts (images as bytes)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as error:
        raise DatasetFormatError(f"cannot read parquet file {path}: {error}") from error
    return table.to_pylist()


def write_verl_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write rows with pyarrow; the same rows always give the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DatasetFormatError(f"no rows to write to {path}")
    try:
        table = pa.Table.from_pylist(list(rows))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DatasetFormatError(f"rows for {path} do not share one schema: {error}") from error
    pq.write_table(table, path, compression="zstd")
