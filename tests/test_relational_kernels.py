"""Kernels of the latent feature relational model against NumPy/SciPy and enumeration."""

import itertools

import numpy as np
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import log_ndtr

from skbinvi.relational import _kernels


def _problem(seed=0, N=7, D=3):
    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(N, k=1)
    x = (rng.random(rows.size) < 0.4).astype(float)
    q = rng.uniform(0.05, 0.95, size=(N, D))
    return (
        rows.astype(np.int64),
        cols.astype(np.int64),
        x,
        q,
        -0.8,
        rng.normal(1.0, 1.0, D),
    )


def test_expected_pair_log_likelihood_matches_reference_with_same_samples():
    rows, cols, x, q, w0, w = _problem()
    uniforms = np.random.default_rng(1).random((64, q.shape[1]))
    out = np.empty(rows.size)
    _kernels.expected_pair_log_likelihood(rows, cols, x, q, w0, w, uniforms, out)
    p = q[rows] * q[cols]  # (P, D)
    bits = uniforms[None, :, :] < p[:, None, :]  # (P, S, D)
    eta = w0 + bits @ w
    sign = np.where(x == 1, 1.0, -1.0)[:, None]
    assert_allclose(out, log_ndtr(sign * eta).mean(axis=1), rtol=1e-12)


def test_expected_pair_log_likelihood_agrees_with_enumeration():
    rows, cols, x, q, w0, w = _problem(seed=2)
    D = q.shape[1]
    S = 40000
    uniforms = np.random.default_rng(3).random((S, D))
    out = np.empty(rows.size)
    _kernels.expected_pair_log_likelihood(rows, cols, x, q, w0, w, uniforms, out)
    for k in range(rows.size):
        p = q[rows[k]] * q[cols[k]]
        sign = 1.0 if x[k] == 1 else -1.0
        values, probs = [], []
        for bits in itertools.product([0.0, 1.0], repeat=D):
            b = np.array(bits)
            values.append(log_ndtr(sign * (w0 + b @ w)))
            probs.append(np.prod(np.where(b == 1, p, 1 - p)))
        values, probs = np.array(values), np.array(probs)
        exact = probs @ values
        se = np.sqrt(probs @ (values - exact) ** 2 / S)
        assert abs(out[k] - exact) <= 4 * se + 1e-12


def test_kl_features_matches_numpy():
    _, _, _, q, _, _ = _problem(seed=4)
    q[0, 0], q[1, 1] = 0.0, 1.0  # saturated entries have finite KL
    rho = 0.3
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(q > 0, q * np.log(q / rho), 0.0) + np.where(
            q < 1, (1 - q) * np.log((1 - q) / (1 - rho)), 0.0
        )
    assert_allclose(_kernels.kl_features(q, rho), kl.sum(), rtol=1e-12)


def _cavi_problem(seed=5, N=12, D=3):
    rng = np.random.default_rng(seed)
    rows, cols = np.triu_indices(N, k=1)
    keep = rng.random(rows.size) < 0.8  # some pairs unobserved
    rows, cols = rows[keep].astype(np.int64), cols[keep].astype(np.int64)
    x = (rng.random(rows.size) < 0.35).astype(float)
    q = rng.uniform(0.1, 0.9, size=(N, D))
    return rows, cols, x, q, -0.5, rng.normal(1.0, 0.8, D), 0.3


def _bound_at(rows, cols, x, q, w0, w, mu, rho):
    return _kernels.augmented_bound(rows, cols, x, q, w0, w, mu, rho)


def _pair_means(rows, cols, q, w0, w):
    m = np.empty(rows.size)
    _kernels.pair_means(rows, cols, q, w0, w, m)
    return m


def test_augmented_bound_below_true_elbo_and_tight_location():
    rows, cols, x, q, w0, w, rho = _cavi_problem()
    m = _pair_means(rows, cols, q, w0, w)
    at_m = _bound_at(rows, cols, x, q, w0, w, m, rho)
    # the optimal location gives sum log Phi(s m) - V/2 - KL
    P = q[rows] * q[cols]
    V = (w**2 * P * (1 - P)).sum(axis=1)
    s = 2 * x - 1
    expected = (log_ndtr(s * m) - V / 2).sum() - _kernels.kl_features(q, rho)
    assert_allclose(at_m, expected, rtol=1e-10)
    # any other location is worse
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert (
            _bound_at(rows, cols, x, q, w0, w, m + rng.normal(size=m.size), rho) < at_m
        )
    # below the true ELBO: E_q log Phi(s eta) >= log Phi(s m) - V/2 pair by pair
    D = q.shape[1]
    true = -_kernels.kl_features(q, rho)
    for k in range(rows.size):
        for bits in itertools.product([0.0, 1.0], repeat=D):
            b = np.array(bits)
            prob = np.prod(np.where(b == 1, P[k], 1 - P[k]))
            true += prob * log_ndtr(s[k] * (w0 + b @ w))
    assert at_m <= true + 1e-9


