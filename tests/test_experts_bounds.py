"""ELBO pieces of the Bayesian mixture of experts (skbinvi/experts/_bounds.py):
pointwise inequalities ([JJ], [Bou]) on grids, the expected bounds against Monte
Carlo over q (vMF directions x Gamma magnitudes), optimality of the closed-form
auxiliaries and responsibilities, Gamma KL against Monte Carlo, the Type II MABN
log-normalizer bound against Monte Carlo and finite differences, dense = sparse."""

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import experts as REF
from numpy.testing import assert_allclose
from scipy import special, stats

from skbinvi.experts import _bounds as B
from skbinvi.experts._vmf import log_normalizer, sample_vmf


def _unit_rows(rng, K, p):
    mu = rng.normal(size=(K, p))
    return mu / np.linalg.norm(mu, axis=1, keepdims=True)


def _random_params(rng, K, p, kappa=(2.0, 30.0), r=(3.0, 10.0), mean_g=(0.7, 2.0)):
    mu = _unit_rows(rng, K, p)
    kap = rng.uniform(*kappa, size=K)
    rr = rng.uniform(*r, size=K)
    s = rr / rng.uniform(*mean_g, size=K)
    return B.VMFGammaParams(mu, kap, rr, s)


def _problem(seed, n=12, K=3, p=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X[rng.uniform(size=(n, p)) < 0.3] = 0.0
    y = rng.integers(0, 2, size=n)
    y[:2] = [0, 1]
    return rng, X, y, _random_params(rng, K, p), _random_params(rng, K, p)


def _sample_vectors(params, S, rng):
    """S draws of the K vectors a_k = g_k u_k from q: shape (S, K, p)."""
    mu, kappa, r, s = params
    out = np.empty((S, mu.shape[0], mu.shape[1]))
    for k in range(mu.shape[0]):
        u = sample_vmf(mu[k], kappa[k], size=S, random_state=_rs(rng))
        g = rng.gamma(r[k], 1.0 / s[k], size=S)
        out[:, k, :] = g[:, None] * u
    return out


def _rs(rng):
    """A RandomState for sample_vmf (check_random_state), seeded from rng."""
    return np.random.RandomState(rng.integers(2 ** 31))


def _mean_se(samples, axis=0):
    se = samples.std(axis=axis) / np.sqrt(samples.shape[axis])
    return samples.mean(axis=axis), se


# ---------------------------------------------------------------------------
# pointwise inequalities
# ---------------------------------------------------------------------------


def test_jj_lambda_values():
    xi = np.array([0.0, 1e-12, 1e-6, 0.3, 2.0, 40.0, 1e3])
    lam = B.jj_lambda(xi)
    assert lam[0] == 0.125 and B.jj_lambda(0.0) == 0.125
    ref = (special.expit(xi[2:]) - 0.5) / (2 * xi[2:])
    assert_allclose(lam[2:], ref, rtol=1e-9)
    assert_allclose(B.jj_lambda(-xi), lam)  # even
    assert np.all(np.diff(lam) <= 0) and np.all(lam > 0)
    assert_allclose(lam[1], 0.125, rtol=1e-15)


def test_jj_log_sigmoid_bound_below_and_tight():
    t = np.linspace(-60, 60, 2401)[:, None]
    xi = np.array([0.0, 1e-9, 0.1, 1.0, 3.7, 15.0, 50.0, -2.5])[None, :]
    bound = REF.jj_log_sigmoid_lower_bound(t, xi)
    truth = -np.logaddexp(0.0, -t)
    assert np.all(bound <= truth + 1e-12)
    # strictly below away from +-xi (so the check is not vacuous)
    assert -np.logaddexp(0.0, -5.0) - REF.jj_log_sigmoid_lower_bound(5.0, 0.5) > 0.1
    for x in [0.0, 0.2, 1.0, 4.0, 30.0]:
        for tt in (x, -x):
            assert_allclose(REF.jj_log_sigmoid_lower_bound(tt, x),
                            -np.logaddexp(0.0, -tt), rtol=1e-13, atol=1e-14)


def test_log1pexp_upper_bound_above_and_tight():
    u = np.linspace(-60, 60, 2401)[:, None]
    d = np.array([0.0, 0.1, 1.0, 3.7, 15.0, 50.0, -2.5])[None, :]
    assert np.all(REF.log1pexp_upper_bound(u, d) >= np.logaddexp(0.0, u) - 1e-12)
    for x in [0.0, 0.3, 2.0, 20.0]:
        for uu in (x, -x):
            assert_allclose(REF.log1pexp_upper_bound(uu, x), np.logaddexp(0.0, uu),
                            rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("K", [1, 2, 5, 20])
def test_logsumexp_upper_bound_any_c_d(K):
    rng = np.random.default_rng(K)
    m = 4000
    t = rng.normal(scale=rng.choice([0.1, 1.0, 10.0], size=(m, 1)), size=(m, K))
    c = rng.normal(scale=5.0, size=m)
    d = rng.normal(scale=5.0, size=(m, K))
    bound = REF.logsumexp_upper_bound(t, c, d)
    assert np.all(bound >= special.logsumexp(t, axis=1) - 1e-12)
    # the intermediate [Bou] bound lies in between
    bou = c + np.sum(np.logaddexp(0.0, t - c[:, None]), axis=1)
    assert np.all(bou >= special.logsumexp(t, axis=1) - 1e-12)
    assert np.all(bound >= bou - 1e-12)


# ---------------------------------------------------------------------------
# moments
# ---------------------------------------------------------------------------


def test_projection_moments_against_full_second_moment():
    rng, X, y, beta, eta = _problem(0, n=15, K=4, p=6)
    mean, second = REF.projection_moments(X, beta)
    mu, kappa, r, s = beta
    e_u = REF.vmf_mean(mu, kappa)
    e_uu = REF.vmf_second_moment(mu, kappa)
    for k in range(4):
        assert_allclose(mean[:, k], (r[k] / s[k]) * X @ e_u[k], rtol=1e-12, atol=1e-14)
        M = (r[k] + r[k] ** 2) / s[k] ** 2 * e_uu[k]
        for Xv in (X, sp.csr_matrix(X)):
            assert_allclose(second[:, k], REF.rowwise_quadratic_form(Xv, M), rtol=1e-12,
                            atol=1e-14)
    assert np.all(second >= mean ** 2 - 1e-12)
    # against Monte Carlo over q
    A = _sample_vectors(beta, 20000, rng)
    t = np.einsum("skp,np->snk", A, X)
    for est, ref in ((t, mean), (t * t, second)):
        m_, se = _mean_se(est)
        assert np.all(np.abs(m_ - ref) <= 5 * se + 1e-12)


# ---------------------------------------------------------------------------
# expected bounds against Monte Carlo over q
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mc_problem():
    rng, X, y, beta, eta = _problem(1)
    S = 40000
    tb = np.einsum("skp,np->snk", _sample_vectors(beta, S, rng), X)
    te = np.einsum("skp,np->snk", _sample_vectors(eta, S, rng), X)
    return X, y, beta, eta, tb, te


def test_expert_bound_below_expectation(mc_problem):
    X, y, beta, eta, tb, te = mc_problem
    sign = (2.0 * y - 1.0)[None, :, None]
    mc, se = _mean_se(-np.logaddexp(0.0, -sign * tb))
    bound, xi = REF.expert_bound(X, y, beta)
    assert np.all(bound <= mc + 5 * se)
    gap = mc - bound
    assert np.max(gap) < 0.5  # a bound, not a vacuous one
    # the printed supplement Eq. 17 (no (2 y_n - 1) factor) is not a bound:
    mean, second = REF.projection_moments(X, beta)
    printed = -np.logaddexp(0.0, -xi) + 0.5 * (mean - xi)
    viol = (printed - mc) / se
    assert np.max(viol[y == 0]) > 20


def test_expert_bound_tight_for_concentrated_q():
    rng, X, y, beta, _ = _problem(2)
    mu, _, _, _ = beta
    g = np.array([0.5, 1.0, 2.0])
    conc = B.VMFGammaParams(mu, np.full(3, 1e5), np.full(3, 1e8), 1e8 / g)
    bound, _ = REF.expert_bound(X, y, conc)
    # q is nearly a point mass at beta_k = g_k mu_k: the bound nearly equals log sigmoid
    truth = -np.logaddexp(0.0, -(2.0 * y - 1.0)[:, None] * (X @ (g[:, None] * mu).T))
    assert_allclose(bound, truth, atol=1e-4)


def test_gate_bound_above_expectation(mc_problem):
    X, y, beta, eta, tb, te = mc_problem
    mc, se = _mean_se(special.logsumexp(te, axis=2))
    linear, upper, c, d = REF.gate_bound(X, eta)
    assert np.all(upper >= mc - 5 * se)
    assert_allclose(linear, te.mean(axis=0), atol=5 * np.max(te.std(axis=0)) / 200)
    # also for arbitrary (non-optimal) c and d
    rng = np.random.default_rng(3)
    for _ in range(5):
        c2 = rng.normal(scale=3, size=X.shape[0])
        d2 = rng.normal(scale=3, size=linear.shape)
        up2 = REF.gate_bound(X, eta, c=c2, d=d2)[1]
        assert np.all(up2 >= mc - 5 * se)
        assert np.all(up2 >= upper - 1e-10)


def test_likelihood_bound_below_monte_carlo(mc_problem):
    X, y, beta, eta, tb, te = mc_problem
    sign = (2.0 * y - 1.0)[None, :, None]
    rng = np.random.default_rng(4)
    phi_rand = rng.dirichlet(np.ones(3), size=X.shape[0])
    value_opt, aux = REF.likelihood_bound(X, y, beta, eta, return_aux=True)
    for phi in (phi_rand, aux["phi_opt"]):
        ent = np.sum(special.entr(phi))
        per_sample = (np.einsum("nk,snk->s", phi, -np.logaddexp(0.0, -sign * tb) + te)
                      - special.logsumexp(te, axis=2).sum(axis=1) + ent)
        mc, se = _mean_se(per_sample)
        value = REF.likelihood_bound(X, y, beta, eta, phi)
        assert value <= mc + 5 * se
        assert mc - value < 3.0 * X.shape[0]  # finite, sensible gap
    assert value == pytest.approx(value_opt, rel=1e-13)


# ---------------------------------------------------------------------------
# optimality of the closed forms
# ---------------------------------------------------------------------------


def test_expert_xi_is_maximizer():
    rng, X, y, beta, _ = _problem(5)
    best, xi = REF.expert_bound(X, y, beta)
    for scale in (1e-4, 1e-2, 0.3, 3.0):
        for _ in range(5):
            xi2 = xi + rng.normal(scale=scale, size=xi.shape)
            assert np.all(REF.expert_bound(X, y, beta, xi=xi2)[0] <= best + 1e-13)
    # and it is the optimum of the [JJ] family
    assert_allclose(xi ** 2, REF.projection_moments(X, beta)[1], rtol=1e-12)


def test_gate_auxiliaries_are_minimizers():
    rng, X, y, _, eta = _problem(6, n=30, K=5, p=4)
    m, v = REF.projection_moments(X, eta)
    c, d = B.optimal_gate_auxiliaries(m, v, n_rounds=2000, tol=1e-15)
    best = B.expected_logsumexp_upper_bound(m, v, c, d)[0]
    tol = 1e-11 * (1 + np.abs(best))
    for scale in (1e-4, 1e-2, 0.3, 3.0):
        for _ in range(5):
            c2 = c + rng.normal(scale=scale, size=c.shape)
            d2 = d + rng.normal(scale=scale, size=d.shape)
            for cc, dd in ((c2, d), (c, d2), (c2, d2)):
                assert np.all(B.expected_logsumexp_upper_bound(m, v, cc, dd)[0]
                              >= best - tol)
    # dB/dc = 0 at the optimum (finite differences)
    h = 1e-5
    up = B.expected_logsumexp_upper_bound(m, v, c + h, d)[0]
    lo = B.expected_logsumexp_upper_bound(m, v, c - h, d)[0]
    assert np.max(np.abs(up - lo) / (2 * h)) < 1e-7
    # the defaults (50 rounds) reach the optimum to high accuracy
    c50, d50 = B.optimal_gate_auxiliaries(m, v)
    val50 = B.expected_logsumexp_upper_bound(m, v, c50, d50)[0]
    assert_allclose(val50, best, rtol=1e-9)


def test_gate_newton_and_coordinate_agree():
    rng = np.random.default_rng(14)
    n, K = 200, 6
    m = rng.normal(scale=rng.choice([0.01, 1.0, 20.0], size=(n, 1)), size=(n, K))
    v = m * m + rng.uniform(0, 5, size=(n, K)) * rng.choice([0.0, 1.0], size=(n, 1))
    c_n, d_n = B.optimal_gate_auxiliaries(m, v)
    c_c, d_c = REF.gate_auxiliaries_reference(m, v, n_rounds=5000, tol=1e-14,
                                              method="coordinate")
    val_n = B.expected_logsumexp_upper_bound(m, v, c_n, d_n)[0]
    val_c = B.expected_logsumexp_upper_bound(m, v, c_c, d_c)[0]
    # same minimum; with deterministic t and an even split of the m_j around c
    # the profile is flat up to e^{-|c - m_j|} and coordinate descent crawls,
    # so Newton is never worse and sometimes lower
    assert np.all(val_n <= val_c + 1e-10 * (1 + np.abs(val_c)))
    assert np.all(val_c - val_n <= 1e-4)
    # first-order optimality of the profile min_d B(c, d) at c_n
    h = 1e-6
    up = B.expected_logsumexp_upper_bound(m, v, c=c_n + h)[0]
    lo = B.expected_logsumexp_upper_bound(m, v, c=c_n - h)[0]
    assert np.max(np.abs(up - lo) / (2 * h)) < 1e-5
    # a warm start at the optimum stays there
    c_w, d_w = B.optimal_gate_auxiliaries(m, v, n_rounds=1, c_init=c_n)
    assert_allclose(B.expected_logsumexp_upper_bound(m, v, c_w, d_w)[0], val_n,
                    rtol=1e-12)
    # K = 1: log softmax = 0; the bound decreases towards E[t] as c -> -inf
    m1, v1 = m[:, :1], v[:, :1]
    b5 = B.expected_logsumexp_upper_bound(m1, v1, n_rounds=5)[0]
    b50 = B.expected_logsumexp_upper_bound(m1, v1, n_rounds=50)[0]
    assert np.all(b50 <= b5 + 1e-12) and np.all(b50 >= m1[:, 0] - 1e-9)


@pytest.mark.parametrize("K", [2, 3, 30, 200])
def test_gate_newton_bracket(K):
    """The analytic bracket of the Newton solver: h'(lo) < 0 < h'(hi) [D]."""
    rng = np.random.default_rng(K)
    n = 500
    m = rng.normal(scale=rng.choice([0.01, 1.0, 50.0], size=(n, 1)), size=(n, K))
    var = rng.choice([0.0, 1e-3, 1.0, 100.0], size=(n, 1)) * rng.uniform(size=(n, K))
    lo, hi = B._gate_bracket(m, var)
    assert_allclose(lo, m.min(axis=1) - 1.0)
    assert_allclose(hi, m.max(axis=1) + 1.0 + np.log(4.0 * K)
                    + np.sqrt(K * var.max(axis=1)))
    assert np.all(REF._gate_profile(m, var, lo, False)[1] < 0)
    assert np.all(REF._gate_profile(m, var, hi, False)[1] > 0)


def test_c_formula_minimizes_for_fixed_d():
    """METHODS.md's c_n = ((K/2 - 1) + 2 sum lam m) / (2 sum lam) for arbitrary d."""
    rng, X, y, _, eta = _problem(7, n=20, K=4, p=3)
    m, v = REF.projection_moments(X, eta)
    d = np.abs(rng.normal(scale=2, size=m.shape))
    val, c, _ = B.expected_logsumexp_upper_bound(m, v, d=d)
    lam = B.jj_lambda(d)
    assert_allclose(c, (4 / 2 - 1 + 2 * np.sum(lam * m, 1)) / (2 * lam.sum(1)))
    for delta in (1e-3, 0.1, -0.1, 2.0):
        assert np.all(B.expected_logsumexp_upper_bound(m, v, c + delta, d)[0] > val)
    # and the d formula for a fixed c
    c0 = rng.normal(size=m.shape[0])
    val0, _, d0 = B.expected_logsumexp_upper_bound(m, v, c=c0)
    for delta in (1e-3, 0.1, -0.1, 2.0):
        assert np.all(B.expected_logsumexp_upper_bound(m, v, c0, d0 + delta)[0]
                      >= val0 - 1e-13)


def test_optimal_phi_maximizes():
    rng, X, y, beta, eta = _problem(8)
    best, aux = REF.likelihood_bound(X, y, beta, eta, return_aux=True)
    expert, _ = REF.expert_bound(X, y, beta)
    linear, upper, _, _ = REF.gate_bound(X, eta)
    closed = np.sum(special.logsumexp(expert + linear, axis=1)) - np.sum(upper)
    assert best == pytest.approx(closed, rel=1e-12)
    for alpha in (0.1, 1.0, 10.0):
        for _ in range(10):
            phi = rng.dirichlet(np.full(3, alpha), size=X.shape[0])
            assert REF.likelihood_bound(X, y, beta, eta, phi) < best
    assert aux["expert"] + aux["gate"] + aux["entropy"] == pytest.approx(best)


# ---------------------------------------------------------------------------
# KL and the whole ELBO
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("r,s,a1,a2", [(3.0, 2.0, 1.0, 1.0), (0.7, 0.2, 2.0, 5.0),
                                       (50.0, 10.0, 3.0, 0.5)])
def test_gamma_kl_against_monte_carlo(r, s, a1, a2):
    rng = np.random.default_rng(9)
    g = rng.gamma(r, 1.0 / s, size=400000)
    diff = (stats.gamma.logpdf(g, r, scale=1 / s)
            - stats.gamma.logpdf(g, a1, scale=1 / a2))
    mc, se = _mean_se(diff)
    kl = REF.gamma_kl(r, s, a1, a2)
    assert abs(kl - mc) <= 5 * se
    assert kl > 0
    assert REF.gamma_kl(r, s, r, s) == pytest.approx(0.0, abs=1e-12)
    assert_allclose(REF.gamma_entropy(r, s), stats.gamma(r, scale=1 / s).entropy(),
                    rtol=1e-12)


def test_independent_prior_kl_and_elbo_pieces():
    rng, X, y, beta, eta = _problem(10)
    prior = REF.VMFGammaPrior(_unit_rows(rng, 1, 4)[0], 2.0, 2.0, 1.5)
    prior_eta = REF.VMFGammaPrior(_unit_rows(rng, 1, 4)[0], 0.0, 1.0, 1.0)
    kl = REF.independent_prior_kl(beta, prior)
    ref = REF.vmf_kl(beta.mu, beta.kappa, prior.mu0, prior.kappa0) + REF.gamma_kl(
        beta.r, beta.s, prior.alpha1, prior.alpha2)
    assert_allclose(kl, ref)
    assert np.all(kl > 0)
    res = REF.independent_prior_elbo(X, y, beta, eta, prior=prior, prior_eta=prior_eta,
                                     return_aux=True)
    assert res.kl_beta == pytest.approx(kl.sum())
    assert res.kl_eta == pytest.approx(REF.independent_prior_kl(eta, prior_eta).sum())
    assert res.elbo == pytest.approx(res.likelihood - res.kl_beta - res.kl_eta)
    assert res.likelihood == pytest.approx(REF.likelihood_bound(X, y, beta, eta))
    assert res.elbo == pytest.approx(REF.independent_prior_elbo(
        X, y, beta, eta, prior=prior, prior_eta=prior_eta))
    # q = prior (where the prior is proper): the KL part vanishes
    mu0 = np.tile(prior.mu0, (3, 1))
    q0 = B.VMFGammaParams(mu0, np.full(3, 2.0), np.full(3, 2.0), np.full(3, 1.5))
    assert_allclose(REF.independent_prior_kl(q0, prior), 0.0, atol=1e-12)


def test_predict_proba():
    rng, X, y, beta, eta = _problem(11, n=50)
    proba = REF.predict_proba_posterior_mean(X, beta, eta)
    assert proba.shape == (50, 2)
    assert np.all((proba >= 0) & (proba <= 1))
    assert_allclose(proba.sum(axis=1), 1.0)
    eb = (beta.r / beta.s)[:, None] * REF.vmf_mean(beta.mu, beta.kappa)
    ee = (eta.r / eta.s)[:, None] * REF.vmf_mean(eta.mu, eta.kappa)
    ref = np.sum(special.softmax(X @ ee.T, axis=1) * special.expit(X @ eb.T), axis=1)
    assert_allclose(proba[:, 1], ref, rtol=1e-12)


def test_sparse_equals_dense():
    rng, X, y, beta, eta = _problem(12, n=40, K=4, p=7)
    Xs = sp.csr_matrix(X)
    prior = REF.VMFGammaPrior(_unit_rows(rng, 1, 7)[0], 1.0, 2.0, 2.0)
    for a, b in zip(REF.projection_moments(X, beta), REF.projection_moments(Xs, beta),
                    strict=True):
        assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    rd = REF.independent_prior_elbo(X, y, beta, eta, prior=prior, return_aux=True)
    rs = REF.independent_prior_elbo(Xs, y, beta, eta, prior=prior, return_aux=True)
    for a, b in zip(rd, rs, strict=True):
        assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    assert_allclose(REF.predict_proba_posterior_mean(X, beta, eta),
                    REF.predict_proba_posterior_mean(Xs, beta, eta), rtol=1e-13)
    assert_allclose(REF.expert_bound(X, y, beta)[0], REF.expert_bound(Xs, y, beta)[0],
                    rtol=1e-13)


def test_input_validation():
    rng, X, y, beta, eta = _problem(13)
    with pytest.raises(ValueError, match="y must contain"):
        REF.expert_bound(X, y + 2, beta)
    with pytest.raises(ValueError, match="unit"):
        REF.expert_bound(X, y, beta._replace(mu=2 * beta.mu))
    with pytest.raises(ValueError, match="r must be"):
        REF.expert_bound(X, y, beta._replace(r=-beta.r))
    with pytest.raises(ValueError, match="columns"):
        REF.expert_bound(X[:, :3], y, beta)
    with pytest.raises(ValueError, match="probability"):
        REF.likelihood_bound(X, y, beta, eta, np.ones((12, 3)))
    with pytest.raises(ValueError, match="norms"):
        REF.mabn_log_normalizer_upper_bound(2 * beta.mu, 1.0)


# ---------------------------------------------------------------------------
# Type II MABN log-normalizer bound
# ---------------------------------------------------------------------------


def _f(p, kappa, r):
    """f(r) = log Z = -log C_p(kappa r)."""
    return -np.asarray(log_normalizer(p, kappa * np.asarray(r)))


@pytest.mark.parametrize("p", [3, 10, 123])
def test_mabn_bound_above_monte_carlo(p):
    rng = np.random.default_rng(p)
    K, S = 5, 3000
    mu = _unit_rows(rng, K, p)
    mu[2] = mu[1]  # some aligned pairs, some random
    kappa_hat = p * rng.uniform(0.3, 3.0, size=K)
    m = REF.vmf_mean(mu, kappa_hat)
    U = np.stack([sample_vmf(mu[k], kappa_hat[k], size=S, random_state=_rs(rng))
                  for k in range(K)], axis=1)  # (S, K, p)
    s_norm = np.linalg.norm(np.cumsum(U, axis=1)[:, :-1], axis=2)  # ||s_i||, i = 2..K
    # E||s_i||^2 formula against the samples
    Q = np.array([(i - 1) + 2 * sum(m[j] @ m[h] for j in range(i - 1)
                                    for h in range(j + 1, i - 1))
                  for i in range(2, K + 1)])
    q_mc, q_se = _mean_se(s_norm ** 2)
    assert np.all(np.abs(q_mc - Q) <= 5 * q_se + 1e-9)
    for kappa in (0.1, 1.0, 10.0, 100.0):
        bound = REF.mabn_log_normalizer_upper_bound(m, kappa)
        assert bound[0] == pytest.approx(-log_normalizer(p, kappa), rel=1e-14)
        vals = _f(p, kappa, s_norm)  # (S, K-1)
        mc, se = _mean_se(vals)
        assert np.all(bound[1:] >= mc - 5 * se - 1e-9 * np.abs(mc)), (kappa, bound, mc)
        # node 2 is exact: ||s_2|| = ||u_1|| = 1
        assert bound[1] == pytest.approx(_f(p, kappa, 1.0), rel=1e-12)
        # the chord lies above f at every sampled point
        R = np.arange(1, K)
        f0 = _f(p, kappa, 0.0)
        chord = f0 + (_f(p, kappa, R) - f0) * s_norm / R
        assert np.all(chord >= vals - 1e-9 * np.abs(vals))
        assert np.all(np.isfinite(bound))


def test_mabn_bound_tight_when_aligned_and_concentrated():
    p, K, kappa = 10, 6, 10.0
    mu = np.tile(np.eye(p)[0], (K, 1))
    kappa_hat = 1e6
    m = REF.vmf_mean(mu, np.full(K, kappa_hat))
    bound = REF.mabn_log_normalizer_upper_bound(m, kappa)
    rng = np.random.default_rng(21)
    U = np.stack([sample_vmf(mu[k], kappa_hat, size=2000, random_state=_rs(rng))
                  for k in range(K)], axis=1)
    mc = _f(p, kappa, np.linalg.norm(np.cumsum(U, axis=1)[:, :-1], axis=2)).mean(axis=0)
    assert np.all(bound[1:] >= mc * (1 - 1e-13))
    # ||s_i|| ~ i - 1 nearly deterministically: chord and Jensen are nearly exact
    assert_allclose(bound[1:], mc, rtol=1e-5)
    assert_allclose(bound[1:], _f(p, kappa, np.arange(1, K)), rtol=1e-5)


def test_mabn_supplement_counterexample_value():
    """p = 3, kappa ||s|| = 100: log Z = log(4 pi sinh(100) / 100) = 97.23 (the
    value of the reported counterexample to Lemma 1); node 2 of our bound is exact."""
    expected = np.log(4 * np.pi) + 100 - np.log(2) - np.log(100)  # sinh(100) ~ e^100/2
    assert _f(3, 100.0, 1.0) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(97.23, abs=5e-3)
    m = REF.vmf_mean(np.tile([0.0, 0.0, 1.0], (2, 1)), np.array([5.0, 5.0]))
    assert REF.mabn_log_normalizer_upper_bound(m, 100.0)[1] >= 97.23
    # finite where Lemma 1 diverges (p >= 19)
    for p in (19, 50, 123):
        rng = np.random.default_rng(p)
        m = REF.vmf_mean(_unit_rows(rng, 4, p), np.full(4, float(p)))
        assert np.all(np.isfinite(REF.mabn_log_normalizer_upper_bound(m, 10.0)))


def _lemma1_literal(area, kr, gamma, xi):
    """Supplement Eq. 5 as printed, with sphere area ``area`` and kappa ||s|| = kr."""
    lam = B.jj_lambda(xi)
    return (gamma + area * (np.logaddexp(0.0, -xi) + 0.5 * (xi - gamma)
                            - lam * (xi ** 2 - gamma ** 2))
            + area * lam * kr ** 2)


@pytest.mark.parametrize("p,area_dim", [(19, 0), (18, 1), (50, 0)])
def test_supplement_lemma1_fails_when_sphere_area_below_one(p, area_dim):
    """area_dim 0: the correct area of S^{p-1}; 1: the printed one (of R^{p+1})."""
    q = p + area_dim
    area = 2 * np.pi ** (q / 2) / special.gamma(q / 2)
    assert area < 1
    kr = 10.0
    xi = 1e4
    gamma = -(1 - area / 2) / (2 * area * B.jj_lambda(xi))  # minimizer in gamma
    log_z = _f(p, 1.0, kr)
    assert _lemma1_literal(area, kr, gamma, xi) < log_z - 100
    # ours is above E log Z_i for any q, in particular for ||s|| = 1 (node 2)
    m = REF.vmf_mean(np.tile(np.eye(p)[0], (2, 1)), np.array([1.0, 1.0]))
    assert REF.mabn_log_normalizer_upper_bound(m, kr)[1] == pytest.approx(log_z)


@pytest.mark.parametrize("p,kappa", [(3, 1.0), (10, 10.0), (123, 100.0)])
def test_mabn_gradients_against_finite_differences(p, kappa):
    rng = np.random.default_rng(p + 1)
    K = 5
    m = REF.vmf_mean(_unit_rows(rng, K, p), rng.uniform(1, 3 * p, size=K))
    mu0 = _unit_rows(rng, 1, p)[0]
    for fun in (lambda mm, g: REF.mabn_log_normalizer_upper_bound(mm, kappa, g),
                lambda mm, g: REF.mabn_expected_energy(mm, kappa, mu0, g),
                lambda mm, g: REF.mabn_expected_log_prior_lower_bound(mm, kappa, mu0,
                                                                      g)):
        _, grad = fun(m, True)
        num = np.zeros_like(m)
        h = 1e-6
        idx = [(k, j) for k in range(K) for j in rng.choice(p, size=min(p, 4),
                                                             replace=False)]
        for k, j in idx:
            E = np.zeros_like(m)
            E[k, j] = h
            num[k, j] = (fun(m + E, False).sum() - fun(m - E, False).sum()) / (2 * h)
        got = np.array([grad[k, j] for k, j in idx])
        ref = np.array([num[k, j] for k, j in idx])
        assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * (1 + np.abs(ref).max()))


def test_mabn_energy_and_lower_bound_against_monte_carlo():
    rng = np.random.default_rng(20)
    p, K, S, kappa = 4, 4, 40000, 3.0
    mu = _unit_rows(rng, K, p)
    kap = rng.uniform(2, 20, size=K)
    mu0 = _unit_rows(rng, 1, p)[0]
    U = np.stack([sample_vmf(mu[k], kap[k], size=S, random_state=_rs(rng))
                  for k in range(K)], axis=1)
    s = np.concatenate([np.zeros((S, 1, p)), np.cumsum(U, axis=1)[:, :-1]], axis=1)
    energy = -kappa * np.einsum("skp,skp->sk", s, U)
    energy[:, 0] = kappa * U[:, 0] @ mu0
    mc, se = _mean_se(energy)
    m = REF.vmf_mean(mu, kap)
    assert np.all(np.abs(REF.mabn_expected_energy(m, kappa, mu0) - mc) <= 5 * se)
    assert REF.mabn_expected_energy(m, kappa)[0] == 0.0
    # the log-prior lower bound is below E_q[log p(u_i | parents)]
    log_z = np.concatenate([np.full((S, 1), -log_normalizer(p, kappa)),
                            _f(p, kappa, np.linalg.norm(s[:, 1:], axis=2))], axis=1)
    lp_mc, lp_se = _mean_se(energy - log_z)
    lower = REF.mabn_expected_log_prior_lower_bound(m, kappa, mu0)
    assert np.all(lower <= lp_mc + 5 * lp_se)
    assert lower[0] == pytest.approx(lp_mc[0], abs=5 * lp_se[0])


def test_independent_prior_kl_broadcasts_a_shared_prior_direction():
    """mu0 of shape (p,) with kappa0 of shape (K,) (allowed by VMFGammaPrior)."""
    rng = np.random.default_rng(0)
    K, p = 3, 4
    mu = rng.normal(size=(K, p))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    kappa, r, s = rng.uniform(1, 5, K), rng.uniform(1, 3, K), rng.uniform(1, 3, K)
    mu0 = np.eye(p)[0]
    kappa0 = np.array([0.5, 1.0, 2.0])
    kl = REF.independent_prior_kl((mu, kappa, r, s), (mu0, kappa0, 2.0, 1.0))
    for k in range(K):
        expected = (REF.vmf_kl(mu[k], kappa[k], mu0, kappa0[k])
                    + REF.gamma_kl(r[k], s[k], 2.0, 1.0))
        np.testing.assert_allclose(kl[k], expected, rtol=1e-12)


@pytest.mark.parametrize("K", [2, 3, 7])
def test_gate_newton_kernel_matches_numpy(K):
    """The Numba kernel of the gate solver (safeguarded Newton) and its NumPy
    reference (gate_auxiliaries_reference, "newton_numpy") find the same c, to
    the solver's tol."""
    rng = np.random.RandomState(K)
    n = 400
    m = rng.normal(scale=3.0, size=(n, K))
    m[:50] *= 1e-4          # nearly equal logits (the small-d series)
    m[50:100] *= 30.0       # large logits
    v = m * m + rng.exponential(size=(n, K)) * np.where(rng.rand(n, 1) < 0.5, 1e-8, 2.0)
    mean_t, var_t = B._gate_moments(m, v)

    def same(c_k, c_n):
        # the bound's value agrees everywhere; c itself where h is not flat
        # (rows with nearly deterministic logits far apart have h' = 0 over an
        # interval, and either end of it is a minimizer)
        h_k, _, H_k = REF._gate_profile(mean_t, var_t, c_k)
        h_n = REF._gate_profile(mean_t, var_t, c_n)[0]
        np.testing.assert_allclose(h_k, h_n, rtol=1e-12, atol=1e-12)
        curved = H_k > 1e-6
        assert curved.mean() > 0.8
        np.testing.assert_allclose(c_k[curved], c_n[curved], rtol=1e-8, atol=1e-8)

    c_k, d_k = B.optimal_gate_auxiliaries(m, v)
    c_n, d_n = REF.gate_auxiliaries_reference(m, v, method="newton_numpy")
    same(c_k, c_n)
    c0 = c_n + rng.normal(size=n)  # warm start
    same(B.optimal_gate_auxiliaries(m, v, c_init=c0)[0],
         REF.gate_auxiliaries_reference(m, v, c_init=c0, method="newton_numpy")[0])


@pytest.mark.parametrize("K", [2, 5])
def test_fused_likelihood_kernel_matches_numpy(K):
    """likelihood_pieces_from_moments at optimal auxiliaries: the fused Numba
    kernel equals the NumPy composition of this module's functions."""
    rng = np.random.RandomState(10 + K)
    n = 300
    y = (rng.rand(n) < 0.4).astype(float)
    mean_b = rng.normal(scale=3.0, size=(n, K))
    second_b = mean_b ** 2 + rng.exponential(size=(n, K))
    mean_e = rng.normal(scale=2.0, size=(n, K))
    mean_e[:20] *= 50.0
    second_e = mean_e ** 2 + rng.exponential(size=(n, K))
    fast = B.likelihood_pieces_from_moments(y, mean_b, second_b, mean_e, second_e)
    ref = B._numpy_likelihood_pieces(y, mean_b, second_b, mean_e, second_e, None, None,
                                     None, None, 50, 1e-10, None)
    for a, b in zip(fast[:3], ref[:3], strict=True):
        assert a == pytest.approx(b, rel=1e-10, abs=1e-8)
    for a, b in zip(fast[3:], ref[3:], strict=True):  # phi, phi_opt, xi, c, d
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)
