"""von Mises-Fisher utilities (skbinvi/experts/_vmf.py): special functions
against mpmath (or SciPy), the normalizer by quadrature and closed forms,
moments, entropy and KL against Monte Carlo from scipy.stats.vonmises_fisher,
derivatives against finite differences."""

import numpy as np
import pytest
from _reference import experts as REF
from numpy.testing import assert_allclose
from scipy import integrate, special, stats

from skbinvi.experts import _vmf as V

try:  # high-precision reference when available
    import mpmath
except ImportError:  # pragma: no cover - mpmath ships with sympy, usually present
    mpmath = None

# scipy.stats.vonmises_fisher, the reference of some tests, is in SciPy >= 1.11;
# the package itself supports SciPy 1.10 and does not use it.
needs_scipy_vmf = pytest.mark.skipif(
    not hasattr(stats, "vonmises_fisher"),
    reason="scipy.stats.vonmises_fisher (the reference) needs SciPy >= 1.11")

KAPPA_GRID = [1e-8, 1e-5, 1e-3, 0.05, 0.3, 1.0, 3.0, 9.9, 10.1, 30.0, 100.0,
              300.0, 1e3, 1e4, 1e5]
DIMS = [2, 3, 4, 10, 50, 124, 200, 201]


def _log_sphere_area(p):
    """log |S^{p-1}| = log(2 pi^{p/2} / Gamma(p/2)), the unit sphere of R^p."""
    return np.log(2.0) + 0.5 * p * np.log(np.pi) - special.gammaln(0.5 * p)


def _ref_log_iv(nu, kappa):
    if mpmath is not None:
        with mpmath.workdps(40):
            return float(mpmath.log(mpmath.besseli(nu, kappa)))
    value = special.iv(nu, kappa)  # only where it is a normal, finite double
    return np.log(value) if 1e-300 < value < np.inf else np.nan


def _ref_ratio_and_derivative(p, kappa):
    """A_p and dA_p/dkappa = 1 - A^2 - (p-1) A / kappa in high precision."""
    nu = 0.5 * p - 1.0
    if mpmath is not None:
        with mpmath.workdps(40):
            k = mpmath.mpf(kappa)
            a = mpmath.besseli(nu + 1, k) / mpmath.besseli(nu, k)
            return float(a), float(1 - a * a - (p - 1) * a / k)
    i0, i1 = special.ive(nu, kappa), special.ive(nu + 1, kappa)
    if not (i0 > 1e-250 and i1 > 1e-250) or kappa > 50.0:
        return np.nan, np.nan  # no trustworthy float64 reference
    a = i1 / i0
    return a, 1 - a * a - (p - 1) * a / kappa


def _unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _random_unit(p, rng, size=None):
    shape = (p,) if size is None else (size, p)
    return _unit(rng.normal(size=shape))


# ---------------------------------------------------------------------------
# special functions
# ---------------------------------------------------------------------------


def test_log_bessel_iv_matches_reference():
    for nu in [0.0, 0.5, 1.0, 4.0, 20.5, 61.0, 99.0]:
        for kappa in KAPPA_GRID:
            ref = _ref_log_iv(nu, kappa)
            if np.isnan(ref):
                continue
            got = REF.log_bessel_iv(nu, kappa)
            assert np.isfinite(got), (nu, kappa)
            assert abs(got - ref) <= 1e-13 * max(1.0, abs(ref)), (nu, kappa, got, ref)
    # where scipy.special.iv underflows to 0 (log = -inf) the result stays finite
    assert special.iv(99.0, 1e-5) == 0.0
    assert REF.log_bessel_iv(99.0, 1e-5) == pytest.approx(
        99.0 * np.log(0.5e-5) - special.gammaln(100.0), rel=1e-14)
    # kappa = 0 and broadcasting
    assert REF.log_bessel_iv(0.0, 0.0) == 0.0
    assert REF.log_bessel_iv(2.5, 0.0) == -np.inf
    out = REF.log_bessel_iv(np.array([[0.0], [3.0]]), np.array([0.5, 2.0, 40.0]))
    assert out.shape == (2, 3)
    assert_allclose(out, np.log(special.iv([[0.0], [3.0]], [0.5, 2.0, 40.0])),
                    rtol=1e-13)


