"""FPGA flow with open tools from PyPI (Yosys, nextpnr, ecppack via YoWASP): the FPGA top (chip,
DRAM in block RAM, UART host link), synthesis and place-and-route reports, board bitstreams, and
the fit check. ``docs/fpga.md`` describes it."""

from .devices import BOARDS, DEVICES
from .fit import FitError, check, estimate
from .flow import FlowError, Report, synth

__all__ = ["BOARDS", "DEVICES", "FitError", "FlowError", "Report", "check", "estimate", "synth", "build"]


def build(*args, **kwargs):
    """``board.build`` (imported on use: it needs amaranth-boards)."""
    from .board import build as _build
    return _build(*args, **kwargs)
