"""The SpecVI-mini grid and instrument constants, and the line and band lists (vacuum A)."""

from __future__ import annotations

import math

import numpy as np

from agent.spectra import air_to_vacuum

GENERATOR_VERSION = "specvi-mini-2.0"
SURVEY = "SpecVI-mini"
DATA_SOURCE = "specvi-mini"
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 2
BENCH_TASKS = ("CV", "CS", "SS", "MG", "WD")
CROSS_TASKS = ("O", "B", "A")
SPLITS = ("train", "test")

LOG10_START = 3.5682  # LAMOST COEFF0: pixel 0 at 3699.99 A
LOG10_STEP = 1e-4  # LAMOST COEFF1
N_PIXELS = 3908
RESOLUTION = 1800.0  # LAMOST LRS nominal; each spectrum draws its own in RESOLUTION_RANGE
RESOLUTION_RANGE = (1200.0, 2500.0)
C_KMS = 299_792.458
INSTRUMENT_FWHM_KMS = C_KMS / RESOLUTION
PIXEL_KMS = C_KMS * LOG10_STEP * math.log(10.0)
SNR_RANGE = (5.0, 80.0)
HARD_NEGATIVE_TRIES = 12

WAVELENGTH = 10.0 ** (LOG10_START + LOG10_STEP * np.arange(N_PIXELS))
WAVELENGTH.setflags(write=False)

_FWHM_TO_SIGMA = 1.0 / (2.0 * math.sqrt(2.0 * math.log(2.0)))
_GAUSS_AREA = 0.5 * math.sqrt(math.pi / math.log(2.0))  # area of a unit-peak Gaussian per FWHM
_SNR_WINDOW = (6000.0, 7000.0)  # where a spectrum's S/N is defined (LAMOST r band)


def _vac(*air: float) -> tuple[float, ...]:
    return tuple(float(air_to_vacuum(value)) for value in air)


def _balmer(n: int) -> float:
    """Vacuum wavelength of the Balmer line from level n, scaled to H-alpha = 6564.61 A."""
    return 6564.61 * (5.0 / 36.0) / (0.25 - 1.0 / n**2)


BALMER_N = tuple(range(3, 17))
HE_I = tuple(
    zip(
        _vac(3819.61, 4026.19, 4387.93, 4471.48, 4713.15, 4921.93, 5015.68, 5875.62, 6678.15),
        (0.5, 1.0, 0.6, 1.0, 0.35, 0.6, 0.4, 0.8, 0.6),
        strict=True,
    )
)
HE_I_7065 = _vac(7065.19)[0]
HE_II = tuple(zip(_vac(4199.83, 4541.59, 4685.70, 5411.52), (0.7, 1.0, 1.2, 1.0), strict=True))
HE_II_4686 = HE_II[2][0]
BOWEN = _vac(4634.14, 4640.64, 4647.42, 4650.25)
CA_K, CA_H = _vac(3933.66, 3968.47)
CA_I = _vac(4226.73)[0]
G_BAND = _vac(4304.0)[0]
MG_B = _vac(5167.32, 5172.68, 5183.60)
MG_II = _vac(4481.23)[0]
SI_III = _vac(4552.62)[0]
SI_IV = _vac(4088.86, 4116.10)
NA_D = _vac(5889.95, 5895.92)
NA_I_8190 = _vac(8183.26, 8194.82)
K_I = _vac(7664.90, 7698.96)
CA_TRIPLET = tuple(zip(_vac(8498.02, 8542.09, 8662.14), (0.55, 1.0, 0.8), strict=True))
O_I_7774 = _vac(7773.4)[0]
O_I_8446 = _vac(8446.4)[0]
FE_II = _vac(4923.92, 5018.44, 5169.03)
BA_II, SR_II = _vac(4554.03, 4077.71)
DIBS = tuple(
    zip(_vac(4428.2, 5780.5, 6283.8), (1.0, 0.5, 0.6), (1300.0, 110.0, 200.0), strict=True)
)
NEBULAR = {
    "[Ne III] 3869": _vac(3868.76)[0],
    "[O III] 4960": _vac(4958.91)[0],
    "[O III] 5008": _vac(5006.84)[0],
    "[N II] 6550": _vac(6548.05)[0],
    "[N II] 6585": _vac(6583.45)[0],
    "[S II] 6718": _vac(6716.44)[0],
    "[S II] 6733": _vac(6730.82)[0],
    "[Ar III] 7138": _vac(7135.79)[0],
    "[O I] 6302": _vac(6300.30)[0],
}

