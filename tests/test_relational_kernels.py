"""Kernels of the latent feature relational model against NumPy/SciPy, enumeration
and finite differences, for diagonal and full (directed) weights, several relations."""

import itertools

import numpy as np
import pytest
from _reference import relational as REF
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats
from scipy.special import log_ndtr

from skbinvi.relational import _kernels

FORMS = [True, False]  # diag


def _problem(seed=0, N=5, D=2, R=2, diag=False, pairs="all", rho=0.4):
    """Ordered pairs of N entities in R relations, random q, b and W."""
    rng = np.random.default_rng(seed)
    i, j = np.nonzero(~np.eye(N, dtype=bool))
    snd = np.tile(i, R).astype(np.int64)
    rcv = np.tile(j, R).astype(np.int64)
    rel = np.repeat(np.arange(R), i.size).astype(np.int64)
    if pairs != "all":
        keep = rng.random(snd.size) < pairs
        snd, rcv, rel = snd[keep], rcv[keep], rel[keep]
    x = (rng.random(snd.size) < 0.4).astype(float)
    q = rng.uniform(0.15, 0.85, size=(N, D))
    b = rng.normal(-0.3, 0.5, R)
    W = rng.normal(0.5, 1.0, (R, D, D))
    if diag:
        W = W * np.eye(D)
    keys = (_kernels.pair_keys(snd, rel, N), _kernels.pair_keys(rcv, rel, N))
    return dict(
        snd=snd, rcv=rcv, rel=rel, x=x, q=q, b=b, W=W, diag=diag, rho=rho, keys=keys
    )


def _configs(D):
    return np.array(list(itertools.product([0.0, 1.0], repeat=D)))


def _bern(q, z):
    return np.prod(np.where(z == 1, q, 1 - q), axis=-1)


def _exact_pair_terms(P, q=None, b=None, W=None):
    """E_q[g(eta_p)] of every pair by enumerating z_i and z_j (2^(2D) terms)."""
    q = P["q"] if q is None else q
    b = P["b"] if b is None else b
    W = P["W"] if W is None else W
    Z = _configs(q.shape[1])
    out = np.empty(P["snd"].size)
    for k, (i, j, r) in enumerate(zip(P["snd"], P["rcv"], P["rel"], strict=False)):
        eta = b[r] + np.einsum("ad,de,be->ab", Z, W[r], Z)
        prob = _bern(q[i], Z)[:, None] * _bern(q[j], Z)[None, :]
        s = 1.0 if P["x"][k] == 1 else -1.0
        out[k] = (prob * log_ndtr(s * eta)).sum()
    return out


def _exact_elbo(P, q=None, b=None, W=None):
    q = P["q"] if q is None else q
    return _exact_pair_terms(P, q, b, W).sum() - _kernels.kl_features(q, P["rho"])


def _exact_logit_gradient(P, eps=1e-6):
    """dELBO / d logit q_id by central differences of the enumerated true ELBO."""
    lam = np.log(P["q"] / (1 - P["q"]))
    grad = np.empty_like(lam)
    for idx in np.ndindex(lam.shape):
        values = []
        for sign in (1, -1):
            moved = lam.copy()
            moved[idx] += sign * eps
            values.append(_exact_elbo(P, 1 / (1 + np.exp(-moved))))
        grad[idx] = (values[0] - values[1]) / (2 * eps)
    return grad


def _args(P):
    (skey, sk_ent, sk_rel), (rkey, rk_ent, rk_rel) = P["keys"]
    return (P["snd"], P["rcv"], P["rel"], skey, sk_ent, sk_rel, rkey, rk_ent, rk_rel)


def _rkeys(P):
    return P["keys"][1]


def _mcvi(P, uniforms, logit_rho=None):
    N, D = P["q"].shape
    if logit_rho is None:
        logit_rho = np.log(P["rho"] / (1 - P["rho"]))
    out = np.empty((N, D))
    _kernels.mcvi_mean_deltas(
        *_args(P), P["x"], P["q"], logit_rho, P["b"], P["W"], P["diag"], uniforms,
        _kernels.NO_WEIGHT, _kernels.NO_WEIGHT, out,
    )
    return out