def test_cavi_sweeps_and_weight_steps_never_decrease_the_augmented_bound():
    rows, cols, x, q, w0, w, rho = _cavi_problem(seed=6)
    N = q.shape[0]
    inc = _kernels.incidence(rows, cols, N)
    logit_rho = np.log(rho / (1 - rho))
    m = _pair_means(rows, cols, q, w0, w)
    mu = m.copy()
    history = [_bound_at(rows, cols, x, q, w0, w, mu, rho)]
    for _ in range(15):
        # q(y): optimal location
        mu = _pair_means(rows, cols, q, w0, w)
        history.append(_bound_at(rows, cols, x, q, w0, w, mu, rho))
        mean_y = np.array(
            [_kernels.truncated_normal_mean(xp, mp) for xp, mp in zip(x, mu)]
        )
        # q(z): one sweep, mu (hence E[y]) fixed
        m = _pair_means(rows, cols, q, w0, w)
        _kernels.cavi_sweep(*inc, q, logit_rho, w0, w, mean_y, m)
        assert_allclose(m, _pair_means(rows, cols, q, w0, w), rtol=1e-10, atol=1e-12)
        history.append(_bound_at(rows, cols, x, q, w0, w, mu, rho))
        # w: closed form, q(y) and q(z) fixed
        w0, w = _kernels.weight_step(rows, cols, q, mean_y)
        history.append(_bound_at(rows, cols, x, q, w0, w, mu, rho))
    history = np.array(history)
    assert np.all(np.diff(history) >= -1e-9 * np.abs(history[1:])), np.diff(history)
    assert history[-1] > history[0] + 1.0


def test_cavi_update_is_the_coordinate_maximizer():
    rows, cols, x, q, w0, w, rho = _cavi_problem(seed=7)
    inc = _kernels.incidence(rows, cols, q.shape[0])
    mu = _pair_means(rows, cols, q, w0, w)
    mean_y = np.array([_kernels.truncated_normal_mean(xp, mp) for xp, mp in zip(x, mu)])
    m = _pair_means(rows, cols, q, w0, w)
    _kernels.cavi_sweep(*inc, q, np.log(rho / (1 - rho)), w0, w, mean_y, m)
    # after the sweep, the last coordinate updated (N-1, D-1) is at its maximum
    best = _bound_at(rows, cols, x, q, w0, w, mu, rho)
    for step in (-0.05, -0.01, 0.01, 0.05):
        moved = q.copy()
        moved[-1, -1] = np.clip(moved[-1, -1] + step, 1e-6, 1 - 1e-6)
        assert _bound_at(rows, cols, x, moved, w0, w, mu, rho) <= best + 1e-12


def test_truncated_normal_mean_matches_scipy():
    from scipy.stats import truncnorm

    for mu in (-30.0, -3.0, 0.0, 2.5, 30.0):
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


def _exact_true_elbo(rows, cols, x, q, w0, w, rho):
    """True ELBO by enumeration of all pair products (tiny problems)."""
    D = q.shape[1]
    P = q[rows] * q[cols]
    s = 2 * x - 1
    total = -_kernels.kl_features(q, rho)
    for k in range(rows.size):
        for bits in itertools.product([0.0, 1.0], repeat=D):
            b = np.array(bits)
            total += np.prod(np.where(b == 1, P[k], 1 - P[k])) * log_ndtr(
                s[k] * (w0 + b @ w)
            )
    return total


def _tiny_problem(rng, N=5):
    """All pairs of N entities, D = 2: small enough to enumerate the true ELBO."""
    rows, cols = (a.astype(np.int64) for a in np.triu_indices(N, k=1))
    x = (rng.random(rows.size) < 0.5).astype(float)
    q = rng.uniform(0.2, 0.8, size=(N, 2))
    return rows, cols, x, q, -0.3, np.array([1.5, -0.7]), 0.4


