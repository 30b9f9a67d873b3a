"""The frontend's random-graph fuzz tester (tests/compiler/test_fuzz.py) run on ``Device("opencl")``:
the same generator and numpy comparison, a fixed window of seeds (``TETRACHIP_OPENCL_FUZZ_GRAPHS``,
default 200). A failure names the seed; replay it with ``TETRACHIP_FUZZ_SEED=<seed>`` here."""
import os

import pytest

from tests.gpu.gpu_helpers import device_or_skip

F = pytest.importorskip("test_fuzz", reason="the frontend's fuzz tester (tests/compiler/test_fuzz.py) is missing")

N_GRAPHS = int(os.environ.get("TETRACHIP_OPENCL_FUZZ_GRAPHS", "200"))
SEEDS = [F.BASE_SEED + 7919 + i for i in range(N_GRAPHS)]  # a window the numpy run does not start with


def _check_all(seeds):
    failures = []
    for seed in seeds:
        try:
            F.check(seed)
        except Exception as e:  # noqa: BLE001  (collect, report every failing seed)
            failures.append(f"seed {seed}: {type(e).__name__}: {str(e)[:300]}")
    return failures


def test_fuzz_graphs_on_opencl():
    dev = device_or_skip("opencl")
    seeds = [int(os.environ["TETRACHIP_FUZZ_SEED"])] if "TETRACHIP_FUZZ_SEED" in os.environ else SEEDS
    dev.backend.precompile(lambda: _check_all(seeds))
    before = dev.backend.launches
    with dev:
        failures = _check_all(seeds)
    assert not failures, f"{len(failures)} of {len(seeds)} fuzz graphs failed on OpenCL:\n" + "\n".join(failures[:10])
    assert dev.backend.launches - before >= len(seeds), "the graphs did not run on the OpenCL device"
