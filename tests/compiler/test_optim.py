"""Optimizers against hand-written numpy updates (and torch.optim when present)."""
import numpy as np
import pytest

import tetrachip as tc

try:
    import torch
except ImportError:
    torch = None

A = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]], np.float32)
T = np.array([0.5, -1.0], np.float32)


def loss_grad(w):
    """loss = sum((A @ w - T)^2); numpy gradient."""
    r = A.astype(np.float64) @ w - T
    return 2 * A.T.astype(np.float64) @ r


def run_tc(opt_cls, steps=5, **kw):
    w = tc.Tensor(np.array([0.2, -0.4, 0.9], np.float32), requires_grad=True)
    opt = opt_cls([w], **kw)
    for _ in range(steps):
        loss = ((tc.Tensor(A) @ w - tc.Tensor(T)) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.numpy()


def np_sgd(w, steps, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    buf = None
    for _ in range(steps):
        g = loss_grad(w) + weight_decay * w
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def np_adam(w, steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    m = v = 0
    for t in range(1, steps + 1):
        g = loss_grad(w)
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        w = w - lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
    return w


W0 = np.array([0.2, -0.4, 0.9])
CASES = [
    ("sgd", tc.optim.SGD, dict(lr=0.05), lambda: np_sgd(W0, 5, 0.05)),
    ("sgd_momentum", tc.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01),
     lambda: np_sgd(W0, 5, 0.05, 0.9, 0.01)),
    ("sgd_nesterov", tc.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True),
     lambda: np_sgd(W0, 5, 0.05, 0.8, nesterov=True)),
    ("adam", tc.optim.Adam, dict(lr=0.1), lambda: np_adam(W0, 5, 0.1)),
    ("adam_l2", tc.optim.Adam, dict(lr=0.1, weight_decay=0.1), lambda: np_adam(W0, 5, 0.1, weight_decay=0.1)),
    ("adamw", tc.optim.AdamW, dict(lr=0.1, weight_decay=0.1),
     lambda: np_adam(W0, 5, 0.1, weight_decay=0.1, decoupled=True)),
]


@pytest.mark.parametrize("name, cls, kw, ref", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy(name, cls, kw, ref):
    np.testing.assert_allclose(run_tc(cls, **kw), ref(), rtol=1e-4, atol=1e-5)


TORCH = {"SGD": "SGD", "Adam": "Adam", "AdamW": "AdamW"}


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name, cls, kw, ref", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_torch(name, cls, kw, ref):
    w = torch.tensor([0.2, -0.4, 0.9], requires_grad=True)
    opt = getattr(torch.optim, TORCH[cls.__name__])([w], **kw)
    for _ in range(5):
        loss = ((torch.tensor(A) @ w - torch.tensor(T)) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    np.testing.assert_allclose(run_tc(cls, **kw), w.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gradients_accumulate_until_zero_grad():
    w = tc.Tensor(np.ones(3, np.float32), requires_grad=True)
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [5, 5, 5])
    opt = tc.optim.SGD([w], lr=1.0)
    opt.zero_grad()
    assert w.grad is None


def test_optimizer_rejects_non_parameters():
    with pytest.raises(ValueError, match="require grad"):
        tc.optim.SGD([tc.ones(3)], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        tc.optim.Adam([], lr=0.1)


def test_subclassing_the_base_optimizer():
    class SignSGD(tc.optim.Optimizer):
        def update(self, p, g, state):
            state["n"] = state.get("n", 0) + 1
            return p - self.lr * g.sign()
    w = tc.Tensor(np.array([1.0, -1.0], np.float32), requires_grad=True)
    opt = SignSGD([w], lr=0.25)
    (w * tc.Tensor(np.array([3.0, -2.0], np.float32))).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.75, -0.75])
    assert opt.state[0]["n"] == 1
