"""Importers of models written elsewhere into the tensor frontend.

``compiler.importers.onnx_import.load`` reads an ONNX model, ``compiler.importers.torch_import.from_torch``
a PyTorch module (through ``torch.export``), each into an ``nn.Module`` whose ``forward`` evaluates the
graph with frontend ops. The error classes live here so that naming one does not import ``onnx`` or
``torch``.
"""
from isa.errors import TetrachipError


class OnnxImportError(TetrachipError, ValueError):
    """An ONNX model the importer cannot read: a bad file, unsupported operators or attributes,
    or inputs that do not match the graph's."""


class TorchImportError(TetrachipError, ValueError):
    """A PyTorch model the importer cannot take: an export failure, unsupported ops (all listed),
    an argument of an op it does not handle, or inputs of the wrong number or shape."""
