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
(Verilator, ``Device("rtl")``, verify/cosim.py); ``--device opencl`` evaluates the float model on
the OpenCL device.

``tetrachip run MODEL.onnx --input x.npy [--input y.npy ...]`` runs an ONNX model
(``tc.onnx.load``, docs/import.md) on the same devices: one ``--input`` per graph input, in the
graph's order or as ``NAME=FILE.npy``. On the chip the outputs are compared with the compiled
model's integer reference (``cm.reference``), which they must equal exactly.
"""
from __future__ import annotations

import json
import runpy
import time
from pathlib import Path

import click
import numpy as np

from isa.errors import TetrachipError
from isa.outputs import write_atomic
from runtime.cli_args import CONFIG, INPUT_FILE, OUTPUT_FILE, check_output, check_suffix

#: most chips ``--chips`` shards a model over (each is a whole simulated chip in this process)
MAX_CHIPS = 1024


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


def _load_npy(path: Path) -> np.ndarray:
    if not path.is_file():
        raise click.BadParameter(f"{path}: no such file" if not path.exists() else f"{path}: is a folder, not a file",
                                 param_hint="'--input'")
    try:
        a = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001  (numpy raises OSError, ValueError, EOFError, zip errors)
        raise TetrachipError(f"{path}: not a loadable .npy array ({e})") from None
    if not isinstance(a, np.ndarray):
        raise TetrachipError(f"{path}: not a loadable .npy array (an .npz archive; give one array per --input)")
    return a


def _check_array(origin: str, what: str, a) -> np.ndarray:
    """``a`` as an array if it is a numeric array of at least one row of finite values, else one line."""
    try:
        arr = np.asarray(a)
    except Exception as e:  # noqa: BLE001  (a ragged list, an object that is not an array)
        raise TetrachipError(f"{origin}: {what} is not an array ({type(e).__name__}: {e})") from None
    if arr.dtype.kind not in "biuf":
        raise TetrachipError(f"{origin}: {what} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise TetrachipError(f"{origin}: {what} is a scalar; the model takes arrays with a batch (rows) axis")
    if arr.size == 0:
        raise TetrachipError(f"{origin}: {what} has shape {arr.shape}: no rows (a batch of at least 1)")
    from compiler.lower.compiled import nonfinite
    why = nonfinite(arr)
    if why:
        raise TetrachipError(f"{origin}: {what} {why}; the chip takes finite numbers")
    return arr


def _check_inputs(origin: str, what: str, inputs) -> list[np.ndarray]:
    """The arrays of one set of inputs (an array, a list/tuple, or a dict name -> array), each checked."""
    if isinstance(inputs, dict):
        items = [(f"{what}[{k!r}]", v) for k, v in inputs.items()]
    elif isinstance(inputs, (list, tuple)):
        items = [(f"{what}[{i}]", v) for i, v in enumerate(inputs)]
    else:
        items = [(what, inputs)]
    if not items:
        raise TetrachipError(f"{origin}: {what} is empty; the model takes at least one input array")
    return [_check_array(origin, name, v) for name, v in items]


def _check_model(path: Path, ns: dict) -> None:
    """Before any compile or run: ``model`` is callable, ``inputs`` (and ``calibration``) are finite numeric
    arrays with rows, the model accepts their shapes (a graph is built, nothing computed) and ``labels``
    has one integer per row of the first output."""
    from compiler.frontend.tensor import Tensor
    model = ns["model"]
    if not callable(model):
        raise TetrachipError(f"{path}: `model` must be a tc.nn.Module or a function of Tensors, "
                             f"got {type(model).__name__}")
    arrays = _check_inputs(str(path), "inputs", ns["inputs"])
    if ns.get("calibration") is not None:
        cal = ns["calibration"]
        if not isinstance(cal, (list, tuple)) or not cal:
            raise TetrachipError(f"{path}: `calibration` must be a non-empty list of inputs (each like `inputs`)")
        for i, c in enumerate(cal):
            got = _check_inputs(str(path), f"calibration[{i}]", c)
            if len(got) != len(arrays):
                raise TetrachipError(f"{path}: calibration[{i}] has {len(got)} array(s); the model takes "
                                     f"{len(arrays)} (like `inputs`)")
    try:
        out = model(*[Tensor(a.astype(np.float32)) for a in arrays])
        first = out[0] if isinstance(out, (list, tuple)) else out
        shape = tuple(first.shape)
    except TetrachipError as e:
        raise TetrachipError(f"{path}: the model does not take its inputs: {e}") from None
    except Exception as e:  # noqa: BLE001  (the user's model: a shape mismatch, a wrong argument count)
        raise TetrachipError(f"{path}: the model does not take its inputs "
                             f"({', '.join(str(a.shape) for a in arrays)}): {type(e).__name__}: {e}") from None
    if "labels" in ns:
        try:
            labels = np.asarray(ns["labels"])
        except Exception as e:  # noqa: BLE001
            raise TetrachipError(f"{path}: `labels` is not an array ({e})") from None
        if labels.dtype.kind not in "iub":
            raise TetrachipError(f"{path}: `labels` must be integer class indices, got dtype {labels.dtype}")
        if not shape or labels.shape != shape[:-1]:
            raise TetrachipError(f"{path}: `labels` has shape {labels.shape}; the first output has shape {shape}, "
                                 f"so labels needs shape {shape[:-1]} (one class per row)")
        if labels.size and (labels.min() < 0 or labels.max() >= shape[-1]):
            raise TetrachipError(f"{path}: `labels` must be class indices 0..{shape[-1] - 1} (the first output's "
                                 f"last axis)")


def _load_onnx(path: Path, specs: tuple[str, ...]) -> dict:
    """The namespace a model file would define, for an ONNX model and its ``--input`` files."""
    from compiler.importers.onnx_import import load
    model = load(path)
    names = model.input_names
    if not specs:
        raise click.BadParameter(f"{path}: the model takes {len(names)} input(s) ({', '.join(names)}): give one "
                                 f"--input FILE.npy for each", param_hint="'--input'")
    named: dict = {}
    for i, spec in enumerate(specs):
        name, sep, file = spec.partition("=")
        if sep and name in names:
            named[name] = _load_npy(Path(file))
        elif i < len(names) and not sep:
            named[names[i]] = _load_npy(Path(spec))
        else:
            raise click.BadParameter(f"{spec!r}: the model takes {len(names)} input(s) ({', '.join(names)}); "
                                     f"give FILE.npy in that order or NAME=FILE.npy", param_hint="'--input'")
    missing = [n for n in names if n not in named]
    if missing:
        raise click.BadParameter(f"{path}: no --input for {', '.join(missing)} (the model takes "
                                 f"{', '.join(names)})", param_hint="'--input'")
    inputs = [named[n] for n in names]
    for n, a in zip(names, inputs):
        _check_array(str(path), f"input {n!r}", a)
    try:
        model(*inputs)                    # checks every input's shape against the graph: one line if wrong
    except TetrachipError as e:
        raise TetrachipError(f"{path}: {e}") from None
    return {"model": model, "inputs": inputs}


def _device(name: str, **kw):
    from runtime.device import Device
    from runtime.gpu_common import DeviceUnavailable
    try:
        return Device(name, **kw)
    except DeviceUnavailable as e:
        raise TetrachipError(f"--device {name}: {e}") from None


@click.command("run")
@click.argument("file", type=INPUT_FILE)
@click.option("--input", "input_files", multiple=True, metavar="[NAME=]FILE.npy",
              help="an input of a .onnx model (repeat: one per graph input, in order, or NAME=FILE.npy)")
@click.option("--device", type=click.Choice(["numpy", "sim", "opencl", "rtl"]), default="sim", show_default=True)
@click.option("--config", "config", type=CONFIG, default="base", show_default=True,
              help="config preset (tiny, small, base, large, tpu) or a .toml/.json file")
@click.option("--trace", "trace", type=OUTPUT_FILE,
              help="write a Chrome/Perfetto trace of the simulated run (instances and counter tracks)")
@click.option("--plot", "plot", type=OUTPUT_FILE,
              help="write a PNG of the chip run: per-unit timeline and utilization (sim and rtl devices)")
@click.option("--json", "json_out", type=OUTPUT_FILE,
              help="write outputs summary, Stats and compile figures as JSON")
@click.option("--chips", type=click.IntRange(1, MAX_CHIPS), default=1, show_default=True,
              help="shard the model over this many chips (sim and rtl devices; docs/sharding.md)")
@click.option("--parallel", type=click.Choice(["auto", "data", "tensor", "pipeline"]), default="auto",
              show_default=True, help="how --chips > 1 shards the model")
@click.option("--topology", type=click.Choice(["ring", "torus2d"]), default="ring", show_default=True,
              help="how --chips > 1 are wired (torus2d: a config with 4 link ports)")
def run_cmd(file: Path, input_files: tuple[str, ...], device: str, config: str, trace: Path | None,
            plot: Path | None, json_out: Path | None, chips: int, parallel: str, topology: str) -> None:
    """Run the model FILE.py defines (``model``, ``inputs``; optional ``calibration``, ``labels``),
    or the ONNX model FILE.onnx on its ``--input`` arrays."""
    from compiler.frontend.tensor import Tensor
    from compiler.lower.dispatch import compile_model
    is_onnx = file.suffix.lower() == ".onnx"
    if chips > 1 and device not in ("sim", "rtl"):
        raise click.BadParameter(f"{chips}: the sim and rtl devices run a model over several chips, not "
                                 f"--device {device}", param_hint="'--chips'")
    if chips > 1 and plot:
        raise click.BadParameter(f"draws one chip's timeline; with --chips {chips} use --trace", param_hint="'--plot'")
    if plot and device in ("numpy", "opencl"):
        raise click.BadParameter(f"--device {device} has no timeline; use --device sim", param_hint="'--plot'")
    if trace and device in ("numpy", "opencl"):
        raise click.BadParameter(f"--device {device} records no trace; use --device sim", param_hint="'--trace'")
    if input_files and not is_onnx:
        raise click.BadParameter(f"{file}: --input is for .onnx models (a model file defines `inputs`)",
                                 param_hint="'--input'")
    check_suffix(plot, "--plot", (".png",))
    sources = [file, *(Path(spec.partition("=")[2] or spec) for spec in input_files),
               *([Path(config)] if Path(config).is_file() else [])]
    for path, option in ((trace, "--trace"), (plot, "--plot"), (json_out, "--json")):
        check_output(path, option, inputs=sources)
    if device in ("sim", "rtl"):
        from isa import ChipConfig
        ChipConfig.load(config)                         # its content, before any compile
    ns = _load_onnx(file, input_files) if is_onnx else _load(file)
    if not is_onnx:
        _check_model(file, ns)
    model, inputs = ns["model"], _as_list(ns["inputs"])
    report: dict = {"file": str(file), "device": device, "config": config}
    t0 = time.perf_counter()
    if device == "rtl":
        _device("rtl", config=config, chips=chips)    # before compiling: one line if no HDL simulator
    if device in ("numpy", "opencl"):
        args = list(inputs.values()) if isinstance(inputs, dict) else inputs
        if not is_onnx:
            args = [Tensor(np.asarray(a, np.float32)) for a in args]
        out = model(*args)
        outs = _device(device).run(*(out if isinstance(out, (list, tuple)) else [out]))
    elif chips > 1:
        _run_sharded(model, inputs, ns, device, config, chips, parallel, topology, trace, report, sources)
        outs = report.pop("_outputs")
    else:
        cm = compile_model(model, inputs, config=config, calibration=ns.get("calibration"))
        click.echo(cm.summary())
        dev = _device(device, config=config, trace=bool(trace or plot))
        args = [inputs] if isinstance(inputs, dict) else inputs
        res = dev.run(cm, *args)
        outs = res.outputs
        ref = cm.reference(*args)
        err = max((float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)), initial=0.0))
                   for o, r in zip(outs, ref)), default=0.0)
        click.echo(res.stats.table())
        s = res.stats
        click.echo(f"chip: {s.cycles} cycles, MXU utilization {100 * s.mxu_utilization:.2f}%, "
                   f"{s.instructions} instructions; max |chip - reference| = {err:g}")
        report["stats"] = s.to_dict()
        report["max_abs_vs_reference"] = err
        report["compile_s"] = cm.compile_s
        report["pages"] = [len(p) for p in getattr(cm, "pages", None) or [cm.program]]   # instructions per page
        report["plans"] = {k: p.to_dict() for k, p in cm.plans.items()}
        if trace:
            write_atomic(trace, json.dumps(res.trace.to_chrome()), inputs=sources)
            click.echo(f"trace: {trace} (open in https://ui.perfetto.dev)")
        if plot:
            from runtime.plots import plot_run
            plot_run(s, res.trace, plot, title=f"{file.name} on {s.config}: {s.cycles} cycles")
            click.echo(f"plot: {plot}")
    report["wall_s"] = time.perf_counter() - t0
    outs = [np.asarray(o) for o in outs]
    report["outputs"] = [{"shape": list(o.shape), "mean": float(np.mean(o)) if o.size else 0.0,
                          "absmax": float(np.max(np.abs(o))) if o.size else 0.0,
                          "first": [round(float(v), 6) for v in o.reshape(-1)[:6]]} for o in outs]
    names = getattr(model, "output_names", None) if is_onnx else None
    for i, o in enumerate(outs):
        first = [round(float(v), 4) for v in o.reshape(-1)[:6]]
        label = f"output {i}" + (f" ({names[i]})" if names else "")
        click.echo(f"{label}: shape {tuple(o.shape)}, first values {first}")
    if "labels" in ns:
        acc = float(np.mean(np.argmax(outs[0], axis=-1) == np.asarray(ns["labels"])))
        report["accuracy"] = acc
        click.echo(f"accuracy: {100 * acc:.2f}%")
    if json_out:
        write_atomic(json_out, json.dumps(report, indent=2) + "\n", inputs=sources)


def _run_sharded(model, inputs, ns, device, config, chips, parallel, topology, trace, report, sources) -> None:
    """``--chips N``: the model sharded (``tc.compile(..., chips=N)``) and run on N chips; the outputs must equal
    the single-chip model's reference."""
    from compiler.lower.shard import compile as compile_sharded
    sm = compile_sharded(model, inputs, config, chips=chips, parallel=parallel, topology=topology,
                         calibration=ns.get("calibration"))
    click.echo(sm.summary())
    kw = {"topology": topology} if device == "sim" else {}
    dev = _device(device, config=config, chips=chips, trace=bool(trace), **kw)
    args = [inputs] if isinstance(inputs, dict) else inputs
    res = dev.run(sm, *args)
    ref = sm.reference(*args)
    err = max((float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)), initial=0.0))
               for o, r in zip(res.outputs, ref)), default=0.0)
    click.echo(res.stats.table())
    click.echo(f"{chips} chips ({sm.parallel} parallel, {topology}): {res.stats.cycles} cycles, "
               f"{res.stats.link_bytes} link bytes; max |chips - reference| = {err:g}")
    report.update(chips=chips, parallel=sm.parallel, topology=topology, cycles=res.stats.cycles,
                  stats=[st.to_dict() for st in res.stats], max_abs_vs_reference=err, compile_s=sm.compile_s,
                  _outputs=res.outputs)
    if trace:
        if res.trace is None:
            raise TetrachipError(f"--trace: --device {device} with --chips records no trace")
        write_atomic(trace, json.dumps(res.trace.to_chrome()), inputs=sources)
        click.echo(f"trace: {trace} (open in https://ui.perfetto.dev)")