def test_bessel_ratio_and_derivative_match_reference():
    for p in DIMS:
        got_a = REF.bessel_ratio(p, np.array(KAPPA_GRID))
        got_da = REF.d_bessel_ratio_dkappa(p, np.array(KAPPA_GRID))
        for kappa, a, da in zip(KAPPA_GRID, got_a, got_da, strict=True):
            ref_a, ref_da = _ref_ratio_and_derivative(p, kappa)
            if np.isnan(ref_a):
                continue
            assert a == pytest.approx(ref_a, rel=1e-12), (p, kappa)
            # dA is a difference of nearly equal terms for large kappa; the
            # asymptotic branch and the direct one are both good to ~1e-10
            assert da == pytest.approx(ref_da, rel=2e-10), (p, kappa)


@pytest.mark.parametrize("p", [2, 3, 10, 124, 200])
def test_bessel_ratio_range_monotonicity_and_limits(p):
    kappa = np.concatenate([[0.0], np.logspace(-8, 5, 300)])
    a = REF.bessel_ratio(p, kappa)
    da = REF.d_bessel_ratio_dkappa(p, kappa)
    assert np.all((a >= 0) & (a < 1))
    assert np.all(np.diff(a) > 0)  # increasing
    assert np.all(da > 0) and np.all(np.isfinite(da))
    # small kappa: A = kappa/p (1 - kappa^2/(p (p+2)) + O(kappa^4)), A' -> 1/p
    small = np.array([1e-8, 1e-6, 1e-4])
    assert_allclose(REF.bessel_ratio(p, small),
                    small / p * (1 - small**2 / (p * (p + 2))),
                    rtol=1e-13)
    assert REF.bessel_ratio(p, 0.0) == 0.0
    assert REF.d_bessel_ratio_dkappa(p, 0.0) == pytest.approx(1.0 / p, rel=1e-13)
    assert REF.d_bessel_ratio_dkappa(p, 1e-8) == pytest.approx(1.0 / p, rel=1e-12)
    # large kappa: 1 - A = c/kappa - c (c-1)/(2 kappa^2) + O(kappa^-3), c = (p-1)/2,
    # and A' = c/kappa^2 - c (c-1)/kappa^3 + O(kappa^-4)
    c = 0.5 * (p - 1)
    big = 1e5
    assert 1 - REF.bessel_ratio(p, big) == pytest.approx(
        c / big - c * (c - 1) / (2 * big**2), rel=1e-6)
    assert REF.d_bessel_ratio_dkappa(p, big) == pytest.approx(
        c / big**2 - c * (c - 1) / big**3, rel=1e-6)


@pytest.mark.parametrize("p", [2, 3, 10, 124, 200])
def test_no_jumps_at_internal_branch_points(p):
    """The series/ive switch (kappa^2 = nu + 1) and the asymptotic switch of A'."""
    nu = 0.5 * p - 1
    for edge in (np.sqrt(nu + 1), max(100.0, 2.5 * (p - 1))):
        # so close that the functions themselves change by < 1e-12 relative
        lo, hi = edge * (1 - 1e-14), edge * (1 + 1e-14)
        for func in (REF.bessel_ratio, REF.d_bessel_ratio_dkappa, V.log_normalizer,
                     V.vmf_entropy):
            below, above = func(p, lo), func(p, hi)
            assert above == pytest.approx(below, rel=1e-10, abs=1e-13), (func, edge)


def test_d_bessel_ratio_by_finite_differences():
    for p in [2, 3, 10, 124, 200]:
        for kappa in [1e-3, 0.1, 1.0, 5.0, 20.0, 99.0, 101.0, 500.0, 1e3, 1e4, 1e5]:
            h = 1e-4 * kappa
            numeric = (REF.bessel_ratio(p, kappa + h)
                       - REF.bessel_ratio(p, kappa - h)) / (2 * h)
            assert (REF.d_bessel_ratio_dkappa(p, kappa)
                    == pytest.approx(numeric, rel=1e-5))


