"""Gradients of the mixture-of-experts objective.

The moment coefficients (c1, c2, c3) of a vMF x Gamma vector and their
derivatives (``moment_coefficients`` of tests/_reference/experts.py, the
formulas ``_ascent.SetObjective`` evaluates) against the projection moments,
central finite differences and mpmath; the compiled gradient the fit ascends
(``_ascent.SetObjective.gradient``, both sets, "vi" and "pr", dense and CSR X,
statistics and direct passes) against central finite differences of its own
value in every coordinate, and, at the optimal auxiliaries, against finite
differences of the objective with the auxiliaries re-optimized (envelope
theorem). The NumPy gradient implementation these tests used to check (a third
one, tested only against itself) was removed (issue 74)."""

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import experts as REF
from numpy.testing import assert_allclose

from skbinvi.experts import _bounds as B
from skbinvi.experts._vmf import vmf_point_quantities

N, P, K = 30, 5, 3


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


# ---------------------------------------------------------------------------
# moment coefficients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_moment_coefficients_match_projection_moments(sparse):
    rng = np.random.default_rng(0)
    X, _ = _data(rng, sparse)
    params = _params(rng)
    coef = REF.moment_coefficients(params)
    Xd = X.toarray() if sparse else X
    t = Xd @ params.mu.T
    sq = np.sum(Xd * Xd, axis=1)
    mean, second = REF.projection_moments(X, params)
    assert_allclose(coef.c1 * t, mean, rtol=1e-13, atol=1e-13)
    assert_allclose(coef.c2 * sq[:, None] + coef.c3 * t * t, second, rtol=1e-12,
                    atol=1e-12)
    A = REF.bessel_ratio(P, params.kappa)
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
    coef = REF.moment_coefficients(params)
    for var in ("kappa", "r", "s"):
        base = getattr(params, var)
        h = 1e-4 * base
        up = REF.moment_coefficients(params._replace(**{var: base + h}))
        dn = REF.moment_coefficients(params._replace(**{var: base - h}))
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
    cs = REF.moment_coefficients(small)
    eg2 = small.r * (small.r + 1) / small.s ** 2
    assert_allclose(cs.dc2_dkappa, -2 * small.kappa / (p * p * (p + 2)) * eg2,
                    rtol=1e-7)
    assert_allclose(cs.dc3_dkappa, 2 * small.kappa / (p * (p + 2)) * eg2, rtol=1e-7)
    # limits: dc2/dkappa -> 0 and dc3/dkappa -> 0 as kappa -> 0 (A/kappa even)
    c0 = REF.moment_coefficients(params._replace(kappa=np.zeros(k)))
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
    got = REF.moment_coefficients(params).dc2_dkappa
    nu = p / 2 - 1
    ref = [float(mp.diff(lambda x: mp.besseli(nu + 1, x) / mp.besseli(nu, x) / x,
                         mp.mpf(float(kv)))) for kv in kappa]
    assert_allclose(got, ref, rtol=1e-10)
    # the same derivative in the quantities the compiled objective uses
    assert_allclose(vmf_point_quantities(p, kappa)[4], ref, rtol=1e-10)


# ---------------------------------------------------------------------------
# the compiled gradient of the fit
# ---------------------------------------------------------------------------


def _compiled_problem(method, sparse, seed, prior="gamma"):
    """(X, y, sq, cfg, consts, lams, beta, eta, value, aux) at a random q: 60
    rows, K = 3, p = 4, expert concentrations from 0.5 to 5,000 (every Bessel
    branch)."""
    from skbinvi.experts._ascent import prior_constants
    from skbinvi.experts._variational import objective_and_aux

    rng = np.random.default_rng(seed)
    n, k, p = 60, 3, 4
    X, y = _data(rng, sparse, n=n, p=p)
    y = y.astype(float)
    cfg, lams = REF._check_config(method, 3.0 if method == "vi" else 0.5, np.eye(p)[-1],
                                  2.0, 0.5, (1.0, 2.0), 0.3, p)
    if prior == "chi":  # the estimator's default: chi experts, Gamma gates
        cfg = cfg._replace(alpha1=np.array([float(p), 2.0]),
                           alpha2=np.array([0.0, 0.5]), alpha3=np.array([0.5, 0.0]))
    beta, eta = _params(rng, k, p), _params(rng, k, p)
    beta = beta._replace(kappa=np.array([0.5, 300.0, 5000.0]))
    Xd = X.toarray() if sparse else X
    sq = np.sum(Xd * Xd, axis=1)
    consts = prior_constants(cfg, k, p)
    value, aux = objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams)
    return X, y, sq, cfg, consts, lams, beta, eta, value, aux


