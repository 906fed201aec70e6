"""Noisy-OR kernels against slow NumPy references, finite differences and
enumeration."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import noisy_or as REF
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, log_expit

from skbinvi import NoisyORFactorizer
from skbinvi.noisy_or import _kernels


def _problem(seed=0, B=5, D=9, K=3, M=4, density=0.4):
    rng = np.random.default_rng(seed)
    dense = (rng.random((B, D)) < density).astype(float)
    dense[0] = 0.0  # an empty row
    X = sp.csr_matrix(dense)
    theta = rng.uniform(0.05, 1.5, size=(D, K))
    leak = rng.uniform(0.01, 0.5, size=D)
    logit_q = rng.normal(size=(B, K))
    logit_prior = rng.normal(size=K)
    uniforms = rng.random((B, M, K))
    return X, theta, leak, logit_q, logit_prior, uniforms


def _logistic(uniforms):
    return np.log(uniforms) - np.log1p(-uniforms)


def _csr(X):
    return X.indptr.astype(np.int64), X.indices.astype(np.int64)


def _kl(logit_q, logit_prior):
    q, mu = expit(logit_q), expit(logit_prior)
    return q * np.log(q / mu) + (1 - q) * np.log((1 - q) / (1 - mu))


def _reference_relaxed_elbo(X, theta, leak, logit_q, logit_prior, uniforms, tau):
    """Dense O(B D K M) formula of [Yan] Algorithm 1 (sum over all features)."""
    noise = _logistic(uniforms)
    x = X.toarray()
    q = expit(logit_q)
    z = expit((logit_q[:, None, :] + noise) / tau)  # (B, M, K)
    u = leak + np.einsum("bmk,dk->bmd", z, theta)  # (B, M, D)
    positive = (x[:, None, :] * np.log(-np.expm1(-u))).sum(axis=2).mean(axis=1)
    negative = -((1 - x) * (leak + q @ theta.T)).sum(axis=1)
    return positive + negative - _kl(logit_q, logit_prior).sum(axis=1)


def _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, tau):
    """The kernel on full arrays; returns the full gradients (dense parts added)."""
    B, K = logit_q.shape
    out = dict(
        g_theta=np.empty_like(theta), g_leak=np.empty_like(leak),
        g_theta_dense=np.empty(K), g_logit_q=np.empty((B, K)),
        g_logit_prior=np.empty(K), elbo_relaxed=np.empty(B),
        elbo_discrete=np.empty(B),
    )
    _kernels.relaxed_elbo_grad(*_csr(X), theta, leak, theta.sum(0), leak.sum(),
                               logit_q, logit_prior, uniforms, tau, *out.values())
    out["g_theta"] += out["g_theta_dense"]
    out["g_leak"] -= B
    return out


def test_relaxed_elbo_compact_columns_match_full():
    """Renumbering the active columns to compact rows gives the same values."""
    X, theta, leak, logit_q, logit_prior, uniforms = _problem(seed=8, D=30, density=0.1)
    full = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, 0.3)
    features, local = np.unique(X.indices, return_inverse=True)
    assert features.size < X.shape[1]  # some features are inactive
    B, K = logit_q.shape
    g_theta, g_leak = np.empty((features.size, K)), np.empty(features.size)
    g_dense, g_logit_q, g_prior = np.empty(K), np.empty((B, K)), np.empty(K)
    relaxed, discrete = np.empty(B), np.empty(B)
    _kernels.relaxed_elbo_grad(
        X.indptr.astype(np.int64), local.astype(np.int64), theta[features],
        leak[features], theta.sum(0), leak.sum(), logit_q, logit_prior, uniforms,
        0.3, g_theta, g_leak, g_dense, g_logit_q, g_prior, relaxed, discrete)
    assert_allclose(relaxed, full["elbo_relaxed"], rtol=1e-13)
    assert_allclose(discrete, full["elbo_discrete"], rtol=1e-13)
    assert_allclose(g_logit_q, full["g_logit_q"], rtol=1e-12)
    expected_theta = np.tile(g_dense, (X.shape[1], 1))
    expected_theta[features] += g_theta
    assert_allclose(expected_theta, full["g_theta"], rtol=1e-12, atol=1e-12)
    expected_leak = np.full(X.shape[1], -float(B))
    expected_leak[features] += g_leak
    assert_allclose(expected_leak, full["g_leak"], rtol=1e-12)


def test_relaxed_logit_gradient_is_the_row_pass():
    """relaxed_elbo_logit_grad_rows gives relaxed_elbo_grad's logit gradient
    and per-row ELBOs to the last bit (one thread; threads in
    test_split_row_kernels_equal_serial_ones), and these are the logit
    gradient of the relaxed ELBO (central differences)."""
    X, theta, leak, logit_q, logit_prior, uniforms = _problem(seed=3, B=6, D=12)
    full = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, 0.4)
    B, K = logit_q.shape
    g_logit_q, relaxed, discrete = np.empty((B, K)), np.empty(B), np.empty(B)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    args = (indptr, indices, theta, leak, theta.sum(0), leak.sum())

    def run(lq):
        _kernels.relaxed_elbo_logit_grad_rows(*args, lq, logit_prior, uniforms, 0.4,
                                              g_logit_q, relaxed, discrete)
        return relaxed.sum()

    run(logit_q)
    assert_array_equal(g_logit_q, full["g_logit_q"])
    assert_array_equal(relaxed, full["elbo_relaxed"])
    assert_array_equal(discrete, full["elbo_discrete"])
    expected = g_logit_q.copy()
    h = 1e-6
    for n, k in [(1, 0), (2, 2), (4, 1), (5, 0)]:
        up, down = logit_q.copy(), logit_q.copy()
        up[n, k] += h
        down[n, k] -= h
        assert_allclose((run(up) - run(down)) / (2 * h), expected[n, k], rtol=1e-5,
                        atol=1e-7)


def test_relaxed_elbo_matches_dense_reference():
    X, theta, leak, logit_q, logit_prior, uniforms = _problem()
    out = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, 0.3)
    expected = _reference_relaxed_elbo(X, theta, leak, logit_q, logit_prior, uniforms,
                                       0.3)
    assert_allclose(out["elbo_relaxed"], expected, rtol=1e-12, atol=1e-12)


def test_relaxed_elbo_discrete_sample_matches_reference():
    X, theta, leak, logit_q, logit_prior, uniforms = _problem(seed=1)
    out = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, 0.3)
    x = X.toarray()
    z = (logit_q + _logistic(uniforms[:, 0, :]) > 0).astype(float)
    u = leak + z @ theta.T
    expected = (
        (x * np.log(-np.expm1(-u))).sum(1)
        - ((1 - x) * (leak + expit(logit_q) @ theta.T)).sum(1)
        - _kl(logit_q, logit_prior).sum(1)
    )
    assert_allclose(out["elbo_discrete"], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["theta", "leak", "logit_q", "logit_prior"])
def test_relaxed_elbo_gradients_finite_differences(name):
    X, theta, leak, logit_q, logit_prior, uniforms = _problem(seed=2)
    args = dict(theta=theta, leak=leak, logit_q=logit_q, logit_prior=logit_prior)
    tau = 0.4
    grad = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms,
                        tau)["g_" + name]
    param = args[name]
    numeric = np.empty_like(param)
    eps = 1e-6
    for idx in np.ndindex(param.shape):
        values = []
        for sign in (1, -1):
            perturbed = {k: v.copy() for k, v in args.items()}
            perturbed[name][idx] += sign * eps
            values.append(_reference_relaxed_elbo(X, uniforms=uniforms, tau=tau,
                                                  **perturbed).sum())
        numeric[idx] = (values[0] - values[1]) / (2 * eps)
    assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


# (K, D, logit scale): few causes; more free causes (0 < q < 1 in the samples)
# than the 62 that _sample_groups packs into keys (the ungrouped path); long
# rows with most causes on or off in every sample (the fixed part of u)
_ELBO_CASES = [(3, 9, 1.0), (80, 30, 0.3), (20, 300, 12.0)]


@pytest.mark.parametrize("K, D, scale", _ELBO_CASES)
def test_discrete_elbo_matches_reference_and_is_row_independent(K, D, scale):
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=3, B=6, K=K, D=D)
    logit_q = logit_q * scale
    rng = np.random.default_rng(0)
    uniforms = rng.random((50, theta.shape[1]))
    out = np.empty(X.shape[0])
    _kernels.discrete_elbo(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                           logit_prior, uniforms, out)
    x = X.toarray()
    q = expit(logit_q)
    z = (uniforms[None, :, :] < q[:, None, :]).astype(float)  # (B, S, K)
    u = leak + np.einsum("bsk,dk->bsd", z, theta)
    expected = (
        (x[:, None, :] * np.log(-np.expm1(-u))).sum(2).mean(1)
        - ((1 - x) * (leak + q @ theta.T)).sum(1)
        - _kl(logit_q, logit_prior).sum(1)
    )
    assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    part = np.empty(3)
    _kernels.discrete_elbo(*_csr(X[3:]), theta, leak, theta.sum(0), leak.sum(),
                           logit_q[3:], logit_prior, uniforms, part)
    assert_allclose(part, out[3:], rtol=0, atol=0)


def _exact_elbo(x, theta, leak, logit_q, logit_prior):
    """ELBO by enumeration of all 2^K states of z: E_q[log p(x, z)] + H[q]."""
    K = theta.shape[1]
    q = expit(logit_q)
    mu = expit(logit_prior)
    value = 0.0
    for state in itertools.product([0.0, 1.0], repeat=K):
        z = np.array(state)
        log_q = np.sum(z * np.log(q) + (1 - z) * np.log(1 - q))
        log_prior = np.sum(z * np.log(mu) + (1 - z) * np.log(1 - mu))
        u = leak + theta @ z
        log_lik = np.sum(np.where(x == 1, np.log(-np.expm1(-u)), -u))
        value += np.exp(log_q) * (log_lik + log_prior - log_q)
    return value


def test_discrete_elbo_agrees_with_enumeration():
    """The Monte Carlo ELBO is within 4 standard errors of the exact ELBO."""
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=4, B=4, D=12, K=4)
    S = 20000
    uniforms = np.random.default_rng(1).random((S, 4))
    out = np.empty(X.shape[0])
    _kernels.discrete_elbo(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                           logit_prior, uniforms, out)
    x = X.toarray()
    for n in range(X.shape[0]):
        exact = _exact_elbo(x[n], theta, leak, logit_q[n], logit_prior)
        # standard error of the sampled positive term
        q = expit(logit_q[n])
        z = (uniforms < q).astype(float)
        u = leak + z @ theta.T
        pos = (x[n] * np.log(-np.expm1(-u))).sum(1)
        se = pos.std() / np.sqrt(S)
        assert abs(out[n] - exact) <= 4 * se + 1e-12, (n, out[n], exact, se)


def test_acp_heads_match_dense_reference():
    X, theta, _, _, logit_prior, _ = _problem(seed=5)
    rng = np.random.default_rng(5)
    B, D = X.shape
    H = 6
    hidden = rng.normal(size=(B, H))
    coef_out = rng.normal(size=(D, H))
    intercept_out = rng.normal(size=D)
    indptr, indices = _csr(X)
    pre = np.empty(X.nnz)
    psi = np.empty(X.nnz)
    _kernels.acp_psi(indptr, indices, hidden, coef_out, intercept_out, pre, psi)
    dense_pre = hidden @ coef_out.T + intercept_out
    rows = np.repeat(np.arange(B), np.diff(indptr))
    assert_allclose(pre, dense_pre[rows, indices], rtol=1e-12)
    assert_allclose(psi, np.logaddexp(0, dense_pre[rows, indices]), rtol=1e-12)
    out = np.empty((B, theta.shape[1]))
    _kernels.acp_logits(indptr, indices, psi, theta, theta.sum(0), logit_prior, out)
    x = X.toarray()
    psi_dense = np.zeros((B, D))
    psi_dense[rows, indices] = psi
    # [Yan] supplement Eq. 5, summed over all features
    expected = (x * psi_dense) @ theta - (1 - x) @ theta + logit_prior
    assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("P", [1, 7, 100])
@pytest.mark.parametrize("mask", [False, True])
def test_gather_dots_equal_plain_loops_bit_for_bit(P, mask):
    # Four rows summed together (overlapping chains of additions) must give
    # the sums of a plain loop over k to the last bit, for rows of every
    # length modulo 4; 0/1 weights must give the masked sums of a loop with a
    # test (the use in discrete_elbo and the exact sample of relaxed_elbo_grad).
    rng = np.random.default_rng(P)
    D = 40
    A = rng.exponential(size=(D, P)) * 10.0 ** rng.integers(-8, 8, size=(D, P))
    bias = rng.exponential(size=D)
    lengths = np.arange(12)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = rng.integers(0, D, size=indptr[-1]).astype(np.int64)
    x = (rng.random(P) < 0.5).astype(float) if mask else rng.normal(size=P)
    for n in range(lengths.size):
        start, stop = indptr[n], indptr[n + 1]
        out = np.full(stop - start + 2, np.nan)
        _kernels._gather_dots(x, A, indices, start, stop, bias, out)
        for j in range(start, stop):
            i = indices[j]
            expected = bias[i]
            for k in range(P):
                if not mask:
                    expected += A[i, k] * x[k]
                elif x[k] == 1.0:
                    expected += A[i, k]
            assert out[j - start] == expected, (n, j)
        assert np.isnan(out[stop - start:]).all()  # nothing written past the row
    # the ACP head uses it: its pre-activations equal a plain loop exactly
    hidden = rng.normal(size=(lengths.size, P))
    coef = rng.normal(size=(D, P))
    pre, psi = np.empty(indptr[-1]), np.empty(indptr[-1])
    _kernels.acp_psi(indptr, indices, hidden, coef, bias, pre, psi)
    for n in range(lengths.size):
        for j in range(indptr[n], indptr[n + 1]):
            expected = bias[indices[j]]
            for h in range(P):
                expected += hidden[n, h] * coef[indices[j], h]
            assert pre[j] == expected


@pytest.mark.parametrize("inference", ["acp", "avi"])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("prior_smoothing", [0.0, 0.2])
def test_estimator_gradients_finite_differences(inference, activation, prior_smoothing,
                                                monkeypatch):
    """Every parameter's gradient, end to end (encoder, heads, softplus/sigmoid).

    With ``prior_smoothing`` a > 0 the objective is the relaxed ELBO plus
    a B sum_k log mu_k (the Beta(1 + a N, 1) prior's share of the B rows)."""
    from skbinvi.noisy_or import _estimator

    X, *_ = _problem(seed=6, B=6, D=10, K=3, density=0.35)
    monkeypatch.setattr(_estimator, "_ACTIVATION", activation)
    # the ELBO's own gradient (AVI's default releases some)
    monkeypatch.setitem(_estimator._FREE_BITS, inference, 0.0)
    est = NoisyORFactorizer(
        n_components=3, inference=inference, hidden_layer_sizes=(5, 4),
        n_mc_samples=3, prior_smoothing=prior_smoothing,
    )
    rng = np.random.RandomState(0)
    est._initialize(X, None, rng)
    for p in est._parameters():  # move away from the symmetric initialization
        p += 0.3 * rng.normal(size=p.shape)
    est._sync_constrained()
    uniforms = np.random.default_rng(7).random((X.shape[0], 3, 3))
    tau = 0.35
    grads, _, _ = est._full_gradients(X, uniforms, tau)

    def objective():
        est._sync_constrained()
        penalty = X.shape[0] * prior_smoothing * np.log(expit(est._logit_prior)).sum()
        return est._full_gradients(X, uniforms, tau)[1].sum() + penalty

    eps = 1e-6
    for param, grad in zip(est._parameters(), grads, strict=True):
        assert grad.shape == param.shape
        numeric = np.empty_like(param)
        for idx in np.ndindex(param.shape):
            old = param[idx]
            param[idx] = old + eps
            up = objective()
            param[idx] = old - eps
            down = objective()
            param[idx] = old
            numeric[idx] = (up - down) / (2 * eps)
        assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_free_bits_adds_back_the_kl_gradient_of_the_released_causes_only():
    """_release_free_bits: for a cause whose KL(Bern(q_k) || Bern(mu_k)),
    averaged over the batch, is below the threshold, the gradient on its
    logits gains d KL / d logit q (central differences of the KL itself)
    where that is positive (logit above the prior's: the KL pulls it down),
    so that switching the cause on costs no KL, while the pull up towards the
    prior (logit below it) stays; the other causes' columns are untouched,
    and the mask returned names the released causes."""
    from skbinvi.noisy_or._estimator import _release_free_bits

    rng = np.random.default_rng(3)
    B, K = 7, 5
    logit_prior = np.array([-4.0, -1.0, 0.5, -6.0, -2.0])
    logit_q = logit_prior + rng.normal(scale=[0.1, 2.0, 0.05, 0.3, 3.0], size=(B, K))

    def kl(logit):
        q = expit(logit)
        mu = expit(logit_prior)
        return q * np.log(q / mu) + (1 - q) * np.log((1 - q) / (1 - mu))

    mean_kl = kl(logit_q).mean(axis=0)
    threshold = np.sort(mean_kl)[2] + 1e-9  # the three smallest are released
    g = rng.normal(size=(B, K))
    out = g.copy()
    free = _release_free_bits(out, logit_q, logit_prior, threshold)
    assert_array_equal(free, mean_kl < threshold)
    assert free.sum() == 3
    eps = 1e-6
    d_kl = (kl(logit_q + eps) - kl(logit_q - eps)) / (2 * eps)
    assert ((d_kl[:, free] > 0).any() and (d_kl[:, free] < 0).any())  # both sides
    assert_allclose(out[:, free], g[:, free] + np.maximum(d_kl[:, free], 0.0),
                    rtol=1e-6, atol=1e-9)
    assert_array_equal(out[:, ~free], g[:, ~free])
    # nothing under a threshold of 0: the gradient is the ELBO's
    again = g.copy()
    assert not _release_free_bits(again, logit_q, logit_prior, 0.0).any()
    assert_array_equal(again, g)

def test_softplus_and_slope_matches_scipy():
    raw = np.concatenate([-np.logspace(-6, 3, 50), np.logspace(-6, 3, 50)])
    value, slope = np.empty_like(raw), np.empty_like(raw)
    _kernels.softplus_and_slope(raw, value, slope)
    assert_allclose(value, np.logaddexp(0, raw), rtol=1e-12)
    assert_allclose(slope, expit(raw), rtol=1e-12)


def test_fused_adam_matches_numpy_reference():
    from skbinvi._optim import Adam

    rng = np.random.default_rng(0)
    param = rng.normal(size=(4, 3))
    ref = param.copy()
    opt = Adam([param], learning_rate=0.1)
    m = np.zeros_like(ref)
    v = np.zeros_like(ref)
    for t in range(1, 4):
        g = rng.normal(size=(4, 3))
        opt.step([g])
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        lr = 0.1 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        ref += lr * m / (np.sqrt(v) + 1e-8)
    assert_allclose(param, ref, rtol=1e-12)


@pytest.mark.parametrize("with_grad", [True, False])
def test_softplus_adam_rows_match_numpy_reference(with_grad):
    """One step on some rows (any order; some with a sparse gradient, the
    others with their delayed part only) equals Adam on raw in NumPy."""
    from skbinvi._optim import Adam

    rng = np.random.default_rng(4)
    D, P, now = 9, 3, 3
    raw = rng.normal(size=(D, P))
    value, slope = np.logaddexp(0.0, raw), expit(raw)
    colsum = value.sum(0)
    delayed = np.cumsum(rng.normal(size=(now + 1, P)), axis=0)
    last = rng.integers(0, now + 1, size=D)
    rows = np.array([7, 0, 4, 2, 8], dtype=np.int64)
    grad = rng.normal(size=(3, P))
    grad_rows = np.array([2, -1, 0, -1, 1], dtype=np.int64)
    opt = Adam([raw], learning_rate=0.1)
    opt.m[0][:] = rng.normal(size=(D, P))
    opt.v[0][:] = rng.random(size=(D, P))
    ref_raw, ref_m, ref_v = raw.copy(), opt.m[0].copy(), opt.v[0].copy()
    opt.t = 4
    opt.tick()
    step = opt.step_size
    opt.update_softplus_rows(0, rows, grad if with_grad else None, delayed, last,
                             now, value, slope, colsum,
                             grad_rows if with_grad else None)
    for j, i in enumerate(rows):
        g = delayed[now] - delayed[last[i]]
        if with_grad and grad_rows[j] >= 0:
            g = g + grad[grad_rows[j]]
        g = g * expit(ref_raw[i])
        ref_m[i] = 0.9 * ref_m[i] + 0.1 * g
        ref_v[i] = 0.999 * ref_v[i] + 0.001 * g * g
        ref_raw[i] += step * ref_m[i] / (np.sqrt(ref_v[i]) + 1e-8)
    assert_allclose(raw, ref_raw, rtol=1e-13, atol=1e-15)
    assert_allclose(opt.m[0], ref_m, rtol=1e-13, atol=1e-15)
    assert_allclose(opt.v[0], ref_v, rtol=1e-13, atol=1e-15)
    assert_allclose(value, np.logaddexp(0.0, ref_raw), rtol=1e-14)
    assert_allclose(slope, expit(ref_raw), rtol=1e-14)
    assert_allclose(colsum, value.sum(0), rtol=1e-13)
    untouched = np.setdiff1d(np.arange(D), rows)
    assert np.array_equal(raw[untouched], ref_raw[untouched])


@pytest.mark.parametrize("with_grad", [True, False])
def test_softplus_adam_entries_equal_rows_of_one(with_grad):
    """A 1-D parameter (the leak) takes the same step, bit for bit, as the
    same values as an (D, 1) matrix through the row kernel."""
    from skbinvi._optim import Adam

    rng = np.random.default_rng(5)
    D, now = 2500, 2  # more than one block of SOFTPLUS_BLOCK entries
    rows = rng.permutation(D)[:2000].astype(np.int64)
    grad = rng.normal(size=700)
    grad_rows = np.full(rows.size, -1, dtype=np.int64)
    grad_rows[rng.choice(rows.size, 700, replace=False)] = np.arange(700)
    delayed = np.cumsum(rng.normal(size=now + 1))
    last = rng.integers(0, now + 1, size=D)
    raw = rng.normal(size=D) * 3
    m0 = 0.01 * rng.normal(size=D)
    states = []
    for shape in [(D,), (D, 1)]:
        param = raw.reshape(shape).copy()
        value, slope = np.logaddexp(0.0, param), expit(param)
        total = np.array([value.sum()])
        opt = Adam([param], learning_rate=0.1)
        opt.m[0][:] = m0.reshape(shape)
        opt.v[0][:] = 0.01
        opt.tick()
        g = None if not with_grad else grad.reshape((-1,) + shape[1:])
        opt.update_softplus_rows(0, rows, g, delayed.reshape((-1,) + shape[1:]), last,
                                 now, value, slope, total,
                                 grad_rows if with_grad else None)
        states.append([a.ravel() for a in (param, value, slope, total, opt.m[0],
                                           opt.v[0])])
    for a, b in zip(*states, strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(states[0][0], raw)


def test_kl_term_uses_stable_log_sigmoid():
    from skbinvi._math import kl_bernoulli_logits

    for lq, lp in [(40.0, -40.0), (-40.0, 40.0), (0.3, -1.2), (700.0, 1.0)]:
        expected = expit(lq) * (lq - lp) + log_expit(-lq) - log_expit(-lp)
        assert_allclose(kl_bernoulli_logits(lq, lp), expected, rtol=1e-12)
        assert kl_bernoulli_logits(lq, lp) >= 0.0


def _reference_local_targets(X, theta, leak, logit_q, logit_prior, uniforms):
    """Dense NumPy version of local_expectation_logits (same samples)."""
    x = X.toarray()
    q = expit(logit_q)
    B, K = logit_q.shape
    out = np.empty((B, K))
    f = lambda u: np.log(-np.expm1(-u))  # noqa: E731
    for n in range(B):
        U = uniforms[0] if uniforms.shape[0] == 1 else uniforms[n]
        z = (U < q[n]).astype(float)  # (S, K)
        u = leak + z @ theta.T  # (S, D)
        for k in range(K):
            off = u - z[:, [k]] * theta[:, k]
            delta = (x[n] * (f(off + theta[:, k]) - f(off))).sum(1).mean()
            out[n, k] = logit_prior[k] + delta - ((1 - x[n]) * theta[:, k]).sum()
    return out


@pytest.mark.parametrize("shared", [True, False])
def test_local_expectation_logits_match_reference(shared):
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=9, B=5, D=11, K=4)
    rng = np.random.default_rng(3)
    uniforms = rng.random((1 if shared else 5, 30, 4))
    out = np.empty_like(logit_q)
    REF.local_expectation_logits(*_csr(X), theta, leak, theta.sum(0), logit_q,
                                 logit_prior, uniforms, out)
    expected = _reference_local_targets(X, theta, leak, logit_q, logit_prior, uniforms)
    assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_local_expectation_logits_with_extreme_weights_match_reference():
    """Weights whose e^{-theta} underflows (800) or nearly does (30, 60).

    The vectorized ratio update selects between its two branches and caps
    e / e^{-theta}; an underflowed e^{-theta} takes the exact scalar path.
    The causes are on in some samples and off in others.
    """
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=11, B=6, D=12, K=5,
                                                       density=0.6)
    theta[:, 1] = 800.0
    theta[::2, 3] = 30.0
    theta[1::3, 4] = 60.0
    uniforms = np.random.default_rng(5).random((1, 40, 5))
    logit_q[:] = 0.0  # every cause on in about half the samples
    out = np.empty_like(logit_q)
    REF.local_expectation_logits(*_csr(X), theta, leak, theta.sum(0), logit_q,
                                 logit_prior, uniforms, out)
    expected = _reference_local_targets(X, theta, leak, logit_q, logit_prior, uniforms)
    assert np.all(np.isfinite(out))
    assert_allclose(out, expected, rtol=1e-12, atol=1e-9)


