"""Gradients of the mixture-of-experts ELBO pieces (skbinvi/experts/_gradients.py):
every gradient against central finite differences of the function it
differentiates in _bounds / _vmf / _angular (dense and CSR X), the sphere and
log-scale helpers, and projected gradient ascent on a synthetic 2-expert
problem (monotone ELBO, accuracy well above chance)."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

from skbinvi.experts import _bounds as B
from skbinvi.experts import _gradients as G
from skbinvi.experts._angular import mutual_angular_gradient, mutual_angular_regularizer
from skbinvi.experts._vmf import bessel_ratio, vmf_kl

N, P, K = 30, 5, 3
H_REL = 1e-5  # relative step of the central differences
RTOL = 1e-5


def _unit_rows(rng, k, p):
    mu = rng.normal(size=(k, p))
    return mu / np.linalg.norm(mu, axis=1, keepdims=True)


def _params(rng, k=K, p=P):
    return B.VMFGammaParams(_unit_rows(rng, k, p), rng.uniform(0.5, 50.0, k),
                            rng.uniform(0.5, 5.0, k), rng.uniform(0.5, 5.0, k))


def _data(rng, sparse, n=N, p=P):
    X = rng.normal(size=(n, p))
    X[rng.uniform(size=(n, p)) < 0.3] = 0.0
    y = rng.integers(0, 2, size=n)
    y[:2] = [0, 1]
    return (sp.csr_matrix(X) if sparse else X), y


def _central(f, x, h):
    return (f(x + h) - f(x - h)) / (2.0 * h)


def _fd_scalar_fields(f, params, fields=("kappa", "r", "s")):
    """Central differences of f(params) in each entry of the given fields."""
    out = {}
    for name in fields:
        base = np.asarray(getattr(params, name), dtype=np.float64)
        num = np.empty_like(base)
        for k in range(base.size):
            def g(v, k=k, base=base, name=name):
                arr = base.copy()
                arr[k] = v
                return f(params._replace(**{name: arr}))
            num[k] = _central(g, base[k], H_REL * base[k])
        out[name] = num
    return out


def _fd_sphere(f, params, rng, n_dir=2):
    """Directional derivatives of f along random tangent vectors of each mu_k
    (retracted to the sphere), with the directions used: list of (k, v, fd)."""
    out = []
    mu = params.mu
    for k in range(mu.shape[0]):
        for _ in range(n_dir):
            v = rng.normal(size=mu.shape[1])
            v -= (v @ mu[k]) * mu[k]

            def g(h, k=k, v=v):
                m = mu.copy()
                m[k] = G.retract_to_sphere(mu[k] + h * v)
                return f(params._replace(mu=m))
            out.append((k, v, _central(g, 0.0, H_REL)))
    return out


def _check_grad(f, params, grad, rng, fields=("kappa", "r", "s"), scale=None):
    scale = abs(f(params)) + 1.0 if scale is None else scale
    atol = 1e-8 * scale
    num = _fd_scalar_fields(f, params, fields)
    for name in fields:
        assert_allclose(getattr(grad, name), num[name], rtol=RTOL, atol=atol,
                        err_msg=name)
    for k, v, fd in _fd_sphere(f, params, rng):
        assert_allclose(grad.mu[k] @ v, fd, rtol=RTOL, atol=atol, err_msg=f"mu[{k}]")
        # the projected gradient gives the same directional derivative
        assert_allclose(G.project_to_tangent(params.mu, grad.mu)[k] @ v, fd,
                        rtol=RTOL, atol=atol)


def _perturbed_aux(rng, X, y, beta, eta):
    """Non-optimal (phi, xi, c, d): the gradients must hold for any fixed ones."""
    _, aux = B.likelihood_bound(X, y, beta, eta, return_aux=True)
    n = X.shape[0]
    phi = rng.dirichlet(np.ones(K), size=n)
    xi = aux["xi"] * rng.uniform(0.7, 1.3, size=aux["xi"].shape)
    c = aux["c"] + rng.normal(scale=0.5, size=n)
    d = aux["d"] * rng.uniform(0.7, 1.3, size=aux["d"].shape)
    return phi, xi, c, d


# ---------------------------------------------------------------------------
# moment coefficients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_moment_coefficients_match_projection_moments(sparse):
    rng = np.random.default_rng(0)
    X, _ = _data(rng, sparse)
    params = _params(rng)
    coef = G.moment_coefficients(params)
    Xd = X.toarray() if sparse else X
    t = Xd @ params.mu.T
    sq = np.sum(Xd * Xd, axis=1)
    mean, second = B.projection_moments(X, params)
    assert_allclose(coef.c1 * t, mean, rtol=1e-13, atol=1e-13)
    assert_allclose(coef.c2 * sq[:, None] + coef.c3 * t * t, second, rtol=1e-12,
                    atol=1e-12)
    A = bessel_ratio(P, params.kappa)
    eg2 = params.r * (params.r + 1) / params.s ** 2
    assert_allclose(coef.c1, params.r / params.s * A, rtol=1e-14)
    assert_allclose(coef.c2, eg2 * A / params.kappa, rtol=1e-14)
    assert_allclose(coef.c3, eg2 * (1 - P * A / params.kappa), rtol=1e-12)


@pytest.mark.parametrize("p", [2, 5, 50])
def test_moment_coefficient_derivatives(p):
    # across the small-kappa, switch (kappa = p) and asymptotic (kappa >= 100) regions
    kappa = np.array([1e-3, 0.5, p - 1e-9, p + 1e-9, 5.0, 50.0, 150.0, 5e3])
    k = kappa.size
    rng = np.random.default_rng(p)
    params = B.VMFGammaParams(_unit_rows(rng, k, p), kappa, rng.uniform(0.5, 5, k),
                              rng.uniform(0.5, 5, k))
    coef = G.moment_coefficients(params)
    for var in ("kappa", "r", "s"):
        base = getattr(params, var)
        h = 1e-4 * base
        up = G.moment_coefficients(params._replace(**{var: base + h}))
        dn = G.moment_coefficients(params._replace(**{var: base - h}))
        for i in (1, 2, 3):
            num = (getattr(up, f"c{i}") - getattr(dn, f"c{i}")) / (2 * h)
            ana = getattr(coef, f"dc{i}_d{var}")
            scale = np.abs(getattr(coef, f"c{i}")) / base  # natural size
            assert_allclose(ana, num, rtol=1e-6, atol=1e-7 * np.max(scale),
                            err_msg=f"dc{i}/d{var}")
    # small kappa: A/kappa = (1/p)(1 - kappa^2/(p (p+2)) + O(kappa^4)), so
    # d(A/kappa)/dkappa = -2 kappa/(p^2 (p+2)) (1 + O(kappa^2)), no cancellation
    small = params._replace(kappa=np.array([1e-7, 1e-6, 1e-5, 1e-4, 1e-7, 1e-6,
                                            1e-5, 1e-4]))
    cs = G.moment_coefficients(small)
    eg2 = small.r * (small.r + 1) / small.s ** 2
    assert_allclose(cs.dc2_dkappa, -2 * small.kappa / (p * p * (p + 2)) * eg2,
                    rtol=1e-7)
    assert_allclose(cs.dc3_dkappa, 2 * small.kappa / (p * (p + 2)) * eg2, rtol=1e-7)
    # limits: dc2/dkappa -> 0 and dc3/dkappa -> 0 as kappa -> 0 (A/kappa even)
    c0 = G.moment_coefficients(params._replace(kappa=np.zeros(k)))
    assert np.all(c0.dc2_dkappa == 0.0) and np.all(c0.dc3_dkappa == 0.0)
    assert_allclose(c0.c2, params.r * (params.r + 1) / params.s ** 2 / p)


@pytest.mark.parametrize("p", [5, 50])
def test_d_a_over_kappa_against_mpmath(p):
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    kappa = np.array([1e-6, 0.3, float(p), 200.0, 1e4, 1e5])
    k = kappa.size
    params = B.VMFGammaParams(np.tile(np.eye(p)[0], (k, 1)), kappa, np.ones(k),
                              np.full(k, np.sqrt(2.0)))  # E g^2 = 1
    got = G.moment_coefficients(params).dc2_dkappa
    nu = p / 2 - 1
    ref = [float(mp.diff(lambda x: mp.besseli(nu + 1, x) / mp.besseli(nu, x) / x,
                         mp.mpf(float(kv)))) for kv in kappa]
    assert_allclose(got, ref, rtol=1e-10)


# ---------------------------------------------------------------------------
# 1. likelihood bound
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_likelihood_bound_gradients_fixed_aux(sparse, seed):
    rng = np.random.default_rng(seed)
    X, y = _data(rng, sparse)
    beta, eta = _params(rng), _params(rng)
    phi, xi, c, d = _perturbed_aux(rng, X, y, beta, eta)
    gb, ge, value = G.likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d,
                                                 return_value=True)
    ref = B.likelihood_bound(X, y, beta, eta, phi, xi=xi, c=c, d=d)
    assert_allclose(value, ref, rtol=1e-12)

    def f_beta(b):
        return B.likelihood_bound(X, y, b, eta, phi, xi=xi, c=c, d=d)

    def f_eta(e):
        return B.likelihood_bound(X, y, beta, e, phi, xi=xi, c=c, d=d)

    _check_grad(f_beta, beta, gb, rng)
    _check_grad(f_eta, eta, ge, rng)
    g2 = G.likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d)
    for a, b in zip(g2, (gb, ge), strict=True):
        for f in range(4):
            assert_allclose(a[f], b[f], rtol=0, atol=0)


def test_likelihood_bound_gradients_dense_equals_sparse():
    rng = np.random.default_rng(3)
    X, y = _data(rng, False)
    beta, eta = _params(rng), _params(rng)
    phi, xi, c, d = _perturbed_aux(rng, X, y, beta, eta)
    gd = G.likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d)
    gs = G.likelihood_bound_gradients(sp.csr_matrix(X), y, beta, eta, phi, xi, c, d)
    for a, b in zip(gd, gs, strict=True):
        for f in range(4):
            assert_allclose(a[f], b[f], rtol=1e-12, atol=1e-12)


def test_likelihood_gradient_at_optimal_aux_is_profile_gradient():
    """Envelope theorem: at the optimal (phi, xi, c, d) the fixed-auxiliary
    gradient equals the gradient of the bound with the auxiliaries re-optimized."""
    rng = np.random.default_rng(4)
    X, y = _data(rng, False)
    beta, eta = _params(rng), _params(rng)
    _, aux = B.likelihood_bound(X, y, beta, eta, return_aux=True)
    gb, ge = G.likelihood_bound_gradients(X, y, beta, eta, aux["phi"], aux["xi"],
                                          aux["c"], aux["d"])
    num_b = _fd_scalar_fields(lambda b: B.likelihood_bound(X, y, b, eta), beta)
    num_e = _fd_scalar_fields(lambda e: B.likelihood_bound(X, y, beta, e), eta)
    scale = abs(B.likelihood_bound(X, y, beta, eta)) + 1.0
    for name in ("kappa", "r", "s"):
        assert_allclose(getattr(gb, name), num_b[name], rtol=1e-5, atol=1e-7 * scale)
        assert_allclose(getattr(ge, name), num_e[name], rtol=1e-5, atol=1e-7 * scale)


def test_likelihood_gradients_validation():
    rng = np.random.default_rng(5)
    X, y = _data(rng, False)
    beta, eta = _params(rng), _params(rng)
    phi, xi, c, d = _perturbed_aux(rng, X, y, beta, eta)
    with pytest.raises(ValueError, match="xi"):
        G.likelihood_bound_gradients(X, y, beta, eta, phi, xi[:, :2], c, d)
    with pytest.raises(ValueError, match="c must"):
        G.likelihood_bound_gradients(X, y, beta, eta, phi, xi, c[:5], d)
    with pytest.raises(ValueError, match="d must"):
        G.likelihood_bound_gradients(X, y, beta, eta, phi, xi, c, d.T)
    with pytest.raises(ValueError, match="phi"):
        G.likelihood_bound_gradients(X, y, beta, eta, 2 * phi, xi, c, d)
    with pytest.raises(ValueError, match="experts"):
        G.likelihood_bound_gradients(X, y, beta, _params(rng, k=2), phi, xi, c, d)


# ---------------------------------------------------------------------------
# 2. KL to independent priors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False])
def test_kl_gradients(shared):
    rng = np.random.default_rng(6)
    params = _params(rng)
    if shared:
        prior = B.VMFGammaPrior(_unit_rows(rng, 1, P)[0], 3.0, 2.0, 1.5)
    else:
        prior = B.VMFGammaPrior(_unit_rows(rng, K, P), rng.uniform(0.5, 20, K),
                                rng.uniform(0.5, 5, K), rng.uniform(0.5, 5, K))
    grad, kl = G.kl_gradients(params, prior, return_value=True)
    assert_allclose(kl, B.independent_prior_kl(params, prior), rtol=1e-13)

    def f(q):
        return float(np.sum(B.independent_prior_kl(q, prior)))
    _check_grad(f, params, grad, rng)


def test_kl_gradients_shared_mu0_per_vector_kappa0():
    # mu0 (p,) with kappa0 (K,) as documented in VMFGammaPrior (independent_prior_kl
    # itself rejects this combination; here the rows are compared with vmf_kl)
    rng = np.random.default_rng(7)
    params = _params(rng)
    mu0 = _unit_rows(rng, 1, P)[0]
    kappa0 = np.array([0.0, 1.0, 10.0])
    _, kl = G.kl_gradients(params, (mu0, kappa0, 1.0, 1.0), return_value=True)
    for k in range(K):
        ref = vmf_kl(params.mu[k], params.kappa[k], mu0, kappa0[k]) \
            + B.gamma_kl(params.r[k], params.s[k], 1.0, 1.0)
        assert_allclose(kl[k], ref, rtol=1e-13)


def test_gamma_kl_gradient():
    rng = np.random.default_rng(8)
    r, s = rng.uniform(0.5, 5, 20), rng.uniform(0.5, 5, 20)
    a1, a2 = rng.uniform(0.5, 5, 20), rng.uniform(0.5, 5, 20)
    gr, gs = G.gamma_kl_gradient(r, s, a1, a2)
    assert_allclose(gr, _central(lambda v: B.gamma_kl(v, s, a1, a2), r, 1e-6 * r),
                    rtol=1e-6, atol=1e-9)
    assert_allclose(gs, _central(lambda v: B.gamma_kl(r, v, a1, a2), s, 1e-6 * s),
                    rtol=1e-6, atol=1e-9)
    gr0, gs0 = G.gamma_kl_gradient(a1, a2, a1, a2)
    assert_allclose(gr0, 0.0, atol=1e-13)
    assert_allclose(gs0, 0.0, atol=1e-13)
    with pytest.raises(ValueError):
        G.gamma_kl_gradient(-1.0, 1.0, 1.0, 1.0)


# ---------------------------------------------------------------------------
# 3. MABN prior lower bound; 4. angular regularizer
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kappa_prior", [0.5, 5.0])
@pytest.mark.parametrize("k", [3, 5])
def test_mabn_gradients(kappa_prior, k):
    rng = np.random.default_rng(int(10 * kappa_prior) + k)
    params = _params(rng, k=k)
    mu0 = _unit_rows(rng, 1, P)[0]

    def f(q):
        A = bessel_ratio(P, q.kappa)
        return float(np.sum(B.mabn_expected_log_prior_lower_bound(
            A[:, None] * q.mu, kappa_prior, mu0)))
    grad, value = G.mabn_gradients(params, kappa_prior, mu0, return_value=True)
    assert_allclose(value, f(params), rtol=1e-13)
    assert np.all(grad.r == 0) and np.all(grad.s == 0)
    _check_grad(f, params, grad, rng, fields=("kappa",))


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_angular_regularizer_gradients(gamma):
    rng = np.random.default_rng(11)
    params = _params(rng, k=4)

    def f(q):
        A = bessel_ratio(P, q.kappa)
        return mutual_angular_regularizer(A[:, None] * q.mu, gamma)
    grad, value = G.angular_regularizer_gradients(params, gamma, return_value=True)
    assert_allclose(value, f(params), rtol=1e-13)
    assert_allclose(value, mutual_angular_regularizer(params.mu, gamma), rtol=1e-13)
    # scale invariance: the kappa gradient is exactly zero, and finite
    # differences in kappa vanish to rounding
    assert np.all(grad.kappa == 0)
    num = _fd_scalar_fields(f, params, ("kappa",))["kappa"]
    assert_allclose(num, 0.0, atol=1e-9)
    # chain rule through E u = A mu: A_k G_k(A mu) = G_k(mu), rows orthogonal to mu
    A = bessel_ratio(P, params.kappa)
    chained = G.mean_direction_chain(params, mutual_angular_gradient(A[:, None] *
                                                                     params.mu, gamma))
    assert_allclose(chained.mu, grad.mu, rtol=1e-10, atol=1e-13)
    assert_allclose(chained.kappa, 0.0, atol=1e-12)
    assert_allclose(np.sum(grad.mu * params.mu, axis=1), 0.0, atol=1e-13)
    _check_grad(f, params, grad, rng, fields=(), scale=1.0)
    with pytest.raises(ValueError, match="kappa > 0"):
        G.angular_regularizer_gradients(params._replace(kappa=np.zeros(4)), gamma)


# ---------------------------------------------------------------------------
# 5. sphere and log-scale helpers
# ---------------------------------------------------------------------------


def test_sphere_helpers():
    rng = np.random.default_rng(12)
    mu = _unit_rows(rng, K, P)
    g = rng.normal(size=(K, P))
    t = G.project_to_tangent(mu, g)
    assert_allclose(np.sum(t * mu, axis=1), 0.0, atol=1e-14)
    assert_allclose(G.project_to_tangent(mu, t), t, atol=1e-14)  # idempotent
    assert_allclose(t + np.sum(g * mu, axis=1, keepdims=True) * mu, g, atol=1e-14)
    r = G.retract_to_sphere(mu + 0.3 * t)
    assert_allclose(np.linalg.norm(r, axis=1), 1.0, rtol=1e-15)
    assert_allclose(G.retract_to_sphere(mu[0]), mu[0], rtol=1e-15)
    with pytest.raises(ValueError):
        G.retract_to_sphere(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        G.project_to_tangent(mu, g[:2])


def test_log_parametrization_gradient():
    rng = np.random.default_rng(13)
    params = _params(rng)
    prior = B.VMFGammaPrior(_unit_rows(rng, 1, P)[0], 3.0, 2.0, 1.5)
    grad = G.kl_gradients(params, prior)
    glog = G.log_parametrization_gradient(params, grad)
    assert_allclose(glog.mu, grad.mu)
    for name in ("kappa", "r", "s"):
        base = np.log(getattr(params, name))
        num = np.empty(K)
        for k in range(K):
            def f(v, k=k, base=base, name=name):
                arr = base.copy()
                arr[k] = v
                q = params._replace(**{name: np.exp(arr)})
                return float(np.sum(B.independent_prior_kl(q, prior)))
            num[k] = _central(f, base[k], 1e-6)
        assert_allclose(getattr(glog, name), num, rtol=1e-6, atol=1e-9)


def test_ascent_step_and_combine():
    rng = np.random.default_rng(14)
    params = _params(rng)
    prior = B.VMFGammaPrior(_unit_rows(rng, 1, P)[0], 3.0, 2.0, 1.5)
    g = G.kl_gradients(params, prior)
    neg = G.combine((-1.0, g))
    for f in range(4):
        assert_allclose(neg[f], -np.asarray(g[f]))
    # descending the KL (ascending -KL) decreases it, in both parametrizations
    kl0 = np.sum(B.independent_prior_kl(params, prior))
    for log_scale, step in ((True, 1e-2), (False, 1e-2)):
        new = G.ascent_step(params, neg, step, log_scale=log_scale)
        assert_allclose(np.linalg.norm(new.mu, axis=1), 1.0, rtol=1e-15)
        assert np.sum(B.independent_prior_kl(new, prior)) < kl0
    # per-field steps; zero step is the identity
    same = G.ascent_step(params, neg, (0.0, 0.0, 0.0, 0.0))
    for f in range(4):
        assert_allclose(same[f], params[f], rtol=1e-15)


# ---------------------------------------------------------------------------
# gradient ascent on a synthetic 2-expert problem
# ---------------------------------------------------------------------------


def _two_expert_problem(seed, n=200):
    """x = (x1, x2, 1); the gate picks expert 1 for x1 > 0 and expert 2 for
    x1 < 0 (eta = +-3 e1); the experts are beta_1 = (0, 4, 1), beta_2 = (4, 2, -1)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(size=(n, 2)), np.ones(n)])
    eta_true = np.array([[3.0, 0.0, 0.0], [-3.0, 0.0, 0.0]])
    beta_true = np.array([[0.0, 4.0, 1.0], [4.0, 2.0, -1.0]])
    gate = np.exp(X @ eta_true.T)
    gate /= gate.sum(axis=1, keepdims=True)
    z = (rng.uniform(size=n) < gate[:, 1]).astype(int)
    prob = 1.0 / (1.0 + np.exp(-np.sum(X * beta_true[z], axis=1)))
    y = (rng.uniform(size=n) < prob).astype(int)
    return rng, X, y


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_projected_gradient_ascent_increases_elbo(sparse, seed):
    rng, X, y = _two_expert_problem(seed)
    n, p = X.shape
    Xin = sp.csr_matrix(X) if sparse else X
    prior = B.VMFGammaPrior(np.array([0.0, 0.0, 1.0]), 0.0, 1.0, 0.5)

    def init():
        return B.VMFGammaParams(_unit_rows(rng, 2, p), np.full(2, 20.0),
                                np.full(2, 10.0), np.full(2, 5.0))
    beta, eta = init(), init()
    step = 1.0 / n
    values, c = [], None
    for _ in range(30):
        aux = B.independent_prior_elbo(Xin, y, beta, eta, prior=prior,
                                       return_aux=True, c_init=c)
        c = aux.c
        values.append(aux.elbo)
        gb, ge, v = G.independent_prior_elbo_gradients(
            Xin, y, beta, eta, aux.phi, aux.xi, aux.c, aux.d, prior=prior,
            return_value=True)
        assert_allclose(v, aux.elbo, rtol=1e-12)
        beta = G.ascent_step(beta, gb, step)
        eta = G.ascent_step(eta, ge, step)
    values.append(B.independent_prior_elbo(Xin, y, beta, eta, prior=prior))
    values = np.array(values)
    assert np.all(np.diff(values) > 0), np.diff(values)
    assert values[-1] > values[0] + 100.0  # nats, over n = 200
    proba = B.predict_proba_posterior_mean(Xin, beta, eta)[:, 1]
    acc = np.mean((proba > 0.5) == y)
    majority = max(np.mean(y), 1 - np.mean(y))
    assert acc >= 0.75 and acc > majority + 0.1, (acc, majority)