def _tangent_fd(f, params, k, v, h=1e-6):
    """d/dh f(mu_k -> (mu_k + h v) / ||mu_k + h v||) at h = 0, central."""
    vals = []
    for sign in (1.0, -1.0):
        mu = params.mu.copy()
        mu[k] = mu[k] + sign * h * v
        mu[k] /= np.linalg.norm(mu[k])
        vals.append(f(params._replace(mu=mu)))
    return (vals[0] - vals[1]) / (2 * h)


def _entry_fd(f, params, name, k, rel=1e-6):
    base = getattr(params, name)
    h = rel * base[k]
    vals = []
    for sign in (1.0, -1.0):
        x = base.copy()
        x[k] += sign * h
        vals.append(f(params._replace(**{name: x})))
    return (vals[0] - vals[1]) / (2 * h)


@pytest.mark.parametrize("method", ["vi", "pr"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("prior", ["gamma", "chi"])
def test_compiled_gradient_every_coordinate(method, sparse, statistics, prior):
    """SetObjective.gradient (fixed auxiliaries, any set) equals central finite
    differences of SetObjective.value in every kappa, r, s entry and along two
    tangent directions of every mean direction."""
    from skbinvi.experts._ascent import Point, SetObjective
    from skbinvi.experts._variational import _FixedAuxLikelihood

    X, y, sq, cfg, consts, lams, beta, eta, value, aux = _compiled_problem(
        method, sparse, 1, prior)
    lik = _FixedAuxLikelihood(X, y, sq, aux, statistics)
    rng = np.random.default_rng(2)
    atol = 1e-7 * (abs(value) + 1.0)
    for which, par in enumerate((beta, eta)):
        obj = SetObjective(lik, which, cfg, consts, lams[which])
        grad = obj.gradient(Point(*par))

        def f(q, obj=obj):
            return obj.value(Point(*q))

        for f_idx, name in enumerate(("kappa", "r", "s"), start=1):
            num = [_entry_fd(f, par, name, k) for k in range(par.kappa.size)]
            assert_allclose(grad[f_idx], num, rtol=1e-5, atol=atol,
                            err_msg=f"set {which} {name}")
        for k in range(par.mu.shape[0]):
            for _ in range(2):
                v = rng.normal(size=par.mu.shape[1])
                v -= (v @ par.mu[k]) * par.mu[k]
                assert_allclose(grad[0][k] @ v, _tangent_fd(f, par, k, v), rtol=1e-5,
                                atol=atol, err_msg=f"set {which} mu[{k}]")


@pytest.mark.parametrize("method", ["vi", "pr"])
def test_compiled_gradient_at_optimal_aux_is_profile_gradient(method):
    """Envelope theorem: at the optimal (phi, xi, c, d) the fixed-auxiliary
    gradient equals the gradient of the objective with the auxiliaries
    re-optimized (objective_and_aux), in every kappa, r, s entry."""
    from skbinvi.experts._ascent import Point, SetObjective
    from skbinvi.experts._variational import _FixedAuxLikelihood, objective_and_aux

    X, y, sq, cfg, consts, lams, beta, eta, value, aux = _compiled_problem(
        method, False, 4)
    lik = _FixedAuxLikelihood(X, y, sq, aux, True)
    atol = 1e-7 * (abs(value) + 1.0)
    for which, par in enumerate((beta, eta)):
        grad = SetObjective(lik, which, cfg, consts, lams[which]).gradient(Point(*par))

        def profiled(q, which=which):
            b, e = (q, eta) if which == 0 else (beta, q)
            return objective_and_aux(X, y, sq, b, e, cfg, consts, lams)[0]

        for f_idx, name in enumerate(("kappa", "r", "s"), start=1):
            num = [_entry_fd(profiled, par, name, k) for k in range(par.kappa.size)]
            assert_allclose(grad[f_idx], num, rtol=1e-5, atol=atol,
                            err_msg=f"set {which} {name}")
