"""``tc.onnx``: ONNX models as frontend modules (``tc.onnx.load(path)``); see docs/import.md.

Reached through ``tetrachip.__getattr__`` on first use, so ``import tetrachip`` does not import onnx.
"""
from compiler.importers import OnnxImportError  # noqa: F401
from compiler.importers.onnx_import import SUPPORTED, OnnxModel, load  # noqa: F401
