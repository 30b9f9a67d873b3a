"""``tetrachip run FILE.py``: run a model file on the reference backend or the simulated chip.

FILE.py is plain Python that defines, at module level:

* ``model``        a ``tc.nn.Module`` or a function of Tensors returning a Tensor (or a tuple)
* ``inputs``       the input arrays: one array, a list of arrays, or a dict name -> array
* ``calibration``  (optional) a list of inputs (same form) used to choose the int8 scales;
                   default: ``inputs`` themselves
* ``labels``       (optional) integer class labels of the first output: accuracy is reported

``--device numpy`` evaluates the float model with the numpy reference; ``--device sim`` compiles
it for ``--config`` and runs it on the cycle-level simulator (Stats printed, ``--trace`` writes
a Perfetto trace); ``--device rtl`` runs the same program on the chip's Verilog under cocotb
(Verilator, ``Device("rtl")``, verify/cosim.py).
"""
from __future__ import annotations

import json
import runpy
import time
from pathlib import Path

import click
import numpy as np

from isa.errors import TetrachipError


def _load(path: Path) -> dict:
    try:
        ns = runpy.run_path(str(path), run_name="__tetrachip_run__")
    except FileNotFoundError:
        raise TetrachipError(f"{path}: no such file") from None
    except TetrachipError:
        raise
    except Exception as e:  # the user's file failed: one line, not a traceback
        raise TetrachipError(f"{path}: {type(e).__name__}: {e}") from None
    for need in ("model", "inputs"):
        if need not in ns:
            raise TetrachipError(f"{path}: defines no `{need}` (a model file defines `model` and `inputs`; "
                                 f"see `tetrachip run --help`)")
    return ns


def _as_list(inputs):
    if isinstance(inputs, dict):
        return inputs
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--device", type=click.Choice(["numpy", "sim", "rtl"]), default="sim", show_default=True)
@click.option("--config", "config", default="base", show_default=True,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file")
@click.option("--trace", "trace", type=click.Path(dir_okay=False, path_type=Path),
              help="write a Chrome/Perfetto trace of the simulated run")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              help="write outputs summary, Stats and compile figures as JSON")
def run_cmd(file: Path, device: str, config: str, trace: Path | None, json_out: Path | None) -> None:
    """Run the model FILE.py defines (``model``, ``inputs``; optional ``calibration``, ``labels``)."""
    from compiler.frontend.tensor import Tensor
    from compiler.lower.dispatch import compile_model
    from runtime.device import Device
    ns = _load(file)
    model, inputs = ns["model"], _as_list(ns["inputs"])
    report: dict = {"file": str(file), "device": device, "config": config}
    t0 = time.perf_counter()
    if device == "rtl":
        Device("rtl", config=config)                  # before compiling: one line if no HDL simulator
    if device == "numpy":
        args = list(inputs.values()) if isinstance(inputs, dict) else inputs
        out = model(*[Tensor(np.asarray(a, np.float32)) for a in args])
        outs = [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]
    else:
        cm = compile_model(model, inputs, config=config, calibration=ns.get("calibration"))
        click.echo(cm.summary())
        dev = Device(device, config=config, trace=bool(trace))
        res = dev.run(cm, *([inputs] if isinstance(inputs, dict) else inputs))
        outs = res.outputs
        click.echo(res.stats.table())
        report["stats"] = res.stats.to_dict()
        report["compile_s"] = cm.compile_s
        report["plans"] = {k: p.to_dict() for k, p in cm.plans.items()}
        if trace:
            try:
                res.trace.save_chrome(trace)
            except OSError as e:
                raise TetrachipError(f"{trace}: cannot write: {e.strerror}") from None
            click.echo(f"trace: {trace} (open in https://ui.perfetto.dev)")
    report["wall_s"] = time.perf_counter() - t0
    report["outputs"] = [{"shape": list(o.shape), "mean": float(np.mean(o)), "absmax": float(np.max(np.abs(o)))}
                         for o in outs]
    for i, o in enumerate(outs):
        first = [round(float(v), 4) for v in o.reshape(-1)[:6]]
        click.echo(f"output {i}: shape {tuple(o.shape)}, first values {first}")
    if "labels" in ns:
        acc = float(np.mean(np.argmax(outs[0], axis=-1) == np.asarray(ns["labels"])))
        report["accuracy"] = acc
        click.echo(f"accuracy: {100 * acc:.2f}%")
    if json_out:
        try:
            json_out.write_text(json.dumps(report, indent=2) + "\n")
        except OSError as e:
            raise TetrachipError(f"{json_out}: cannot write: {e.strerror}") from None