# ------------------------------------------------------------ pair keys, hash
def test_pair_keys_index_the_distinct_entity_relation_pairs():
    ent = np.array([3, 1, 3, 0, 1], dtype=np.int64)
    rel = np.array([0, 0, 0, 1, 1], dtype=np.int64)
    key, key_ent, key_rel = _kernels.pair_keys(ent, rel, 5)
    assert_array_equal(key_ent[key], ent)
    assert_array_equal(key_rel[key], rel)
    assert key_ent.size == 4



@pytest.mark.parametrize("seed", range(4))
def test_unique_codes_and_counting_argsort_equal_numpy(seed):
    # the O(P + n) versions of np.unique and a stable argsort that a
    # stochastic step uses for its local ids and keys: the same arrays
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    codes = rng.integers(0, n, size=int(rng.integers(0, 200)))
    uniq, inverse = _kernels.unique_codes(codes, n)
    ref_uniq, ref_inverse = np.unique(codes, return_inverse=True)
    assert_array_equal(uniq, ref_uniq)
    assert_array_equal(inverse, ref_inverse.ravel())
    assert_array_equal(_kernels.counting_argsort(codes, n),
                       np.argsort(codes, kind="stable"))
    ent, rel = rng.integers(0, n, size=codes.size), rng.integers(0, 3, size=codes.size)
    for fast, slow in zip(_kernels.pair_keys(ent, rel, n, 3),
                          _kernels.pair_keys(ent, rel, n), strict=True):
        assert_array_equal(fast, slow)
        assert fast.dtype == np.int64
    # both ways of unique_inverse: counting, and sorting for a wide span
    for span in (n, 10**9):
        uniq, inverse = _kernels.unique_inverse(codes, span)
        assert_array_equal(uniq, ref_uniq)
        assert_array_equal(inverse, ref_inverse.ravel())
        assert inverse.dtype == np.int64