# ---------------------------------------------------------------------------
# normalizer
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("p", [2, 3, 10])
@pytest.mark.parametrize("kappa", [1e-3, 0.5, 1.0, 10.0, 100.0, 1000.0])
def test_normalizer_integrates_to_one(p, kappa):
    """[D] int_{S^{p-1}} f(mu^T x) dx
    = |S^{p-2}| int_{-1}^1 f(t) (1-t^2)^{(p-3)/2} dt."""
    log_c = V.log_normalizer(p, kappa)
    log_sub = _log_sphere_area(p - 1)

    def density(t):
        return np.exp(log_c + kappa + log_sub + kappa * (t - 1.0))

    a = 0.5 * (p - 3)
    mass, _ = integrate.quad(density, -1, 1, weight="alg", wvar=(a, a), limit=200,
                             epsabs=0, epsrel=1e-10)
    assert mass == pytest.approx(1.0, rel=1e-10)


def test_normalizer_closed_forms_and_limits():
    kappa = np.array(KAPPA_GRID)
    # p = 3: C = kappa / (4 pi sinh kappa), log sinh k = k + log1p(-e^{-2k}) - log 2
    log_sinh = np.where(kappa < 1, np.log(np.sinh(np.minimum(kappa, 1))),
                        kappa + np.log1p(-np.exp(-2 * kappa)) - np.log(2))
    assert_allclose(V.log_normalizer(3, kappa),
                    np.log(kappa) - np.log(4 * np.pi) - log_sinh, rtol=1e-13)
    # p = 2: C = 1 / (2 pi I_0(kappa))
    assert_allclose(V.log_normalizer(2, kappa),
                    -np.log(2 * np.pi) - np.log(special.i0e(kappa)) - kappa, rtol=1e-13)
    # kappa -> 0: the uniform density 1 / |S^{p-1}| (area of the sphere of R^p,
    # not the supplement's 2 pi^{(p+1)/2} / Gamma((p+1)/2), that of R^{p+1})
    for p in DIMS:
        limit = -_log_sphere_area(p)
        assert V.log_normalizer(p, 0.0) == pytest.approx(limit, rel=1e-14, abs=1e-14)
        assert V.log_normalizer(p, 1e-8) == pytest.approx(limit, rel=1e-12, abs=1e-12)
        assert V.vmf_entropy(p, 0.0) == pytest.approx(-limit, rel=1e-14, abs=1e-14)
        # d/dkappa log C_p = -A_p
        k, h = 7.0, 1e-5
        slope = (V.log_normalizer(p, k + h) - V.log_normalizer(p, k - h)) / (2 * h)
        assert slope == pytest.approx(-REF.bessel_ratio(p, k), rel=1e-7)
    big = V.log_normalizer(np.array(DIMS), 1e5)
    assert np.all(np.isfinite(big))
    # sphere area in R^3 is 4 pi: check the constant itself
    assert np.exp(_log_sphere_area(3)) == pytest.approx(4 * np.pi)


