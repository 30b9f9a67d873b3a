"""Importers of models written elsewhere into the tensor frontend.

``compiler.importers.onnx_import.load`` reads an ONNX model into an ``nn.Module`` whose ``forward``
evaluates the graph with frontend ops. The error class lives here so that naming it does not
import the ``onnx`` package.
"""
from isa.errors import TetrachipError


class OnnxImportError(TetrachipError, ValueError):
    """An ONNX model the importer cannot read: a bad file, unsupported operators or attributes,
    or inputs that do not match the graph's."""
