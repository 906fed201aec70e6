"""Jaakkola-Jordan variational EM of the noisy-OR model ("jj", LB-CDI baseline).

Checked against exact enumeration of the true ELBO, a dense NumPy reference of
the bound, the KKT conditions of the weight update, finite differences of the
M-step objective, and synthetic data with known patterns.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import noisy_or as REF
from numpy.testing import assert_allclose
from scipy.optimize import linear_sum_assignment
from scipy.special import expit, log_expit, logit

from skbinvi.datasets import make_noisy_or
from skbinvi.noisy_or import _jaakkola_jordan as jj

FLOOR = jj.LEAK_FLOOR


# ----------------------------------------------------------------------------
# problems and slow references
# ----------------------------------------------------------------------------


def _problem(seed=0, B=6, D=10, K=4, density=0.35, extreme=False):
    """Random binary batch, parameters, q and r on the simplex."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((B, D)) < density).astype(float)
    dense[0] = 0.0  # an empty row
    dense[1, : min(D, 3)] = 1.0  # a row with several active features
    X = sp.csr_matrix(dense)
    theta = rng.uniform(0.0, 2.0, size=(D, K))
    theta[rng.random((D, K)) < 0.2] = 0.0  # exact zeros
    leak = rng.uniform(0.01, 0.5, size=D)
    logit_q = rng.normal(scale=2.0, size=(B, K))
    logit_prior = rng.normal(size=K)
    if extreme:
        theta[rng.random((D, K)) < 0.1] = 1e-9
        theta[rng.random((D, K)) < 0.1] = 15.0
        leak[rng.random(D) < 0.3] = 0.0  # below the floor
        leak[rng.random(D) < 0.1] = 8.0
        logit_q[rng.random((B, K)) < 0.1] = 30.0
        logit_q[rng.random((B, K)) < 0.1] = -30.0
    r = rng.dirichlet(np.ones(K), size=X.nnz)
    return X, theta, leak, logit_q, logit_prior, r


def _csr(X):
    return X.indptr.astype(np.int64), X.indices.astype(np.int64)


def _f(u):
    return np.log(-np.expm1(-u))


def _kl(logit_q, logit_prior):
    """KL(Bern(q) || Bern(mu)) from logits, finite for saturated q."""
    q = expit(logit_q)
    return (q * (logit_q - logit_prior) + log_expit(-logit_q)
            - log_expit(-logit_prior))


def _dense_r(X, r):
    """(B, D, K) array of the weights, zero at inactive entries."""
    K = r.shape[1]
    R = np.zeros(X.shape + (K,))
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    R[rows, X.indices] = r
    return R