@needs_scipy_vmf
@pytest.mark.parametrize("p", [2, 3, 10, 124])
def test_log_density_matches_scipy_logpdf(p):
    rng = np.random.default_rng(p)
    mu = _random_unit(p, rng)
    x = np.vstack([mu, -mu, _random_unit(p, rng, size=5)])
    for kappa in [0.1, 1.0, 10.0, 100.0, 1000.0]:
        got = V.log_normalizer(p, kappa) + kappa * x @ mu
        expected = stats.vonmises_fisher(mu, kappa).logpdf(x)
        assert_allclose(got, expected, rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------------------
# moments against Monte Carlo
# ---------------------------------------------------------------------------

MC_CASES = [(p, kappa) for p in (2, 3, 10, 124)
            for kappa in (0.1, 1.0, 10.0, 100.0, 1000.0)]


def _frame(mu, rng, n_extra=3):
    """Orthonormal columns [+-mu, v_1, ..., v_n], at most p of them."""
    p = mu.size
    m = min(p, n_extra + 1)
    Q, _ = np.linalg.qr(np.column_stack([mu, rng.normal(size=(p, m - 1))]))
    return Q


def _assert_moments_match(x, mu, kappa, rng):
    """Sample moments of x (n, p) within 5 standard errors of the formulas."""
    n, p = x.shape
    mean = REF.vmf_mean(mu, kappa)
    cov = REF.vmf_covariance(mu, kappa)
    second = REF.vmf_second_moment(mu, kappa)

    # E x, every coordinate, standard errors from the covariance under test
    se = np.sqrt(np.diag(cov) / n)
    assert np.max(np.abs(x.mean(axis=0) - mean) / se) < 5.0

    # E[x x^T] and Cov[x] in a frame containing mu (all entries for p <= 10 is
    # the same check up to rotation; the frame keeps p = 124 cheap)
    Q = _frame(mu, rng)
    y = x @ Q
    prod = y[:, :, None] * y[:, None, :]
    se2 = prod.std(axis=0) / np.sqrt(n)
    z = (prod.mean(axis=0) - Q.T @ second @ Q) / se2
    assert np.max(np.abs(z)) < 5.0
    yc = y - y.mean(axis=0)
    cprod = yc[:, :, None] * yc[:, None, :]
    zc = (cprod.mean(axis=0) - Q.T @ cov @ Q) / (cprod.std(axis=0) / np.sqrt(n))
    assert np.max(np.abs(zc)) < 5.0
    # along mu: variance A_p'; across: A_p / kappa
    t = x @ mu
    assert cov @ mu @ mu == pytest.approx(REF.d_bessel_ratio_dkappa(p, kappa),
                                          rel=1e-12)
    assert abs(t.var() - REF.d_bessel_ratio_dkappa(p, kappa)) < 5 * (
        ((t - t.mean()) ** 2).std() / np.sqrt(n))


@pytest.mark.parametrize("p, kappa", MC_CASES)
def test_moments_against_monte_carlo(p, kappa):
    rng = np.random.default_rng(1000 * p + int(kappa * 10))
    n = 200_000 if p <= 10 else 20_000
    mu = _random_unit(p, rng)
    x = V.sample_vmf(mu, kappa, size=n, random_state=int(rng.integers(2**31)))
    _assert_moments_match(x, mu, kappa, rng)


@pytest.mark.parametrize("p, kappa", [(2, 1.0), (3, 10.0), (10, 0.1), (124, 1000.0),
                                      (5, 1e5)])
def test_wood_sampler_fallback(p, kappa):
    """Our Wood (1994) sampler, behind sample_vmf and the MCMC direction
    proposals."""
    rng = np.random.default_rng(p)
    mu = _random_unit(p, rng)
    n = 100_000 if p <= 10 else 20_000
    x = V._sample_vmf_wood(mu, kappa, n, np.random.RandomState(0))
    assert x.shape == (n, p)
    assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)
    _assert_moments_match(x, mu, kappa, rng)


@pytest.mark.parametrize("p", [2, 3, 10, 124, 200])
def test_covariance_identities(p):
    rng = np.random.default_rng(p)
    mu = _random_unit(p, rng, size=3)
    for kappa in [0.0, 1e-8, 1e-3, 0.7, 3.0, 40.0, 1e3, 1e5]:
        mean = REF.vmf_mean(mu, kappa)
        cov = REF.vmf_covariance(mu, kappa)
        second = REF.vmf_second_moment(mu, kappa)
        assert mean.shape == (3, p) and cov.shape == second.shape == (3, p, p)
        # E||x||^2 = trace(cov) + ||E x||^2 = 1 exactly (|x| = 1)
        total = np.trace(cov, axis1=1, axis2=2) + np.sum(mean**2, axis=1)
        assert_allclose(total, 1.0, rtol=1e-12)
        assert_allclose(np.trace(second, axis1=1, axis2=2), 1.0, rtol=1e-12)
        assert_allclose(second, cov + mean[:, :, None] * mean[:, None, :], atol=1e-15)
        assert np.min(np.linalg.eigvalsh(cov)) > -1e-15
        # the printed form of [Xie] supplement item (II)
        h = REF.bessel_ratio(p, kappa)
        if kappa > 0:
            printed = (h / kappa * np.eye(p)
                       + (1 - 2 * (0.5 * p) * h / kappa - h**2)
                       * mu[:, :, None] * mu[:, None, :])
            # the printed form cancels catastrophically at large kappa
            atol = 1e-13 if kappa <= 40 else 1e-16 * kappa
            assert_allclose(cov, printed, atol=atol)
    # limits: uniform and point mass
    assert_allclose(REF.vmf_second_moment(mu[0], 0.0), np.eye(p) / p, atol=1e-16)
    assert_allclose(REF.vmf_covariance(mu[0], 0.0), np.eye(p) / p, atol=1e-16)
    far = REF.vmf_second_moment(mu[0], 1e5)
    assert_allclose(far, np.outer(mu[0], mu[0]), atol=2 * p / 1e5)  # O(p / kappa)
    # kappa per row
    kappas = np.linspace(0.5, 50, 3)
    per_row = REF.vmf_mean(mu, kappas)
    assert_allclose(per_row, REF.bessel_ratio(p, kappas)[:, None] * mu, rtol=1e-14)


