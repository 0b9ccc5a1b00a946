"""Writing a SpecVI-mini benchmark (FITS, parquet, manifest, README) and reading its manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.inspection_tasks import build_prompt, get_task
from agent.synthetic.lines import (
    BENCH_TASKS,
    DATA_SOURCE,
    GENERATOR_VERSION,
    HARD_NEGATIVE_TRIES,
    LOG10_START,
    LOG10_STEP,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    N_PIXELS,
    RESOLUTION,
    RESOLUTION_RANGE,
    SURVEY,
)
from agent.synthetic.sampling import (
    _BASELINE_RECALL,
    SyntheticSample,
    _checked_sizes,
    _task_code,
    bench_code,
    default_split_sizes,
    generate_split,
)


def write_benchmark(
    out_dir: Path | str,
    *,
    seed: int = 20260,
    tasks: Sequence[str] = BENCH_TASKS,
    sizes: Mapping[str, Mapping[str, int]] | None = None,
    with_parquet: bool = True,
) -> Path:
    """Write FITS files, ``manifest.json`` and SpecVI-Bench parquet files; return the manifest.

    Layout: ``spectra/{task}/{split}/{object_id}.fits`` (LAMOST new layout),
    ``data/{split}_{bench code}.parquet`` and ``manifest.json``, plus a README.md.
    """
    from agent.spectra import save_lamost_fits

    out = Path(out_dir)
    codes = [_task_code(task) for task in tasks]
    if len(set(codes)) != len(codes):
        raise ValueError(f"tasks must not repeat, got {list(tasks)}")
    split_sizes = _checked_sizes(sizes if sizes is not None else default_split_sizes())
    out.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    parquet_files: list[str] = []
    for code in codes:
        for split, size in split_sizes.items():
            samples = generate_split(
                code, split, n_pos=size["n_pos"], n_neg=size["n_neg"], seed=seed
            )
            for sample in samples:
                relative = (
                    Path("spectra") / code.lower() / split / f"{sample.spectrum.object_id}.fits"
                )
                (out / relative).parent.mkdir(parents=True, exist_ok=True)
                save_lamost_fits(sample.spectrum, out / relative, header=_fits_header(sample))
                entries.append(_manifest_entry(sample, relative))
            if with_parquet:
                parquet_files.append(_write_parquet(out, code, split, samples))
    manifest = {
        "name": SURVEY,
        "version": MANIFEST_VERSION,
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "synthetic": True,
        "description": _README.strip(),
        "wavelength_frame": "vacuum",
        "grid": {"log10_start": LOG10_START, "log10_step": LOG10_STEP, "n_pixels": N_PIXELS},
        "resolution": {
            "per_spectrum": "resolving power drawn log-uniform, constant over the spectrum",
            "range": list(RESOLUTION_RANGE),
            "nominal": RESOLUTION,
        },
        "hard_negatives": {
            "method": "rejection sampling against a weak classifier (nearest class means of "
            "coarse continuum-normalised flux)",
            "threshold": f"score of the {100 * (1 - _BASELINE_RECALL):.0f}th-percentile positive",
            "max_draws": HARD_NEGATIVE_TRIES,
        },
        "tasks": codes,
        "sizes": split_sizes,
        "parquet": parquet_files,
        "samples": entries,
    }
    path = out / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "README.md").write_text(_README.lstrip(), encoding="utf-8")
    return path


def load_manifest(out_dir: Path | str) -> list[dict[str, Any]]:
    """The per-sample entries of a written benchmark (directory or manifest path)."""
    path = Path(out_dir)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"SpecVI-mini manifest {path}: cannot be read ({error})") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"SpecVI-mini manifest {path}: not valid JSON ({error})") from error
    if not isinstance(document, dict) or document.get("synthetic") is not True:
        raise ValueError(f"SpecVI-mini manifest {path}: not a synthetic benchmark manifest")
    samples = document.get("samples")
    if not isinstance(samples, list):
        raise ValueError(f"SpecVI-mini manifest {path}: field 'samples' must be a list")
    return samples


def _fits_header(sample: SyntheticSample) -> dict[str, Any]:
    spectrum = sample.spectrum
    return {
        "TELESCOP": SURVEY,
        "SYNTHET": True,
        "DATA_V": GENERATOR_VERSION,
        "OBJTYPE": "SYNTHETIC",
        "DESIG": spectrum.object_id,
        "FILENAME": f"{spectrum.object_id}.fits",
        "Z": 0.0,
        "VACUUM": True,
        "HELIO": True,
        "SNRR": float(spectrum.snr or 0.0),
        "COMMENT": "Synthetic SpecVI-mini spectrum, not an observation.",
    }


def _manifest_entry(sample: SyntheticSample, relative: Path) -> dict[str, Any]:
    return {
        "object_id": sample.spectrum.object_id,
        "file": relative.as_posix(),
        "task": sample.task,
        "bench_task": bench_code(sample.task),
        "label": "YES" if sample.label else "NO",
        "subtype": sample.subtype,
        "split": sample.split,
        "index": sample.index,
        "snr": sample.spectrum.snr,
        "resolving_power": sample.params["resolving_power"],
        "params": sample.params,
    }


def _write_parquet(out: Path, code: str, split: str, samples: Sequence[SyntheticSample]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agent.tool import SpectralVisualizationTool

    prompt = build_prompt(get_task(code))
    rows = []
    for sample in samples:
        image = SpectralVisualizationTool(sample.spectrum).render_full()
        if image.png is None:
            raise ValueError(f"{sample.spectrum.object_id}: the full view could not be rendered")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": prompt}],
                "images": [{"bytes": image.png}],
                "ability": "spectral_inspection",
                "reward_model": {"style": "rule", "ground_truth": "YES" if sample.label else "NO"},
                "extra_info": {
                    "index": sample.index,
                    "name": sample.spectrum.object_id,
                    "split": split,
                    "task": bench_code(code),
                    "tools_kwargs": {
                        "spectral_visualization_tool": {
                            "create_kwargs": {
                                "wavelength": sample.spectrum.wavelength.tolist(),
                                "flux": sample.spectrum.flux.tolist(),
                                "redshift": 0.0,
                            }
                        }
                    },
                },
            }
        )
    relative = Path("data") / f"{split}_{bench_code(code)}.parquet"
    (out / relative).parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=_parquet_schema(pa))
    pq.write_table(table, out / relative, compression="zstd")
    return relative.as_posix()


def _parquet_schema(pa: Any) -> Any:
    create_kwargs = pa.struct(
        [
            ("wavelength", pa.list_(pa.float64())),
            ("flux", pa.list_(pa.float64())),
            ("redshift", pa.float64()),
        ]
    )
    tool = pa.struct([("create_kwargs", create_kwargs)])
    extra_info = pa.struct(
        [
            ("index", pa.int64()),
            ("name", pa.string()),
            ("split", pa.string()),
            ("task", pa.string()),
            ("tools_kwargs", pa.struct([("spectral_visualization_tool", tool)])),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("images", pa.list_(pa.struct([("bytes", pa.binary())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra_info),
        ]
    )


_README = """
# SpecVI-mini (SYNTHETIC)

