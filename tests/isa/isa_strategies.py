"""Hypothesis strategies for legal instructions, derived from the table (not from the encoder)."""

from __future__ import annotations

from hypothesis import strategies as st

from isa.encoding import Instruction
from isa.table import (INSTRUCTIONS, CountMode, ScaleMode, Space, SrcMode, derived_widths)


def _depth(cfg, space: int) -> int:
    return cfg.spm_rows if space == Space.SPM else cfg.acc_rows


# address fields whose memory is fixed by the instruction
FIXED_SPACE = {("mxu.lw", "src"): Space.SPM, ("mxu.mm", "dst"): Space.ACC, ("mxu.mm", "src"): Space.SPM,
               ("mxu.mma", "dst"): Space.ACC, ("mxu.mma", "src"): Space.SPM,
               ("vlutld", "src"): Space.SPM, ("vreq", "dst"): Space.SPM, ("vreq", "src"): Space.ACC}
SPACE_OF = {"local": "space", "addr": "space", "dst": "dspace", "a": "aspace"}


@st.composite
def instructions(draw, cfg, specs=INSTRUCTIONS):
    spec = draw(st.sampled_from(list(specs)))
    w = derived_widths(cfg)
    v: dict[str, int] = {}
    for f in spec.fields:
        bits = f.width if isinstance(f.width, int) else w[f.width]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if f.signed else (0, (1 << bits) - 1)
        mx = f.max_value(cfg)
        if mx is not None:
            hi = min(hi, mx)
        v[f.name] = draw(st.integers(lo, hi))
    names = v.keys()
    # dependent constraints a legal program respects
    for addr, space_f in SPACE_OF.items():
        if addr in names and space_f in names:
            v[addr] = draw(st.integers(0, _depth(cfg, v[space_f]) - 1))
    for (mn, addr), space in FIXED_SPACE.items():
        if spec.mnemonic == mn:
            v[addr] = draw(st.integers(0, _depth(cfg, space) - 1))
    if "dram" in names:
        v["dram"] = draw(st.integers(0, cfg.dram_bytes - 1))
    if "rep_base" in names:
        v["rep_depth"] = draw(st.integers(0, min(4, cfg.loop_regs)))
        v["rep_base"] = draw(st.integers(0, cfg.loop_regs - max(1, v["rep_depth"])))
    if "bmode" in names:
        m = SrcMode(v["bmode"])
        if m in (SrcMode.SPM, SrcMode.ACC):
            v["b"] = draw(st.integers(0, _depth(cfg, int(m)) - 1))
        else:
            v["xb"] = 0
            if m == SrcMode.REG:
                v["b"] = draw(st.integers(0, cfg.scalar_regs - 1))
    if "smode" in names:
        m = ScaleMode(v["smode"])
        if m == ScaleMode.ROW:
            v["scale"] = draw(st.integers(0, cfg.acc_rows - 1))
        else:
            v["xscale"] = 0
            v["scale"] = draw(st.integers(0, cfg.scalar_regs - 1) if m == ScaleMode.REG
                              else st.integers(-(1 << 15), (1 << 15) - 1))
    if "cmode" in names and v["cmode"] == CountMode.REG:
        v["count"] = draw(st.integers(0, cfg.scalar_regs - 1))
    return Instruction.make(spec.mnemonic, **v)