# ---------------------------------------------------------------------------
# entropy and KL
# ---------------------------------------------------------------------------


@needs_scipy_vmf
def test_entropy_against_scipy_and_monte_carlo():
    rng = np.random.default_rng(7)
    for p in (2, 3, 10, 124):
        mu = _random_unit(p, rng)
        for kappa in (1e-3, 0.1, 1.0, 10.0, 100.0, 1000.0, 1e5):
            expected = stats.vonmises_fisher(mu, kappa).entropy()
            assert V.vmf_entropy(p, kappa) == pytest.approx(expected, rel=1e-10,
                                                            abs=1e-10)
    for p, kappa in [(3, 2.0), (10, 30.0)]:
        mu = _random_unit(p, rng)
        dist = stats.vonmises_fisher(mu, kappa)
        log_q = dist.logpdf(dist.rvs(100_000, random_state=3))
        se = log_q.std() / np.sqrt(log_q.size)
        assert abs(-log_q.mean() - V.vmf_entropy(p, kappa)) < 5 * se


KL_CASES = [
    # p, kappa_q, kappa_0, cosine between mu_q and mu_0
    (2, 1.0, 3.0, 0.3),
    (3, 10.0, 1.0, -0.5),
    (3, 50.0, 50.0, 0.9),
    (10, 5.0, 20.0, 0.0),
    (124, 200.0, 10.0, 0.7),
    (124, 0.5, 100.0, 0.2),
]


def _directions_with_cosine(p, cosine, rng):
    u = _random_unit(p, rng)
    w = rng.normal(size=p)
    w = _unit(w - (w @ u) * u)
    return u, cosine * u + np.sqrt(1 - cosine**2) * w


@needs_scipy_vmf
@pytest.mark.parametrize("p, kappa_q, kappa_0, cosine", KL_CASES)
def test_kl_against_monte_carlo(p, kappa_q, kappa_0, cosine):
    rng = np.random.default_rng(p + int(kappa_q))
    mu_q, mu_0 = _directions_with_cosine(p, cosine, rng)
    q = stats.vonmises_fisher(mu_q, kappa_q)
    prior = stats.vonmises_fisher(mu_0, kappa_0)
    x = q.rvs(100_000 if p <= 10 else 30_000, random_state=11)
    log_q, log_p = q.logpdf(x), prior.logpdf(x)
    diff = log_q - log_p
    se = diff.std() / np.sqrt(diff.size)
    kl = REF.vmf_kl(mu_q, kappa_q, mu_0, kappa_0)
    assert abs(diff.mean() - kl) < 5 * se
    cross = REF.expected_log_vmf_density(mu_q, kappa_q, mu_0, kappa_0)
    assert abs(log_p.mean() - cross) < 5 * log_p.std() / np.sqrt(log_p.size)
    # KL = -H(q) - E_q log p
    assert kl == pytest.approx(-V.vmf_entropy(p, kappa_q) - cross, rel=1e-10, abs=1e-9)


