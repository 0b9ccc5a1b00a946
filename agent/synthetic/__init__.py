"""SpecVI-mini: a physically motivated SYNTHETIC benchmark for the inspection tasks.

No reachable package ships real optical spectra of the rare classes (data_formats.md section 2),
so the demo and the benchmark use spectra built here. Every product says it is synthetic: the
spectra (``survey="SpecVI-mini"``, ``meta["synthetic"]``), the FITS headers (TELESCOP, SYNTHET),
the manifest (``"synthetic": true``) and the parquet ``data_source``. The rendered images do not:
the tool draws a synthetic spectrum exactly as it would draw the same arrays from a survey file.

How a spectrum is made:

- **Grid and instrument**: the LAMOST low-resolution grid (log10 step 1e-4 from 3699.99 A, 3908
  pixels to 9097 A, vacuum). Each spectrum draws its own resolving power, log-uniform in
  RESOLUTION_RANGE (LAMOST and SDSS spectra span about R 1200-2500), applied as a Gaussian
  line-spread function in log-lambda and recorded in the spectrum's ``resolution``
  (``RESOLVPW`` in the FITS header) and in the manifest.
- **Source**: a Planck continuum (plus power laws for quasars and discs), molecular bands as
  saw-tooth optical depths (TiO/VO/ZrO/CaH sharp at the head and recovering to the red; C2 Swan
  and CN sharp on the red side and fading to the blue), atomic lines as pseudo-Voigt profiles with
  widths in km/s (instrumental width added in quadrature), double-peaked disc emission for CVs,
  pressure-broadened merging Balmer series for DA white dwarfs, redshifted lines for quasars;
  radial velocities of tens of km/s with a halo-like tail to a few hundred.
- **Observation** (what the two real LAMOST files in ``shared/data/lamost`` show): reddening and
  interstellar lines; a flux-calibration tilt; telluric O2 A/B and water bands; a two-arm
  throughput whose blue end falls off below ~4500 A (the real files have S/N(3750-3900 A) /
  S/N(6000-7000 A) = 0.020 for the G7 star and 0.076 for the A2 star, 0.14 and 0.35 at 4000-4500
  A; FGK and A stars drawn here get medians of about 0.03 and 0.05, 0.24 and 0.35), with the
  dichroic junction near 5700-5900 A (a throughput dip, a flux step and a calibration bump);
  Poisson + sky + read noise for a red S/N drawn log-uniform in 5-80; imperfectly subtracted sky
  lines (5577, 5890/5896, 6300/6363 A, OH bands redward of 6800 A: scale and wavelength errors
  leave residuals and P-Cygni-like wiggles); cosmic-ray spikes and masked bad pixels (ivar = 0).
- **Hard negatives** (the paper's rejection sampling): for each task a weak classifier (nearest
  class means of coarse continuum-normalised flux, fitted on a fixed set of plain draws) scores
  each candidate negative; a negative is kept only when that classifier calls it positive (its
  score reaches the score of the 25th-percentile positive), trying up to HARD_NEGATIVE_TRIES draws
  and keeping the most positive-looking one if none passes. The classes therefore overlap on the
  obvious feature and are not separable by one threshold on it.

What the generator drew (the ``subtype`` and ``params``) goes to the manifest for analysis only;
it never reaches a spectrum's ``meta`` or a FITS header, so policies cannot see it.
"""

from __future__ import annotations

from agent.synthetic.lines import (
    BALMER_N,
    BENCH_TASKS,
    BOWEN,
    C_KMS,
    CA_I,
    CA_TRIPLET,
    CAH_BANDS,
    CN_RED_BANDS,
    CN_VIOLET_BANDS,
    CROSS_TASKS,
    DATA_SOURCE,
    DIBS,
    FE_II,
    G_BAND,
    GENERATOR_VERSION,
    HARD_NEGATIVE_TRIES,
    HE_I,
    HE_I_7065,
    HE_II,
    HE_II_4686,
    INSTRUMENT_FWHM_KMS,
    K_I,
    LAO_BANDS,
    LOG10_START,
    LOG10_STEP,
    LYMAN_ALPHA,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    MG_B,
    MG_II,
    N_PIXELS,
    NA_D,
    NA_I_8190,
    NEBULAR,
    O_I_7774,
    O_I_8446,
    PIXEL_KMS,
    QUASAR_LINES,
    RESOLUTION,
    RESOLUTION_RANGE,
    SI_III,
    SI_IV,
    SKY_LINES,
    SNR_RANGE,
    SPLITS,
    SURVEY,
    SWAN_BANDS,
    TIO_BANDS,
    VO_BANDS,
    WAVELENGTH,
    ZRO_BANDS,
)
from agent.synthetic.observing import BLUE_EDGE_RANGE, SKY_EMISSION
from agent.synthetic.sampling import (
    TASK_MIXES,
    SyntheticSample,
    baseline_score,
    baseline_threshold,
    bench_code,
    default_split_sizes,
    draw_hard_negative,
    generate_sample,
    generate_split,
    object_id,
    subtypes,
    task_codes,
)
from agent.synthetic.writer import load_manifest, write_benchmark

__all__ = [
    "BALMER_N",
    "BENCH_TASKS",
    "BLUE_EDGE_RANGE",
    "BOWEN",
    "CAH_BANDS",
    "CA_I",
    "CA_TRIPLET",
    "CN_RED_BANDS",
    "CN_VIOLET_BANDS",
    "CROSS_TASKS",
    "C_KMS",
    "DATA_SOURCE",
    "DIBS",
    "FE_II",
    "GENERATOR_VERSION",
    "G_BAND",
    "HARD_NEGATIVE_TRIES",
    "HE_I",
    "HE_II",
    "HE_II_4686",
    "HE_I_7065",
    "INSTRUMENT_FWHM_KMS",
    "K_I",
    "LAO_BANDS",
    "LOG10_START",
    "LOG10_STEP",
    "LYMAN_ALPHA",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "MG_B",
    "MG_II",
    "NA_D",
    "NA_I_8190",
    "NEBULAR",
    "N_PIXELS",
    "O_I_7774",
    "O_I_8446",
    "PIXEL_KMS",
    "QUASAR_LINES",
    "RESOLUTION",
    "RESOLUTION_RANGE",
    "SI_III",
    "SI_IV",
    "SKY_EMISSION",
    "SKY_LINES",
    "SNR_RANGE",
    "SPLITS",
    "SURVEY",
    "SWAN_BANDS",
    "SyntheticSample",
    "TASK_MIXES",
    "TIO_BANDS",
    "VO_BANDS",
    "WAVELENGTH",
    "ZRO_BANDS",
    "baseline_score",
    "baseline_threshold",
    "bench_code",
    "default_split_sizes",
    "draw_hard_negative",
    "generate_sample",
    "generate_split",
    "load_manifest",
    "object_id",
    "subtypes",
    "task_codes",
    "write_benchmark",
]
