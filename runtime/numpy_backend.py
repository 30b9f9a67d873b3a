"""``Device("numpy")``, the reference backend: an IR graph executed with numpy by
``compiler.ir.evaluate`` (each primitive's meaning is ``compiler.ir.semantics.apply``; the compiler
owns the reference meaning of its IR and evaluates graphs with it too).
"""
from __future__ import annotations

import numpy as np

from compiler.ir.evaluate import evaluate
from compiler.ir.graph import Node


class NumpyBackend:
    name = "numpy"

    def execute(self, outputs: list[Node], feeds: dict) -> list[np.ndarray]:
        return evaluate(outputs, feeds)