def test_kl_properties():
    rng = np.random.default_rng(3)
    for p in (2, 3, 10, 124, 200):
        mu_q = _random_unit(p, rng, size=40)
        mu_0 = _random_unit(p, rng, size=40)
        kq = 10 ** rng.uniform(-8, 5, size=40)
        k0 = 10 ** rng.uniform(-8, 5, size=40)
        kl = REF.vmf_kl(mu_q, kq, mu_0, k0)
        assert kl.shape == (40,) and np.all(kl >= -1e-12)
        # identical distributions: zero (the formula avoids O(kappa) cancellations)
        assert_allclose(REF.vmf_kl(mu_q, kq, mu_q, kq), 0.0, atol=1e-12)
        # uniform reference: KL = log |S^{p-1}| - H(q)
        assert_allclose(REF.vmf_kl(mu_q, kq, mu_0, 0.0),
                        _log_sphere_area(p) - V.vmf_entropy(p, kq),
                        rtol=1e-9, atol=1e-9)
        # a (p,) reference broadcasts against (K, p)
        assert_allclose(REF.vmf_kl(mu_q, kq, mu_0[0], k0[0]),
                        [REF.vmf_kl(m, k, mu_0[0], k0[0])
                         for m, k in zip(mu_q, kq, strict=True)],
                        rtol=1e-14)
    # KL grows as the directions separate
    mu = np.eye(3)
    near = REF.vmf_kl(mu[0], 10.0, _unit([1, 0.1, 0]), 10.0)
    far = REF.vmf_kl(mu[0], 10.0, mu[1], 10.0)
    assert 0 < near < far
    assert isinstance(REF.vmf_kl(mu[0], 1.0, mu[1], 2.0), float)


@pytest.mark.parametrize("p, kappa_q, kappa_0, cosine", KL_CASES)
def test_kl_gradient_by_finite_differences(p, kappa_q, kappa_0, cosine):
    rng = np.random.default_rng(p)
    mu_q, mu_0 = _directions_with_cosine(p, cosine, rng)
    g_mu, g_k = REF.vmf_kl_gradient(mu_q, kappa_q, mu_0, kappa_0)
    h = 1e-6 * kappa_q
    numeric = (REF.vmf_kl(mu_q, kappa_q + h, mu_0, kappa_0)
               - REF.vmf_kl(mu_q, kappa_q - h, mu_0, kappa_0)) / (2 * h)
    assert g_k == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    # directional derivative along a tangent direction, retracting to the sphere
    v = rng.normal(size=p)
    v -= (v @ mu_q) * mu_q
    eps = 1e-6
    numeric = (REF.vmf_kl(_unit(mu_q + eps * v), kappa_q, mu_0, kappa_0)
               - REF.vmf_kl(_unit(mu_q - eps * v), kappa_q, mu_0, kappa_0)) / (2 * eps)
    assert g_mu @ v == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    # stationary in kappa_q at kappa_0 mu_0^T mu_q
    if cosine > 0:
        assert REF.vmf_kl_gradient(mu_q, kappa_0 * cosine, mu_0, kappa_0)[1] == \
            pytest.approx(0.0, abs=1e-12)


# ---------------------------------------------------------------------------
# sampling and input checks
# ---------------------------------------------------------------------------