def _exact_logit_gradient(rows, cols, x, q, w0, w, rho, eps=1e-6):
    """dELBO / d logit q_id by central differences of the enumerated true ELBO."""
    logit = np.log(q / (1 - q))
    grad = np.empty_like(q)
    for idx in np.ndindex(q.shape):
        values = []
        for sign in (1, -1):
            moved = logit.copy()
            moved[idx] += sign * eps
            values.append(
                _exact_true_elbo(rows, cols, x, 1 / (1 + np.exp(-moved)), w0, w, rho)
            )
        grad[idx] = (values[0] - values[1]) / (2 * eps)
    return grad


def test_mcvi_deltas_are_the_natural_gradient_of_the_true_elbo():
    """With many samples, q(1-q)(mean Delta - logit q) = dELBO/dlogit q (enumeration)."""
    rng = np.random.default_rng(8)
    rows, cols, x, q, w0, w, rho = _tiny_problem(rng)
    N, D = q.shape
    S = 40000
    out = np.empty((N, D))
    _kernels.mcvi_mean_deltas(
        rows, cols, x, q, np.log(rho / (1 - rho)), w0, w, rng.random((S, N, D)), out
    )
    logit = np.log(q / (1 - q))
    natural = _exact_logit_gradient(rows, cols, x, q, w0, w, rho) / (q * (1 - q))
    assert np.all(np.abs((out - logit) - natural) < 0.03), (out - logit, natural)


def test_mcvi_deltas_match_a_numpy_reference_with_the_same_samples():
    rows, cols, x, q, w0, w, rho = _cavi_problem(seed=9, N=6, D=3)
    N, D = q.shape
    uniforms = np.random.default_rng(2).random((7, N, D))
    out = np.empty((N, D))
    _kernels.mcvi_mean_deltas(rows, cols, x, q, 0.1, w0, w, uniforms, out)
    expected = np.zeros((N, D))
    for s in range(7):
        z = (uniforms[s] < q).astype(float)
        for k in range(rows.size):
            for i, j in ((rows[k], cols[k]), (cols[k], rows[k])):
                for d in range(D):
                    if z[j, d]:
                        a = w0 + (w * z[i] * z[j]).sum() - w[d] * z[i, d]
                        sign = 1.0 if x[k] == 1 else -1.0
                        expected[i, d] += log_ndtr(sign * (a + w[d])) - log_ndtr(
                            sign * a
                        )
    assert_allclose(out, 0.1 + expected / 7, rtol=1e-10, atol=1e-12)


def test_score_function_gradient_is_unbiased_for_the_true_elbo_gradient():
    """With many samples, the estimate matches dELBO/dlogit q by enumeration."""
    rng = np.random.default_rng(10)
    rows, cols, x, q, w0, w, rho = _tiny_problem(rng)
    N, D = q.shape
    out = np.empty((N, D))
    _kernels.score_function_gradient(
        rows,
        cols,
        x,
        q,
        np.log(rho / (1 - rho)),
        w0,
        w,
        rng.random((100000, N, D)),
        out,
    )
    grad = _exact_logit_gradient(rows, cols, x, q, w0, w, rho)
    assert np.all(np.abs(out - grad) < 0.02), (out, grad)


def test_weight_pass_climbs_to_the_closed_form_w_step():
    """Coordinate passes never decrease the augmented bound and converge to weight_step."""
    rows, cols, x, q, w0, w, rho = _cavi_problem(seed=11)
    mean_y = np.array(
        [
            _kernels.truncated_normal_mean(xp, mp)
            for xp, mp in zip(x, _pair_means(rows, cols, q, w0, w))
        ]
    )
    mu = _pair_means(rows, cols, q, w0, w)
    for alpha in (0.0, 2.0):
        rhs = np.empty(q.shape[1] + 1)
        _kernels.augmented_weight_rhs(rows, cols, q, mean_y, rhs)
        P = q[rows] * q[cols]
        assert_allclose(rhs, np.concatenate([[mean_y.sum()], P.T @ mean_y]), rtol=1e-12)
        full = np.concatenate([[w0], w])
        m = _pair_means(rows, cols, q, w0, w)

        def objective(v, alpha=alpha):  # augmented bound minus the ridge penalty
            return (
                _bound_at(rows, cols, x, q, v[0], v[1:], mu, rho)
                - 0.5 * alpha * v[1:] @ v[1:]
            )

        values = [objective(full)]
        for _ in range(300):
            _kernels.weight_pass(rows, cols, q, rhs, alpha, full, m)
            values.append(objective(full))
        assert np.all(np.diff(values) >= -1e-9 * np.abs(values[1:]))
        assert_allclose(m, _pair_means(rows, cols, q, full[0], full[1:]), rtol=1e-10)
        w0_star, w_star = _kernels.weight_step(rows, cols, q, mean_y, alpha)
        assert_allclose(full, np.concatenate([[w0_star], w_star]), rtol=1e-6, atol=1e-8)


