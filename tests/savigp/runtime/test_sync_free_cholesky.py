"""savigp.runtime.sync_free.cholesky: no host read inside a deferred block (a failure is flagged on
the device and the factor's diagonal set to NaN); outside one, torch.linalg.cholesky's error."""
import pytest
import torch

from savigp.runtime import sync_free


def _spd(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(2, n, n, dtype=torch.float64, generator=g)
    return A @ A.transpose(-1, -2) + n * torch.eye(n, dtype=torch.float64)


def test_a_good_factor_is_the_plain_cholesky_inside_and_outside_a_deferred_block():
    A = _spd()
    flags = sync_free.StepFlags(A.device)
    with sync_free.deferred(flags):
        L = sync_free.cholesky(A)
    assert torch.equal(L, torch.linalg.cholesky(A)) and not bool(flags.cholesky)
    assert torch.equal(sync_free.cholesky(A), torch.linalg.cholesky(A))


def test_a_failed_factor_is_flagged_and_made_nan_only_where_it_failed():
    A = _spd()
    A[1] = -A[1]  # the second matrix is not positive definite
    flags = sync_free.StepFlags(A.device)
    with sync_free.deferred(flags):
        L = sync_free.cholesky(A)
    assert bool(flags.cholesky)
    assert torch.equal(L[0], torch.linalg.cholesky(A[0]))
    assert torch.isnan(L[1].diagonal()).all()
    with sync_free.deferred(flags):  # flag=None: nothing recorded, the NaN factor remains
        flags.reset()
        L = sync_free.cholesky(A, flag=None)
    assert not bool(flags.cholesky) and torch.isnan(L[1].diagonal()).all()
    with pytest.raises(torch.linalg.LinAlgError):
        sync_free.cholesky(A)