def test_local_expectation_is_the_natural_gradient_of_the_exact_elbo():
    """q(1 - q) (target - logit q) = dL/d logit q, L by enumeration of 2^K states."""
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=10, B=3, D=10, K=3,
                                                       density=0.5)
    uniforms = np.random.default_rng(4).random((1, 40000, 3))
    out = np.empty_like(logit_q)
    REF.local_expectation_logits(*_csr(X), theta, leak, theta.sum(0), logit_q,
                                 logit_prior, uniforms, out)
    x = X.toarray()
    eps = 1e-6
    for n in range(X.shape[0]):
        q = expit(logit_q[n])
        for k in range(3):
            up, down = logit_q[n].copy(), logit_q[n].copy()
            up[k] += eps
            down[k] -= eps
            grad = (_exact_elbo(x[n], theta, leak, up, logit_prior)
                    - _exact_elbo(x[n], theta, leak, down, logit_prior)) / (2 * eps)
            natural = grad / (q[k] * (1 - q[k]))
            assert abs((out[n, k] - logit_q[n, k]) - natural) < 0.03, (n, k)


def _exact_log_likelihood(x, theta, leak, logit_prior):
    K = theta.shape[1]
    mu = expit(logit_prior)
    total = 0.0
    for state in itertools.product([0.0, 1.0], repeat=K):
        z = np.array(state)
        u = leak + theta @ z
        log_joint = np.sum(np.where(x == 1, np.log(-np.expm1(-u)), -u)) + np.sum(
            z * np.log(mu) + (1 - z) * np.log(1 - mu))
        total += np.exp(log_joint)
    return np.log(total)


