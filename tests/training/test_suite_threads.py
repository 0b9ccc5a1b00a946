"""The tests run torch and BLAS on one thread (tests/conftest.py): on a shared 2-core machine
two spinning threads made the tiny model's generate() 20x slower."""

from __future__ import annotations

import os

import pytest


@pytest.mark.skipif(
    os.environ.get("OMP_NUM_THREADS", "1") != "1", reason="threads set in the environment"
)
def test_it_runs_torch_and_blas_on_one_thread():
    import torch
    from threadpoolctl import threadpool_info

    assert torch.get_num_threads() == 1
    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas)
