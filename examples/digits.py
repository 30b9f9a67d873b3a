"""Digits models (scikit-learn's bundled 8x8 digits, no download): an MLP and a small CNN.

Trained with Adam on the numpy reference backend in a few seconds. Used by ``make demo``
(``runtime/demo.py``) and ``bench/models.py``; also a model file for the CLI::

    tetrachip run examples/digits.py --device sim --config base --trace out/digits.json

(the CLI convention: this file defines ``model``, ``inputs``, ``calibration`` and ``labels``).
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

import tetrachip as tc

nn, F = tc.nn, tc.functional


def load(test_size: float = 0.25, seed: int = 0):
    """(Xtr, Xte, ytr, yte): standardized float32 images (N, 64) and int32 labels."""
    from sklearn import datasets, model_selection
    X, y = datasets.load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    Xtr, Xte, ytr, yte = model_selection.train_test_split(X, y, test_size=test_size, random_state=seed,
                                                          stratify=y)
    mu, sd = Xtr.mean(), Xtr.std()
    return (Xtr - mu) / sd, (Xte - mu) / sd, ytr.astype(np.int32), yte.astype(np.int32)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


class CNN(nn.Module):
    """conv 3x3 (1->16) + ReLU, conv 3x3 stride 2 (16->32) + ReLU, linear 512 -> 10."""

    def __init__(self):
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.c2(self.c1(x).relu()).relu().flatten(1))


class BNCNN(nn.Module):
    """conv 3x3 (1->16) + BatchNorm + ReLU, 2x2 max-pool, conv 3x3 (16->32) + BatchNorm + ReLU, 2x2 average
    pool, linear 128 -> 10: the layers of a modern CNN (BatchNorm folded into the convs on the chip)."""

    def __init__(self):
        self.c1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        y = F.max_pool2d(self.b1(self.c1(x)).relu(), 2)
        y = F.avg_pool2d(self.b2(self.c2(y)).relu(), 2)
        return self.fc(y.flatten(1))


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def train(model, data, shape, epochs: int = 10, lr: float = 0.01, batch: int = 64, seed: int = 0,
          progress=None) -> float:
    """Train in place; returns the float test accuracy. ``progress(epoch, loss)`` is called per epoch."""
    Xtr, Xte, ytr, yte = data
    opt = tc.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    with _one_blas_thread():
        for ep in range(epochs):
            model.train()
            perm = rng.permutation(len(Xtr))
            for i in range(0, len(perm), batch):
                b = perm[i:i + batch]
                loss = F.cross_entropy(model(tc.Tensor(Xtr[b].reshape(shape))), tc.Tensor(ytr[b]))
                opt.zero_grad()
                loss.backward()
                opt.step()
            if progress:
                progress(ep, float(loss.item()))
        model.eval()
        return accuracy(model(tc.Tensor(Xte.reshape(shape))).numpy(), yte)


def accuracy(logits, labels) -> float:
    return float(np.mean(np.argmax(logits, axis=-1) == labels))


def trained(kind: str = "mlp", epochs: int = 10, progress=None):
    """(model, data, input shape, float accuracy) of a freshly trained digits model."""
    tc.manual_seed(0)
    data = load()
    if kind == "mlp":
        model, shape = mlp(), (-1, 64)
        acc = train(model, data, shape, epochs, lr=0.01, batch=64, progress=progress)
    else:
        model, shape = (BNCNN() if kind == "bncnn" else CNN()), (-1, 1, 8, 8)
        acc = train(model, data, shape, epochs, lr=0.01, batch=64, progress=progress)
    return model, data, shape, acc


if __name__ == "__tetrachip_run__":      # tetrachip run examples/digits.py
    t0 = time.perf_counter()
    model, (Xtr, Xte, ytr, yte), _shape, _acc = trained("mlp")
    inputs = [Xte]
    calibration = [[Xtr[:len(Xte)]]]      # same shape as the inputs the model is compiled for
    labels = yte
    print(f"trained the digits MLP in {time.perf_counter() - t0:.1f} s (float test accuracy {100 * _acc:.2f}%)")
