"""The default mixture entropy (Kolchinsky & Tracey 2017, the Bhattacharyya pairwise-distance lower
bound) against a brute-force Monte Carlo entropy: below it for random mixtures, within 0.01 Q M
nats of it when the components coincide and when they are far apart (where eq. (18) of Bonilla
et al. 2019 is 0.153 Q M nats loose), differentiable; and the choice of entropy in a model file."""
import math

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.posteriors.entropy import ENTROPY_ESTIMATES, entropy_bound, entropy_pairwise

DRAWS = 200_000


def _random_mixture(K, Q, M, diagonal, seed, spread=1.0):
    """Means ``(K, Q, M)`` (times ``spread``), factors ``(K, Q, M, M)`` or sds ``(K, Q, M)``, log pi ``(K,)``."""
    g = torch.Generator().manual_seed(seed)
    mean = spread * torch.randn(K, Q, M, generator=g, dtype=torch.float64)
    sd = 0.4 + torch.rand(K, Q, M, generator=g, dtype=torch.float64)
    if diagonal:
        L = sd
    else:
        L = torch.tril(0.4 * torch.randn(K, Q, M, M, generator=g, dtype=torch.float64), -1) + torch.diag_embed(sd)
    log_pi = torch.log_softmax(torch.randn(K, generator=g, dtype=torch.float64), 0)
    return mean, L, log_pi


def _brute_force_entropy(mean, L, log_pi, diagonal, n=DRAWS, seed=7):
    """-E_q[log q(v)] from n draws of the mixture over all Q M coordinates (torch.distributions),
    and its standard error."""
    K, Q, M = mean.shape
    g = torch.Generator().manual_seed(seed)
    F = torch.diag_embed(L) if diagonal else L  # (K, Q, M, M)
    cov = torch.stack([torch.block_diag(*(F[k] @ F[k].transpose(-1, -2))) for k in range(K)])  # (K, QM, QM)
    comps = torch.distributions.MultivariateNormal(mean.reshape(K, Q * M), covariance_matrix=cov)
    which = torch.multinomial(log_pi.exp(), n, replacement=True, generator=g)
    eps = torch.randn(n, Q * M, 1, generator=g, dtype=torch.float64)
    v = mean.reshape(K, Q * M)[which] + (torch.linalg.cholesky(cov)[which] @ eps).squeeze(-1)
    neg = -torch.logsumexp(comps.log_prob(v.unsqueeze(1)) + log_pi, dim=1)
    return float(neg.mean()), float(neg.std() / math.sqrt(n))


CASES = [(2, 1, 3), (3, 2, 2), (4, 1, 5), (2, 3, 2)]  # (K, Q, M)


@pytest.mark.parametrize("diagonal", [True, False])
@pytest.mark.parametrize("K, Q, M", CASES)
def test_pairwise_entropy_is_a_lower_bound_tighter_than_eq18(K, Q, M, diagonal):
    """Random overlapping mixtures: the bound lies below the brute-force entropy (within 4 standard
    errors) and above eq. (18)."""
    mean, L, log_pi = _random_mixture(K, Q, M, diagonal, seed=10 * K + Q + M)
    with torch.no_grad():
        h, se = _brute_force_entropy(mean, L, log_pi, diagonal)
        pw = float(entropy_pairwise(mean, L, log_pi, diagonal))
        jensen = float(entropy_bound(mean, L, log_pi, diagonal))
    assert pw < h + 4 * se, (pw, h, se)
    assert pw > jensen, (pw, jensen)


@pytest.mark.parametrize("diagonal", [True, False])
@pytest.mark.parametrize("K, Q, M", CASES)
def test_pairwise_entropy_is_tight_when_components_coincide_or_separate(K, Q, M, diagonal):
    """Coinciding components: exactly the component's entropy; components 100 sds apart: within
    0.01 Q M nats of the brute-force entropy (plus 4 standard errors), where eq. (18) is
    0.153 Q M nats below."""
    D = Q * M
    mean, L, log_pi = _random_mixture(K, Q, M, diagonal, seed=K + Q + M)
    same_mean, same_L = mean[:1].expand_as(mean).clone(), L[:1].expand_as(L).clone()
    F = torch.diag_embed(same_L[0]) if diagonal else same_L[0]
    exact = float(torch.distributions.MultivariateNormal(
        same_mean[0].reshape(D), scale_tril=torch.block_diag(*F)).entropy())
    with torch.no_grad():
        assert float(entropy_pairwise(same_mean, same_L, log_pi, diagonal)) == pytest.approx(exact, abs=1e-10)
        h, se = _brute_force_entropy(same_mean, same_L, log_pi, diagonal)
        assert abs(h - exact) < 4 * se  # the reference itself
        assert float(entropy_bound(same_mean, same_L, log_pi, diagonal)) == pytest.approx(
            exact - 0.5 * D * (1 - math.log(2)), abs=1e-9)
        far = mean * 100.0
        h, se = _brute_force_entropy(far, L, log_pi, diagonal)
        pw = float(entropy_pairwise(far, L, log_pi, diagonal))
        assert h - 0.01 * D - 4 * se < pw < h + 4 * se, (pw, h, se)
        assert float(entropy_bound(far, L, log_pi, diagonal)) < pw - 0.15 * D


@pytest.mark.parametrize("diagonal", [True, False])
def test_pairwise_entropy_gradcheck(diagonal):
    mean, L, log_pi = _random_mixture(3, 2, 2, diagonal, seed=3)
    logits = log_pi.clone().requires_grad_(True)
    mean.requires_grad_(True)
    L.requires_grad_(True)

    def f(m, l, z):
        return entropy_pairwise(m, torch.tril(l) if not diagonal else l, torch.log_softmax(z, 0), diagonal)

    assert torch.autograd.gradcheck(f, (mean, L, logits), eps=1e-6, atol=1e-7)


def test_default_entropy_and_model_files_keep_their_meaning(tmp_path):
    """New mixtures use the pairwise bound; "bound" (what every model file before it stored, or
    implied by storing nothing) still means eq. (18) after saving and loading."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(20, 2, generator=g, dtype=torch.float64)
    Y = torch.randn(20, 1, generator=g, dtype=torch.float64)
    assert ENTROPY_ESTIMATES[0] == "pairwise"
    model = savigp.SAVIGP(X, Y, Gaussian(variance=0.1), num_inducing=5, num_components=2, seed=1)
    assert model.posterior.entropy_estimate == "pairwise" and model.config["entropy"] == "pairwise"
    old = savigp.SAVIGP(X, Y, Gaussian(variance=0.1), num_inducing=5, num_components=2, seed=1, entropy="bound")
    post = old.posterior
    with torch.no_grad():
        expected = float(entropy_bound(post.mean, post.scale(), post.log_weights(), post.diagonal))
    for name, drop in (("bound.pt", False), ("none.pt", True)):
        path = tmp_path / name
        savigp.save(old, str(path))
        if drop:  # a file from before the field was recorded
            blob = torch.load(str(path), weights_only=True)
            del blob["config"]["model"]["entropy"]
            blob.pop("content_sha256", None)  # (edited: as a file written before the content digest)
            torch.save(blob, str(path))
        loaded = savigp.load(str(path)).model
        assert loaded.posterior.entropy_estimate == "bound"
        with torch.no_grad():
            assert float(loaded.posterior.entropy()) == pytest.approx(expected, rel=1e-12)
