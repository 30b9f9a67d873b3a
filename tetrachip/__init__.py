"""tetrachip: ``import tetrachip as tc`` — the public facade (re-exports only, no logic)."""

# --- tensor frontend and reference runtime ---------------------------------------------------------
from compiler.frontend import functional  # noqa: F401
from compiler.frontend import nn
from compiler.frontend import optim
from compiler.frontend.autograd import no_grad  # noqa: F401
from compiler.frontend.control import cond, loop, while_loop  # noqa: F401
from compiler.ir.dtypes import DType, bool_, float32, int8, int32  # noqa: F401
from compiler.ir.dtypes import bool_ as bool  # noqa: F401,A001  (tc.bool, as torch.bool)
from compiler.frontend.random import bernoulli, manual_seed, rand, randint, randn, randperm, uniform  # noqa: F401
from compiler.frontend.tensor import (Tensor, ShapeError, arange, cat, eye, full, hstack, ones, realize, stack,  # noqa: F401
                             tensor, vstack, where, zeros)
from compiler.ir import dtypes  # noqa: F401
from runtime.device import Device  # noqa: F401
# --- end of tensor frontend -------------------------------------------------------------------------
# --- chip compiler and simulated device --------------------------------------------------------------
from compiler.lower.dispatch import CompiledModel, compile_model as compile  # noqa: F401,A001
from compiler.lower.schedule import ChipCompileError  # noqa: F401
import runtime.sim_backend  # noqa: F401,E402  (registers Device("sim") and Device("rtl"))
# --- end of chip compiler ---------------------------------------------------------------------------
# --- ISA, simulator, RTL and comparison devices ----------------------------------------------------
from isa import (ChipConfig, PRESETS, Program, TetrachipError, assemble, assemble_file,  # noqa: F401,E402
                 disassemble)
from sim import Chip, SimError, Stats, System, Trace  # noqa: F401,E402
from rtl import Chip as RtlChip, Ring as RtlRing, generate_verilog  # noqa: F401,E402
import runtime.gpu_devices  # noqa: F401,E402  (registers Device("opencl"), Device("cuda"), Device("triton"))
from runtime.gpu_common import DeviceUnavailable  # noqa: F401,E402
# --- end of ISA, simulator, RTL ---------------------------------------------------------------------
