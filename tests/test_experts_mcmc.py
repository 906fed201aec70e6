"""Metropolis-within-Gibbs sampler of the BMEM (skbinvi/experts/_mcmc.py).

Exactness of the log densities against slow references (scipy.stats vMF and
loops), normalization of the Type I MABN prior by quadrature, and the
stationary distribution of the sampler: prior sampling with no data against
exact ancestral draws (KS tests), the truncation correction of the magnitude
proposal (with and without it), and a one-expert posterior against a grid.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import experts as REF
from numpy.testing import assert_allclose
from scipy import integrate, special, stats

from skbinvi.experts import _mcmc as M
from skbinvi.experts import _vmf as V

P_MIN = 1e-3  # KS p-value threshold for "same distribution" with fixed seeds


def _data(n=30, p=4, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, p))
    X[rng.uniform(size=X.shape) < 0.4] = 0.0
    y = (rng.uniform(size=n) < 0.5).astype(int)
    return X, y


# ---------------------------------------------------------------------------
# densities
# ---------------------------------------------------------------------------


def _slow_loglik(X, y, beta, eta):
    total = 0.0
    for n in range(X.shape[0]):
        e = np.array([eta[k] @ X[n] for k in range(beta.shape[0])])
        gate = np.exp(e - e.max())
        gate /= gate.sum()
        lik = 0.0
        for k in range(beta.shape[0]):
            t = beta[k] @ X[n]
            s1 = 1.0 / (1.0 + np.exp(-t))
            lik += gate[k] * (s1 if y[n] == 1 else 1.0 - s1)
        total += np.log(lik)
    return total


def test_log_likelihood_matches_loop_dense_and_sparse():
    X, y = _data()
    rng = np.random.RandomState(1)
    beta, eta = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    ref = _slow_loglik(X, y, beta, eta)
    assert_allclose(M.log_likelihood(X, y, beta, eta), ref, rtol=1e-12)
    assert_allclose(M.log_likelihood(sp.csr_matrix(X), y, beta, eta), ref, rtol=1e-12)
    assert M.log_likelihood(np.empty((0, 4)), np.empty(0), beta, eta) == 0.0


def test_log_likelihood_stable_for_large_projections():
    X, y = _data(n=10, p=3)
    rng = np.random.RandomState(2)
    beta, eta = 1e4 * rng.normal(size=(2, 3)), 1e4 * rng.normal(size=(2, 3))
    val = M.log_likelihood(X, y, beta, eta)
    assert np.isfinite(val) and val <= 0.0
    # K = 1: the gate is irrelevant; exact sum of log sigmoid
    b = rng.normal(size=(1, 3))
    ref = np.sum(np.log(special.expit((2 * y - 1) * (X @ b[0]))))
    assert_allclose(M.log_likelihood(X, y, b, 100.0 * rng.normal(size=(1, 3))),
                    ref, rtol=1e-12)


@pytest.mark.skipif(not hasattr(stats, "vonmises_fisher"),
                    reason="the reference, stats.vonmises_fisher, needs SciPy >= 1.11")
def test_mabn_type1_prior_matches_product_of_scipy_vmf_densities():
    rng = np.random.RandomState(3)
    for p, K, kappa in [(2, 3, 0.7), (3, 4, 2.5), (10, 5, 20.0)]:
        U = rng.normal(size=(K, p))
        U /= np.linalg.norm(U, axis=1, keepdims=True)
        mu0 = rng.normal(size=p)
        mu0 /= np.linalg.norm(mu0)
        ref = stats.vonmises_fisher(mu0, kappa).logpdf(U[0])
        s = np.zeros(p)
        for i in range(1, K):
            s += U[i - 1]
            ref += stats.vonmises_fisher(-s / np.linalg.norm(s), kappa).logpdf(U[i])
        assert_allclose(M.log_mabn_type1_prior(U, kappa, mu0), ref, rtol=1e-10)
    # s_i = 0 exactly: mu0 is used
    U = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    mu0 = np.array([0.0, 1.0])
    ref = (3 * V.log_normalizer(2, 1.5)
           + 1.5 * (mu0 @ U[0] + (-U[0]) @ U[1] + mu0 @ U[2]))
    assert_allclose(M.log_mabn_type1_prior(U, 1.5, mu0), ref, rtol=1e-12)


@pytest.mark.parametrize("kappa", [0.0, 0.8, 6.0])
def test_mabn_type1_prior_normalized_on_circle(kappa):
    # p = 2, K = 2: periodic trapezoid rule on a 64 x 64 grid of angles
    # (spectrally accurate for this smooth periodic integrand)
    mu0 = np.array([np.cos(0.4), np.sin(0.4)])
    t = np.linspace(0.0, 2 * np.pi, 64, endpoint=False)
    h = t[1] - t[0]
    circ = np.column_stack([np.cos(t), np.sin(t)])
    total = 0.0
    for u1 in circ:
        vals = [M.log_mabn_type1_prior(np.vstack([u1, u2]), kappa, mu0) for u2 in circ]
        total += np.sum(np.exp(vals)) * h * h
    assert_allclose(total, 1.0, rtol=1e-9)


def test_mabn_type1_prior_normalized_k3_circle():
    # K = 3 (m_3 jumps where u_2 = -u_1, but each inner integral over u_3 is
    # of a smooth periodic function): 20^3 periodic trapezoid grid
    kappa = 1.5
    t = np.linspace(0.0, 2 * np.pi, 20, endpoint=False)
    h = t[1] - t[0]
    circ = np.column_stack([np.cos(t), np.sin(t)])
    total = 0.0
    for u1 in circ:
        for u2 in circ:
            U = np.empty((len(t), 3, 2))
            U[:, 0], U[:, 1], U[:, 2] = u1, u2, circ
            total += sum(np.exp(M.log_mabn_type1_prior(Ui, kappa)) for Ui in U) * h ** 3
    assert_allclose(total, 1.0, rtol=1e-9)


def test_gamma_and_gaussian_priors():
    g = np.array([0.3, 1.7, 4.0])
    assert_allclose(M.log_gamma_prior(g, 0.7, 2.0),
                    stats.gamma(0.7, scale=0.5).logpdf(g).sum(), rtol=1e-12)
    assert M.log_gamma_prior([1.0, -0.1], 1.0, 1.0) == -np.inf
    A = np.random.RandomState(0).normal(size=(3, 4))
    assert_allclose(M.log_gaussian_prior(A, 1.7),
                    stats.norm(0, 1.7).logpdf(A).sum(), rtol=1e-12)


def test_truncated_normal_hastings_ratio_matches_truncnorm():
    s = 0.8
    for g, g2 in [(0.1, 2.0), (3.0, 0.05), (1.0, 1.3)]:
        def logq(to, frm):  # N(frm, s^2) truncated to (0, inf), at ``to``
            dist = stats.truncnorm((0 - frm) / s, np.inf, loc=frm, scale=s)
            return dist.logpdf(to)
        assert_allclose(M.truncated_normal_log_hastings_ratio(g, g2, s),
                        logq(g, g2) - logq(g2, g), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------
# the sampler: stationary distribution
# ---------------------------------------------------------------------------


def _exact_mabn_draws(K, p, kappa, mu0, size, seed):
    """Ancestral draws u_1 ~ vMF(mu0), u_i ~ vMF(-s_i/||s_i||) (test's own)."""
    rng = np.random.RandomState(seed)
    out = np.empty((size, K, p))
    for t in range(size):
        s = np.zeros(p)
        for i in range(K):
            mean = mu0 if i == 0 else -s / np.linalg.norm(s)
            out[t, i] = V.sample_vmf(mean, kappa, 1, rng)[0]
            s += out[t, i]
    return out


def _angle(U, i, j):
    return np.arccos(np.clip(np.einsum("np,np->n", U[:, i], U[:, j]), -1, 1))


@pytest.mark.slow
def test_sampler_without_data_samples_mabn_prior():
    K, p, kappa, a1, a2 = 2, 3, 2.0, 2.0, 1.5
    mu0 = np.array([1.0, 1.0, 1.0]) / np.sqrt(3)
    res = M.run_metropolis_hastings(
        np.empty((0, p)), np.empty(0), K, prior="mabn", kappa=kappa, mu0=mu0,
        alpha1=a1, alpha2=a2, n_samples=1500, burn_in=200, thin=10,
        direction_concentration=4.0, magnitude_scale=1.0, random_state=0)
    exact = _exact_mabn_draws(K, p, kappa, mu0, 3000, seed=1)
    gamma_cdf = stats.gamma(a1, scale=1 / a2).cdf
    for samples in (res.beta_samples, res.eta_samples):
        g = np.linalg.norm(samples, axis=2)
        U = samples / g[:, :, None]
        assert stats.ks_2samp(U[:, 0] @ mu0, exact[:, 0] @ mu0).pvalue > P_MIN
        assert stats.ks_2samp(_angle(U, 0, 1), _angle(exact, 0, 1)).pvalue > P_MIN
        assert stats.ks_2samp(U[:, 1] @ mu0, exact[:, 1] @ mu0).pvalue > P_MIN
        for k in range(K):
            assert stats.kstest(g[:, k], gamma_cdf).pvalue > P_MIN
    # sanity: the diversity prior pushes u_2 away from u_1 (mean angle > 90 deg)
    assert np.mean(_angle(U, 0, 1)) > 2.0
    for key in ("expert_direction", "expert_magnitude", "gate_direction",
                "gate_magnitude"):
        assert 0.05 < res.acceptance_rates[key] < 0.99


@pytest.mark.slow
def test_truncation_correction_is_needed(monkeypatch):
    # small shape, large proposal scale: many proposals near 0 are truncated.
    # [D] Without the factor Phi(g/s)/Phi(g'/s) the kernel is in detailed
    # balance with pi(g) Phi(g/s) instead of pi(g) (Gamma(0.7, 1) mean 0.70,
    # biased mean 0.83). 5,000 kept draws: with 2,500 the test of the corrected
    # chain against the biased density had p-values from 3e-4 to 3e-9 across
    # seeds 7-9 (too little power); with 5,000, 3e-14 to 4e-18.
    kw = dict(prior="mabn", kappa=0.5, alpha1=0.7, alpha2=1.0, n_samples=5000,
              burn_in=100, thin=10, direction_concentration=2.0,
              magnitude_scale=3.0, random_state=7)
    X0, y0 = np.empty((0, 2)), np.empty(0)
    target = stats.gamma(0.7, scale=1.0).cdf
    good = M.run_metropolis_hastings(X0, y0, 1, **kw)
    with monkeypatch.context() as mp:  # drop the factor Phi(g / s) / Phi(g' / s)
        mp.setattr(M, "truncated_normal_log_hastings_ratio", lambda *args: 0.0)
        bad = M.run_metropolis_hastings(X0, y0, 1, **kw)
    g_good = np.linalg.norm(good.beta_samples[:, 0], axis=1)
    g_bad = np.linalg.norm(bad.beta_samples[:, 0], axis=1)
    assert stats.kstest(g_good, target).pvalue > P_MIN
    assert stats.kstest(g_bad, target).pvalue < 1e-8
    # the uncorrected chain matches the biased density pi(g) Phi(g / s);
    # its CDF from Gamma CDF increments (the density diverges at 0)
    grid = np.linspace(0.0, 60.0, 600001)
    mid = 0.5 * (grid[1:] + grid[:-1])
    inc = np.diff(stats.gamma(0.7).cdf(grid)) * special.ndtr(mid / 3.0)
    cdf = np.concatenate([[0.0], np.cumsum(inc)])
    cdf /= cdf[-1]
    biased = lambda x: np.interp(x, grid, cdf)  # noqa: E731
    assert stats.kstest(g_bad, biased).pvalue > P_MIN
    assert stats.kstest(g_good, biased).pvalue < 1e-4


@pytest.mark.slow
def test_sampler_one_expert_posterior_matches_grid():
    # n = 5, p = 2, K = 1: posterior of beta = g (cos t, sin t) on a grid
    X = np.array([[1.0, 0.5], [-0.3, 1.2], [0.8, -1.0], [1.5, 0.2], [-1.0, -0.4]])
    y = np.array([1, 1, 0, 1, 0])
    kappa, a1, a2 = 1.0, 2.0, 1.0
    t0 = 0.3
    mu0 = np.array([np.cos(t0), np.sin(t0)])
    res = M.run_metropolis_hastings(
        X, y, 1, prior="mabn", kappa=kappa, mu0=mu0, alpha1=a1, alpha2=a2,
        n_samples=2000, burn_in=200, thin=8, direction_concentration=3.0,
        magnitude_scale=1.5, random_state=3)
    theta = np.linspace(-np.pi, np.pi, 721)
    g = np.linspace(1e-6, 25.0, 1001)
    T, Gm = np.meshgrid(theta, g, indexing="ij")
    proj = np.cos(T)[..., None] * X[:, 0] + np.sin(T)[..., None] * X[:, 1]
    logpost = (stats.gamma(a1, scale=1 / a2).logpdf(Gm) + kappa * np.cos(T - t0)
               - np.logaddexp(0, -(2 * y - 1) * Gm[..., None] * proj).sum(-1))
    w = np.exp(logpost - logpost.max())
    marg_t = integrate.trapezoid(w, g, axis=1)
    cdf_t = integrate.cumulative_trapezoid(marg_t, theta, initial=0.0)
    cdf_t /= cdf_t[-1]
    marg_g = integrate.trapezoid(w, theta, axis=0)
    cdf_g = integrate.cumulative_trapezoid(marg_g, g, initial=0.0)
    cdf_g /= cdf_g[-1]
    b = res.beta_samples[:, 0]
    ang = np.arctan2(b[:, 1], b[:, 0])
    assert stats.kstest(ang, lambda x: np.interp(x, theta, cdf_t)).pvalue > P_MIN
    assert stats.kstest(np.linalg.norm(b, axis=1),
                        lambda x: np.interp(x, g, cdf_g)).pvalue > P_MIN
    # the posterior differs from the prior (the test has power): prior angle
    # is von Mises(t0, kappa)
    assert stats.kstest(ang, stats.vonmises(kappa, loc=t0).cdf).pvalue < 1e-6
    # the gate does not enter the K = 1 likelihood: eta follows the prior
    e = res.eta_samples[:, 0]
    ang_e = np.arctan2(e[:, 1], e[:, 0])
    assert stats.kstest(ang_e, stats.vonmises(kappa, loc=t0).cdf).pvalue > P_MIN
    assert stats.kstest(np.linalg.norm(e, axis=1),
                        stats.gamma(a1, scale=1 / a2).cdf).pvalue > P_MIN


def test_sampler_gaussian_prior_without_data():
    sigma = 1.3
    res = M.run_metropolis_hastings(
        np.empty((0, 3)), np.empty(0), 2, prior="gaussian", sigma=sigma,
        n_samples=1500, burn_in=100, thin=6, gaussian_scale=2.5, random_state=5)
    assert set(res.acceptance_rates) == {"expert_gaussian", "gate_gaussian"}
    assert all(0.05 < r < 0.95 for r in res.acceptance_rates.values())
    for samples in (res.beta_samples, res.eta_samples):
        assert stats.kstest(samples[:, 0, 0], stats.norm(0, sigma).cdf).pvalue > P_MIN
        assert stats.kstest(samples[:, 1, 2], stats.norm(0, sigma).cdf).pvalue > P_MIN


# ---------------------------------------------------------------------------
# the sampler: bookkeeping, determinism, prediction
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("prior", ["mabn", "gaussian"])
def test_sampler_deterministic_and_consistent(prior):
    X, y = _data(n=40, p=4, seed=4)
    kw = dict(prior=prior, kappa=1.0, n_samples=30, burn_in=20, thin=2,
              direction_concentration=30.0, magnitude_scale=0.3, gaussian_scale=0.2)
    r1 = M.run_metropolis_hastings(X, y, 3, random_state=11, **kw)
    r2 = M.run_metropolis_hastings(X, y, 3, random_state=11, **kw)
    r3 = M.run_metropolis_hastings(X, y, 3, random_state=12, **kw)
    rs = M.run_metropolis_hastings(sp.csr_matrix(X), y, 3, random_state=11, **kw)
    assert r1.beta_samples.shape == (30, 3, 4) and r1.eta_samples.shape == (30, 3, 4)
    assert r1.log_posterior.shape == (20 + 30 * 2,)
    assert_allclose(r1.beta_samples, r2.beta_samples, rtol=0, atol=0)
    assert_allclose(r1.log_posterior, r2.log_posterior, rtol=0, atol=0)
    assert_allclose(rs.beta_samples, r1.beta_samples, rtol=1e-10, atol=1e-12)
    assert not np.allclose(r1.beta_samples, r3.beta_samples)
    for rate in r1.acceptance_rates.values():
        assert 0.0 < rate < 1.0
    # the cached projections kept the running log posterior exact
    b, e = r1.beta_samples[-1], r1.eta_samples[-1]
    ll = M.log_likelihood(X, y, b, e)
    if prior == "mabn":
        lp = 0.0
        for a in (b, e):
            g = np.linalg.norm(a, axis=1)
            lp += (M.log_mabn_type1_prior(a / g[:, None], 1.0)
                   + M.log_gamma_prior(g, 1.0, 1.0))
    else:
        lp = M.log_gaussian_prior(b, 1.0) + M.log_gaussian_prior(e, 1.0)
    assert_allclose(r1.log_posterior[-1], ll + lp, rtol=1e-9)
    assert_allclose(r1.log_likelihood[-1], ll, rtol=1e-9)


def test_sampler_init_and_validation():
    X, y = _data(n=20, p=3, seed=5)
    rng = np.random.RandomState(0)
    init = {"beta": rng.normal(size=(2, 3)), "eta": rng.normal(size=(2, 3))}
    res = M.run_metropolis_hastings(X, y, 2, init=init, n_samples=5, burn_in=0,
                                    random_state=0)
    assert res.beta_samples.shape == (5, 2, 3)
    with pytest.raises(ValueError):
        M.run_metropolis_hastings(X, y, 2, prior="laplace")
    with pytest.raises(ValueError):
        M.run_metropolis_hastings(X, y, 2, init={"beta": np.zeros((2, 3)),
                                                 "eta": init["eta"]})
    with pytest.raises(ValueError):
        M.run_metropolis_hastings(X, y[:-1], 2)


def test_posterior_sampling_fits_data_and_predicts():
    # separable-ish data: the posterior predictive should beat chance clearly
    rng = np.random.RandomState(6)
    X = np.column_stack([rng.normal(size=200), rng.normal(size=200), np.ones(200)])
    y = (X[:, 0] - 0.5 * X[:, 1] > 0).astype(int)
    res = M.run_metropolis_hastings(X, y, 2, kappa=1.0, alpha1=2.0, alpha2=0.5,
                                    n_samples=100, burn_in=300, thin=2,
                                    direction_concentration=100.0,
                                    magnitude_scale=0.5, random_state=0)
    assert res.log_posterior[-1] > res.log_posterior[0]
    proba = M.predict_proba_samples(X, res.beta_samples, res.eta_samples)
    assert proba.shape == (200, 2)
    assert_allclose(proba.sum(axis=1), 1.0)
    assert np.mean((proba[:, 1] > 0.5) == y) > 0.85
    # against a loop reference
    ref = np.zeros(5)
    for b, e in zip(res.beta_samples, res.eta_samples, strict=True):
        for n in range(5):
            gate = special.softmax(e @ X[n])
            ref[n] += gate @ special.expit(b @ X[n])
    assert_allclose(proba[:5, 1], ref / len(res.beta_samples), rtol=1e-12)
    assert_allclose(M.predict_proba_samples(sp.csr_matrix(X[:5]), res.beta_samples,
                                            res.eta_samples), proba[:5], rtol=1e-12)


def test_direction_proposer_is_vmf_around_u():
    rng = np.random.RandomState(8)
    u = np.array([0.2, -0.5, 0.84])
    u /= np.linalg.norm(u)
    prop = M._DirectionProposer(3, 5.0, rng)
    draws = np.array([prop(u) for _ in range(3000)])
    ref = V.sample_vmf(u, 5.0, 3000, 9)
    assert_allclose(np.linalg.norm(draws, axis=1), 1.0)
    assert stats.ks_2samp(draws @ u, ref @ u).pvalue > P_MIN
    # isotropy around u: a fixed orthogonal coordinate
    w = np.cross(u, [1.0, 0.0, 0.0])
    w /= np.linalg.norm(w)
    assert stats.ks_2samp(draws @ w, ref @ w).pvalue > P_MIN


# ---------------------------------------------------------------------------
# the fast likelihood (numba kernels) against the NumPy reference
# ---------------------------------------------------------------------------


def _row_logliks(X, y, b, e):
    """Per-row log-likelihoods with the reference formula (n,)."""
    B, E = np.asarray(X @ b.T), np.asarray(X @ e.T)
    sign = (2.0 * y - 1.0)[:, None]
    return np.array([M._loglik_fast(B[i:i + 1], E[i:i + 1], sign[i:i + 1])
                     for i in range(B.shape[0])])


@pytest.mark.parametrize("prior", ["mabn", "gaussian"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("K", [1, 3])
def test_fast_loglik_trace_matches_reference(prior, sparse, K, monkeypatch):
    X, y = _data(n=300, p=5, seed=13)
    X[:, -1] = 1.0
    Xs = sp.csr_matrix(X) if sparse else X
    kw = dict(prior=prior, n_samples=25, burn_in=0, thin=1, random_state=2,
              direction_concentration=40.0, magnitude_scale=0.4, gaussian_scale=0.3)
    res = M.run_metropolis_hastings(Xs, y, K, **kw)
    for t in range(25):  # every sweep is kept
        ref = M.log_likelihood_from_projections(
            X @ res.beta_samples[t].T, X @ res.eta_samples[t].T, y.astype(float))
        assert_allclose(res.log_likelihood[t], ref, rtol=1e-12)
    # the same chain as with the NumPy reference likelihood
    monkeypatch.setattr(M, "_FastLikelihood", REF._ReferenceLikelihood)
    ref_run = M.run_metropolis_hastings(Xs, y, K, **kw)
    assert res.acceptance_rates == ref_run.acceptance_rates
    assert_allclose(res.beta_samples, ref_run.beta_samples, rtol=1e-12, atol=1e-14)
    assert_allclose(res.eta_samples, ref_run.eta_samples, rtol=1e-12, atol=1e-14)
    assert_allclose(res.log_posterior, ref_run.log_posterior, rtol=1e-12)


@pytest.mark.parametrize("prior", ["mabn", "gaussian"])
def test_fast_loglik_extreme_projections(prior, monkeypatch):
    # |beta^T x| and |eta^T x| in the hundreds to thousands: rows whose sums
    # underflow (log space fallback) and gate logits that jump by more than
    # the cache shift (row resets) must not change the chain
    rng = np.random.RandomState(21)
    X = 300.0 * rng.normal(size=(150, 3))
    y = (rng.uniform(size=150) < 0.5).astype(int)
    init = {"beta": 3.0 * rng.normal(size=(3, 3)), "eta": 3.0 * rng.normal(size=(3, 3))}
    kw = dict(prior=prior, n_samples=20, burn_in=0, random_state=4, init=init,
              direction_concentration=5.0, magnitude_scale=3.0, gaussian_scale=3.0)
    res = M.run_metropolis_hastings(X, y, 3, **kw)
    monkeypatch.setattr(M, "_FastLikelihood", REF._ReferenceLikelihood)
    ref = M.run_metropolis_hastings(X, y, 3, **kw)
    assert res.acceptance_rates == ref.acceptance_rates
    assert_allclose(res.beta_samples, ref.beta_samples, rtol=1e-12, atol=1e-13)
    assert_allclose(res.log_likelihood, ref.log_likelihood, rtol=1e-12)
    # the regimes were visited: rows whose sums underflow _TINY, gate jumps
    rows = _row_logliks(X, y, ref.beta_samples[0], ref.eta_samples[0])
    assert rows.min() < np.log(M._TINY) - 100
    E = np.einsum("np,skp->snk", X, ref.eta_samples)
    assert np.abs(np.diff(E, axis=0)).max() > 5 * M._SHIFT


def test_fast_likelihood_kernels_against_reference_every_column():
    # propose/accept/next_column protocol against the reference, column by
    # column, with ordinary and extreme new columns
    rng = np.random.RandomState(17)
    n, K = 400, 4
    y = (rng.uniform(size=n) < 0.5).astype(float)
    Bt, Et = 2.0 * rng.normal(size=(K, n)), 2.0 * rng.normal(size=(K, n))
    fast = M._FastLikelihood(Bt.copy(), Et.copy(), y)
    ref = REF._ReferenceLikelihood(Bt.copy(), Et.copy(), y)
    for _sweep in range(3):
        for s in range(2):
            fast.start_pass(s)
            for k in range(K):
                for scale in (1.0, 30.0, 800.0):
                    col = scale * rng.normal(size=n)
                    v_fast, v_ref = fast.propose(s, k, col), ref.propose(s, k, col)
                    assert_allclose(v_fast, v_ref, rtol=1e-13)
                    if rng.uniform() < 0.5:
                        fast.accept(s, k, col)
                        ref.accept(s, k, col)
                fast.next_column(s, k)
    assert_allclose(fast.Bt, ref.proj[0], rtol=0, atol=0)
    assert_allclose(fast.Et, ref.proj[1], rtol=0, atol=0)
    # the caches are fresh function values of the projections
    assert_allclose(fast.S, special.expit((2 * y - 1) * fast.Bt),
                    rtol=1e-15, atol=1e-300)
    assert_allclose(fast.W, np.exp(fast.Et - fast.M), rtol=1e-15)
    assert np.all(fast.Et.max(axis=0) - fast.M <= M._SHIFT)


# ---------------------------------------------------------------------------
# Monte Carlo EM of mu0, alpha1, alpha2
# ---------------------------------------------------------------------------


def _log_prior_samples(beta_samples, eta_samples, kappa, mu0, a1, a2):
    """Mean over samples of the MABN x Gamma log prior of both sets."""
    total = 0.0
    for b, e in zip(beta_samples, eta_samples, strict=True):
        for a in (b, e):
            g = np.linalg.norm(a, axis=1)
            total += (M.log_mabn_type1_prior(a / g[:, None], kappa, mu0)
                      + M.log_gamma_prior(g, a1, a2))
    return total / len(beta_samples)


def test_gamma_mle_matches_scipy_fit():
    rng = np.random.RandomState(0)
    for shape, rate in [(0.3, 2.0), (2.5, 0.7), (40.0, 10.0)]:
        g = rng.gamma(shape, 1.0 / rate, size=500)
        a, b = M.gamma_mle(g)
        a_ref, _, scale_ref = stats.gamma.fit(g, floc=0)
        assert_allclose(a, a_ref, rtol=1e-5)
        assert_allclose(b, 1.0 / scale_ref, rtol=1e-5)
        # the score equations hold to rounding
        assert_allclose(np.log(a) - special.digamma(a),
                        np.log(g.mean()) - np.log(g).mean(), rtol=1e-10)
        assert_allclose(b, a / g.mean(), rtol=1e-14)
    # huge shape (nearly equal values): the asymptotic branch
    g = 1.0 + 1e-4 * rng.normal(size=200)
    a, b = M.gamma_mle(g)
    s = np.log(g.mean()) - np.log(g).mean()
    assert 0.5 / s < a < 1.0 / s and a > 1e6
    with pytest.raises(ValueError):
        M.gamma_mle([2.0, 2.0, 2.0])
    with pytest.raises(ValueError):
        M.gamma_mle([1.0, -1.0])


def test_fit_mabn_hyperparameters_recovers_prior_and_maximizes():
    # exact draws from the prior with known hyper-parameters: the M-step is
    # the maximum-likelihood estimate, consistent for many draws
    K, p, kappa, a1, a2 = 3, 4, 3.0, 2.5, 1.5
    mu0 = np.array([1.0, -2.0, 0.5, 1.0])
    mu0 /= np.linalg.norm(mu0)
    rng = np.random.RandomState(5)
    S = 400
    sets = [M.sample_mabn_type1_prior(K, p, kappa, mu0, S, rng)
            * rng.gamma(a1, 1.0 / a2, size=(S, K))[:, :, None] for _ in range(2)]
    m_hat, a1_hat, a2_hat = M.fit_mabn_hyperparameters(*sets)
    assert_allclose(np.linalg.norm(m_hat), 1.0)
    assert m_hat @ mu0 > 0.99
    assert_allclose(a1_hat, a1, rtol=0.1)
    assert_allclose(a2_hat, a2, rtol=0.1)
    # on few samples it maximizes their mean log prior: the value is not
    # below the one at the truth nor at perturbations of each parameter
    few = [a[:60] for a in sets]
    m60, a60, b60 = M.fit_mabn_hyperparameters(*few)
    q_hat = _log_prior_samples(*few, kappa, m60, a60, b60)
    for m, a, b in [(mu0, a1, a2), (m60, a60 * 1.05, b60), (m60, a60 / 1.05, b60),
                    (m60, a60, b60 * 1.05), (m60, a60, b60 / 1.05),
                    (m60 + 0.1 * rng.normal(size=p), a60, b60)]:
        m = m / np.linalg.norm(m)
        assert q_hat >= _log_prior_samples(*few, kappa, m, a, b)
    with pytest.raises(ValueError):
        M.fit_mabn_hyperparameters(sets[0], sets[1][:, :2])


def test_monte_carlo_em_without_data_stays_at_start():
    # n = 0: the posterior is the prior and p(y) = 1 for every hyper-parameter,
    # so exact EM does not move; one Monte Carlo EM step must return the
    # values it sampled with (up to Monte Carlo error), e.g. no rate/scale mix-up
    p, K = 3, 3
    mu0 = np.array([0.0, 0.6, 0.8])
    res = REF.run_monte_carlo_em(
        np.empty((0, p)), np.empty(0), K, kappa=4.0, mu0=mu0, alpha1=3.0, alpha2=2.0,
        n_em_iter=1, sweeps_per_em_iter=1500, burn_in=50, n_samples=10,
        direction_concentration=4.0, magnitude_scale=1.0, random_state=0)
    assert res.alpha1_history.shape == (2,) and res.mu0_history.shape == (2, p)
    assert_allclose(res.alpha1_history, [3.0, 3.0], rtol=0.15)
    assert_allclose(res.alpha2_history, [2.0, 2.0], rtol=0.15)
    assert res.mu0_history[1] @ mu0 > 0.97
    assert res.alpha1 == res.alpha1_history[-1] and res.alpha2 == res.alpha2_history[-1]
    assert_allclose(res.mu0, res.mu0_history[-1])


def test_monte_carlo_em_moves_towards_truth():
    # data from the model (K = 2, p = 3) with magnitudes from Gamma(8, rate 2);
    # EM started far away (prior mean magnitude 0.1) must move the prior
    # mean towards the true magnitudes, and raise the log prior of the samples
    rng = np.random.RandomState(0)
    p, K, n, kappa = 3, 2, 2000, 1.0
    U = M.sample_mabn_type1_prior(K, p, kappa, None, 2, rng)
    beta = U[0] * rng.gamma(8.0, 0.5, size=K)[:, None]
    eta = U[1] * rng.gamma(8.0, 0.5, size=K)[:, None]
    X = np.column_stack([rng.normal(size=(n, p - 1)), np.ones(n)])
    p1 = np.sum(special.softmax(X @ eta.T, axis=1) * special.expit(X @ beta.T), axis=1)
    y = (rng.uniform(size=n) < p1).astype(int)
    true_mean = np.mean(np.linalg.norm(np.vstack([beta, eta]), axis=1))
    a1_0, a2_0 = 1.0, 10.0
    res = REF.run_monte_carlo_em(
        X, y, K, kappa=kappa, alpha1=a1_0, alpha2=a2_0, n_em_iter=8,
        sweeps_per_em_iter=40, burn_in=100, n_samples=100,
        direction_concentration=50.0, magnitude_scale=0.3, random_state=0)
    assert res.alpha1_history.shape == (9,) and res.mu0_history.shape == (9, p)
    mean_hist = res.alpha1_history / res.alpha2_history
    assert abs(np.log(mean_hist[-1] / true_mean)) < 0.25 * abs(np.log(0.1 / true_mean))
    assert res.beta_samples.shape == (100, K, p)
    assert (res.alpha1, res.alpha2) == (res.alpha1_history[-1], res.alpha2_history[-1])
    lp_learned = _log_prior_samples(res.beta_samples, res.eta_samples, kappa,
                                    res.mu0, res.alpha1, res.alpha2)
    lp_initial = _log_prior_samples(res.beta_samples, res.eta_samples, kappa,
                                    res.mu0_history[0], a1_0, a2_0)
    assert lp_learned >= lp_initial


def test_monte_carlo_em_validation_and_zero_iterations():
    X, y = _data(n=20, p=3, seed=2)
    with pytest.raises(ValueError):
        REF.run_monte_carlo_em(X, y, 2, n_em_iter=-1)
    with pytest.raises(ValueError):
        REF.run_monte_carlo_em(X, y, 2, sweeps_per_em_iter=0)
    with pytest.raises(ValueError):
        REF.run_monte_carlo_em(X, y, 2, alpha1=0.0)
    # no EM iteration: a plain run with the initial hyper-parameters
    kw = dict(kappa=0.5, alpha1=2.0, alpha2=3.0, n_samples=5, burn_in=3, random_state=1)
    res = REF.run_monte_carlo_em(X, y, 2, n_em_iter=0, **kw)
    plain = M.run_metropolis_hastings(X, y, 2, **kw)
    assert_allclose(res.beta_samples, plain.beta_samples, rtol=0, atol=0)
    assert_allclose(res.alpha1_history, [2.0]) and res.mu0_history.shape == (1, 3)


def test_per_vector_proposal_scales():
    rng = np.random.RandomState(0)
    X = np.column_stack([rng.normal(size=(60, 2)), np.ones(60)])
    y = (X[:, 0] > 0).astype(float)
    K = 2
    scalar = M.run_metropolis_hastings(X, y, K, n_samples=10, burn_in=0,
                                     direction_concentration=30.0, magnitude_scale=0.2,
                                     random_state=0)
    array = M.run_metropolis_hastings(X, y, K, n_samples=10, burn_in=0,
                                    direction_concentration=np.full((2, K), 30.0),
                                    magnitude_scale=np.full((2, K), 0.2),
                                    random_state=0)
    # equal per-vector values: one shared proposer, the same chain
    np.testing.assert_array_equal(scalar.beta_samples, array.beta_samples)
    rates = scalar.vector_acceptance_rates
    assert rates.shape == (2, K, 2)
    # the per-vector counts add up to the per-move-type rates (equal proposals)
    assert rates[0, :, 0].mean() == pytest.approx(
        scalar.acceptance_rates["expert_direction"])
    assert rates[1, :, 1].mean() == pytest.approx(
        scalar.acceptance_rates["gate_magnitude"])
    # a tiny step for one vector only: that vector accepts almost every move
    step = np.full((2, K), 0.5)
    step[0, 1] = 1e-6
    gauss = M.run_metropolis_hastings(X, y, K, prior="gaussian", n_samples=40,
                                    burn_in=0, gaussian_scale=step, random_state=0)
    assert gauss.vector_acceptance_rates.shape == (2, K, 1)
    assert gauss.vector_acceptance_rates[0, 1, 0] > 0.9
    assert (gauss.vector_acceptance_rates[0, 0, 0]
            < gauss.vector_acceptance_rates[0, 1, 0])
    with pytest.raises(ValueError, match="direction_concentration"):
        M.run_metropolis_hastings(X, y, K, direction_concentration=np.ones(3),
                                  n_samples=1)
    with pytest.raises(ValueError, match="magnitude_scale"):
        M.run_metropolis_hastings(X, y, K, magnitude_scale=np.zeros((2, K)),
                                  n_samples=1)


def test_sampler_prior_kernels_equal_the_public_priors():
    """The numba set priors that the sampler evaluates after every proposal
    equal log_mabn_type1_prior + log_gamma_prior and log_gaussian_prior."""
    rng = np.random.RandomState(5)
    for p, K, kappa in [(2, 1, 0.0), (2, 3, 1.2), (7, 5, 4.0), (40, 9, 30.0)]:
        U = rng.normal(size=(K, p))
        U /= np.linalg.norm(U, axis=1, keepdims=True)
        mu0 = rng.normal(size=p)
        mu0 /= np.linalg.norm(mu0)
        g = rng.gamma(2.0, 1.0, size=K)
        log_c = float(V.log_normalizer(p, kappa))
        # the NumPy form of the means, written out
        Mn = M.mabn_type1_means(U, mu0)
        ref = K * log_c + kappa * np.sum(Mn * U)
        assert_allclose(M._log_mabn_kernel(U, kappa, mu0, log_c), ref,
                        rtol=1e-13, atol=1e-13)
        const = 0.7 * np.log(1.9) - special.gammaln(0.7)
        assert_allclose(K * const + M._log_gamma_terms(g, 0.7, 1.9),
                        M.log_gamma_prior(g, 0.7, 1.9), rtol=1e-13)
        A = U * g[:, None]
        assert_allclose(M._log_gaussian_kernel(A, 0.8),
                        M.log_gaussian_prior(A, 0.8), rtol=1e-13)
    # s_i = 0 exactly: the kernel takes mu0, as mabn_type1_means does
    U = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    mu0 = np.array([0.0, 1.0])
    ref = 3 * V.log_normalizer(2, 1.5) + 1.5 * np.sum(M.mabn_type1_means(U, mu0) * U)
    assert M._log_mabn_kernel(U, 1.5, mu0, float(V.log_normalizer(2, 1.5))) == ref


def _sample_sets(sparse, seed):
    """Inputs and sample sets (S, K, p) of several sizes, with gate
    projections large enough to overflow a naive softmax."""
    rng = np.random.RandomState(seed)
    for n, p, K, S in [(1, 2, 1, 1), (9, 3, 2, 5), (200, 6, 7, 30)]:
        X = rng.normal(size=(n, p))
        if sparse:
            X[rng.random_sample(X.shape) < 0.5] = 0.0
            X = sp.csr_matrix(X)
        yield X, rng.normal(size=(S, K, p)) * 3, rng.normal(size=(S, K, p)) * 300


@pytest.mark.parametrize("sparse", [False, True])
def test_predictive_averages_equal_the_sample_by_sample_ones(sparse, monkeypatch):
    """predict_proba_samples and gate_proba_samples (one product per block of
    rows, compiled averages) equal the averages written out sample by sample,
    and blocks of 3 rows give the numbers of one block (to the last bit for
    CSR input)."""
    for X, Bs, Es in _sample_sets(sparse, 4):
        S, K = Bs.shape[:2]
        p1, gates_ref = np.zeros(X.shape[0]), 0.0
        for b, e in zip(Bs, Es, strict=True):
            gate = special.softmax(np.asarray(X @ e.T), axis=1)
            p1 += np.sum(gate * special.expit(np.asarray(X @ b.T)), axis=1)
            gates_ref = gates_ref + gate
        proba = M.predict_proba_samples(X, Bs, Es)
        gates = M.gate_proba_samples(X, Es)
        assert np.all(np.isfinite(proba)) and np.all(np.isfinite(gates))
        assert_allclose(proba[:, 1], p1 / S, rtol=1e-12, atol=1e-14)
        assert_allclose(proba.sum(axis=1), 1.0)
        assert_allclose(gates, gates_ref / S, rtol=1e-12, atol=1e-14)
        assert_allclose(gates.sum(axis=1), 1.0)
        monkeypatch.setattr(M, "_PREDICT_BLOCK", 2 * S * K * 3)
        # CSR products go row by row: the same numbers in any block. BLAS may
        # take another kernel for a 3-row block than for 200 rows (numpy 2.4's
        # OpenBLAS: 2 of 1,400 gate entries 1 ulp apart), so dense to 1e-14
        rtol = 0.0 if sparse else 1e-14
        assert_allclose(M.predict_proba_samples(X, Bs, Es), proba, rtol=rtol, atol=0)
        assert_allclose(M.gate_proba_samples(X, Es), gates, rtol=rtol, atol=0)
        monkeypatch.undo()
    with pytest.raises(ValueError, match="eta_samples"):
        M.gate_proba_samples(np.ones((2, 3)), np.ones((4, 2, 2)))
