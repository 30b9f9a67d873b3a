"""ChipConfig: the one description of a chip's sizes, shared by simulator, RTL and compiler.

A config is a frozen dataclass. Presets are looked up by name (``ChipConfig.preset("base")``);
any config can also be read from a TOML or JSON file whose keys are the field names
(``preset = "base"`` in the file starts from that preset and overrides the rest).

Every size-dependent instruction field width is derived from a config (see
``isa.table.derived_widths``), so a program is encoded for one config; binaries carry
``config.name`` and ``config.digest()`` and are refused by another config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .table import WORD_BYTES, check_layout

#: Smallest number of loop (repeat) registers; the ISA promises nests of at least 3 levels.
MIN_LOOP_REGS = 3
#: Largest DRAM: byte addresses are 32-bit two's complement (scalar registers and DMA addresses,
#: docs/microarchitecture.md section 2), so bytes 0 .. 2**31 - 1 are the ones an instruction can reach.
MAX_DRAM_BYTES = 1 << 31
#: Largest on-chip memory, SPM + ACC + instruction memory in bytes: the simulator and the RTL's
#: simulation hold them whole in host memory (the largest preset, tpu, uses about 30 MB: a ninth of it).
MAX_ONCHIP_BYTES = 1 << 28
#: Smallest link latency: a flit's row is read from memory in the cycle the flit is sent (a
#: registered read) and crosses the link after it (docs/microarchitecture.md section 3, Links).
MIN_LINK_LATENCY = 2
#: Largest value of any integer field (latencies, credits, counts, sizes): 2**32.
MAX_FIELD = 1 << 32


@dataclass(frozen=True)
class ChipConfig:
    """Sizes of one tetrachip.

    Memories: SPM holds ``spm_rows`` rows of ``cols`` int8 lanes; ACC holds ``acc_rows``
    rows of ``cols`` int32 lanes; DRAM is ``dram_bytes`` bytes, byte addressed.
    The MXU is a ``rows`` x ``cols`` weight-stationary array: a weight tile is
    ``rows`` (K) x ``cols`` (N); an input vector uses lanes ``0..rows-1`` of an SPM row,
    so ``rows <= cols``.
    """

    name: str = "base"
    rows: int = 16                #: MXU rows (the K extent of a weight tile)
    cols: int = 16                #: MXU columns (N extent); also the lane count of SPM/ACC rows
    spm_rows: int = 32768         #: scratchpad depth in rows of ``cols`` int8 lanes
    acc_rows: int = 4096          #: accumulator depth in rows of ``cols`` int32 lanes
    spm_bank_rows: int = 1        #: SPM rows per bank: two units writing one bank at once race
    acc_bank_rows: int = 1        #: ACC rows per bank (likewise; microarchitecture.md section 4)
    dram_bytes: int = 1 << 26     #: DRAM size in bytes
    imem_words: int = 16384       #: instruction memory depth in instruction words
    dma_beat_bytes: int = 16      #: bytes per DMA beat; DRAM moves one beat per cycle per direction
    dram_latency: int = 32        #: cycles from a DRAM request beat to its response
    links: int = 2                #: chip-to-chip link ports (a ring uses 2: next and previous; 0: none,
                                  #: link.send/link.recv are then illegal)
    link_latency: int = 8         #: cycles for a flit (and a returned credit) to cross a link
    link_width_bytes: int = 16    #: bytes per link flit; one flit per cycle per direction
    link_credits: int = 16        #: receive buffer depth in flits (the sender's initial credits)
    loop_regs: int = 8            #: repeat (loop) registers
    scalar_regs: int = 16         #: scalar registers r0..; r0 reads as zero
    clock_mhz: float = 500.0      #: clock used to report time; does not affect cycles

    def __post_init__(self) -> None:
        self.validate()

    # -- validation -----------------------------------------------------------------
    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"config {self.name!r}: {msg}")

        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                need(isinstance(v, str) and 0 < len(v.encode()) <= 16 and v.isprintable(),
                     "name must be 1..16 printable characters")
            elif f.name == "clock_mhz":
                need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
                     f"clock_mhz must be a finite number > 0, got {v!r}")
            else:
                need(isinstance(v, int) and not isinstance(v, bool),
                     f"{f.name} must be an integer, got {v!r}")
                low = 0 if f.name == "links" else 1     # a chip without link ports: no link.send/recv
                need(v >= low, f"{f.name} must be >= {low}, got {v}")
                need(v <= MAX_FIELD, f"{f.name} ({v}) must be <= 2**32")
        need(self.link_latency >= MIN_LINK_LATENCY,
             f"link_latency ({self.link_latency}) must be >= {MIN_LINK_LATENCY}: a flit's row is read from memory "
             "in the cycle it is sent and crosses the link after that")
        need(self.rows <= self.cols,
             f"rows ({self.rows}) must be <= cols ({self.cols}): inputs use lanes 0..rows-1 of an SPM row")
        need(self.cols <= 1024, f"cols ({self.cols}) must be <= 1024")
        need(self.loop_regs >= MIN_LOOP_REGS,
             f"loop_regs ({self.loop_regs}) must be >= {MIN_LOOP_REGS}")
        need(self.scalar_regs >= 4, f"scalar_regs ({self.scalar_regs}) must be >= 4")
        need(self.dram_bytes <= MAX_DRAM_BYTES,
             f"dram_bytes ({self.dram_bytes}) must be <= 2**31 (addresses are signed 32-bit)")
        need(self.dma_beat_bytes & (self.dma_beat_bytes - 1) == 0,
             f"dma_beat_bytes ({self.dma_beat_bytes}) must be a power of two")
        need(self.link_width_bytes & (self.link_width_bytes - 1) == 0,
             f"link_width_bytes ({self.link_width_bytes}) must be a power of two")
        for mem in ("spm", "acc"):
            bank = getattr(self, f"{mem}_bank_rows")
            need(bank & (bank - 1) == 0, f"{mem}_bank_rows ({bank}) must be a power of two")
        need(self.spm_rows * self.cols >= 256,
             "SPM must hold at least 256 bytes (the VPU lookup table is loaded from it)")
        # The instruction layout must fit the word for this config's derived widths.
        check_layout(self)
        onchip = self.spm_bytes + self.acc_bytes + self.imem_words * WORD_BYTES
        need(onchip <= MAX_ONCHIP_BYTES,
             f"SPM + ACC + imem is {onchip} bytes (spm_rows {self.spm_rows} x cols {self.cols}, acc_rows "
             f"{self.acc_rows} x cols {self.cols} x 4, imem_words {self.imem_words} x {WORD_BYTES}); it must be "
             f"<= {MAX_ONCHIP_BYTES} (256 MiB)")

    # -- derived sizes -------------------------------------------------------------------
    @property
    def spm_bytes(self) -> int:
        return self.spm_rows * self.cols

    @property
    def acc_bytes(self) -> int:
        return self.acc_rows * self.cols * 4

    @property
    def peak_macs_per_cycle(self) -> int:
        return self.rows * self.cols

    # -- identity ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> bytes:
        """8-byte hash of every field but the name and the reporting clock: what a binary depends on."""
        d = {k: v for k, v in self.to_dict().items() if k not in ("name", "clock_mhz")}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).digest()[:8]

    def replace(self, **changes: Any) -> "ChipConfig":
        return dataclasses.replace(self, **changes)

    # -- construction --------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "ChipConfig":
        if not isinstance(name, str):
            raise ConfigError(f"preset must be a preset name ({', '.join(PRESETS)}), got {name!r}")
        try:
            return PRESETS[name]
        except KeyError:
            raise ConfigError(
                f"unknown config {name!r}; presets: {', '.join(PRESETS)}") from None

    @classmethod
    def from_dict(cls, data: dict, *, origin: str = "config") -> "ChipConfig":
        data = dict(data)
        try:
            base = cls.preset(data.pop("preset")) if "preset" in data else None
        except ConfigError as e:
            raise ConfigError(f"{origin}: {e}") from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{origin}: unknown config field(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        try:
            return dataclasses.replace(base, **data) if base else cls(**data)
        except TypeError as e:
            raise ConfigError(f"{origin}: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"{origin}: {e}" if origin != "config" else str(e)) from None

    @classmethod
    def from_file(cls, path: str | Path) -> "ChipConfig":
        p = Path(path)
        try:
            text = p.read_bytes()
        except OSError as e:
            raise ConfigError(f"{p}: cannot read config: {e.strerror}") from None
        try:
            if p.suffix == ".json":
                data = json.loads(text)
            else:
                data = tomllib.loads(text.decode())
        except (ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: not a valid {'JSON' if p.suffix == '.json' else 'TOML'} config: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: a config file must hold a table of fields")
        data.setdefault("name", p.stem[:16])
        return cls.from_dict(data, origin=str(p))

    @classmethod
    def load(cls, spec: "str | Path | ChipConfig") -> "ChipConfig":
        """A preset name, a path to a .toml/.json file, or a ChipConfig."""
        if isinstance(spec, ChipConfig):
            return spec
        s = str(spec)
        if s in PRESETS:
            return PRESETS[s]
        if s.endswith((".toml", ".json")) or Path(s).is_file():
            return cls.from_file(s)
        return cls.preset(s)


def _presets() -> dict[str, ChipConfig]:
    P = ChipConfig
    return {
        "tiny": P(name="tiny", rows=4, cols=4, spm_rows=1024, acc_rows=256, dram_bytes=1 << 16,
                  imem_words=1024, dma_beat_bytes=4, dram_latency=8, links=2, link_latency=4,
                  link_width_bytes=4, link_credits=8, loop_regs=4, scalar_regs=16, clock_mhz=50.0),
        "small": P(name="small", rows=8, cols=8, spm_rows=4096, acc_rows=1024, dram_bytes=1 << 20,
                   imem_words=2048, dma_beat_bytes=8, dram_latency=16, links=2, link_latency=4,
                   link_width_bytes=8, link_credits=8, loop_regs=8, scalar_regs=16, clock_mhz=100.0),
        "base": P(name="base"),
        "large": P(name="large", rows=128, cols=128, spm_rows=65536, acc_rows=8192,
                   dram_bytes=1 << 30, imem_words=16384, dma_beat_bytes=128, dram_latency=64,
                   links=2, link_latency=16, link_width_bytes=64, link_credits=32,
                   loop_regs=8, scalar_regs=16, clock_mhz=940.0),
        "tpu": P(name="tpu", rows=256, cols=256, spm_rows=98304, acc_rows=4096,
                 dram_bytes=1 << 31, imem_words=16384, dma_beat_bytes=256, dram_latency=100,
                 links=2, link_latency=32, link_width_bytes=64, link_credits=64,
                 loop_regs=8, scalar_regs=16, clock_mhz=700.0),
    }


PRESETS: dict[str, ChipConfig] = {}
PRESETS.update(_presets())


def square_shape(n: int) -> tuple[int, int]:
    """The most square factorisation ``(rows, cols)`` of n chips, rows <= cols (8 -> (2, 4), 7 -> (1, 7)): the
    default shape of a 2-D torus (``sim.System``, ``compiler.lower.shard``)."""
    rows = max(d for d in range(1, int(n ** 0.5) + 1) if n % d == 0)
    return rows, n // rows
