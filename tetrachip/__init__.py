"""tetrachip: ``import tetrachip as tc`` — the public facade (re-exports only, no logic).

The tensor frontend and ``tc.Device`` load with the package. The chip layers (the chip compiler,
the ISA, the simulator, the Amaranth RTL, the GPU comparison devices) load on first use of one of
their names (``_LAZY`` below), so ``import tetrachip`` does not pay for Amaranth or a GPU library;
``Device(name)`` likewise imports a backend's module only when that device is first built
(``runtime.device.BACKENDS``).
"""
from importlib import import_module as _import_module

# --- tensor frontend and reference runtime ---------------------------------------------------------
from compiler.frontend import functional  # noqa: F401
from compiler.frontend import nn  # noqa: F401
from compiler.frontend import optim  # noqa: F401
from compiler.frontend.autograd import no_grad  # noqa: F401
from compiler.frontend.control import cond, loop, while_loop  # noqa: F401
from compiler.ir.dtypes import DType, bool_, float32, int8, int32  # noqa: F401
from compiler.ir.dtypes import bool_ as bool  # noqa: F401,A001  (tc.bool, as torch.bool)
from compiler.frontend.random import bernoulli, manual_seed, rand, randint, randn, randperm, uniform  # noqa: F401
from compiler.frontend.shapes import ShapeError  # noqa: F401
from compiler.frontend.tensor import (Tensor, arange, cat, eye, full, hstack, ones, realize, stack,  # noqa: F401
                             tensor, vstack, where, zeros)
from compiler.ir import dtypes  # noqa: F401
from runtime.device import Device  # noqa: F401
# --- end of tensor frontend -------------------------------------------------------------------------

# name -> (module, attribute), imported on first use of the name
_LAZY = {
    # --- chip compiler ---
    "CompiledModel": ("compiler.lower.pipeline", "CompiledModel"),
    "compile": ("compiler.lower.shard", "compile"),
    "ChipCompileError": ("compiler.lower.schedule", "ChipCompileError"),
    # --- text generation (a GPT decoder; its decode step compiled once, a KV cache in chip DRAM) ---
    "GPT": ("compiler.frontend.gpt", "GPT"),
    "Generator": ("runtime.generate", "Generator"),
    # --- ISA ---
    "ChipConfig": ("isa", "ChipConfig"),
    "PRESETS": ("isa", "PRESETS"),
    "Program": ("isa", "Program"),
    "TetrachipError": ("isa", "TetrachipError"),
    "assemble": ("isa", "assemble"),
    "assemble_file": ("isa", "assemble_file"),
    "disassemble": ("isa", "disassemble"),
    # --- simulator ---
    "Chip": ("sim", "Chip"),
    "SimError": ("sim", "SimError"),
    "Stats": ("sim", "Stats"),
    "System": ("sim", "System"),
    "Trace": ("sim", "Trace"),
    # --- RTL (Amaranth) ---
    "RtlChip": ("rtl", "Chip"),
    "RtlRing": ("rtl", "Ring"),
    "generate_verilog": ("rtl", "generate_verilog"),
    # --- GPU comparison devices ---
    "DeviceUnavailable": ("runtime.gpu_common", "DeviceUnavailable"),
    # --- importers (a module name with attribute None is the module itself) ---
    "onnx": ("tetrachip.onnx", None),
    "OnnxImportError": ("compiler.importers", "OnnxImportError"),
    "from_torch": ("compiler.importers.torch_import", "from_torch"),      # imports torch when called
    "TorchImportError": ("compiler.importers", "TorchImportError"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tetrachip' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = _import_module(module) if attr is None else getattr(_import_module(module), attr)
    globals()[name] = value               # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