Every spectrum here is synthetic: made by specvet's SpecVI-mini generator, not observed by any
telescope. It mimics LAMOST low-resolution spectra (log-linear vacuum grid 3700-9100 A, a
resolving power drawn per spectrum in R 1200-2500 and recorded as RESOLVPW, relative flux, ivar
with Poisson, sky and read noise, a blue end with a few per cent of the red S/N, sky-line and OH
residuals, telluric bands, the dichroic junction near 5700-5900 A, flux-calibration tilts, cosmic
rays, radial velocities and masked bad pixels) and builds each object from physically motivated
ingredients (Planck continua, molecular bands with the right shading, pseudo-Voigt lines, disc
emission profiles, pressure-broadened white-dwarf Balmer lines, redshifted quasar lines).

Each task (CV, CS, SS, MG, WD; O, B, A on request) has positives and hard negatives: negatives are
rejection-sampled, keeping those a weak classifier calls positive, as in the Spec-o3 paper. Train
splits are balanced, test splits are about 1:5 like SpecVI-Bench. Use it to exercise the
pipeline, never to claim performance on real spectra.

Files: spectra/{task}/{split}/{object_id}.fits (LAMOST new layout, TELESCOP='SpecVI-mini',
SYNTHET=T), data/{split}_{task}.parquet (SpecVI-Bench/verl rows, data_source 'specvi-mini'),
manifest.json (per sample: file, task, label, subtype, split, snr, resolving power, generator
parameters including the weak classifier's score; the subtype and parameters are for analysis and
must not be shown to a policy).
"""