def _reference_importance_log_likelihood(x, theta, leak, logit_q, logit_prior,
                                         uniforms):
    """NumPy log mean exp(log p(x, z_s) - log q(z_s)) of each row, same samples."""
    q, mu = expit(logit_q), expit(logit_prior)
    out = np.empty(x.shape[0])
    for n in range(x.shape[0]):
        z = (uniforms < q[n]).astype(float)
        u = leak + z @ theta.T
        log_lik = np.where(x[n] == 1, np.log(-np.expm1(-u)), -u).sum(1)
        log_prior = (z * np.log(mu) + (1 - z) * np.log(1 - mu)).sum(1)
        log_q = (z * np.log(q[n]) + (1 - z) * np.log(1 - q[n])).sum(1)
        w = log_lik + log_prior - log_q
        out[n] = w.max() + np.log(np.mean(np.exp(w - w.max())))
    return out


@pytest.mark.parametrize("K, D, scale", _ELBO_CASES)
def test_importance_log_likelihood_matches_reference(K, D, scale):
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=11, B=5, D=D, K=K)
    logit_q = logit_q * scale
    uniforms = np.random.default_rng(5).random((64, K))
    out = np.empty(X.shape[0])
    _kernels.importance_log_likelihood(*_csr(X), theta, leak, theta.sum(0), leak.sum(),
                                       logit_q, logit_prior, uniforms, out)
    expected = _reference_importance_log_likelihood(X.toarray(), theta, leak, logit_q,
                                                    logit_prior, uniforms)
    assert_allclose(out, expected, rtol=1e-12)