def _exact_em_rhs(rows, cols, x, q, w0, w):
    """E_q[sum_p f_p(z) ybar_p(z)] by enumeration of each pair's D products."""
    D = q.shape[1]
    rhs = np.zeros(D + 1)
    P = q[rows] * q[cols]
    for k in range(rows.size):
        for bits in itertools.product([0.0, 1.0], repeat=D):
            b = np.array(bits)
            prob = np.prod(np.where(b == 1, P[k], 1 - P[k]))
            ybar = _kernels.truncated_normal_mean(x[k], w0 + b @ w)
            rhs += prob * ybar * np.concatenate([[1.0], b])
    return rhs


def test_mc_weight_rhs_and_the_em_w_step_on_the_true_elbo():
    """The Monte Carlo right-hand side agrees with enumeration, and the EM step
    with the exact one never decreases the (enumerated) true ELBO."""
    rng = np.random.default_rng(12)
    rows, cols, x, q, w0, w, rho = _tiny_problem(rng, N=6)
    N, D = q.shape
    exact = _exact_em_rhs(rows, cols, x, q, w0, w)
    out = np.empty(D + 1)
    _kernels.mc_weight_rhs(rows, cols, x, q, w0, w, rng.random((20000, N, D)), out)
    assert_allclose(out, exact, rtol=0.02, atol=0.05)
    full = np.concatenate([[w0], w])
    before = _exact_true_elbo(rows, cols, x, q, w0, w, rho)
    for _ in range(5):
        rhs = _exact_em_rhs(rows, cols, x, q, full[0], full[1:])
        m = _pair_means(rows, cols, q, full[0], full[1:])
        for _ in range(50):  # converge the inner quadratic (the full M step)
            _kernels.weight_pass(rows, cols, q, rhs, 0.0, full, m)
        after = _exact_true_elbo(rows, cols, x, q, full[0], full[1:], rho)
        assert after >= before - 1e-10
        before = after


def test_mcvi_step_one_with_exact_expectation_is_coordinate_ascent():
    """logit q_id = E[Delta_id] (exact) maximizes the enumerated true ELBO over q_id."""
    rng = np.random.default_rng(13)
    rows, cols, x, q, w0, w, rho = _tiny_problem(rng)
    N, D = q.shape
    logit_rho = np.log(rho / (1 - rho))
    out = np.empty((N, D))
    _kernels.mcvi_mean_deltas(
        rows, cols, x, q, logit_rho, w0, w, rng.random((200000, N, D)), out
    )
    grid = np.linspace(0.005, 0.995, 199)
    for i, d in ((0, 0), (2, 1), (4, 0)):
        values = []
        for value in grid:
            moved = q.copy()
            moved[i, d] = value
            values.append(_exact_true_elbo(rows, cols, x, moved, w0, w, rho))
        best = grid[int(np.argmax(values))]
        # the Monte Carlo estimate of E[Delta] from 200k samples
        assert abs(1 / (1 + np.exp(-out[i, d])) - best) < 0.01, (i, d, out[i, d], best)


def test_monte_carlo_kernels_do_not_depend_on_the_number_of_threads():
    """Threads split the samples; the sums run in a fixed order (reproducible results)."""
    import numba

    rows, cols, x, q, w0, w, rho = _cavi_problem(seed=14, N=15, D=4)
    N, D = q.shape
    uniforms = np.random.default_rng(0).random((6, N, D))
    results = []
    default = numba.get_num_threads()
    try:
        for n_threads in sorted({1, default}):
            numba.set_num_threads(n_threads)
            deltas, grad, rhs = np.empty((N, D)), np.empty((N, D)), np.empty(D + 1)
            _kernels.mcvi_mean_deltas(rows, cols, x, q, 0.2, w0, w, uniforms, deltas)
            _kernels.score_function_gradient(
                rows, cols, x, q, 0.2, w0, w, uniforms, grad
            )
            _kernels.mc_weight_rhs(rows, cols, x, q, w0, w, uniforms, rhs)
            results.append((deltas, grad, rhs))
    finally:
        numba.set_num_threads(default)
    for a, b in zip(results[0], results[-1]):
        assert_array_equal(a, b)
