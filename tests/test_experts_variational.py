"""Tests of skbinvi.experts._variational, of the estimator's "vi" and "pr" fits,
and of the reference drivers of tests/_reference/experts.py."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _reference import experts as REF
from scipy import special, stats
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from skbinvi import DiversityMixtureOfExperts
from skbinvi.experts import _variational as V
from skbinvi.experts._bounds import VMFGammaParams
from skbinvi.experts._mcmc import predict_proba_samples
from skbinvi.experts._variational import (
    _canonical_csr,
    _fixed_aux_statistics,
    _fixed_aux_statistics_parallel,
    _fixed_aux_statistics_serial,
    _fixed_aux_weights,
    _FixedAuxLikelihood,
    _rowwise_quadratic_forms,
)
from skbinvi.experts._vmf import log_normalizer, sample_vmf


def _two_expert_data(n=200, seed=0):
    """Gate by sign of x_1; experts +4 x_2 and -4 x_2 (XOR-like: one LR fails)."""
    rng = np.random.RandomState(seed)
    Z = rng.normal(size=(n, 3))
    X = np.column_stack([Z, np.ones(n)])
    logit = np.where(Z[:, 0] > 0, 4.0 * Z[:, 1], -4.0 * Z[:, 1])
    y = (rng.rand(n) < special.expit(logit)).astype(float)
    return X, y


def _random_q(K, p, rng):
    mu = rng.normal(size=(K, p))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    return VMFGammaParams(mu, rng.uniform(1, 20, K), rng.uniform(1, 5, K),
                          rng.uniform(0.5, 2, K))


def _fit_estimator(X, y, **kw):
    """DiversityMixtureOfExperts(2, **kw) fitted on (X, y); fixed iteration counts,
    so the ConvergenceWarning is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return DiversityMixtureOfExperts(2, **kw).fit(X, y)


@pytest.fixture(scope="module")
def fits():
    """The estimator's "vi" and "pr" fits (30 iterations, no early stop) of the
    two-expert data, which carry their own intercept column."""
    X, y = _two_expert_data()
    out = {}
    for method in ("vi", "pr"):
        out[method] = _fit_estimator(X, y, inference=method, fit_intercept=False,
                                     max_iter=30, tol=0.0, random_state=0)
    return X, y, out


@pytest.mark.parametrize("method", ["vi", "pr"])
def test_objective_history_non_decreasing(fits, method):
    _, _, out = fits
    h = out[method].elbo_history_
    assert h.shape == (out[method].n_iter_,) == (30,)
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[:-1]))
    assert h[-1] > h[0]


@pytest.mark.parametrize("method", ["vi", "pr"])
def test_training_accuracy_beats_majority_and_logistic(fits, method):
    X, y, out = fits
    acc = out[method].score(X, y)
    majority = max(y.mean(), 1 - y.mean())
    lr = LogisticRegression().fit(X, y).score(X, y)
    # measured (n = 200, 30 iterations): acc 0.885 (Bayes rule 0.89),
    # majority ~0.5, logistic regression ~0.55
    assert acc > majority + 0.2
    assert acc > lr + 0.2


def test_mabn_kappa0_equals_uniform_independent_elbo():
    rng = np.random.RandomState(1)
    X, y = _two_expert_data(n=50, seed=1)
    p = X.shape[1]
    beta, eta = _random_q(3, p, rng), _random_q(3, p, rng)
    mu0 = np.eye(p)[0]
    vi = REF.variational_objective(X, y, beta, eta, method="vi", kappa_prior=0.0,
                                   mu0=mu0, alpha1=2.0, alpha2=0.5)
    ind = REF.independent_prior_elbo(X, y, beta, eta, prior=(mu0, 0.0, 2.0, 0.5))
    pr0 = REF.variational_objective(X, y, beta, eta, method="pr", kappa_prior=0.0,
                                    mu0=mu0, alpha1=2.0, alpha2=0.5,
                                    pr_weights=(0.0, 0.0))
    assert vi == pytest.approx(ind, rel=1e-10, abs=1e-8)
    assert pr0 == pytest.approx(ind, rel=1e-10, abs=1e-8)


def test_deterministic_with_random_state():
    X, y = _two_expert_data(n=80)
    kw = dict(fit_intercept=False, max_iter=5, tol=0.0, random_state=3)
    a = _fit_estimator(X, y, **kw)
    b = _fit_estimator(X, y, **kw)
    np.testing.assert_array_equal(a.elbo_history_, b.elbo_history_)
    np.testing.assert_array_equal(a.expert_coef_, b.expert_coef_)
    np.testing.assert_array_equal(a.gate_coef_, b.gate_coef_)