def test_importance_log_likelihood_reference_and_bounds():
    X, theta, leak, logit_q, logit_prior, _ = _problem(seed=11, B=4, D=10, K=3)
    x = X.toarray()
    rng = np.random.default_rng(5)
    # same samples: a NumPy reference of log mean exp(log p(x, z) - log q(z))
    uniforms = rng.random((64, 3))
    out = np.empty(4)
    _kernels.importance_log_likelihood(*_csr(X), theta, leak, theta.sum(0), leak.sum(),
                                       logit_q, logit_prior, uniforms, out)
    expected = _reference_importance_log_likelihood(x, theta, leak, logit_q,
                                                    logit_prior, uniforms)
    assert_allclose(out, expected, rtol=1e-12)
    # many samples: close to the exact log-likelihood and above the exact ELBO
    uniforms = rng.random((40000, 3))
    _kernels.importance_log_likelihood(*_csr(X), theta, leak, theta.sum(0), leak.sum(),
                                       logit_q, logit_prior, uniforms, out)
    for n in range(4):
        exact = _exact_log_likelihood(x[n], theta, leak, logit_prior)
        elbo = _exact_elbo(x[n], theta, leak, logit_q[n], logit_prior)
        assert abs(out[n] - exact) < 0.02, (out[n], exact)
        assert exact >= elbo - 1e-12


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(K=st.sampled_from([1, 3, 8, 61, 62, 63, 90]), S=st.integers(1, 40),
       scale=st.sampled_from([0.3, 3.0, 40.0]), seed=st.integers(0, 2**31 - 1))
