"""tetrachip RTL in Amaranth 0.5: ``Chip(cfg)``, ``Ring(cfg, n)`` and Verilog generation (docs/rtl.md)."""

from .chip import Chip, HostSignature, Ring, TraceSignature
from .dma import DramSignature
from .link import LinkSignature
from .verilog import generate as generate_verilog

__all__ = ["Chip", "Ring", "HostSignature", "DramSignature", "LinkSignature", "TraceSignature",
           "generate_verilog"]