def test_sparse_matches_dense():
    rng = np.random.RandomState(2)
    n, p = 120, 8
    Xd = (rng.rand(n, p) < 0.3).astype(float)
    Xd[:, -1] = 1.0
    y = (Xd[:, 0] != Xd[:, 1]).astype(float)
    kw = dict(inference="pr", fit_intercept=False, max_iter=5, tol=0.0, random_state=0)
    a = _fit_estimator(Xd, y, **kw)
    b = _fit_estimator(sp.csr_matrix(Xd), y, **kw)
    np.testing.assert_allclose(a.elbo_history_, b.elbo_history_, rtol=1e-9)
    np.testing.assert_allclose(a.expert_coef_, b.expert_coef_, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(a.gate_coef_, b.gate_coef_, rtol=1e-7, atol=1e-10)


def _mean_pairwise_angle(mu):
    K = mu.shape[0]
    cos = np.abs(mu @ mu.T)[np.triu_indices(K, 1)]
    return float(np.mean(np.arccos(np.clip(cos, 0, 1))))


def test_pr_regularizer_increases_diversity():
    X, y = _two_expert_data(n=100, seed=4)
    kw = dict(method="pr", max_iter=15, random_state=0, pr_gamma=0.0)
    a0 = REF.fit_variational(X, y, 3, pr_weights=(0.0, 0.0), **kw)
    a1 = REF.fit_variational(X, y, 3, pr_weights=(200.0, 0.0), **kw)
    assert _mean_pairwise_angle(a1.beta.mu) > _mean_pairwise_angle(a0.beta.mu) + 0.05


def _exact_log_joint_prior(U, G, kappa, mu0, alpha1, alpha2):
    """log p(u_1..u_K) Type II MABN (exact normalizers) + sum log Gamma(g)."""
    K, p = U.shape
    out = float(log_normalizer(p, kappa)) + kappa * float(mu0 @ U[0])
    S = np.zeros(p)
    for i in range(1, K):
        S = S + U[i - 1]
        out += (float(log_normalizer(p, kappa * np.linalg.norm(S)))
                - kappa * float(S @ U[i]))
    out += float(np.sum(stats.gamma.logpdf(G, alpha1, scale=1.0 / alpha2)))
    return out


def test_vi_objective_is_below_monte_carlo_elbo():
    X, y = _two_expert_data(n=40, seed=5)
    p = X.shape[1]
    mu0 = np.eye(p)[0]
    kappa, a1, a2 = 2.0, 2.0, 0.5
    res = REF.fit_variational(X, y, 3, method="vi", kappa_prior=kappa, mu0=mu0,
                              alpha1=a1, alpha2=a2, max_iter=10, random_state=0)
    bound = res.objective
    rng = np.random.RandomState(0)
    vals = []
    for _ in range(300):
        total = 0.0
        vecs = []
        for q in (res.beta, res.eta):
            U = np.vstack([sample_vmf(q.mu[k], q.kappa[k], random_state=rng)
                           for k in range(3)])
            G = rng.gamma(q.r, 1.0 / q.s)
            total += _exact_log_joint_prior(U, G, kappa, mu0, a1, a2)
            total -= sum(float(log_normalizer(p, q.kappa[k]))
                         + q.kappa[k] * float(q.mu[k] @ U[k])
                         for k in range(3))
            total -= float(np.sum(stats.gamma.logpdf(G, q.r, scale=1.0 / q.s)))
            vecs.append(G[:, None] * U)
        B, E = vecs
        log_gate = special.log_softmax(X @ E.T, axis=1)
        t = X @ B.T
        log_lik = np.where(y[:, None] == 1, special.log_expit(t), special.log_expit(-t))
        total += float(np.sum(special.logsumexp(log_gate + log_lik, axis=1)))
        vals.append(total)
    vals = np.asarray(vals)
    mc, se = vals.mean(), vals.std(ddof=1) / np.sqrt(vals.size)
    assert bound <= mc + 4 * se


# ---------------------------------------------------------------------------
# sufficient statistics of the fixed-auxiliary likelihood
# ---------------------------------------------------------------------------


def _messy_csr(rng, n, p, density=0.3):
    """CSR with unsorted indices and duplicate entries (sum_duplicates changes it)."""
    X = sp.random(n, p, density=density, random_state=rng, format="coo")
    X = sp.coo_matrix((np.concatenate([X.data, X.data[:5]]),
                       (np.concatenate([X.row, X.row[:5]]),
                        np.concatenate([X.col, X.col[:5]]))), shape=(n, p))
    X = X.tocsr()
    X.has_sorted_indices = False
    X.indices[X.indptr[0]:X.indptr[1]] = X.indices[X.indptr[0]:X.indptr[1]][::-1]
    X.data[X.indptr[0]:X.indptr[1]] = X.data[X.indptr[0]:X.indptr[1]][::-1]
    return X


def test_weighted_gram_and_quadratic_forms_match_numpy():
    rng = np.random.RandomState(0)
    n, p, K = 40, 7, 3
    X = _messy_csr(rng, n, p)
    Xd = X.toarray()
    W = rng.normal(size=(n, K))
    Q = REF._weighted_gram(X, W)
    ref = np.stack([Xd.T @ (Xd * W[:, k, None]) for k in range(K)])
    np.testing.assert_allclose(Q, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(REF._weighted_gram(Xd, W), ref, rtol=1e-12, atol=1e-12)
    # b = X^T G_M and v = G_V^T sq come from the same pass
    G = rng.normal(size=(n, K))
    sq = rng.rand(n)
    for Xa in (X, Xd):
        b, v, Q2 = _fixed_aux_statistics(Xa, sq, G, W)
        np.testing.assert_allclose(b, G.T @ Xd, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(v, sq @ W, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(Q2, ref, rtol=1e-12, atol=1e-12)
    A = rng.normal(size=(K, p, p))
    S = A + np.swapaxes(A, 1, 2)
    ref_q = np.stack([np.einsum("np,pq,nq->n", Xd, S[k], Xd) for k in range(K)], axis=1)
    np.testing.assert_allclose(_rowwise_quadratic_forms(X, S), ref_q, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(_rowwise_quadratic_forms(Xd, S), ref_q, rtol=1e-12,
                               atol=1e-12)
    # both sets in one pass (the BMEM-G iterations): the CSR path stacks the
    # two sets with a compiled transpose
    S2 = S[::-1].copy()
    for Xa in (X, Xd):
        qf = V._both_quadratic_forms(Xa, [S, S2])
        np.testing.assert_allclose(qf[0], ref_q, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(qf[1], ref_q[:, ::-1], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(V._transposed_stack(S, S2),
                                  np.moveaxis(np.concatenate([S, S2]), 0, 2))


def _row_major_statistics(X, sq, G, W):
    """The statistics summed row by row, each entry over its rows in order
    (the order of the former row-major kernel), in NumPy."""
    n, p = X.shape
    K = W.shape[1]
    bt, Q = np.zeros((K, p)), np.zeros((K, p, p))
    for i in range(n):
        cols = X.indices[X.indptr[i]:X.indptr[i + 1]]
        vals = X.data[X.indptr[i]:X.indptr[i + 1]]
        for ja, (a, xa) in enumerate(zip(cols, vals, strict=True)):
            bt[:, a] += xa * G[i]
            for b, xb in zip(cols[ja:], vals[ja:], strict=True):
                Q[:, a, b] += W[i] * (xa * xb)
    iu = np.triu_indices(p, 1)
    Q[:, iu[1], iu[0]] = Q[:, iu[0], iu[1]]
    v = np.zeros(K)
    for i in range(n):
        v += sq[i] * W[i]
    return bt, v, Q


def test_statistics_kernels_equal_a_row_major_pass_bit_for_bit():
    """The weighted Gram pass, row-major or feature-major, serial or with
    the features split into ranges on threads, and whatever the chunk of
    rows, gives the numbers of a row-major pass bit for bit (every entry
    summed over its rows in increasing order), including empty rows and
    unused features."""
    rng = np.random.RandomState(5)
    n, p, K = 300, 11, 19
    X = _messy_csr(rng, n, p)
    X = sp.csr_matrix(X.toarray() * (np.arange(n) % 7 != 3)[:, None])  # empty rows
    X = V.prepared_csr(X)
    assert np.diff(X.indptr).min() == 0
    indptr, indices, data = _canonical_csr(X)
    sq = rng.rand(n)
    G, W = rng.normal(size=(n, K)), rng.normal(size=(n, K))
    ref = _row_major_statistics(X, sq, G, W)
    Xd = X.toarray()
    np.testing.assert_allclose(ref[2][4], Xd.T @ (Xd * W[:, 4, None]), rtol=1e-12,
                               atol=1e-12)
    out = V._statistics_rows(indptr, indices, data, sq, G, W, p)
    for a, b in zip(out, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    for chunk in (1, 7, 64, n + 5):
        out = _fixed_aux_statistics_serial(indptr, indices, data, sq, G, W, p, chunk,
                                           V._column_index(indptr, indices, p, 1))
        for a, b in zip(out, ref, strict=True):
            np.testing.assert_array_equal(a, b)
        for n_parts in (1, 2, 3, 7, p):
            out = _fixed_aux_statistics_parallel(
                indptr, indices, data, sq, G, W, p, chunk,
                V._column_index(indptr, indices, p, n_parts))
            for a, b in zip(out, ref, strict=True):
                np.testing.assert_array_equal(a, b)
    # a feature no row uses gets zero rows and columns
    Xz = sp.csr_matrix((data, indices, indptr), shape=(n, p + 2))
    out = _fixed_aux_statistics(Xz, sq, G, W)
    np.testing.assert_array_equal(out[2][:, :p, :p], ref[2])
    assert not out[2][:, p:, :].any() and not out[2][:, :, p:].any()
    assert not out[0][:, p:].any()


def test_cached_column_index_follows_the_structure():
    """The column index is reused for the same arrays, and built again when
    they were changed in place (same objects, another structure)."""
    rng = np.random.RandomState(4)
    X = V.prepared_csr(_messy_csr(rng, 30, 6))
    first = V._cached_column_index(X.indptr, X.indices, 6, 2)
    assert V._cached_column_index(X.indptr, X.indices, 6, 2) is first
    # move one entry of a row to a column that row does not use, in place
    i = next(i for i in range(30) if 0 < X.indptr[i + 1] - X.indptr[i] < 6)
    row = X.indices[X.indptr[i]:X.indptr[i + 1]]
    row[0] = min(set(range(6)) - set(row))
    row.sort()
    again = V._cached_column_index(X.indptr, X.indices, 6, 2)
    fresh = V._column_index(X.indptr, X.indices, 6, 2)
    assert not all(np.array_equal(a, b) for a, b in zip(first, fresh, strict=True))
    for a, b in zip(again, fresh, strict=True):
        np.testing.assert_array_equal(a, b)


def test_column_index_is_a_stable_transpose_with_balanced_ranges():
    rng = np.random.RandomState(2)
    X = V.prepared_csr(_messy_csr(rng, 50, 9))
    start, rows, pos, bounds = V._column_index(X.indptr, X.indices, 9, 3)
    Xc = X.tocsc()
    Xc.sort_indices()
    np.testing.assert_array_equal(start, Xc.indptr)
    np.testing.assert_array_equal(rows, Xc.indices)
    columns = np.repeat(np.arange(9), np.diff(start))
    np.testing.assert_array_equal(X.indices[pos], columns)
    np.testing.assert_array_equal(X.data[pos], Xc.data)
    assert bounds[0] == 0 and bounds[-1] == 9 and np.all(np.diff(bounds) >= 0)
    # each range holds about a third of the work (entries at or after a in its rows)
    work = np.zeros(9)
    for t, a in enumerate(columns):
        work[a] += X.indptr[rows[t] + 1] - pos[t]
    shares = [work[bounds[r]:bounds[r + 1]].sum() / work.sum() for r in range(3)]
    assert max(shares) < 1 / 3 + work.max() / work.sum()


def test_serial_and_parallel_row_passes_agree_and_weights_match_aux():
    """The serial and parallel variants of the row passes give the same
    numbers (the parallel one is chosen by size only), with the projections
    given or formed from CSR X inside the pass, and the fixed-auxiliary
    weights that the objective's pass returns are those of its auxiliaries."""
    rng = np.random.RandomState(3)
    n, p, K = 1500, 9, 4  # several chunks of rows
    X = sp.random(n, p, density=0.4, random_state=rng, format="csr")
    X.data[:] = rng.normal(size=X.nnz)
    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    sign = np.where(rng.rand(n) < 0.4, 1.0, -1.0)
    t_b, t_e = rng.normal(size=(n, K)), 3.0 * rng.normal(size=(n, K))
    coef_b = np.abs(rng.normal(size=(3, K)))
    coef_e = np.abs(rng.normal(size=(3, K)))
    coef_e[2] *= 0.1
    c0 = rng.normal(size=n)
    args = (sign, sq, t_b, t_e, coef_b, coef_e, c0, True, 50, 1e-10, 1e-12, True)
    ser = REF._objective_rows_serial(*args)
    par = REF._objective_rows_parallel(*args)
    for a, b in zip(ser, par, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    phi, xi, c, d, _, g_mean, g_second = ser
    ref_mean, ref_second = _fixed_aux_weights(sign, phi, xi, c, d)
    np.testing.assert_allclose(g_mean, ref_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_second, ref_second, rtol=1e-10, atol=1e-12)
    idx = V._canonical_csr(X)
    # the projections formed inside the pass from CSR X and the mean
    # directions, serial and parallel, equal the pass from X @ mu^T
    mu_b, mu_e = rng.normal(size=(K, p)), rng.normal(size=(K, p))
    args = (sign, sq, np.asarray(X @ mu_b.T), np.asarray(X @ mu_e.T), coef_b, coef_e,
            c0, True, 50, 1e-10, 1e-12, True)
    ref = REF._objective_rows_serial(*args)
    csr_args = (sign, sq, None, None, *args[4:])
    for kernel in (REF._objective_rows_serial, REF._objective_rows_parallel):
        out = kernel(*csr_args, csr=(*idx, mu_b, mu_e))
        for a, b in zip(out, ref, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12,
                                       atol=1e-12)
    S = rng.normal(size=(p, p, K))
    S = np.ascontiguousarray(S + np.swapaxes(S, 0, 1))
    np.testing.assert_array_equal(V._quadratic_forms_serial(*idx, S),
                                  V._quadratic_forms_parallel(*idx, S))


@pytest.mark.parametrize("sparse", [False, True])
def test_fixed_aux_likelihood_statistics_match_direct_and_bound(sparse):
    from skbinvi.experts._ascent import Point, SetObjective, prior_constants

    rng = np.random.RandomState(1)
    X, y = _two_expert_data(n=60, seed=1)
    if sparse:
        X = sp.csr_matrix(X)
    p, K = X.shape[1], 3
    beta, eta = _random_q(K, p, rng), _random_q(K, p, rng)
    _, aux = REF.variational_objective(X, y, beta, eta, method="pr",
                                       pr_weights=(0, 0), return_aux=True)
    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel() if sparse else np.sum(X * X, 1)
    fast = _FixedAuxLikelihood(X, y, sq, aux, True)
    slow = _FixedAuxLikelihood(X, y, sq, aux, False)
    cfg, lams = REF._check_config("pr", 0.0, None, 2.0, 0.5, (0, 0), 0.0, p)
    consts = prior_constants(cfg, K, p)

    def lik_value(lik, which, q):  # L_set at the fixed auxiliaries, the fit's path
        obj = SetObjective(lik, which, cfg, consts, 0.0)
        return float(np.sum(obj.likelihood(Point(*q))))

    beta2, eta2 = _random_q(K, p, rng), _random_q(K, p, rng)
    for which, (q1, q2) in enumerate(((beta, beta2), (eta, eta2))):
        assert lik_value(fast, which, q1) == pytest.approx(lik_value(slow, which, q1),
                                                           rel=1e-10)
        g_fast = SetObjective(fast, which, cfg, consts, 0.0).gradient(Point(*q2))
        g_slow = SetObjective(slow, which, cfg, consts, 0.0).gradient(Point(*q2))
        for a, b in zip(g_fast, g_slow, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
    # value differences are those of the likelihood bound at the fixed auxiliaries
    kw = dict(method="pr", pr_weights=(0, 0), kappa_prior=0.0, aux=aux)

    f1 = REF.variational_objective(X, y, beta, eta, **kw)
    f2 = REF.variational_objective(X, y, beta2, eta, **kw)
    d_lik = (f2 - REF._prior_term(REF._as_params(beta2), cfg, 0.0)) \
        - (f1 - REF._prior_term(REF._as_params(beta), cfg, 0.0))
    d_stats = lik_value(fast, 0, beta2) - lik_value(fast, 0, beta)
    assert d_stats == pytest.approx(d_lik, rel=1e-9, abs=1e-9)


def test_direct_likelihood_reuses_projections_only_for_the_same_mu():
    """The pass-over-the-data likelihood remembers X mu^T of the last mu of
    each set: the same numbers, to the last bit, as a fresh object, for a
    new mu, the old one again, and a mu changed in place."""
    rng = np.random.RandomState(2)
    X = _messy_csr(rng, 70, 9)
    y = (rng.rand(70) < 0.5).astype(float)
    K, p = 3, 9
    beta, eta = _random_q(K, p, rng), _random_q(K, p, rng)
    _, aux = REF.variational_objective(X, y, beta, eta, method="pr", pr_weights=(0, 0),
                                       return_aux=True)
    sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    lik = _FixedAuxLikelihood(X, y, sq, aux, False)
    c1, c2, c3 = rng.uniform(0.5, 2.0, (3, K))
    mu1, mu2 = _random_q(K, p, rng).mu, _random_q(K, p, rng).mu
    mu3 = mu1.copy()
    for which in (0, 1):
        for mu in (mu1, mu2, mu1, mu3):
            fresh = _FixedAuxLikelihood(X, y, sq, aux, False)
            assert np.array_equal(lik.moments_value(which, mu, c1, c2, c3),
                                  fresh.moments_value(which, mu, c1, c2, c3))
            for a, b in zip(lik.moments_gradient(which, mu, c1, c3),
                            fresh.moments_gradient(which, mu, c1, c3), strict=True):
                assert np.array_equal(a, b)
        mu3[0] = mu2[0]  # in place: the remembered copy must not be used
        fresh = _FixedAuxLikelihood(X, y, sq, aux, False)
        assert np.array_equal(lik.moments_value(which, mu3, c1, c2, c3),
                              fresh.moments_value(which, mu3, c1, c2, c3))
        mu3[:] = mu1


@pytest.mark.parametrize("sparse", [True, False])
def test_line_search_trials_equal_a_pass_over_the_data(sparse):
    """A trial mu(h) = (mu + h d) / ||mu + h d|| of the ascent's line search is
    priced from X mu^T and X d^T (one pass for the line): the same value as a
    pass at mu(h), to rounding, per vector and per step; the gradient and
    value at the trial then reuse those projections; dL/dmu is skipped when
    not asked for, the other derivatives unchanged."""
    rng = np.random.RandomState(5)
    X = _messy_csr(rng, 80, 11)
    if not sparse:
        X = X.toarray()
    y = (rng.rand(80) < 0.5).astype(float)
    K, p = 4, 11
    beta, eta = _random_q(K, p, rng), _random_q(K, p, rng)
    _, aux = REF.variational_objective(X, y, beta, eta, method="vi", return_aux=True)
    sq = np.asarray((X.multiply(X) if sparse else X * X).sum(axis=1)).ravel()
    c1, c2, c3 = rng.uniform(0.5, 2.0, (3, K))
    for which in (0, 1):
        lik = _FixedAuxLikelihood(X, y, sq, aux, False)
        mu = _random_q(K, p, rng).mu
        d = rng.normal(size=(K, p))
        d -= np.sum(d * mu, axis=1, keepdims=True) * mu  # tangent, as the ascent's
        lik.line(which, mu, d)
        for h in (np.full(K, 0.5), np.array([0.0, 1e-3, 0.3, 2.0])):
            trial = mu + h[:, None] * d
            trial /= np.linalg.norm(trial, axis=1, keepdims=True)
            fresh = _FixedAuxLikelihood(X, y, sq, aux, False)
            want = fresh.moments_value(which, trial, c1, c2, c3)
            got = lik.moments_value(which, trial, c1, c2, c3, line=h)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
            # the trial's projections are remembered: value and gradient agree
            np.testing.assert_allclose(lik.moments_value(which, trial, c1, c2, c3),
                                       want, rtol=1e-12, atol=1e-12)
            for a, b in zip(lik.moments_gradient(which, trial, c1, c3),
                            fresh.moments_gradient(which, trial, c1, c3), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        no_mu = lik.moments_gradient(which, mu, c1, c3, need_mu=False)
        full = _FixedAuxLikelihood(X, y, sq, aux, False).moments_gradient(which, mu,
                                                                          c1, c3)
        assert no_mu[0] is None
        for a, b in zip(no_mu[1:], full[1:], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_statistics_and_direct_fits_agree():
    X, y = _two_expert_data(n=80, seed=3)
    a = REF.fit_variational(X, y, 2, max_iter=4, random_state=0, statistics=True)
    b = REF.fit_variational(X, y, 2, max_iter=4, random_state=0, statistics=False)
    np.testing.assert_allclose(a.objective_history, b.objective_history, rtol=1e-8)
    np.testing.assert_allclose(a.beta.mu, b.beta.mu, rtol=1e-6, atol=1e-8)



@pytest.mark.parametrize("shape, row_nnz, expected", [
    ((32_561, 123), 14, True),     # UCI Adult: p^2 = 0.03 nnz
    ((5_048, 250), 20, True),      # Reuters bodies, 250 words: p^2 = 0.6 nnz
    ((5_048, 939), 4, False),      # Reuters headlines: p^2 = 44 nnz
    ((5_048, 800), 27, False),     # bodies, 800 words: p^2 = 4.7 nnz
    ((2_000, 400), 300, False),    # rows denser than 256 non-zeros on average
])
def test_auto_statistics_picks_the_cheaper_evaluation(shape, row_nnz, expected):
    # the statistics make an evaluation O(K p^2), a pass over the data
    # O(K nnz(X)): "auto" takes them only where p^2 <= 3 nnz(X) (and K p^2,
    # the row density, are within their limits)
    n, p = shape
    rng = np.random.default_rng(0)
    cols = np.sort(np.argsort(rng.random((n, p)), axis=1)[:, :row_nnz], axis=1)
    X = sp.csr_matrix((np.ones(cols.size), cols.ravel(),
                       np.arange(0, cols.size + 1, cols.shape[1])), shape=(n, p))
    assert V._use_statistics(X, 10, "auto") is expected
    assert V._use_statistics(X, 10, True) is True
    assert V._use_statistics(X, 10, False) is False


def test_auto_statistics_on_dense_data():
    # dense rows have p non-zeros: the statistics pay when n >= p / 3
    assert V._use_statistics(np.zeros((1_000, 20)), 5, "auto")
    assert not V._use_statistics(np.zeros((5, 100)), 5, "auto")
    assert not V._use_statistics(np.zeros((5_000, 784)), 5, "auto")  # > 256 per row


# ---------------------------------------------------------------------------
# BMEM-G: Gaussian prior, Gaussian q
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gaussian_fit():
    X, y = _two_expert_data(n=200)
    return X, y, REF.fit_gaussian_variational(X, y, 2, sigma=2.0, max_iter=60,
                                              random_state=0)


def test_gaussian_elbo_non_decreasing_and_accurate(gaussian_fit):
    X, y, res = gaussian_fit
    h = res.objective_history
    assert np.all(np.diff(h) >= -1e-9 * np.abs(h[:-1]))
    acc = np.mean(
        (predict_proba_samples(X, res.beta_mean, res.eta_mean)[:, 1] > 0.5) == y)
    assert acc > LogisticRegression().fit(X, y).score(X, y) + 0.2
    for cov in (res.beta_cov, res.eta_cov):  # symmetric positive definite
        np.testing.assert_allclose(cov, np.swapaxes(cov, 1, 2), atol=1e-12)
        assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_gaussian_elbo_is_below_monte_carlo_elbo(gaussian_fit):
    X, y, res = gaussian_fit
    sigma, K = 2.0, 2
    rng = np.random.RandomState(0)
    vals = []
    for _ in range(400):
        total = 0.0
        vecs = []
        for m, S in ((res.beta_mean, res.beta_cov), (res.eta_mean, res.eta_cov)):
            A = np.stack([rng.multivariate_normal(m[k], S[k]) for k in range(K)])
            total += float(np.sum(stats.norm.logpdf(A, scale=sigma)))
            total -= sum(stats.multivariate_normal.logpdf(A[k], m[k], S[k])
                         for k in range(K))
            vecs.append(A)
        B, E = vecs
        t = X @ B.T
        log_lik = np.where(y[:, None] == 1, special.log_expit(t), special.log_expit(-t))
        total += float(np.sum(special.logsumexp(
            special.log_softmax(X @ E.T, axis=1) + log_lik, axis=1)))
        vals.append(total)
    vals = np.asarray(vals)
    assert res.objective <= vals.mean() + 4 * vals.std(ddof=1) / np.sqrt(vals.size)


def _diagonal_state(X, y, K, sigma, n_iter, seed=0):
    X2 = V.squared_entries(X)
    state = V.diagonal_gaussian_init(K, X.shape[1], sigma, np.random.RandomState(seed),
                                     0.1)
    values = [V.diagonal_gaussian_iteration(X, X2, y, state, sigma)
              for _ in range(n_iter)]
    return state, np.asarray(values)


@pytest.mark.parametrize("sparse", [False, True])
def test_diagonal_gaussian_elbo_non_decreasing_and_equal_to_full_formula(sparse):
    """The factorized BMEM-G iteration never lowers its ELBO, and that ELBO is
    the full-covariance one at the diagonal covariances diag(s_k)."""
    X, y = _two_expert_data(n=200)
    X = sp.csr_matrix(X) if sparse else X
    sigma = 2.0
    state, values = _diagonal_state(X, y, 2, sigma, 25)
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values[:-1]))
    assert values[-1] > values[0] + 10.0
    full = V.GaussianState([m.copy() for m in state.means],
                           [np.stack([np.diag(s) for s in v]) for v in state.covs])
    np.testing.assert_allclose(V.gaussian_objective_and_aux(X, y, full, sigma),
                               state.value, rtol=1e-10)
    # a factorized q is a restricted full one: its ELBO is below the full fit's
    full_fit = REF.fit_gaussian_variational(X, y, 2, sigma=sigma, max_iter=60,
                                            random_state=0)
    assert state.value <= full_fit.objective + 1e-6


@pytest.mark.parametrize("sparse", [False, True])
def test_columns_of_zeros_stay_at_the_prior_in_the_factorized_start(sparse):
    """A column of zeros takes no part in the BMEM-G bound, so the factorized
    start runs on the other columns and puts these at the prior (mean 0,
    variance sigma^2, KL 0): the same ELBO on all the columns, and a fixed
    point there of the iteration on all of them. Before, the start iterated
    over every column: 104 of the 117 s of a fit on 200 rows of 2,000,000
    mostly empty columns (test_sparse_two_million_columns_no_dense_square)."""
    X, y = _two_expert_data(n=200)
    p = 9
    support = np.array([0, 3, 4, 8])  # the four columns of X among five zeros
    full = np.zeros((200, p))
    full[:, support] = X
    if sparse:
        full = sp.csr_matrix(full)
    sigma = 2.0
    used = V.column_support(full)
    assert used.dtype == np.int64 and used.tolist() == support.tolist()
    state, _ = _diagonal_state(full[:, used], y, 2, sigma, 15)
    value = state.value
    V.embed_columns(state, used, p, sigma)
    empty = np.setdiff1d(np.arange(p), used)
    for means, variances in zip(state.means, state.covs, strict=True):
        assert means.shape == variances.shape == (2, p)
        assert np.all(means[:, empty] == 0.0)
        assert np.all(variances[:, empty] == sigma**2)
    state.aux = state.weights = None
    np.testing.assert_allclose(V.gaussian_objective_and_aux(full, y, state, sigma),
                               value, rtol=1e-12)
    V.diagonal_gaussian_iteration(full, V.squared_entries(full), y, state, sigma)
    for means, variances in zip(state.means, state.covs, strict=True):
        assert np.all(means[:, empty] == 0.0)
        np.testing.assert_allclose(variances[:, empty], sigma**2, rtol=1e-15)
    assert state.value >= value - 1e-9 * abs(value)


def test_diagonal_gaussian_update_is_the_coordinate_optimum():
    """At fixed auxiliaries the new variances are 1 / diag(I / sigma^2 - 2 Q_k)
    and the new means solve (I / sigma^2 - 2 Q_k) m_k = b_k (conjugate
    gradients to a tight tolerance equal a dense solve)."""
    rng = np.random.RandomState(3)
    X = _messy_csr(rng, 150, 12)
    y = (rng.rand(150) < 0.5).astype(float)
    sigma, K = 1.5, 3
    state, _ = _diagonal_state(X, y, K, sigma, 3, seed=1)
    g_mean, g_second = state.weights
    b, _, Q = V._fixed_aux_statistics(X, np.zeros(150), g_mean, g_second)
    P = np.eye(12) / sigma**2 - 2.0 * Q                # (2K, p, p)
    X2 = V.squared_entries(X)
    state.omega = 1.0  # no over-relaxation: the update itself
    V.diagonal_gaussian_iteration(X, X2, y, state, sigma, cg_max_iter=200,
                                  cg_rtol=1e-13)
    solved = np.linalg.solve(P, b[:, :, None])[:, :, 0]
    variances = 1.0 / np.diagonal(P, axis1=1, axis2=2)
    np.testing.assert_allclose(np.concatenate(state.covs), variances, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(state.means), solved, rtol=1e-8,
                               atol=1e-12)


def test_precision_cg_never_lowers_the_quadratic():
    """Every stopped solve raises b^T m - m^T P m / 2 from its start (so the
    factorized iteration is monotone however few steps it takes)."""
    rng = np.random.RandomState(0)
    X = _messy_csr(rng, 80, 30)
    g = -rng.uniform(0.0, 0.3, size=(80, 4))
    rhs = rng.normal(size=(30, 4))
    start = rng.normal(size=(30, 4))
    sigma = 0.7
    Xd = X.toarray()
    P = np.stack([np.eye(30) / sigma**2 - 2.0 * Xd.T @ (g[:, j, None] * Xd)
                  for j in range(4)])
    diag = np.diagonal(P, axis1=1, axis2=2).T

    def quad(M):
        return [rhs[:, j] @ M[:, j] - 0.5 * M[:, j] @ P[j] @ M[:, j] for j in range(4)]

    previous = quad(start)
    for steps in (1, 2, 4, 8, 30):
        M = V._precision_cg(X, V.transposed(X), g, rhs, start, diag, sigma, steps, 0.0)
        now = quad(M)
        assert np.all(np.asarray(now) >= np.asarray(previous) - 1e-10)
        previous = now
    np.testing.assert_allclose(M.T, np.linalg.solve(P, rhs.T[:, :, None])[:, :, 0],
                               rtol=1e-8)


def test_inverse_from_cholesky_equals_inverse():
    rng = np.random.RandomState(0)
    A = rng.normal(size=(3, 7, 12))
    P = A @ np.swapaxes(A, 1, 2) / 12 + 0.1 * np.eye(7)
    P_in = P.copy()
    cov = V._inverse_from_cholesky(np.linalg.cholesky(P))
    np.testing.assert_array_equal(P, P_in)
    np.testing.assert_allclose(cov, np.linalg.inv(P), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(cov, np.swapaxes(cov, 1, 2))


def test_gaussian_fit_validation():
    X, y = _two_expert_data(n=20)
    with pytest.raises(ValueError, match="sigma"):
        REF.fit_gaussian_variational(X, y, 2, sigma=0.0)
    with pytest.raises(ValueError, match="n_components"):
        REF.fit_gaussian_variational(X, y, 0)
    with pytest.raises(ValueError, match="statistics"):
        REF.fit_variational(X, y, 2, statistics="yes")


# ---------------------------------------------------------------------------
# the fast inner objective (skbinvi.experts._ascent) against the references
# ---------------------------------------------------------------------------


def _chi_experts(cfg, p):
    """``cfg`` with the estimator's default magnitude priors: the chi
    distribution of an N(0, I_p) vector's norm for the experts, a Gamma for
    the gates."""
    return cfg._replace(alpha1=np.array([float(p), 2.0]), alpha2=np.array([0.0, 0.5]),
                        alpha3=np.array([0.5, 0.0]))


def _ascent_problem(method, prior="gamma"):
    """(X, y, cfg, lams, consts, beta, eta) of the inner-ascent tests: 150 rows,
    K = 4, expert concentrations from 0.5 to 5,000 (every Bessel branch);
    ``prior="chi"``: the experts' magnitudes under :func:`_chi_experts`."""
    from skbinvi.experts._ascent import prior_constants

    rng = np.random.RandomState(0)
    X, y = _two_expert_data(n=150, seed=5)
    K, p = 4, X.shape[1]
    cfg, lams = REF._check_config(method, 3.0 if method == "vi" else 0.5, np.eye(p)[-1],
                                  2.0, 0.5, (1.0, 2.0), 0.3, p)
    if prior == "chi":
        cfg = _chi_experts(cfg, p)
    beta, eta = _random_q(K, p, rng), _random_q(K, p, rng)
    beta = beta._replace(kappa=np.array([0.5, 20.0, 300.0, 5000.0]))
    return X, y, cfg, lams, prior_constants(cfg, K, p), beta, eta


def test_chi_magnitude_kl_closed_form_equals_quadrature():
    """KL(Gamma(r, s) || chi-type prior) of Point.gamma and of the compiled
    _gamma_into equals the quadrature oracle REF.chi_kl, and the Gamma prior
    (alpha3 = 0) still equals REF.gamma_kl."""
    from skbinvi.experts import _ascent as A

    r = np.array([0.7, 3.0, 40.0, 900.0])
    s = np.array([0.4, 2.0, 9.0, 250.0])
    for p in (2.0, 9.0, 124.0):
        want = REF.chi_kl(r, s, p, 0.5)
        got = A.Point(np.eye(4), np.ones(4), r, s).gamma(p, 0.0, 0.5)
        np.testing.assert_allclose(got[2], want, rtol=1e-8, atol=1e-10)
        if A.COMPILED:
            out = np.empty((3, 4))
            alphas = np.array([p, 0.0, 0.5, A.magnitude_log_normalizer(p, 0.0, 0.5)])
            A._gamma_into(r, s, alphas, out)
            np.testing.assert_allclose(out, np.array(got), rtol=1e-12, atol=1e-12)
    got = A.Point(np.eye(4), np.ones(4), r, s).gamma(2.0, 0.5)
    np.testing.assert_allclose(got[2], REF.gamma_kl(r, s, 2.0, 0.5), rtol=1e-12,
                               atol=1e-12)
    with pytest.raises(ValueError, match="alpha2 = 0"):
        A.magnitude_log_normalizer(3.0, 0.5, 0.5)


@pytest.mark.parametrize("method", ["vi", "pr"])
@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("prior", ["gamma", "chi"])
def test_fast_objective_matches_reference(method, statistics, prior):
    """_ascent evaluates the objective without validation and with cached Bessel
    and Gamma functions: its value equals the reference REF.variational_objective,
    and its gradient equals central finite differences of its own value."""
    from skbinvi.experts._ascent import Point, SetObjective
    from skbinvi.experts._variational import objective_and_aux

    X, y, cfg, lams, consts, beta, eta = _ascent_problem(method, prior)
    mu0 = cfg.mu0
    ref, aux = REF.variational_objective(X, y, beta, eta, method=method,
                                         kappa_prior=cfg.kappa_prior, mu0=mu0,
                                         pr_weights=(1.0, 2.0), pr_gamma=0.3,
                                         return_aux=True)
    if prior == "chi":  # the reference's experts' magnitude term, under the chi
        gamma_cfg = cfg._replace(alpha1=2.0, alpha2=0.5, alpha3=0.0)
        ref += (REF._magnitude_prior(beta, cfg._replace(alpha1=float(X.shape[1]),
                                                        alpha3=0.5))
                - REF._magnitude_prior(beta, gamma_cfg))
    sq = np.sum(X * X, axis=1)
    value, _ = objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams)
    assert value == pytest.approx(ref, rel=1e-12, abs=1e-9)
    lik = _FixedAuxLikelihood(X, y, sq, aux, statistics)
    fields = ("mu", "kappa", "r", "s")
    for which, par in enumerate((beta, eta)):
        obj = SetObjective(lik, which, cfg, consts, lams[which])
        grad = obj.gradient(Point(*par))
        for f, name in enumerate(fields):
            base = getattr(par, name)
            # mu: a tangent direction (the rows stay unit to first order)
            idx = (2, 1) if f == 0 else (2,)
            eps = 1e-6 * max(1.0, abs(base[idx]))
            vals = []
            for sign in (1.0, -1.0):
                x = base.copy()
                x[idx] += sign * eps
                if f == 0:
                    x /= np.linalg.norm(x, axis=1, keepdims=True)
                vals.append(obj.value(Point(*[x if n == name else getattr(par, n)
                                              for n in fields])))
            fd = (vals[0] - vals[1]) / (2 * eps)
            g = grad[f][idx]
            if f == 0:  # remove the radial part: only the tangent gradient is seen
                g = g - (grad[0][2] @ par.mu[2]) * par.mu[2][1]
            assert g == pytest.approx(fd, rel=1e-5, abs=1e-6), (which, name)


@pytest.mark.parametrize("method", ["vi", "pr"])
@pytest.mark.parametrize("prior", ["gamma", "chi"])
def test_compiled_ascent_equals_python_ascent(method, prior):
    """The compiled inner ascent (_ascend_kernel: both sets, statistics path)
    takes the steps of the Python one (_ascend_python, the reference) from the
    same start: the same points, step sizes and gain, to rounding; the
    objective never decreases. Concentrations from 0.5 to 5,000 cover the
    Bessel series, ratio and asymptotic branches; "pr" with Omega weights."""
    from skbinvi.experts import _ascent as A

    if not A.COMPILED:
        pytest.skip("this SciPy does not export the special functions")
    X, y, cfg, lams, consts, beta, eta = _ascent_problem(method, prior)
    K = beta.mu.shape[0]
    sq = np.sum(X * X, axis=1)
    _, aux = V.objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams)
    lik = _FixedAuxLikelihood(X, y, sq, aux, True)
    objectives = [A.SetObjective(lik, j, cfg, consts, lams[j]) for j in range(2)]
    start = [A.Point(*q) for q in (beta, eta)]
    before = sum(obj.value(pt) for obj, pt in zip(objectives, start, strict=True))
    out = {}
    for name, run in (("python", A._ascend_python), ("compiled", A._ascend_compiled)):
        steps = np.full((8, K), A.INIT_STEP)
        pts, gain, accepted = run(objectives, start, steps, 4, 0.0)
        out[name] = (pts, gain, accepted, steps)
    (pts_p, gain_p, acc_p, steps_p), (pts_c, gain_c, acc_c, steps_c) = (
        out["python"], out["compiled"])
    assert acc_p and acc_c
    assert gain_c > 0.0
    assert gain_c == pytest.approx(gain_p, rel=1e-8)
    np.testing.assert_array_equal(steps_c, steps_p)
    for a, b in zip(pts_c, pts_p, strict=True):
        for field in ("mu", "kappa", "r", "s"):
            np.testing.assert_allclose(getattr(a, field), getattr(b, field),
                                       rtol=1e-8, atol=1e-12)
    after = sum(obj.value(pt) for obj, pt in zip(objectives, pts_c, strict=True))
    assert after - before == pytest.approx(gain_c, rel=1e-9)
    # the inputs are not modified
    for pt, q in zip(start, (beta, eta), strict=True):
        assert pt.mu is q.mu and pt.kappa is q.kappa


def _outer_iteration_setup():
    """Two-expert data and a random "vi" start for tests of the outer iterations."""
    from skbinvi.experts._ascent import prior_constants

    X, y = _two_expert_data(n=400, seed=1)
    cfg, lams = REF._check_config("vi", 1.0, None, 2.0, 0.5, (0.0, 0.0), 0.0,
                                  X.shape[1])
    rng = np.random.RandomState(0)
    state = V.VariationalState(V._init_params(2, X.shape[1], rng, 10.0, 1.0),
                               V._init_params(2, X.shape[1], rng, 10.0, 1.0))
    sq = np.sum(X * X, axis=1)
    return X, y, sq, state, cfg, prior_constants(cfg, 2, X.shape[1]), lams


def test_over_relaxation_factor_grows_less_after_each_rejection():
    """[SR] over-relaxation of "vi": omega starts at 2, is multiplied by the
    growth factor after an extrapolation that beat the plain step (at most
    16) and falls back to 2 after one that did not, when the growth factor is
    replaced by its square root (2, 1.41, 1.19, ..., never below 1.05); the
    objective never decreases."""
    X, y, sq, state, cfg, consts, lams = _outer_iteration_setup()
    trace = [(state.omega, state.omega_growth, -np.inf)]
    for _ in range(40):
        value = V.variational_iteration(X, y, sq, state, cfg, consts, lams, 3, True,
                                        0.0)
        trace.append((state.omega, state.omega_growth, value))
    rejections = 0
    for (om0, gr0, v0), (om1, gr1, v1) in zip(trace, trace[1:], strict=False):
        assert v1 >= v0
        assert V._MIN_OMEGA <= om1 <= V._MAX_OMEGA
        unchanged = om1 == om0 and gr1 == gr0  # no ascent step was accepted
        if om1 == V._MIN_OMEGA and not unchanged:  # a rejected extrapolation
            assert gr1 == pytest.approx(max(np.sqrt(gr0), V._MIN_OMEGA_GROWTH))
            rejections += gr1 < gr0
        elif not unchanged:  # a kept extrapolation
            assert gr1 == gr0
            assert om1 == pytest.approx(min(om0 * gr0, V._MAX_OMEGA))
    assert rejections >= 1 and trace[-1][1] < 2.0
    assert any(omega > V._MIN_OMEGA for omega, _, _ in trace)  # some were kept


def test_extrapolation_kept_when_it_raises_the_objective(monkeypatch):
    """[SR]'s rule: an extrapolation is kept whenever it raises the objective
    (one pass over the rows), even when it falls short of the plain step's
    floor (then omega falls back to 2); only one that lowers the objective
    costs the second pass, at q1. The objective never decreases."""
    X, y, sq, state, cfg, consts, lams = _outer_iteration_setup()
    calls = []
    real = V.objective_and_aux

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out[0])
        return out

    monkeypatch.setattr(V, "objective_and_aux", counted)
    V.variational_iteration(X, y, sq, state, cfg, consts, lams, 3, True, 0.0)
    short_but_kept = 0
    for _ in range(40):
        before, n_calls = state.value, len(calls)
        value = V.variational_iteration(X, y, sq, state, cfg, consts, lams, 3, True,
                                        0.0)
        assert value >= before
        passes = calls[n_calls:]
        if len(passes) == 1:  # the extrapolation was kept: it raised the objective
            assert passes[0] == value > before
            # omega grows (by 1.05 at least) only when it beat the plain step too
            short_but_kept += state.omega == V._MIN_OMEGA
        elif len(passes) == 2:  # it lowered the objective: q1 was evaluated
            assert passes[0] <= before and state.omega == V._MIN_OMEGA
    assert short_but_kept >= 1


@pytest.mark.parametrize("method", ["vi", "pr"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("K", [1, 4])
def test_scaled_expert_intercept_is_a_second_design(method, sparse, K):
    """ObjectiveConfig.intercept_scale = c: the experts see X with its last
    (constant) column multiplied by c, the gates X itself. The objective
    (the fused row kernel for K >= 2, dense and CSR; the moments path for
    K = 1) equals the reference's with that experts' design, and the
    fixed-auxiliary likelihood of each set (statistics or passes over the
    data, line-search trials included) gives the values and gradients of one
    built on that set's design: X diag(s) for the experts, X for the gates."""
    from skbinvi.experts._ascent import Point, SetObjective, prior_constants
    from skbinvi.experts._variational import objective_and_aux

    rng = np.random.RandomState(4)
    X, y = _two_expert_data(n=90, seed=4)  # last column: the constant 1
    X[:, 1] *= rng.uniform(0.5, 2.0, 90)
    c = 3.0
    X_e = X.copy()
    X_e[:, -1] *= c
    if sparse:
        X[rng.rand(*X.shape) < 0.3] = 0.0
        X[:, -1] = 1.0
        X_e[:, :-1] = X[:, :-1]
        X, X_e = sp.csr_matrix(X), sp.csr_matrix(X_e)
    p = X.shape[1]
    cfg, lams = REF._check_config(method, 3.0 if method == "vi" else 0.5,
                                  np.eye(p)[-1], 2.0, 0.5, (1.0, 2.0), 0.3, p)
    scaled = cfg._replace(intercept_scale=c)
    consts = prior_constants(cfg, K, p)
    beta, eta = _random_q(K, p, rng), _random_q(K, p, rng)
    ref, aux = REF.variational_objective(X, y, beta, eta, method=method,
                                         kappa_prior=cfg.kappa_prior, mu0=cfg.mu0,
                                         pr_weights=(1.0, 2.0), pr_gamma=0.3,
                                         return_aux=True, expert_X=X_e)
    unscaled = REF.variational_objective(X, y, beta, eta, method=method,
                                         kappa_prior=cfg.kappa_prior, mu0=cfg.mu0,
                                         pr_weights=(1.0, 2.0), pr_gamma=0.3)

    def sq_of(A):
        return np.asarray((A.multiply(A) if sparse else A * A).sum(axis=1)).ravel()

    sq = sq_of(X)
    value = objective_and_aux(X, y, sq, beta, eta, scaled, consts, lams)[0]
    assert value == pytest.approx(ref, rel=1e-11, abs=1e-9)
    assert abs(ref - unscaled) > 1e-3  # the scale changes the objective
    assert objective_and_aux(X, y, sq, beta, eta, cfg, consts, lams)[0] == \
        pytest.approx(unscaled, rel=1e-11, abs=1e-9)
    if K == 1:
        return
    s = V.design_scale(scaled.intercept_scale, p)
    np.testing.assert_array_equal(s, np.r_[np.ones(p - 1), c])
    q2 = _random_q(K, p, rng)
    d = rng.normal(size=(K, p))
    d -= np.sum(d * q2.mu, axis=1, keepdims=True) * q2.mu
    h = np.array([0.0, 1e-3, 0.3, 2.0])
    trial = q2.mu + h[:, None] * d
    trial /= np.linalg.norm(trial, axis=1, keepdims=True)
    coefs = rng.uniform(0.5, 2.0, (3, K))
    for statistics in (True, False):
        lik = V._FixedAuxLikelihood(X, y, sq, aux, statistics, scale=s)
        for which, (A, sq_a) in enumerate(((X_e, sq_of(X_e)), (X, sq))):
            want = V._FixedAuxLikelihood(A, y, sq_a, aux, statistics)
            obj = SetObjective(lik, which, scaled, consts, lams[which])
            obj_want = SetObjective(want, which, cfg, consts, lams[which])
            pt = Point(*q2)
            assert np.sum(obj.likelihood(pt)) == pytest.approx(
                np.sum(obj_want.likelihood(pt)), rel=1e-11)
            for a, b in zip(obj.gradient(pt), obj_want.gradient(pt), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
            if not statistics:
                lik.line(which, q2.mu, d)
                np.testing.assert_allclose(
                    lik.moments_value(which, trial, *coefs, line=h),
                    want.moments_value(which, trial, *coefs), rtol=1e-11, atol=1e-11)