def test_hash_uniforms_are_uniform_and_independent():
    q = np.full((200, 5), 0.5)
    z = REF.sample_features(q, 123, 40)  # 40 000 bits
    assert abs(z.mean() - 0.5) < 0.01
    # neighbouring samples, entities and features are uncorrelated
    for a, b in ((z[1:], z[:-1]), (z[:, 1:], z[:, :-1]), (z[..., 1:], z[..., :-1])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.03
    u = np.array([_kernels.hash_uniform(7, s, 3, 2) for s in range(5000)])
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert _kernels.hash_uniform(7, 1, 3, 2) == _kernels.hash_uniform(7, 1, 3, 2)
    assert not np.array_equal(z, REF.sample_features(q, 124, 40))


# -------------------------------------------------------------------- ELBO
@pytest.mark.parametrize("diag", FORMS)
def test_expected_pair_log_likelihood_matches_numpy_with_the_same_samples(diag):
    P = _problem(seed=1, N=6, D=3, R=2, diag=diag, pairs=0.7)
    S, seed = 16, 99
    out = np.empty(P["snd"].size)
    _kernels.expected_pair_log_likelihood(
        P["snd"],
        P["rcv"],
        P["rel"],
        *_rkeys(P),
        P["x"],
        P["q"],
        P["b"],
        P["W"],
        diag,
        seed,
        S,
        out,
    )
    z = REF.sample_features(P["q"], seed, S)  # (S, N, D)
    eta = P["b"][P["rel"]] + np.einsum(
        "spd,pde,spe->sp", z[:, P["snd"]], P["W"][P["rel"]], z[:, P["rcv"]]
    )
    sign = np.where(P["x"] == 1, 1.0, -1.0)
    assert_allclose(out, log_ndtr(sign * eta).mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("diag", FORMS)
def test_expected_pair_log_likelihood_agrees_with_enumeration(diag):
    P = _problem(seed=2, N=4, D=2, R=2, diag=diag)
    S = 20000
    out = np.empty(P["snd"].size)
    _kernels.expected_pair_log_likelihood(
        P["snd"],
        P["rcv"],
        P["rel"],
        *_rkeys(P),
        P["x"],
        P["q"],
        P["b"],
        P["W"],
        diag,
        5,
        S,
        out,
    )
    exact = _exact_pair_terms(P)
    # Monte Carlo error: |g| is at most a few nats here
    assert_allclose(out, exact, atol=0.03)


def test_kl_features_matches_numpy():
    q = np.random.default_rng(0).uniform(0.01, 0.99, size=(6, 3))
    rho = 0.3
    expected = (q * np.log(q / rho) + (1 - q) * np.log((1 - q) / (1 - rho))).sum()
    assert_allclose(_kernels.kl_features(q, rho), expected, rtol=1e-12)


@pytest.mark.parametrize("diag", FORMS)
def test_pair_mean_and_variance_match_enumeration(diag):
    P = _problem(seed=3, N=5, D=3, R=2, diag=diag)
    n = P["snd"].size
    mean, var = np.empty(n), np.empty(n)
    _kernels.pair_mean_and_variance(
        P["snd"], P["rcv"], P["rel"], P["q"], P["b"], P["W"], diag, mean, var
    )
    Z = _configs(3)
    for k, (i, j, r) in enumerate(zip(P["snd"], P["rcv"], P["rel"], strict=False)):
        eta = P["b"][r] + np.einsum("ad,de,be->ab", Z, P["W"][r], Z)
        prob = _bern(P["q"][i], Z)[:, None] * _bern(P["q"][j], Z)[None, :]
        m = (prob * eta).sum()
        assert_allclose(mean[k], m, rtol=1e-10)
        assert_allclose(var[k], (prob * (eta - m) ** 2).sum(), rtol=1e-9, atol=1e-12)
    m2 = np.empty(n)
    _kernels.pair_means(P["snd"], P["rcv"], P["rel"], P["q"], P["b"], P["W"], diag, m2)
    assert_allclose(m2, mean, rtol=1e-12)


# --------------------------------------------------------------------- mcvi
@pytest.mark.parametrize("diag", FORMS)
@pytest.mark.parametrize("n_components", [3, 64])
def test_mcvi_deltas_match_a_numpy_reference(diag, n_components):
    """The same samples through a direct NumPy evaluation of Delta_id(z).
    With 64 features a pattern does not fit in 62 bits: no memo."""
    P = _problem(seed=4, N=6, D=n_components, R=2, diag=diag, pairs=0.8)
    P["W"] *= 3.0 / n_components  # etas of a few units whatever D
    N, D = P["q"].shape
    S = 5 if n_components < 10 else 2
    uniforms = np.random.default_rng(2).random((S, N, D))
    out = _mcvi(P, uniforms, logit_rho=0.1)
    expected = np.zeros((N, D))
    for s in range(S):
        z = (uniforms[s] < P["q"]).astype(float)
        for k, (i, j, r) in enumerate(zip(P["snd"], P["rcv"], P["rel"], strict=False)):
            sign = 1.0 if P["x"][k] == 1 else -1.0
            for end in (i, j):
                for d in range(D):
                    etas = []
                    for value in (1.0, 0.0):
                        zz = z.copy()
                        zz[end, d] = value
                        etas.append(P["b"][r] + zz[i] @ P["W"][r] @ zz[j])
                    expected[end, d] += log_ndtr(sign * etas[0]) - log_ndtr(
                        sign * etas[1]
                    )
    assert_allclose(out, 0.1 + expected / S, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("diag", FORMS)
def test_mcvi_deltas_are_the_natural_gradient_of_the_true_elbo(diag):
    """With many samples, mean Delta - logit q = (dELBO/dlogit q) / (q (1 - q))."""
    P = _problem(seed=5, N=4, D=2, R=2, diag=diag)
    N, D = P["q"].shape
    out = _mcvi(P, np.random.default_rng(8).random((40000, N, D)))
    lam = np.log(P["q"] / (1 - P["q"]))
    natural = _exact_logit_gradient(P) / (P["q"] * (1 - P["q"]))
    assert np.all(np.abs((out - lam) - natural) < 0.05), (out - lam, natural)


def test_mcvi_step_one_with_exact_expectation_is_coordinate_ascent():
    """logit q_id = E[Delta_id] maximizes the enumerated true ELBO in q_id (full W)."""
    P = _problem(seed=6, N=4, D=2, R=2, diag=False)
    N, D = P["q"].shape
    out = _mcvi(P, np.random.default_rng(13).random((100000, N, D)))
    grid = np.linspace(0.005, 0.995, 199)
    for i, d in ((0, 0), (2, 1), (3, 0)):
        values = []
        for value in grid:
            moved = P["q"].copy()
            moved[i, d] = value
            values.append(_exact_elbo(P, moved))
        best = grid[int(np.argmax(values))]
        assert abs(1 / (1 + np.exp(-out[i, d])) - best) < 0.015, (i, d, best)


def test_full_weights_are_directed():
    """A full W gives (i, j) and (j, i) different means; a diagonal one does not."""
    for diag in FORMS:
        P = _problem(seed=7, N=4, D=3, R=1, diag=diag)
        n = P["snd"].size
        mean = np.empty(n)
        _kernels.pair_means(
            P["snd"], P["rcv"], P["rel"], P["q"], P["b"], P["W"], diag, mean
        )
        reverse = np.empty(n)
        _kernels.pair_means(
            P["rcv"], P["snd"], P["rel"], P["q"], P["b"], P["W"], diag, reverse
        )
        assert np.allclose(mean, reverse) == diag


# ------------------------------------------------------------ weight step
def _explicit_features(P, k):
    """E[f f^T] and E[f] of pair k by enumeration (f = (1, vec(z_i z_j^T)) or diag)."""
    i, j = P["snd"][k], P["rcv"][k]
    D = P["q"].shape[1]
    Z = _configs(D)
    F = 1 + (D if P["diag"] else D * D)
    second, first = np.zeros((F, F)), np.zeros(F)
    for zi in Z:
        for zj in Z:
            prob = _bern(P["q"][i], zi) * _bern(P["q"][j], zj)
            outer = np.outer(zi, zj)
            f = np.concatenate(
                [[1.0], np.diagonal(outer) if P["diag"] else outer.ravel()]
            )
            second += prob * np.outer(f, f)
            first += prob * f
    return second, first


@pytest.mark.parametrize("diag", FORMS)
def test_weight_system_matches_explicit_moments(diag):
    P = _problem(seed=9, N=5, D=2, R=3, diag=diag, pairs=0.6)
    A = _kernels.weight_system(
        P["snd"], P["rcv"], P["rel"], P["q"], 3, diag, P["keys"][0]
    )
    expected = np.zeros_like(A)
    for k in range(P["snd"].size):
        expected[P["rel"][k]] += _explicit_features(P, k)[0]
    assert_allclose(A, expected, rtol=1e-10, atol=1e-12)


def _exact_em_rhs(P):
    """E_q[sum_p ybar_p(z) f_p(z)] per relation by enumeration."""
    R, D = P["b"].size, P["q"].shape[1]
    rhs0, rhsW = np.zeros(R), np.zeros((R, D, D))
    Z = _configs(D)
    for k, (i, j, r) in enumerate(zip(P["snd"], P["rcv"], P["rel"], strict=False)):
        for zi in Z:
            for zj in Z:
                prob = _bern(P["q"][i], zi) * _bern(P["q"][j], zj)
                ybar = _kernels.truncated_normal_mean(
                    P["x"][k], P["b"][r] + zi @ P["W"][r] @ zj
                )
                rhs0[r] += prob * ybar
                rhsW[r] += prob * ybar * np.outer(zi, zj)
    return rhs0, rhsW


@pytest.mark.parametrize("diag", FORMS)
def test_mc_weight_rhs_and_the_em_w_step_on_the_true_elbo(diag):
    """The Monte Carlo right-hand side agrees with enumeration; EM weight steps
    with the exact one never decrease the enumerated true ELBO."""
    P = _problem(seed=10, N=5, D=2, R=2, diag=diag)
    N, D = P["q"].shape
    R = P["b"].size
    exact0, exactW = _exact_em_rhs(P)
    out0, outW = np.empty(R), np.empty((R, D, D))
    _kernels.mc_weight_rhs(
        *_args(P),
        P["x"],
        P["q"],
        P["b"],
        P["W"],
        diag,
        np.random.default_rng(1).random((20000, N, D)),
        _kernels.NO_WEIGHT,
        False,
        out0,
        outW,
    )
    assert_allclose(out0, exact0, rtol=0.02, atol=0.05)
    if diag:
        assert_allclose(
            np.diagonal(outW, axis1=1, axis2=2),
            np.diagonal(exactW, axis1=1, axis2=2),
            rtol=0.02,
            atol=0.05,
        )
    else:
        assert_allclose(outW, exactW, rtol=0.02, atol=0.05)
    A = _kernels.weight_system(
        P["snd"], P["rcv"], P["rel"], P["q"], R, diag, P["keys"][0]
    )
    before = _exact_elbo(P)
    for _ in range(4):
        rhs0, rhsW = _exact_em_rhs(P)
        b, W = P["b"].copy(), P["W"].copy()
        _kernels.solve_weights(A, rhs0, rhsW, 0.0, diag, b, W)
        P["b"], P["W"] = b, W
        after = _exact_elbo(P)
        assert after >= before - 1e-9, (before, after)
        before = after


@pytest.mark.parametrize("diag", FORMS)
def test_solve_weights_maximizes_the_ridge_quadratic(diag):
    """The solution zeroes the gradient rhs - (A + alpha I_W) w (finite differences)."""
    P = _problem(seed=11, N=5, D=2, R=2, diag=diag)
    R, D = 2, 2
    A = _kernels.weight_system(
        P["snd"], P["rcv"], P["rel"], P["q"], R, diag, P["keys"][0]
    )
    rhs0 = np.array([1.0, -2.0])
    rhsW = np.random.default_rng(0).normal(size=(R, D, D))
    b, W = np.zeros(R), np.zeros((R, D, D))
    alpha = 0.7
    _kernels.solve_weights(A, rhs0, rhsW, alpha, diag, b, W)
    for r in range(R):
        wv = np.concatenate([[b[r]], np.diagonal(W[r]) if diag else W[r].ravel()])
        rhs = np.concatenate(
            [[rhs0[r]], np.diagonal(rhsW[r]) if diag else rhsW[r].ravel()]
        )

        def Q(v, r=r, rhs=rhs):
            return v @ rhs - 0.5 * v @ A[r] @ v - 0.5 * alpha * v[1:] @ v[1:]

        for k in range(wv.size):
            e = np.zeros_like(wv)
            e[k] = 1e-5
            assert abs(Q(wv + e) - Q(wv - e)) / 2e-5 < 1e-5
        assert Q(wv) >= Q(wv + 0.01)


# --------------------------------------------------------------------- cavi
def _truncated_means(x, m):
    return np.array(
        [_kernels.truncated_normal_mean(a, b) for a, b in zip(x, m, strict=False)]
    )


def _bound(P, q, mu):
    return REF.augmented_bound(
        P["snd"], P["rcv"], P["rel"], P["x"], q, P["b"], P["W"], P["diag"], mu,
        P["rho"],
    )


def _sweep(P, inc, q, mean_y, m):
    """The cavi sweep of P's weight form, in place."""
    if P["diag"]:
        _kernels.cavi_sweep(
            *inc, P["rel"], q, np.log(0.4 / 0.6), P["b"], P["W"], mean_y, m
        )
    else:
        _kernels.cavi_sweep_full(
            *inc, P["snd"], P["rel"], q, np.log(0.4 / 0.6), P["b"], P["W"], mean_y, m
        )


@pytest.mark.parametrize("diag", FORMS)
def test_augmented_bound_below_true_elbo_and_tight_location(diag):
    P = _problem(seed=12, N=5, D=2, R=2, diag=diag)
    n = P["snd"].size
    m = np.empty(n)
    _kernels.pair_means(P["snd"], P["rcv"], P["rel"], P["q"], P["b"], P["W"], diag, m)
    at_m = _bound(P, P["q"], m)
    assert at_m <= _exact_elbo(P) + 1e-9
    assert _bound(P, P["q"], m + 0.3) < at_m


@pytest.mark.parametrize("diag", FORMS)
def test_cavi_sweeps_and_weight_steps_never_decrease_the_augmented_bound(diag):
    """B(q, w, mu): the sweep (mu fixed), the weight step (mu fixed) and the new
    optimal location mu = E_q[eta] each never decrease it."""
    P = _problem(seed=13, N=8, D=3, R=2, diag=diag, pairs=0.7)
    q = P["q"].copy()
    inc = _kernels.incidence(P["snd"], P["rcv"], 8)
    R, D = 2, 3
    m = np.empty(P["snd"].size)
    _kernels.pair_means(P["snd"], P["rcv"], P["rel"], q, P["b"], P["W"], diag, m)
    values = []
    for _ in range(6):
        mu = m.copy()  # q(y) at its optimal location, then held fixed
        mean_y = _truncated_means(P["x"], mu)
        values.append(_bound(P, q, mu))
        _sweep(P, inc, q, mean_y, m)
        check = np.empty_like(m)
        _kernels.pair_means(
            P["snd"], P["rcv"], P["rel"], q, P["b"], P["W"], diag, check
        )
        assert_allclose(m, check, rtol=1e-10, atol=1e-12)  # kept up to date
        values.append(_bound(P, q, mu))
        rhs0, rhsW = np.empty(R), np.empty((R, D, D))
        _kernels.augmented_weight_rhs(
            P["snd"], P["rcv"], P["rel"], q, mean_y, rhs0, rhsW
        )
        A = _kernels.weight_system(
            P["snd"], P["rcv"], P["rel"], q, R, diag, None if diag else P["keys"][0]
        )
        b, W = P["b"].copy(), P["W"].copy()
        _kernels.solve_weights(A, rhs0, rhsW, 0.0, diag, b, W)
        P["b"], P["W"] = b, W
        values.append(_bound(P, q, mu))
        _kernels.pair_means(P["snd"], P["rcv"], P["rel"], q, P["b"], P["W"], diag, m)
    values.append(_bound(P, q, m))
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values[1:])), values
    assert values[-1] > values[0] + 0.1


@pytest.mark.parametrize("diag", FORMS)
@pytest.mark.parametrize("entity, feature", [(0, 0), (3, 1), (5, 2)])
def test_cavi_update_is_the_coordinate_maximizer(diag, entity, feature):
    """Every update of a sweep maximizes B over its q_id on a grid, given the
    q the sweep has reached: the updates before it applied, those after it not."""
    P = _problem(seed=14, N=6, D=3, R=2, diag=diag)
    q = P["q"].copy()
    m = np.empty(P["snd"].size)
    _kernels.pair_means(P["snd"], P["rcv"], P["rel"], q, P["b"], P["W"], diag, m)
    mu = m.copy()
    mean_y = _truncated_means(P["x"], mu)
    inc = _kernels.incidence(P["snd"], P["rcv"], 6)
    swept = q.copy()
    _sweep(P, inc, swept, mean_y, m.copy())
    # the state just before the update of (entity, feature)
    before = q.copy()
    order = [(i, d) for i in range(6) for d in range(3)]
    for i, d in order[: order.index((entity, feature))]:
        before[i, d] = swept[i, d]
    grid = np.linspace(0.001, 0.999, 999)
    values = []
    for v in grid:
        moved = before.copy()
        moved[entity, feature] = v
        values.append(_bound(P, moved, mu))
    assert abs(grid[int(np.argmax(values))] - swept[entity, feature]) < 2e-3


def test_truncated_normal_mean_matches_scipy():
    from scipy.stats import truncnorm

    for mu in (-30.0, -3.0, 0.0, 2.0, 35.0):
        assert_allclose(
            _kernels.truncated_normal_mean(1.0, mu),
            truncnorm.mean(-mu, np.inf, loc=mu),
            rtol=1e-9,
        )
        assert_allclose(
            _kernels.truncated_normal_mean(0.0, mu),
            truncnorm.mean(-np.inf, -mu, loc=mu),
            rtol=1e-9,
        )


# -------------------------------------------------------------------- score
@pytest.mark.parametrize("diag", FORMS)
def test_score_function_gradient_is_unbiased_for_the_true_elbo_gradient(diag):
    P = _problem(seed=15, N=4, D=2, R=1, diag=diag)
    N, D = P["q"].shape
    out = np.empty((N, D))
    _kernels.score_function_gradient(
        P["snd"],
        P["rcv"],
        P["rel"],
        *_rkeys(P),
        P["x"],
        P["q"],
        np.log(P["rho"] / (1 - P["rho"])),
        P["b"],
        P["W"],
        diag,
        np.random.default_rng(10).random((100000, N, D)),
        out,
    )
    assert np.all(np.abs(out - _exact_logit_gradient(P)) < 0.03)


@pytest.mark.parametrize("diag", FORMS)
def test_monte_carlo_kernels_do_not_depend_on_threads_or_the_memo(diag, monkeypatch):
    """Passes split into parts (threads), and a memo that is disabled, kept
    at some samples only or at every one, give the same numbers."""
    P = _problem(seed=16, N=12, D=3, R=2, diag=diag, pairs=0.5)
    N, D = P["q"].shape
    uniforms = np.random.default_rng(0).random((6, N, D))
    w_snd = np.random.default_rng(1).random(P["x"].size)
    w_rcv = np.where(np.arange(P["x"].size) % 3 == 0, 0.0, 2.0)

    def run():
        grad = np.empty((N, D))
        _kernels.score_function_gradient(
            P["snd"], P["rcv"], P["rel"], *_rkeys(P), P["x"], P["q"], 0.2, P["b"],
            P["W"], diag, uniforms, grad,
        )
        out0, outW = np.empty(2), np.empty((2, D, D))
        _kernels.mc_weight_rhs(
            *_args(P), P["x"], P["q"], P["b"], P["W"], diag, uniforms,
            _kernels.NO_WEIGHT, False, out0, outW,
        )
        weighted = np.empty((N, D))
        _kernels.mcvi_mean_deltas(
            *_args(P), P["x"], P["q"], 0.2, P["b"], P["W"], diag, uniforms, w_snd,
            w_rcv, weighted,
        )
        elbo = np.empty(P["x"].size)
        _kernels.expected_pair_log_likelihood(
            P["snd"], P["rcv"], P["rel"], *_rkeys(P), P["x"], P["q"], P["b"],
            P["W"], diag, 3, 7, elbo,
        )
        return _mcvi(P, uniforms, 0.2), grad, out0, outW, weighted, elbo

    reference = run()
    split = _kernels._parts
    monkeypatch.setattr(
        _kernels, "_parts",
        lambda n, work_per_item, min_work: split(n, 1, 0) if n < 3 else
        [(0, 1), (1, n // 2), (n // 2, n)],
    )
    # no memo; a table too small for some samples; room for every key
    for keys in (0, 100, 2**18):
        monkeypatch.setattr(_kernels, "_MEMO_KEYS", keys)
        for a, b in zip(reference, run(), strict=True):
            assert_array_equal(a, b)


def test_two_hop_product_on_threads_equals_one_product(monkeypatch):
    # the start's products with the adjacency go to threads from a threshold,
    # in row ranges that are views of the matrix: the same numbers
    import scipy.sparse as sp

    from skbinvi import _numba
    from skbinvi.relational import _estimator

    rng = np.random.default_rng(0)
    N = 300
    S = sp.random(N, N, density=0.05, random_state=1, format="csr")
    S = ((S + S.T) > 0).astype(float).tocsr()
    degree = np.asarray(S.sum(axis=1))
    A = rng.random((N, 4))
    serial = _estimator._two_hop_product(S, degree, A)
    calls = []

    def recording_run_parts(kernel, parts):
        calls.append(len(parts))
        return [kernel(*p) for p in parts]

    monkeypatch.setattr(_numba, "run_parts", recording_run_parts)
    monkeypatch.setattr(_numba, "thread_count", lambda: 3)
    monkeypatch.setattr(_estimator, "_MIN_PARALLEL_PRODUCT", 1)
    split = _estimator._two_hop_product(S, degree, A)
    assert calls == [3, 3]
    assert_array_equal(split, serial)
    assert_array_equal(split, S @ A + _estimator._TWO_HOP_WEIGHT
                       * (S @ (S @ A) - degree * A))
