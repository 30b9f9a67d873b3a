"""Shared by the GPU-backend tests: the frontend's test folder on sys.path, and a device fixture
that skips with the reason (what to install) when the backend cannot start."""
import sys
from pathlib import Path

import pytest

FRONTEND_TESTS = Path(__file__).resolve().parents[1] / "compiler"
if str(FRONTEND_TESTS) not in sys.path:
    sys.path.insert(0, str(FRONTEND_TESTS))


def device_or_skip(name: str):
    import tetrachip as tc
    from runtime.gpu_common import DeviceUnavailable
    try:
        return tc.Device(name)
    except DeviceUnavailable as e:
        pytest.skip(str(e))
