"""End-to-end training on scikit-learn's bundled digits (8x8, 1797 images, no download):
an MLP and a small CNN trained with Adam on the numpy reference device.

Each takes a few seconds to tens of seconds on a 2-core machine; the tests assert accuracy only.
"""
import contextlib
import time

import numpy as np
import pytest

import tetrachip as tc

nn, F = tc.nn, tc.functional


@pytest.fixture(scope="module")
def digits():
    datasets = pytest.importorskip("sklearn.datasets")
    model_selection = pytest.importorskip("sklearn.model_selection")
    X, y = datasets.load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    Xtr, Xte, ytr, yte = model_selection.train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    mu, sd = Xtr.mean(), Xtr.std()
    return (Xtr - mu) / sd, (Xte - mu) / sd, ytr.astype(np.int32), yte.astype(np.int32)


def _one_blas_thread():
    """The matrices here are tiny: a multi-threaded BLAS only spins (twice the CPU time on 2 cores)."""
    try:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def train(model, data, shape, epochs, lr, batch, seed=0):
    with _one_blas_thread():
        return _train(model, data, shape, epochs, lr, batch, seed)


def _train(model, data, shape, epochs, lr, batch, seed):
    Xtr, Xte, ytr, yte = data
    opt = tc.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.train()
        perm = rng.permutation(len(Xtr))
        for i in range(0, len(perm), batch):
            b = perm[i:i + batch]
            loss = F.cross_entropy(model(tc.Tensor(Xtr[b].reshape(shape))), tc.Tensor(ytr[b]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    pred = model(tc.Tensor(Xte.reshape(shape))).argmax(1).numpy()
    acc = float((pred == yte).mean())
    print(f"{type(model).__name__}: test accuracy {acc:.4f}, training {seconds:.1f} s")
    return acc, float(loss.item())


def test_mlp_on_digits(digits):
    tc.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    acc, last_loss = train(model, digits, (-1, 64), epochs=10, lr=0.01, batch=64)
    assert acc >= 0.95, acc
    assert last_loss < 0.5


def test_cnn_on_digits(digits):
    tc.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
    acc, _ = train(model, digits, (-1, 1, 8, 8), epochs=10, lr=0.01, batch=128)
    assert acc >= 0.97, acc


def test_untrained_model_is_near_chance(digits):
    """The accuracy assertions above can fail: an untrained model scores near 10%."""
    tc.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    _, Xte, _, yte = digits
    acc = float((model(tc.Tensor(Xte)).argmax(1).numpy() == yte).mean())
    assert acc < 0.3