def test_sample_vmf():
    rng = np.random.default_rng(0)
    mu = _random_unit(5, rng)
    x = V.sample_vmf(mu, 3.0, size=1000, random_state=42)
    assert x.shape == (1000, 5)
    assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)
    assert_allclose(x, V.sample_vmf(mu, 3.0, size=1000, random_state=42))
    assert V.sample_vmf(mu, 3.0, size=0).shape == (0, 5)
    assert V.sample_vmf(mu, 3.0).shape == (1, 5)
    # kappa = 0 is uniform: mean 0 within 5 standard errors (variance 1/p)
    u = V.sample_vmf(mu, 0.0, size=20_000, random_state=np.random.RandomState(1))
    assert np.max(np.abs(u.mean(axis=0))) < 5 * np.sqrt(1 / 5 / 20_000)
    assert_allclose(np.linalg.norm(u, axis=1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError):
        V.sample_vmf(np.eye(3), 1.0)
    with pytest.raises(ValueError):
        V.sample_vmf(mu, 1.0, size=-1)


def test_sample_vmf_memory_is_linear_in_the_dimension():
    """No p x p matrix per draw: SciPy's vonmises_fisher, used before, rotated
    every call's draws with the QR factorization of one (0.3 GB and 20 s for
    a single vector at p = 3,000), which the MABN prior's one call per
    vector made the Metropolis-Hastings start on wide data pay K times."""
    import tracemalloc

    p = 4000
    mu = np.zeros(p)
    mu[-2] = 1.0
    tracemalloc.start()
    try:
        x = V.sample_vmf(mu, 1e5, size=3, random_state=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert x.shape == (3, p)
    assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-12)
    assert peak < 100 * 8 * p  # p x p float64 would be 4,000 times 8 p
    # concentrated about mu: mu^T x near A_p(1e5) = 0.98
    assert_allclose(x @ mu, REF.bessel_ratio(p, 1e5), atol=0.01)


def test_input_validation():
    mu = np.array([1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="unit"):
        REF.vmf_mean(2 * mu, 1.0)
    with pytest.raises(ValueError, match="kappa"):
        REF.vmf_mean(mu, -1.0)
    with pytest.raises(ValueError, match="kappa"):
        REF.bessel_ratio(3, np.inf)
    with pytest.raises(ValueError, match="dimension"):
        V.log_normalizer(1, 1.0)
    with pytest.raises(ValueError, match="dimension"):
        REF.bessel_ratio(2.5, 1.0)
    with pytest.raises(ValueError):
        REF.vmf_mean(np.array([1.0]), 1.0)  # p = 1
    with pytest.raises(ValueError):
        REF.vmf_mean(mu, np.array([1.0, 2.0]))  # one direction, two kappas
    with pytest.raises(ValueError):
        REF.vmf_kl(mu, 1.0, np.array([1.0, 0.0]), 1.0)  # dimensions differ
    with pytest.raises(ValueError, match="nu"):
        REF.log_bessel_iv(-0.5, 1.0)
    # nearly unit rows are accepted and normalized
    assert_allclose(REF.vmf_mean(mu * (1 + 1e-9), 2.0), REF.vmf_mean(mu, 2.0),
                    rtol=1e-15)
    assert isinstance(REF.bessel_ratio(3, 1.0), float)
    assert REF.bessel_ratio([2, 3], [[1.0], [2.0]]).shape == (2, 2)


@pytest.mark.parametrize("p", [2, 3, 5, 21, 124, 301, 785, 1500])
def test_point_quantities_equal_numpy_reference(p):
    """The compiled pass of the inner ascent (vmf_point_quantities) against
    _bessel_quantities and the formulas it replaced, over every branch: the
    series (small kappa, or ive underflow at large p), the ive ratio and the
    large-kappa asymptotic series, and kappa = 0. dA/dkappa and
    d(A/kappa)/dkappa are differences of nearly equal terms in both versions,
    so they are compared to rounding of those terms."""
    c = 2.5 * (p - 1)
    kappa = np.concatenate([[0.0, 1e-8, 1e-3, 0.1, 1.0, p / 2, p, c, c + 1e-9],
                            np.geomspace(1e-2, 1e5, 300)])
    a, aok, omega, da, oma, log_c = V._bessel_quantities(
        np.full(kappa.shape, float(p)), kappa, with_log_normalizer=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        num = np.where(kappa > p, da - aok, omega - a * a)
        d_aok = np.where(kappa > 0, num / kappa, 0.0)
    entropy = -log_c + kappa * oma
    fast = V.vmf_point_quantities(p, kappa)
    assert fast.shape == (6, kappa.size)
    for got, ref in zip(fast[[0, 1, 2, 5]], (a, aok, omega, entropy), strict=True):
        assert_allclose(got, ref, rtol=1e-12, atol=1e-300)
    scale = np.abs(omega) + aok + a * a
    assert np.all(np.abs(fast[3] - da) <= 1e-12 * scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        tol = np.where(kappa > 0, 1e-12 * scale / kappa, 0.0)
    assert np.all(np.abs(fast[4] - d_aok) <= tol)
    assert np.all(np.isfinite(fast))
    if V._IVE is not None:
        # fast is vmf_point_quantities_into's (SciPy's ive through its Cython
        # export); the fallback from the ive ufunc's values gives the same
        # numbers, bit for bit
        from scipy import special

        nu = 0.5 * p - 1.0
        with np.errstate(under="ignore"):
            iv0, iv1 = special.ive(nu, kappa), special.ive(nu + 1.0, kappa)
        slow = V._point_kernel(float(p), kappa, iv0, iv1,
                               V._asymptotic_coefficients(0.5 * (p - 1.0)))
        np.testing.assert_array_equal(slow, fast)
