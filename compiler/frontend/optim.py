"""Optimizers: one ``Optimizer`` base (parameter groups of one, state per parameter, a
single graph execution per step) and SGD (momentum, Nesterov, weight decay), Adam, AdamW."""
from __future__ import annotations

from compiler.ir import engine
from compiler.frontend.autograd import no_grad
from compiler.frontend.shapes import ShapeError
from compiler.frontend.tensor import Tensor


class Optimizer:
    def __init__(self, params, lr: float):
        try:
            self.params = [p for p in params]
        except TypeError:
            raise ShapeError(f"optimizer: params must be an iterable of parameters, got {type(params).__name__}") \
                from None
        if not self.params:
            raise ShapeError("optimizer got an empty parameter list")
        if any(not isinstance(p, Tensor) or not p.requires_grad for p in self.params):
            raise ShapeError("optimizer: every parameter must require grad (a float Tensor)")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 <= lr < float("inf"):
            raise ShapeError(f"optimizer: lr must be a finite number >= 0, got {lr!r}")
        self.lr = lr
        self.state: list[dict] = [{} for _ in self.params]
        self.steps = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Build every update lazily, then compute all of them (and the state) in one execution."""
        self.steps += 1
        outs = []
        with no_grad():
            for p, st in zip(self.params, self.state):
                if p.grad is None:
                    continue
                new = self.update(p.detach(), p.grad.detach(), st)
                p.node = new.node
                outs.append(p)
                outs.extend(v for v in st.values() if isinstance(v, Tensor))
        engine.realize(outs)

    def update(self, p: Tensor, g: Tensor, state: dict) -> Tensor:
        """The new value of parameter ``p`` given its gradient; may read and write ``state``."""
        raise NotImplementedError


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, lr)
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov

    def update(self, p, g, st):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = g if "buf" not in st else self.momentum * st["buf"] + g
            st["buf"] = buf
            g = g + self.momentum * buf if self.nesterov else buf
        return p - self.lr * g


class Adam(Optimizer):
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay

    def update(self, p, g, st):
        b1, b2 = self.betas
        if self.weight_decay and not self.decoupled:
            g = g + self.weight_decay * p
        if self.weight_decay and self.decoupled:
            p = p * (1 - self.lr * self.weight_decay)
        st["m"] = g * (1 - b1) if "m" not in st else st["m"] * b1 + g * (1 - b1)
        st["v"] = g * g * (1 - b2) if "v" not in st else st["v"] * b2 + g * g * (1 - b2)
        mhat = st["m"] * (1 / (1 - b1 ** self.steps))
        vhat = st["v"] * (1 / (1 - b2 ** self.steps))
        return p - self.lr * mhat / (vhat.sqrt() + self.eps)


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay)