def _reference_bound(X, theta, leak, logit_q, logit_prior, r):
    """Dense O(B D K) formula of the Jensen bound, straight from its definition."""
    x = X.toarray()
    q = expit(logit_q)
    R = _dense_r(X, r)
    t0 = np.maximum(leak, FLOOR)[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = np.where(R > 0, R * _f(t0 + theta[None] / R), 0.0)
    positive = q[:, None, :] * shifted + (1 - q[:, None, :]) * R * _f(t0)
    positive = (x * positive.sum(axis=2)).sum(axis=1)
    negative = -((1 - x) * (leak + q @ theta.T)).sum(axis=1)
    return positive + negative - _kl(logit_q, logit_prior).sum(axis=1)


def _true_elbo(X, theta, leak, logit_q, logit_prior):
    """True ELBO per row under factorized q, by enumeration of the 2^K states."""
    K = theta.shape[1]
    x = X.toarray()
    q = expit(logit_q)
    Z = np.array(list(itertools.product([0, 1], repeat=K)), dtype=float)
    w = np.prod(np.where(Z[None] == 1, q[:, None, :], 1 - q[:, None, :]), axis=2)
    u = np.maximum(leak, FLOOR) + Z @ theta.T  # (2^K, D)
    positive = w @ _f(u) * x  # (B, D)
    negative = -((1 - x) * (leak + q @ theta.T)).sum(axis=1)
    return positive.sum(axis=1) + negative - _kl(logit_q, logit_prior).sum(axis=1)


def _bound(X, theta, leak, logit_q, logit_prior, r):
    out = np.empty(X.shape[0])
    jj.jj_bound(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                 logit_prior, r, out)
    return out


def _entry_objective(t0, t, q, r):
    """sum_k r_k [q_k f(t0 + t_k / r_k) + (1 - q_k) f(t0)] for a batch of r (.., K)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = np.where(r > 0, r * _f(t0 + t / r), 0.0)
    return (q * shifted + (1 - q) * r * _f(t0)).sum(axis=-1)


# ----------------------------------------------------------------------------
# the bound
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_bound_matches_dense_reference(seed, extreme):
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, extreme=extreme)
    r[::3, 0] = 0.0  # some zero weights (the r -> 0 limit)
    r /= r.sum(axis=1, keepdims=True)
    assert_allclose(_bound(X, theta, leak, logit_q, logit_prior, r),
                    _reference_bound(X, theta, leak, logit_q, logit_prior, r),
                    rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("K", [1, 2, 3, 5, 6])
@pytest.mark.parametrize("seed", range(3))
def test_bound_below_true_elbo(seed, K):
    """B_n <= ELBO_n for random r on the simplex and for optimized r."""
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, B=8, D=11, K=K)
    elbo = _true_elbo(X, theta, leak, logit_q, logit_prior)
    bound_random = _bound(X, theta, leak, logit_q, logit_prior, r)
    assert np.all(bound_random <= elbo + 1e-10)
    # optimal r for this q
    jj.jj_update_r(*_csr(X), theta, leak, logit_q, r, 200, 1e-12)
    bound_opt = _bound(X, theta, leak, logit_q, logit_prior, r)
    assert np.all(bound_opt >= bound_random - 1e-12)
    assert np.all(bound_opt <= elbo + 1e-10)
    # after a full E-step (q changes too): compare with the ELBO at the new q
    out = np.empty(X.shape[0])
    jj.jj_e_step(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                  logit_prior, r, 10, 0.0, out)
    elbo = _true_elbo(X, theta, leak, logit_q, logit_prior)
    assert np.all(out <= elbo + 1e-10)
    if K > 1:  # the bound is strictly loose at an interior q
        assert np.max(elbo - out) > 1e-3


@pytest.mark.parametrize("seed", range(3))
def test_bound_exact_for_one_cause(seed):
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed, K=1)
    r = np.ones((X.nnz, 1))
    assert_allclose(_bound(X, theta, leak, logit_q, logit_prior, r),
                    _true_elbo(X, theta, leak, logit_q, logit_prior), rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_r_update_tight_when_causes_are_certain(seed):
    """With q_k = 1 the optimum is r_k = theta_ik / sum_l theta_il and the gap is 0."""
    X, theta, leak, _, logit_prior, r = _problem(seed, K=5)
    theta[:, 0] = np.maximum(theta[:, 0], 0.1)  # no all-zero row of theta
    logit_q = np.full((X.shape[0], 5), 40.0)  # q = 1 in double precision
    jj.jj_update_r(*_csr(X), theta, leak, logit_q, r, 200, 1e-12)
    expected = theta[X.indices] / theta[X.indices].sum(axis=1, keepdims=True)
    assert_allclose(r, expected, rtol=1e-8, atol=1e-12)
    assert_allclose(_bound(X, theta, leak, logit_q, logit_prior, r),
                    _true_elbo(X, theta, leak, logit_q, logit_prior), rtol=1e-11)


# ----------------------------------------------------------------------------
# E-step
# ----------------------------------------------------------------------------


def test_q_update_matches_reference():
    X, theta, leak, logit_q, logit_prior, r = _problem(3, extreme=True)
    x = X.toarray()
    R = _dense_r(X, r)
    t0 = np.maximum(leak, FLOOR)[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(R > 0, R * (_f(t0 + theta[None] / R) - _f(t0)), 0.0)
    expected = logit_prior + (x[:, :, None] * gain).sum(axis=1) - (1 - x) @ theta
    out = np.empty(X.shape[0])
    REF.jj_update_q(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                    logit_prior, r, out)
    assert_allclose(logit_q, expected, rtol=1e-10, atol=1e-9)
    assert_allclose(out, _reference_bound(X, theta, leak, logit_q, logit_prior, r),
                    rtol=1e-11)


@pytest.mark.parametrize("seed", range(25))
def test_e_step_sweeps_never_decrease_the_bound(seed):
    extreme = seed % 2 == 1
    X, theta, leak, logit_q, logit_prior, r = _problem(
        seed, B=8, D=12, K=1 + seed % 6, extreme=extreme)
    indptr, indices = _csr(X)
    colsum, leak_sum = theta.sum(0), leak.sum()
    B = X.shape[0]
    previous = _bound(X, theta, leak, logit_q, logit_prior, r)
    out = np.empty(B)
    for _ in range(8):
        # the two half steps separately ...
        REF.jj_update_q(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                        logit_prior, r, out)
        assert np.all(out >= previous - 1e-12 * (1 + np.abs(previous)))
        half = out.copy()
        jj.jj_update_r(indptr, indices, theta, leak, logit_q, r, 200, 1e-12)
        current = _bound(X, theta, leak, logit_q, logit_prior, r)
        assert np.all(current >= half - 1e-12 * (1 + np.abs(half)))
        assert_allclose(r.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(r >= 0)
        # ... and one sweep of the E-step kernel
        jj.jj_e_step(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                      logit_prior, r, 1, 0.0, out)
        assert np.all(out >= current - 1e-12 * (1 + np.abs(current)))
        assert_allclose(out, _bound(X, theta, leak, logit_q, logit_prior, r),
                        rtol=1e-13)
        previous = out.copy()


@pytest.mark.parametrize("extreme", [False, True])
def test_e_step_is_the_same_on_any_number_of_threads(extreme, monkeypatch):
    """Rows are updated in parts on threads: 1 thread and 3 give equal bits."""
    from skbinvi import _numba

    X, theta, leak, logit_q, logit_prior, r = _problem(
        3, B=5 * jj._E_STEP_CHUNK + 3, D=30, K=7, extreme=extreme)
    indptr, indices = _csr(X)
    results = []
    for threads in (1, 3):
        monkeypatch.setattr(_numba, "thread_count", lambda threads=threads: threads)
        state = [logit_q.copy(), r.copy(), np.empty(X.shape[0])]
        jj.jj_e_step(indptr, indices, theta, leak, theta.sum(0), leak.sum(),
                     state[0], logit_prior, state[1], 5, 1e-10, state[2])
        results.append(state)
    # and row by row, as a batch of one row each
    one = [logit_q.copy(), r.copy(), np.empty(X.shape[0])]
    for n in range(X.shape[0]):
        rows = slice(X.indptr[n], X.indptr[n + 1])
        Xn = X[n]
        out = np.empty(1)
        q_n, r_n = one[0][n:n + 1], one[1][rows]
        jj.jj_e_step(*_csr(Xn), theta, leak, theta.sum(0), leak.sum(), q_n,
                     logit_prior, r_n, 5, 1e-10, out)
        one[0][n], one[1][rows], one[2][n] = q_n[0], r_n, out[0]
    for a, b in zip(results[0], results[1], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(results[0], one, strict=True):
        np.testing.assert_array_equal(a, b)


def _phi(t0, s):
    return _f(t0 + s) - _f(t0) - s / np.expm1(t0 + s)


def _psi(t0, s):
    return -_f(t0 + s) + s / np.expm1(t0 + s)


@pytest.mark.parametrize("t0", [1e-3, 1e-2, 0.1, 1.0, 5.0])
def test_inverse_solves_reach_the_root_in_few_steps(t0):
    """phi^-1 and psi^-1 of the r update: relative 1e-10 within 12 steps.

    Newton from any start (cold, far below, far above the root) needs 3 to 9
    steps; the cap of 12 catches a solve that leaves a root it has found
    (at the root the residual rounds to 0 and the step lands on the bracket
    end just set, which the safeguard once took for a step out of the
    bracket: it then expanded by e^3 and bisected back, 30 to 50 steps).
    """
    em1 = np.expm1(t0)
    top = -_f(t0)
    # each solve on the half of (0, -f(t0)) where _solve_r_entry uses it
    # (phi for y <= -f(t0) / 2, psi for w < -f(t0) / 2), where s is well
    # conditioned
    for frac, start in itertools.product(
            [1e-6, 1e-3, 0.1, 0.3, 0.5], [-1.0, np.nan, 1e-3, 0.01, 1.0, 10.0]):
        y = frac * top
        s = jj._solve_phi(y, t0, em1, start, 12)
        assert_allclose(jj._phi(s, t0, em1), y, rtol=1e-12)
        assert_allclose(s, jj._solve_phi(y, t0, em1, -1.0), rtol=1e-12)
        if frac > 1e-3:  # the NumPy reference cancels for phi ~ s^2 / 2
            assert_allclose(_phi(t0, s), y, rtol=1e-8)
        s = jj._solve_psi(y, t0, start, 12)
        assert_allclose(jj._psi(s, t0), y, rtol=1e-12)
        assert_allclose(s, jj._solve_psi(y, t0, -1.0), rtol=1e-12)
        assert_allclose(_psi(t0, s), y, rtol=1e-8)


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_r_update_is_optimal_for_fixed_q(seed, extreme):
    """Beats random and local perturbations on the simplex; satisfies the KKT."""
    rng = np.random.default_rng(100 + seed)
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, K=5, extreme=extreme)
    jj.jj_update_r(*_csr(X), theta, leak, logit_q, r, 200, 1e-12)
    q = expit(logit_q)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    for j, (n, i) in enumerate(zip(rows, X.indices, strict=True)):
        t0 = max(leak[i], FLOOR)
        best = _entry_objective(t0, theta[i], q[n], r[j])
        # random points of the simplex and small multiplicative perturbations
        others = np.vstack([
            rng.dirichlet(np.ones(5), size=100),
            r[j] * np.exp(0.05 * rng.normal(size=(100, 5))),
            r[j] * np.exp(1e-4 * rng.normal(size=(100, 5))),
        ])
        others /= others.sum(axis=1, keepdims=True)
        values = _entry_objective(t0, theta[i], q[n], others)
        assert np.all(values <= best + 1e-12 * (1 + abs(best)))
        # KKT: q_k phi(t_k / r_k) = lambda where r_k > 0, q_k phi(inf) <= lambda else
        on = (r[j] > 1e-6) & (theta[i] > 1e-6) & (q[n] > 1e-6)
        if on.sum() >= 2 and not extreme:
            lam = q[n, on] * _phi(t0, theta[i, on] / r[j, on])
            assert_allclose(lam, lam.mean(), rtol=1e-6)
            off = (r[j] == 0) & (theta[i] > 0)
            assert np.all(q[n, off] * -_f(t0) <= lam.mean() * (1 + 1e-9))


# ----------------------------------------------------------------------------
# M-step and EM
# ----------------------------------------------------------------------------


def _total_bound(X, theta, leak, logit_q, logit_prior, r):
    return _bound(X, theta, leak, logit_q, logit_prior, r).sum()


@pytest.mark.parametrize("seed", range(4))
def test_feature_bound_is_the_theta_part_of_the_total(seed):
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, B=9, D=14)
    leak = np.maximum(leak, FLOOR)
    out = np.empty(theta.shape[0])
    REF.jj_feature_bound(*_csr(X), logit_q, r, theta, leak, out)
    total = out.sum() - _kl(logit_q, logit_prior).sum()
    assert_allclose(total, _total_bound(X, theta, leak, logit_q, logit_prior, r),
                    rtol=1e-12)


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_m_step_never_decreases_the_bound(seed, extreme):
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, B=10, D=12, K=4,
                                                       extreme=extreme)
    leak = np.maximum(leak, FLOOR)
    before = _total_bound(X, theta, leak, logit_q, logit_prior, r)
    gain = jj.jj_m_step(*_csr(X), logit_q, r, theta, leak, logit_prior, 3, 1e-12)
    after = _total_bound(X, theta, leak, logit_q, logit_prior, r)
    assert gain >= 0.0
    assert after >= before - 1e-9 * abs(before)
    assert np.all(theta >= 0) and np.all(leak >= FLOOR)
    assert_allclose(expit(logit_prior), expit(logit_q).mean(axis=0), rtol=1e-10)


def test_m_step_caps_a_weight_whose_bound_has_no_maximum():
    """A word present in every document where a cause is on, with q_k zero to
    double precision elsewhere, has its bound rising without limit in theta_ik.
    On 500 Reuters headlines at K = 150 (seed 2, 60 EM iterations) the Newton
    steps ran such a weight to 4e44 and transform's logits to -4e44, and the
    classifier on them scored 0.547 (0.88-0.89 on the other seeds). The
    M-step keeps theta in [0, THETA_MAX]."""
    from skbinvi import NoisyORFactorizer
    from skbinvi.datasets import load_reuters

    train = load_reuters(subset="train", text="headline")
    rows = np.random.RandomState(0).permutation(train.data.shape[0])[:500]
    X = train.data[rows]
    model = NoisyORFactorizer(150, inference="jj", max_iter=60,
                              random_state=2).fit(X)
    assert model.components_.max() <= jj.THETA_MAX
    assert model.components_.max() == jj.THETA_MAX  # the cap is what binds
    logits = model.set_params(posterior="logit").transform(X)
    assert np.all(np.abs(logits) < 1e3)


def test_fit_keeps_the_leak_of_a_word_unseen_in_training():
    """The M-step's maximizer puts the leak of a word absent from the training
    rows at the lower bound; with LEAK_FLOOR (1e-10) there, a held-out row
    with that word paid log(1e-10) = -23 nats for it (test ELBO of 500
    Reuters headlines -32 nats per document against -20 with all of them).
    The estimator bounds the leak by that of a word seen once in n + 1 rows,
    so such a word costs about log(n + 1) nats, whatever q is (its weights
    are 0: no cause explains it)."""
    from skbinvi import NoisyORFactorizer

    X, _ = make_noisy_or(300, 30, 4, density=0.25, random_state=0)
    X_train = X[:200].copy()
    X_train[:, 0] = 0  # word 0 never seen in training
    model = NoisyORFactorizer(4, inference="jj", max_iter=20, random_state=0)
    model.fit(X_train)
    assert np.all(model.components_[:, 0] == 0.0)
    rows = X[200:]
    on, off = rows.copy(), rows.copy()
    on[:, 0], off[:, 0] = 1, 0
    cost = model.score_samples(on) - model.score_samples(off)
    leak_min = -np.log1p(-1.0 / 201)
    assert_allclose(cost, _f(leak_min) + leak_min, rtol=1e-9)
    assert np.all(cost > -1.1 * np.log(201))  # was -23


@pytest.mark.parametrize("leak_min", [FLOOR, 0.05])
@pytest.mark.parametrize("seed", range(3))
def test_m_step_reaches_the_constrained_maximum(seed, leak_min):
    """KKT by central differences of the dense reference; perturbations lose.
    With leak_min = 0.05 some initial leaks (drawn in [0.01, 0.5]) start
    below the bound and every leak ends at or above it."""
    rng = np.random.default_rng(seed)
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, B=12, D=10, K=3,
                                                       density=0.5)
    indptr, indices = _csr(X)
    for _ in range(3):  # a few EM rounds so that some weights hit zero
        out = np.empty(X.shape[0])
        jj.jj_e_step(indptr, indices, theta, leak, theta.sum(0), leak.sum(),
                      logit_q, logit_prior, r, 3, 0.0, out)
        jj.jj_m_step(indptr, indices, logit_q, r, theta, leak, logit_prior, 100,
                      0.0, leak_min)
    assert np.all(leak >= leak_min)

    def total(th, lk):
        return _reference_bound(X, th, lk, logit_q, logit_prior, r).sum()

    best = total(theta, leak)
    h = 1e-6
    for i in range(theta.shape[0]):
        for k in range(-1, theta.shape[1]):
            params = [theta.copy(), leak.copy()]
            arr, idx = (params[1], i) if k < 0 else (params[0], (i, k))
            lb = leak_min if k < 0 else 0.0
            value = arr[idx]
            if value - lb > 10 * h:  # free: zero derivative
                arr[idx] = value + h
                up = total(*params)
                arr[idx] = value - h
                down = total(*params)
                assert abs(up - down) / (2 * h) < 1e-4 * (1 + abs(best))
            else:  # at the bound: derivative pointing out of the feasible set
                arr[idx] = value + h
                assert total(*params) <= best + 1e-9
    for _ in range(50):
        th = np.maximum(theta + 1e-3 * rng.normal(size=theta.shape), 0.0)
        lk = np.maximum(leak + 1e-3 * rng.normal(size=leak.shape), leak_min)
        assert total(th, lk) <= best + 1e-10 * abs(best)


@pytest.mark.parametrize("seed", range(3))
def test_em_is_monotone(seed):
    X, theta, leak, _, logit_prior, _ = _problem(seed, B=40, D=12, K=4)
    fit = REF.jj_fit_em(X, theta, leak, logit_prior, n_iter=15, n_inner=2,
                        n_newton=3)
    trace = np.concatenate([[fit.bound_init],
                            np.column_stack([fit.bound_e, fit.bound_m]).ravel()])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert trace[-1] > trace[0]


def _matched_cosines(true, learned):
    """Cosine similarities of Hungarian-matched rows (true (K, D), learned (K, D))."""
    cos = (true @ learned.T) / np.outer(np.linalg.norm(true, axis=1),
                                        np.linalg.norm(learned, axis=1) + 1e-300)
    rows, cols = linear_sum_assignment(-cos)
    return cos[rows, cols]


@pytest.mark.slow
def test_em_on_synthetic_data_finds_patterns():
    """1000 rows of make_noisy_or: large gain in bound, some patterns recovered.

    [Yan] report that LB-CDI merges patterns, so only 2 of the 5 true
    components are required to match a learned one with cosine similarity
    >= 0.9 (Hungarian matching; this run matches 3, and 2 to 3 over other
    initialization seeds). EM started at the true parameters stays there
    (every cosine >= 0.95) and ends at a higher bound than the random start:
    the random start ends in a worse local optimum of the same bound.
    """
    K, D, N = 5, 60, 1000
    X, truth = make_noisy_or(N, D, K, density=0.1, prior=0.2, weight=2.0,
                             leak=0.01, sparse=True, random_state=0)
    rng = np.random.default_rng(0)
    theta0 = rng.uniform(0.05, 0.5, size=(D, K))
    fit = REF.jj_fit_em(X, theta0, np.full(D, 0.05), np.full(K, logit(0.2)),
                        n_iter=60, n_inner=3, n_newton=5)
    per_row_init = fit.bound_init / N
    per_row = fit.bound_m[-1] / N
    assert per_row > per_row_init + 10.0  # about -31.8 -> -11.3 nats per row
    matched = _matched_cosines(truth.components, fit.theta.T)
    assert np.sum(matched >= 0.9) >= 2, matched
    assert_allclose(expit(fit.logit_prior), expit(fit.logit_q).mean(axis=0))

    at_truth = REF.jj_fit_em(X, truth.components.T, truth.leak,
                             logit(truth.prior), n_iter=20, n_inner=3, n_newton=5)
    assert np.all(_matched_cosines(truth.components, at_truth.theta.T) >= 0.95)
    assert at_truth.bound_m[-1] > fit.bound_m[-1]


@pytest.mark.parametrize("seed", range(4))
def test_m_step_prior_smoothing_is_the_map_prior(seed):
    """With prior_smoothing a the prior is (mean q + a) / (1 + a), the maximizer
    of the bound plus a B sum_k log mu_k (a Beta(1 + a B, 1) prior on each
    mu_k): any other mu scores lower, and theta and the leak are those of the
    unsmoothed M-step (the objective separates)."""
    a = 0.05
    X, theta, leak, logit_q, logit_prior, r = _problem(seed, B=10, D=12, K=4)
    leak = np.maximum(leak, FLOOR)
    plain = [theta.copy(), leak.copy(), logit_prior.copy()]
    jj.jj_m_step(*_csr(X), logit_q, r, *plain, 3, 1e-12)
    jj.jj_m_step(*_csr(X), logit_q, r, theta, leak, logit_prior, 3, 1e-12, FLOOR, a)
    q_mean = expit(logit_q).mean(axis=0)
    assert_allclose(expit(logit_prior), (q_mean + a) / (1 + a), rtol=1e-10)
    assert np.all(expit(logit_prior) >= a / (1 + a))
    assert_allclose(theta, plain[0], rtol=1e-12)
    assert_allclose(leak, plain[1], rtol=1e-12)
    B = X.shape[0]

    def objective(lp):
        return (_total_bound(X, theta, leak, logit_q, lp, r)
                + a * B * np.log(expit(lp)).sum())

    best = objective(logit_prior)
    for k in range(logit_prior.size):
        for step in (-0.05, 0.05):
            moved = logit_prior.copy()
            moved[k] += step
            assert objective(moved) < best
