"""Shared by the GPU-backend tests: a device that skips with the reason (what to install) when
the backend cannot start."""
import pytest


def device_or_skip(name: str):
    import tetrachip as tc
    from runtime.gpu_common import DeviceUnavailable
    try:
        return tc.Device(name)
    except DeviceUnavailable as e:
        pytest.skip(str(e))
