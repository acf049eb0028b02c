"""Read-only numpy arrays (pandas 3's ``DataFrame.values`` under copy-on-write, a read-only memory
map) reach torch as copies (issue 54): ``torch.as_tensor``/``torch.from_numpy`` of one shares
read-only memory and warns "The given NumPy array is not writable" (once per process, so the test
watches the calls themselves, not the warning)."""
from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Gaussian


@pytest.fixture()
def read_only_calls(monkeypatch):
    """Where a read-only numpy array was handed to torch.as_tensor or torch.from_numpy."""
    calls = []

    def watch(convert):
        def watched(x, *args, **kwargs):
            if isinstance(x, np.ndarray) and not x.flags.writeable:
                calls.append(traceback.format_stack(limit=3)[0].strip())
            return convert(x, *args, **kwargs)
        return watched

    monkeypatch.setattr(torch, "as_tensor", watch(torch.as_tensor))
    monkeypatch.setattr(torch, "from_numpy", watch(torch.from_numpy))
    return calls


def test_pandas_frames_reach_torch_as_copies(tmp_path, read_only_calls):
    rng = np.random.default_rng(0)
    pd = pytest.importorskip("pandas")  # (not among the test extra's packages: a user's clone may lack it)
    frame = pd.DataFrame({"x": rng.uniform(-2, 2, 40)})
    frame["y"] = np.sin(2 * frame["x"])
    X, Y = frame[["x"]].values, frame[["y"]].values
    if X.flags.writeable:
        pytest.skip(f"pandas {pd.__version__} hands out writable .values (copy-on-write is pandas 3's)")
    model = savigp.SAVIGP(X, Y, Gaussian(), inducing_inputs=X[:6], prior_mean=frame["y"].values[:1])
    savigp.fit(model, iterations=2, progress=False)
    model.predict(frame[["x"]])
    path = str(tmp_path / "m.pt")
    savigp.save(model, path)
    saved = savigp.load(path)
    saved.predict(X)
    saved.evaluate(X, Y)
    memmap = np.lib.format.open_memmap(str(tmp_path / "x.npy"), mode="w+", shape=X.shape)
    memmap[:] = X
    del memmap
    model.predict(np.load(str(tmp_path / "x.npy"), mmap_mode="r"))
    spread = frame[["x"]].std().values  # (1,), read-only too
    savigp.kernels.KERNELS["rbf"](1, 1, lengthscale=spread)
    savigp.odvff_model(X, Y, Gaussian(), num_frequencies=3, mean_basis_size=2, lengthscale=spread)
    assert read_only_calls == [], "\n".join(read_only_calls)