def test_sample_groups_group_exactly_the_equal_samples(K, S, scale, seed):
    """Samples share a group iff they are equal (or stay ungrouped: G = S)."""
    rng = np.random.default_rng(seed)
    q = expit(scale * rng.normal(size=K))
    uniforms = rng.random((S, K))
    umin, umax = _kernels._uniform_range(uniforms)
    assert_allclose(umin, uniforms.min(0), rtol=0, atol=0)
    assert_allclose(umax, uniforms.max(0), rtol=0, atol=0)
    keys, group, rep = (np.empty(S, dtype=np.int64) for _ in range(3))
    G = _kernels._sample_groups(q, uniforms, umin, umax, keys, group, rep)
    z = uniforms < q
    assert 1 <= G <= S
    assert set(group.tolist()) == set(range(G))
    assert np.array_equal(group[rep[:G]], np.arange(G))
    # every sample equals its group's representative ...
    assert np.array_equal(z, z[rep[group]])
    n_free = int(((umin < q) & (q <= umax)).sum())
    if n_free <= 62:
        # ... and the representatives are distinct
        assert len({r.tobytes() for r in z[rep[:G]]}) == G
    else:
        assert np.array_equal(group, np.arange(S))


@pytest.mark.parametrize("K", [4, 70])
def test_discrete_elbo_and_importance_weights_on_near_deterministic_posteriors(K):
    """Saturated logits (most samples equal) and > 62 free causes: same as NumPy."""
    X, theta, leak, _, logit_prior, _ = _problem(seed=12, B=6, D=15, K=K)
    rng = np.random.default_rng(6)
    logit_q = 30.0 * rng.normal(size=(6, K))
    if K > 62:
        logit_q[3:] = 0.2 * rng.normal(size=(3, K))  # every cause free
    logit_q[2] = np.linspace(-40, 40, K)  # some causes exactly 0 or 1 in float64
    uniforms = rng.random((80, K))
    x = X.toarray()
    q = expit(logit_q)
    elbo, iw = np.empty(6), np.empty(6)
    _kernels.discrete_elbo(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                           logit_prior, uniforms, elbo)
    _kernels.importance_log_likelihood(*_csr(X), theta, leak, theta.sum(0), leak.sum(),
                                       logit_q, logit_prior, uniforms, iw)
    for n in range(6):
        z = (uniforms < q[n]).astype(float)
        u = leak + z @ theta.T
        pos = (x[n] * np.log(-np.expm1(-u))).sum(1)
        neg = ((1 - x[n]) * (leak + q[n] @ theta.T)).sum()
        lq, lp = logit_q[n], logit_prior  # a KL that is finite at q = 0 or 1
        kl = (q[n] * (lq - lp) + log_expit(-lq) - log_expit(-lp)).sum()
        assert_allclose(elbo[n], pos.mean() - neg - kl, rtol=1e-12, atol=1e-9)
        log_lik = np.where(x[n] == 1, np.log(-np.expm1(-u)), -u).sum(1)
        w = (log_lik + (z * log_expit(logit_prior) + (1 - z) * log_expit(-logit_prior)
                        - z * log_expit(logit_q[n])
                        - (1 - z) * log_expit(-logit_q[n])).sum(1))
        expected = w.max() + np.log(np.mean(np.exp(w - w.max())))
        assert_allclose(iw[n], expected, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_local_optimize_equals_repeated_targets(scale):
    """Reusing the targets while no sample changes is exact: local_optimize equals
    n_steps damped steps towards freshly computed local_expectation_logits."""
    X, theta, leak, _, logit_prior, _ = _problem(seed=13, B=6, D=12, K=5)
    rng = np.random.default_rng(7)
    logit_q = scale * rng.normal(size=(6, 5))
    uniforms = rng.random((1, 3, 5))
    fast = logit_q.copy()
    _kernels.local_optimize(*_csr(X), theta, leak, theta.sum(0), logit_prior,
                            uniforms, 6, 0.7, 0.0, fast)
    slow = logit_q.copy()
    target = np.empty_like(slow)
    for _ in range(6):
        REF.local_expectation_logits(*_csr(X), theta, leak, theta.sum(0), slow,
                                     logit_prior, uniforms, target)
        slow += 0.7 * (target - slow)
    assert_allclose(fast, slow, rtol=1e-13, atol=1e-13)
    assert not np.array_equal(fast, logit_q)


def test_kernels_match_references_on_long_rows_with_many_distinct_samples():
    """Rows of ~400 active features and posteriors far from 0 and 1.

    The vectorized evaluation of log(1 - e^-u) takes several blocks per row
    here: discrete_elbo flushes its buffer of u values several times per row
    (about 400 features times up to 100 distinct samples), the relaxed ELBO
    evaluates (M + 1) * 400 > 1024 terms, and the local targets take
    e^-theta and the logs of 400 * K > 1024 entries; each must still equal
    its dense NumPy reference.
    """
    X, theta, leak, logit_q, logit_prior, uniforms = _problem(
        seed=11, B=4, D=600, K=12, M=4, density=0.7)
    theta *= 0.05  # u of order one, so that both branches of log1mexp occur
    tau = 0.5
    S = np.random.default_rng(5).random((100, 12))
    out = np.empty(X.shape[0])
    _kernels.discrete_elbo(*_csr(X), theta, leak, theta.sum(0), leak.sum(), logit_q,
                           logit_prior, S, out)
    x = X.toarray()
    q = expit(logit_q)
    z = (S[None, :, :] < q[:, None, :]).astype(float)
    u = leak + np.einsum("bsk,dk->bsd", z, theta)
    assert (u[x[:, None, :].repeat(100, 1) > 0] < np.log(2.0)).any()
    assert (u[x[:, None, :].repeat(100, 1) > 0] > np.log(2.0)).any()
    expected = (
        (x[:, None, :] * np.log(-np.expm1(-u))).sum(2).mean(1)
        - ((1 - x) * (leak + q @ theta.T)).sum(1)
        - _kl(logit_q, logit_prior).sum(1)
    )
    assert_allclose(out, expected, rtol=1e-12)
    got = _run_relaxed(X, theta, leak, logit_q, logit_prior, uniforms, tau)
    assert_allclose(got["elbo_relaxed"],
                    _reference_relaxed_elbo(X, theta, leak, logit_q, logit_prior,
                                            uniforms, tau), rtol=1e-12)
    targets = np.empty_like(logit_q)
    REF.local_expectation_logits(*_csr(X), theta, leak, theta.sum(0), logit_q,
                                 logit_prior, S[None, :8], targets)
    assert_allclose(targets, _reference_local_targets(X, theta, leak, logit_q,
                                                      logit_prior, S[None, :8]),
                    rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("nnz, n_features", [(0, 5), (1, 5), (200, 7), (500, 10_000)])
def test_compact_columns_matches_unique(dtype, nnz, n_features):
    indices = np.random.default_rng(nnz).integers(0, n_features, size=nnz).astype(dtype)
    marker = np.full(n_features, -1, dtype=np.int64)
    features, local = _kernels.compact_columns(indices, marker)
    expected, inverse = np.unique(indices, return_inverse=True)
    assert features.dtype == local.dtype == np.int64
    assert_array_equal(features, expected)
    assert_array_equal(local, inverse.reshape(-1))
    assert_array_equal(marker, -1)  # the scratch is left as it was given


@pytest.fixture
def split_passes(monkeypatch):
    """Every pass of the threaded wrappers split into 3 parts on threads."""
    from skbinvi import _numba, _optim
    from skbinvi.noisy_or import _encoder

    monkeypatch.setattr(_numba, "thread_count", lambda: 3)
    monkeypatch.setattr(_kernels, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(_encoder, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(_optim, "PARALLEL_MIN_ENTRIES", 0)


def test_split_row_kernels_equal_serial_ones(split_passes):
    """The passes split between threads give the serial kernels' numbers to
    the last bit: rows of unequal length (some empty), shared and per-row
    uniforms, the gradient kernels' row and feature passes."""
    rng = np.random.default_rng(7)
    B, D, K, H, M = 83, 60, 12, 7, 3
    dense = rng.random((B, D)) < rng.uniform(0.0, 0.4, size=(B, 1))
    dense[::9] = False
    X = sp.csr_matrix(dense.astype(float))
    indptr, indices = _csr(X)
    theta = rng.uniform(0.05, 1.5, size=(D, K))
    leak = rng.uniform(0.01, 0.5, size=D)
    logit_q = rng.normal(scale=3.0, size=(B, K))
    logit_prior = rng.normal(size=K)
    colsum, leak_sum = theta.sum(0), leak.sum()
    assert len(_kernels._row_parts(indptr, B, K)) == 3

    uniforms = rng.random((40, K))
    serial, split = np.empty(B), np.empty(B)
    _kernels.discrete_elbo(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                           logit_prior, uniforms, serial)
    _kernels.discrete_elbo_rows(indptr, indices, theta, leak, colsum, leak_sum,
                                logit_q, logit_prior, uniforms, split)
    assert np.all(np.isfinite(serial))
    assert_array_equal(split, serial)

    for local_uniforms in (rng.random((1, 3, K)), rng.random((B, 3, K))):
        a, b = logit_q.copy(), logit_q.copy()
        most_a = _kernels.local_optimize(indptr, indices, theta, leak, colsum,
                                         logit_prior, local_uniforms, 6, 0.5, 1e-3, a)
        most_b = _kernels.local_optimize_rows(indptr, indices, theta, leak, colsum,
                                              logit_prior, local_uniforms, 6, 0.5, 1e-3,
                                              b)
        assert not np.array_equal(a, logit_q)
        assert_array_equal(b, a)
        assert most_b == most_a

    relaxed_uniforms = rng.random((B, M, K))
    outputs = []
    for kernel in (_kernels.relaxed_elbo_grad, _kernels.relaxed_elbo_grad_rows):
        out = dict(g_theta=np.full_like(theta, np.nan),
                   g_leak=np.full_like(leak, np.nan),
                   g_theta_dense=np.empty(K), g_logit_q=np.empty((B, K)),
                   g_logit_prior=np.empty(K), elbo_relaxed=np.empty(B),
                   elbo_discrete=np.empty(B))
        kernel(indptr, indices, theta, leak, colsum, leak_sum, logit_q, logit_prior,
               relaxed_uniforms, 0.5, **out)
        outputs.append(out)
    for name, value in outputs[0].items():
        assert np.all(np.isfinite(value)), name
        assert_array_equal(outputs[1][name], value, err_msg=name)
    row_pass = dict(g_logit_q=np.empty((B, K)), elbo_relaxed=np.empty(B),
                    elbo_discrete=np.empty(B))
    _kernels.relaxed_elbo_logit_grad_rows(indptr, indices, theta, leak, colsum,
                                          leak_sum, logit_q, logit_prior,
                                          relaxed_uniforms, 0.5, **row_pass)
    for name, value in row_pass.items():
        assert_array_equal(value, outputs[0][name], err_msg=name)

    hidden = rng.random((B, H))
    coef_out = rng.normal(size=(D, H))
    intercept_out = rng.normal(size=D)
    nnz = indices.shape[0]
    heads = []
    variants = ((_kernels.acp_psi, _kernels.acp_logits),
                (_kernels.acp_psi_rows, _kernels.acp_logits_rows))
    for psi_kernel, logits_kernel in variants:
        pre, psi, logits = np.empty(nnz), np.empty(nnz), np.empty((B, K))
        psi_kernel(indptr, indices, hidden, coef_out, intercept_out, pre, psi)
        logits_kernel(indptr, indices, psi, theta, colsum, logit_prior, logits)
        heads.append((pre, psi, logits))
    for x, y in zip(*heads, strict=True):
        assert_array_equal(y, x)
    pre, psi, _ = heads[0]
    g_logit_q = rng.normal(size=(B, K))
    outputs = []
    for kernel in (_kernels.acp_backward, _kernels.acp_backward_rows):
        g_theta = np.ones_like(theta)  # the kernel adds to it
        g_theta_dense = np.ones(K)
        out = (g_theta, g_theta_dense, np.full_like(coef_out, np.nan),
               np.full(D, np.nan), np.full((B, H), np.nan))
        kernel(indptr, indices, g_logit_q, psi, pre, theta, hidden, coef_out, *out)
        outputs.append(out)
    for x, y in zip(*outputs, strict=True):
        assert np.all(np.isfinite(x))
        assert_array_equal(y, x)

    # Adam on distinct rows of a (D, P) parameter, with and without gradient
    D, P = 1500, 50
    rows = rng.permutation(D)[:1100].astype(np.int64)
    for grad in (rng.normal(size=(rows.size, P)), None):
        states = []
        for threads in (False, True):
            param, opt = _adam_in_state(1, D, P)
            if threads:
                opt.update_rows(0, rows, grad)
            else:
                _optim_serial_rows(opt, rows, grad)
            states.append((param, opt.m[0], opt.v[0]))
        for x, y in zip(*states, strict=True):
            assert_array_equal(y, x)
    # the softplus rows: every row, some with a sparse gradient, as the end
    # of a training window updates them (the split update leaves the column
    # sums to its caller)
    all_rows = np.arange(D, dtype=np.int64)
    grad_rows = np.full(D, -1, dtype=np.int64)
    active = rng.choice(D, 300, replace=False)
    grad_rows[active] = np.arange(300)
    grad = rng.normal(size=(300, P))
    delayed = np.cumsum(rng.normal(size=(4, P)), axis=0)
    last = rng.integers(0, 3, size=D).astype(np.int64)
    states = []
    for recomputed in (False, True):
        raw, opt = _adam_in_state(2, D, P)
        value, slope = np.logaddexp(0.0, raw), expit(raw)
        opt.update_softplus_rows(0, all_rows, grad, delayed, last, 3, value, slope,
                                 value.sum(0), grad_rows,
                                 colsum_recomputed=recomputed)
        states.append((raw, value, slope, opt.m[0], opt.v[0]))
    for x, y in zip(*states, strict=True):
        assert_array_equal(y, x)


def _adam_in_state(seed, D, P):
    """A (D, P) parameter and its Adam optimizer at step 1, with random moments."""
    from skbinvi._optim import Adam

    r = np.random.default_rng(seed)
    param = r.normal(size=(D, P))
    opt = Adam([param], learning_rate=0.01)
    opt.m[0][:] = r.normal(size=(D, P))
    opt.v[0][:] = r.random((D, P))
    opt.tick()
    return param, opt


def _optim_serial_rows(opt, rows, grad):
    """Adam.update_rows through the serial kernel."""
    from skbinvi._optim import _adam_update_rows, _rows_view

    param = _rows_view(opt.params[0])
    grad = np.empty((0, param.shape[1])) if grad is None else grad
    _adam_update_rows(param, grad, rows, opt.m[0], opt.v[0], opt.step_size,
                      opt.beta1, opt.beta2, opt.epsilon)


def test_balanced_parts_cover_the_items_in_order():
    from skbinvi._numba import balanced_parts

    cumulative = np.concatenate(([0], np.cumsum([5, 0, 0, 9, 1, 1, 30, 2])))
    for n_parts in (1, 2, 3, 8, 20):
        parts = balanced_parts(cumulative, n_parts)
        assert parts[0][0] == 0 and parts[-1][1] == 8
        assert all(hi > lo for lo, hi in parts)
        assert all(a[1] == b[0] for a, b in zip(parts[:-1], parts[1:], strict=True))
        assert len(parts) <= n_parts
    assert balanced_parts(np.zeros(1), 3) == []


def test_part_count_keeps_parts_large_on_many_cores(monkeypatch):
    """One part per thread, but none below half the threshold of a split
    pass: a pass just above it goes to two threads on a 64-core machine."""
    from skbinvi import _numba

    monkeypatch.setattr(_numba, "thread_count", lambda: 64)
    assert _numba.part_count(400_000, 400_000) == 2
    assert _numba.part_count(1_100_000, 400_000) == 5
    assert _numba.part_count(10**9, 400_000) == 64
    assert _numba.part_count(10, 400_000) == 1
    assert _numba.part_count(10, 0) == 64
    monkeypatch.setattr(_numba, "thread_count", lambda: 2)
    # on two threads every pass that pays is split in two, as before
    assert _numba.part_count(400_000, 400_000) == 2
    assert _numba.parallel_pays(400_000, 400_000, n_tasks=5)
    assert not _numba.parallel_pays(399_999, 400_000, n_tasks=5)


def test_each_pass_goes_to_threads_from_its_own_threshold(monkeypatch):
    """A pass is split from ``scale * PARALLEL_MIN_WORK`` on, no sooner (on
    two threads, in two), with the ACP passes' scales at least the Monte
    Carlo passes' 1; the first layer's product splits from its own
    threshold on, with the product's numbers either way."""
    from skbinvi import _numba
    from skbinvi.noisy_or import _encoder

    monkeypatch.setattr(_numba, "thread_count", lambda: 2)
    base = _kernels.PARALLEL_MIN_WORK
    scales = (1.0, _kernels.ACP_HEAD_SCALE, _kernels.ACP_LOGITS_SCALE,
              _kernels.ACP_BACKWARD_SCALE)
    assert scales == tuple(sorted(scales)) and scales[-1] > 1.0
    B = 100
    for scale in scales:
        # rows of equal length: the work of the batch is B * length * per_entry
        per_entry = 10.0
        at = int(np.ceil(scale * base / (B * per_entry)))
        indptr = np.arange(B + 1, dtype=np.int64) * at
        parts = _kernels._row_parts(indptr, B, per_entry, scale=scale)
        assert parts == [(0, B // 2), (B // 2, B)]
        indptr_below = np.arange(B + 1, dtype=np.int64) * (at - 1)
        assert _kernels._row_parts(indptr_below, B, per_entry, scale=scale) is None
    # the first layer's product: one scipy product below its threshold
    calls = []

    def recording_run_parts(kernel, parts):
        calls.append(parts)
        return [kernel(*p) for p in parts]

    monkeypatch.setattr(_numba, "run_parts", recording_run_parts)
    H, n_rows = 10, 3000
    width = _encoder.PARALLEL_MIN_WORK // (H * n_rows)  # nnz * H == threshold
    rng = np.random.default_rng(0)
    for columns, split in ((width - 1, False), (width, True)):
        X = sp.csr_matrix(np.ones((n_rows, columns)))
        W = rng.random((columns, H))
        calls.clear()
        assert_array_equal(_encoder.sparse_dot(X, W), X @ W)
        assert len(calls) == int(split)


def test_run_parts_returns_in_order_and_raises():
    from skbinvi import _numba

    @_numba.njit(nogil=True)
    def square_sum(lo, hi):
        total = 0
        for i in range(lo, hi):
            total += i * i
        return total

    parts = [(0, 10), (10, 20), (20, 35)]
    assert _numba.run_parts(square_sum, parts) == [sum(i * i for i in range(a, b))
                                                  for a, b in parts]

    def fails(x):
        if x == 2:
            raise ValueError("part 2")
        return x

    with pytest.raises(ValueError, match="part 2"):
        _numba.run_parts(fails, [(1,), (2,), (3,)])


@pytest.mark.parametrize("inference", ["acp", "avi", "svi"])
def test_fit_is_the_same_with_and_without_threads(inference, split_passes,
                                                   monkeypatch):
    """A fit whose passes are all split between threads equals one that runs
    them all serially, to the last bit (the threads only change the time)."""
    from skbinvi import _optim
    from skbinvi.noisy_or import _encoder

    rng = np.random.default_rng(0)
    X = sp.csr_matrix((rng.random((300, 400)) < 0.06).astype(float))
    results = []
    for min_work in (0, np.inf):
        monkeypatch.setattr(_kernels, "PARALLEL_MIN_WORK", min_work)
        monkeypatch.setattr(_encoder, "PARALLEL_MIN_WORK", min_work)
        monkeypatch.setattr(_optim, "PARALLEL_MIN_ENTRIES", min_work)
        est = NoisyORFactorizer(8, inference=inference, max_iter=3, batch_size=300,
                                random_state=0)
        features = est.fit_transform(X)
        results.append((est.components_, features, est.transform(X[:50]),
                        est.elbo_))
    for x, y in zip(*results, strict=True):
        assert_array_equal(y, x)


def test_fit_then_fork_keeps_working():
    """A process that ran split passes can still fork workers that fit (GNU
    OpenMP, the usual Numba threading layer, would terminate them)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    rng = np.random.default_rng(0)
    X = sp.csr_matrix((rng.random((600, 2000)) < 0.05).astype(float))
    NoisyORFactorizer(20, max_iter=1, random_state=0).fit(X)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        elbo = pool.apply_async(_fit_elbo, (X,)).get(timeout=120)
    assert np.isfinite(elbo)


def _fit_elbo(X):
    return NoisyORFactorizer(20, max_iter=1, random_state=1).fit(X).elbo_