# (head, relative optical depth, e-folding length in A). Heads are approximate to a few A.
TIO_BANDS = tuple(
    zip(
        _vac(4762, 4954, 5167, 5448, 5847, 6159, 6651, 7054, 7589, 8432),
        (0.45, 0.55, 0.7, 0.8, 0.6, 0.9, 0.85, 1.0, 0.8, 0.5),
        (55, 65, 80, 100, 120, 150, 140, 180, 150, 160),
        strict=True,
    )
)
VO_BANDS = tuple(zip(_vac(7334, 7851, 7865), (1.0, 0.9, 0.9), (90, 70, 90), strict=True))
# CaH: the 6382 head and the 6750-7000 A trough (ends before the 7042-7046 pseudo-continuum).
CAH_BANDS = ((_vac(6382)[0], 0.6, 45.0, math.inf), (_vac(6750)[0], 1.0, 400.0, 7005.0))
ZRO_BANDS = tuple(
    zip(
        _vac(4619.8, 4626.1, 4640.6, 5551.7, 5718.1, 6229.0, 6345.0, 6474.0),
        (0.5, 0.5, 0.8, 0.7, 0.6, 0.6, 0.8, 1.0),
        (25, 25, 35, 50, 55, 60, 70, 85),
        strict=True,
    )
)
LAO_BANDS = tuple(zip(_vac(7403, 7910), (1.0, 0.8), (60, 60), strict=True))  # heads unverified
SWAN_BANDS = tuple(
    zip(
        _vac(4383, 4737, 5165, 5636, 6122),
        (0.5, 0.8, 1.0, 0.8, 0.5),
        (60, 90, 110, 120, 130),
        strict=True,
    )
)
CN_VIOLET_BANDS = tuple(zip(_vac(3883, 4216), (1.0, 0.8), (60, 60), strict=True))
CN_RED_BANDS = tuple(  # approximate heads of the red system; drawn blue-shaded like Swan
    zip(
        _vac(6925, 7088, 7259, 7875, 8067, 8320),
        (0.4, 0.8, 0.4, 0.9, 0.7, 0.5),
        (70, 90, 80, 100, 100, 100),
        strict=True,
    )
)

# Quasar lines: (rest vacuum A, equivalent width range A, broad?)
QUASAR_LINES = (
    (1215.67, (60.0, 150.0), True),
    (1240.14, (5.0, 15.0), True),
    (1397.61, (5.0, 12.0), True),
    (1549.06, (20.0, 60.0), True),
    (1908.73, (10.0, 30.0), True),
    (2799.12, (20.0, 60.0), True),
    (3728.48, (2.0, 8.0), False),
    (3869.85, (1.0, 3.0), False),
    (4102.89, (4.0, 10.0), True),
    (4341.68, (10.0, 30.0), True),
    (4862.68, (40.0, 120.0), True),
    (4960.30, (2.0, 12.0), False),
    (5008.24, (6.0, 36.0), False),
    (5877.25, (3.0, 10.0), True),
    (6564.61, (150.0, 400.0), True),
    (6585.27, (5.0, 30.0), False),
    (6718.29, (2.0, 8.0), False),
    (6732.67, (2.0, 8.0), False),
)
LYMAN_ALPHA = 1215.67

# Night-sky emission (vacuum A, peak relative to the sky continuum). OH positions approximate.
SKY_LINES = tuple(
    zip(
        _vac(
            5577.34, 6300.30, 6363.78, 5889.95, 5895.92, 4358.34, 5460.74, 5769.60, 5790.66,
            6863.96, 7316.28, 7340.89, 7369.25, 7794.11, 7821.50, 7913.71, 7993.33,
            8344.60, 8399.17, 8430.17, 8827.10, 8885.85, 8943.40, 8988.38,
        ),
        (
            8.0, 4.0, 1.5, 1.5, 1.2, 1.5, 2.0, 0.8, 0.8,
            1.5, 2.5, 2.5, 2.0, 3.0, 3.0, 3.5, 3.5,
            4.0, 4.0, 4.5, 5.0, 5.0, 5.0, 4.5,
        ),
        strict=True,
    )
)  # fmt: skip
