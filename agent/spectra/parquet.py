"""SpecVI-Bench / verl parquet rows."""

from __future__ import annotations

import io
from typing import Any

from agent import bounded_json
from agent.reading import ReadLimits, SpectrumFormatError, check_parquet_metadata, over_limit
from agent.spectra.value import (
    Spectrum,
    _finish,
    _json_safe,
    _redshift,
    frame_meta,
    validate_arrays,
)

_PARQUET_COLUMNS = ("data_source", "reward_model", "extra_info")
_CREATE_KWARGS_PATH = ("tools_kwargs", "spectral_visualization_tool", "create_kwargs")


_PARQUET_BATCH_ROWS = 16


def _load_parquet(raw: bytes, source: str, limits: ReadLimits) -> list[Spectrum]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    errors = (pa.ArrowException, OSError, ValueError)
    try:
        parquet = pq.ParquetFile(io.BytesIO(raw))
        present = [name for name in _PARQUET_COLUMNS if name in parquet.schema_arrow.names]
        metadata = parquet.metadata
    except errors as exc:
        raise SpectrumFormatError(f"{source}: truncated or corrupt parquet file ({exc})") from exc
    if "extra_info" not in present:
        raise SpectrumFormatError(f"{source}: parquet file has no column 'extra_info'")
    check_parquet_metadata(metadata, present, source, limits)
    # Batch by batch, counting what is decoded: the footer's sizes are only the file's word.
    spectra: list[Spectrum] = []
    decoded = 0
    batches = parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=present)
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                break
            decoded += batch.nbytes
            if decoded > limits.max_uncompressed_bytes:
                raise over_limit(
                    source,
                    f"more than {limits.max_uncompressed_bytes} bytes of decoded columns",
                    limits,
                    "max_uncompressed_bytes",
                )
            rows = batch.to_pylist()
        except SpectrumFormatError:
            raise
        except errors as exc:
            raise SpectrumFormatError(
                f"{source}: truncated or corrupt parquet file ({exc})"
            ) from exc
        if len(spectra) + len(rows) > limits.max_spectra:
            raise over_limit(source, "more rows (spectra) than allowed", limits, "max_spectra")
        first = len(spectra)
        spectra.extend(_specvi_row(row, first + i, source) for i, row in enumerate(rows))
    if not spectra:
        raise SpectrumFormatError(f"{source}: parquet file has no rows")
    return spectra


def _specvi_row(row: dict[str, Any], index: int, source: str) -> Spectrum:
    where = f"{source}#row{index}"
    extra = _as_mapping(row.get("extra_info"), "extra_info", where)
    kwargs: Any = extra
    dotted = "extra_info"
    for key in _CREATE_KWARGS_PATH:
        dotted = f"{dotted}.{key}"
        kwargs = _as_mapping(kwargs.get(key), dotted, where)
    for key in ("wavelength", "flux"):
        if kwargs.get(key) is None:
            raise SpectrumFormatError(f"{where}: missing {dotted}.{key}")
    arrays = validate_arrays(kwargs["wavelength"], kwargs["flux"], source=where)
    data_source = str(row.get("data_source") or "")
    reward = row.get("reward_model")
    reward = reward if isinstance(reward, dict) else {}
    meta = {
        "data_source": data_source,
        "ground_truth": _json_safe(reward.get("ground_truth")),
        "index": _json_safe(extra.get("index")),
        "split": _json_safe(extra.get("split")),
        "task": _json_safe(extra.get("task")),
        **frame_meta("vacuum", "survey", "SpecVI-Bench spectra are LAMOST spectra, in vacuum"),
    }
    name = _json_safe(extra.get("name"))
    object_id = (
        str(name)
        if name not in (None, "")
        else str(meta["index"] if meta["index"] is not None else index)
    )
    survey = "SpecVI-mini" if data_source.startswith("specvi-mini") else "SpecVI-Bench"
    return _finish(
        arrays,
        source=where,
        survey=survey,
        object_id=object_id,
        redshift=_redshift(kwargs.get("redshift")),
        meta=meta,
    )


def _as_mapping(value: Any, dotted: str, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = bounded_json.loads(value, what=dotted)
        except ValueError as exc:
            raise SpectrumFormatError(f"{where}: {dotted} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SpectrumFormatError(f"{where}: missing {dotted}")
    return value
