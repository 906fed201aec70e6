"""Von Mises-Fisher (vMF) utilities on the unit sphere S^{p-1} of R^p, p >= 2.

The directions of the expert and gate vectors of the diversity-promoting
mixture of experts are vMF distributed, in the prior and in the variational
family (user guide :ref:`experts`; [Xie] supplement, items (I)-(III) and Eqs. 6-7).
The density with respect to the surface measure of S^{p-1} is

    vMF(x | mu, kappa) = C_p(kappa) exp(kappa mu^T x),
    C_p(kappa) = kappa^{p/2-1} / ((2 pi)^{p/2} I_{p/2-1}(kappa)),

with ||mu|| = 1 and kappa >= 0 (kappa = 0 is the uniform distribution).
Everything here is vectorized NumPy/SciPy (O(K p) per call), in nats, and
accurate for kappa from 0 (or 1e-8) to 1e5 and p from 2 to a few hundred.

Numerical scheme
----------------
Write nu = p/2 - 1 and x = kappa^2 / 4. Two representations of I_nu are used:

* the power series (Abramowitz & Stegun 9.6.10)
  I_nu(kappa) = (kappa/2)^nu / Gamma(nu+1) * 0F1(; nu+1; x),
  0F1(; b; x) = sum_m x^m / (m! (b)_m), summed in log space. It is used where
  x <= (nu+1)/4 (successive terms shrink at least fourfold, so ~30 terms are
  exact to rounding), and wherever ``scipy.special.ive`` underflows (large
  nu at moderate kappa; outside the first region only for p above ~300);
* ``scipy.special.ive`` (I_nu(kappa) exp(-kappa)) elsewhere.

The kappa -> 0 limits come out of the series exactly (no 0 * inf). For large
kappa, dA_p/dkappa and 1 - A_p, differences of nearly equal numbers, are
taken from the asymptotic series of A_p (see :func:`d_bessel_ratio_dkappa`),
and the entropy and KL are arranged so that no two O(kappa) terms cancel.

Sources
-------
[Xie] P. Xie, J. Zhu, E. P. Xing, "Diversity-Promoting Bayesian Learning of
Latent Variable Models", ICML 2016, supplement, items (I)-(III), (VIII), Eq. 7.
[MJ] K. V. Mardia, P. E. Jupp, "Directional Statistics", Wiley 2000, chapter 9
(the vMF distribution, its normalizer and mean resultant length A_p).
[AS] M. Abramowitz, I. Stegun, "Handbook of Mathematical Functions", 9.6.10
(power series of I_nu), 9.6.26 (I_nu' = I_{nu+1} + (nu/z) I_nu).
[Wood] A. T. A. Wood, "Simulation of the von Mises Fisher distribution",
Comm. Statist. Simulation Comput. 23 (1994) 157-164 (the sampler of
``sample_vmf``, which ``scipy.stats.vonmises_fisher`` also implements).
Derivations tagged [D] are ours and are checked in tests/test_experts_vmf.py.
The vMF functions only the tests use (``log_bessel_iv``, ``bessel_ratio``,
``d_bessel_ratio_dkappa``, the moments and ``vmf_kl`` with its gradient) live
in tests/_reference/experts.py.
"""

import functools
import math

import numba
import numpy as np
from scipy import special
from sklearn.utils import check_random_state

from .._numba import njit, scipy_special

__all__ = [
    "log_normalizer",
    "sample_vmf",
    "vmf_entropy",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
# ive values below this are treated as underflowed (subnormal doubles start at
# 2.2e-308 and lose relative precision); the power series is used there.
_IVE_TINY = 1e-280
# the series is used where kappa^2 / 4 <= _SERIES_X_OVER_B * (nu + 1)
_SERIES_X_OVER_B = 0.25
# the large-kappa asymptotic series of dA_p/dkappa: used for
# kappa >= max(_ASYM_KAPPA_MIN, _ASYM_KAPPA_PER_C * (p-1)/2), with _ASYM_TERMS terms
_ASYM_KAPPA_MIN = 100.0
_ASYM_KAPPA_PER_C = 5.0
_ASYM_TERMS = 40
# tolerance on | ||mu|| - 1 | for mean directions
_UNIT_TOL = 1e-6


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------


def _as_kappa(kappa, name="kappa"):
    kappa = np.asarray(kappa, dtype=np.float64)
    if not np.all(np.isfinite(kappa)) or np.any(kappa < 0):
        raise ValueError(f"{name} must be finite and >= 0; got {kappa!r}.")
    return kappa


def _as_dim(p):
    p_arr = np.asarray(p)
    if p_arr.dtype.kind not in "iuf" or np.any(p_arr != np.round(p_arr)) \
            or np.any(p_arr < 2):
        raise ValueError(f"the dimension p must be an integer >= 2; got {p!r}.")
    return p_arr.astype(np.float64)


def _check_mu_kappa(mu, kappa, name="mu"):
    """mu as (K, p) unit rows and kappa as (K,); ``single`` if mu was 1-D."""
    mu = np.asarray(mu, dtype=np.float64)
    single = mu.ndim == 1
    if mu.ndim not in (1, 2) or mu.shape[-1] < 2:
        raise ValueError(
            f"{name} must have shape (p,) or (K, p) with p >= 2; got {mu.shape}.")
    if not np.all(np.isfinite(mu)):
        raise ValueError(f"{name} must be finite.")
    mu2 = np.atleast_2d(mu)
    norms = np.linalg.norm(mu2, axis=1)
    if np.any(np.abs(norms - 1.0) > _UNIT_TOL):
        raise ValueError(
            f"the rows of {name} must be unit vectors (| ||{name}|| - 1 | <= "
            f"{_UNIT_TOL}); got norms {norms}.")
    mu2 = mu2 / norms[:, None]  # exactly unit up to rounding
    kappa = _as_kappa(kappa)
    if single and kappa.ndim != 0:
        raise ValueError("with a single mean direction of shape (p,), kappa must "
                         f"be a scalar; got shape {kappa.shape}.")
    if kappa.ndim > 1 or (kappa.ndim == 1 and kappa.shape[0] != mu2.shape[0]):
        raise ValueError(f"kappa must be a scalar or of shape ({mu2.shape[0]},); "
                         f"got shape {kappa.shape}.")
    kappa = np.broadcast_to(kappa, (mu2.shape[0],))
    return mu2, kappa, single


def _scalar_or_array(out):
    out = np.asarray(out, dtype=np.float64)
    return out[()] if out.ndim == 0 else out


# ---------------------------------------------------------------------------
# Bessel function kernels (flat float64 arrays)
# ---------------------------------------------------------------------------


def _log_hyp0f1(b, x):
    """log 0F1(; b; x) = log sum_{m>=0} x^m / (m! (b)_m) for b > 0, x >= 0.

    Flat arrays of equal shape. Terms t_m are accumulated in log space,
    log t_m - log t_{m-1} = log x - log m - log(b + m - 1), and summed relative
    to the largest (log1p when the leading term t_0 = 1 dominates). The number
    of terms, 30 + 3 sqrt(max x), passes the peak of the terms (at m <= sqrt x)
    and the following geometric decay well below rounding.
    """
    if b.size == 0:
        return np.empty(0)
    n_terms = int(30 + np.ceil(3.0 * np.sqrt(float(np.max(x)))))
    m = np.arange(1.0, n_terms)
    with np.errstate(divide="ignore"):
        log_x = np.log(x)[:, None]
    log_t = np.cumsum(log_x - np.log(m) - np.log(b[:, None] + m - 1.0), axis=1)
    l_max = np.maximum(np.max(log_t, axis=1), 0.0)
    rest = np.sum(np.exp(log_t - l_max[:, None]), axis=1)
    with np.errstate(divide="ignore"):
        out = np.where(l_max == 0.0, np.log1p(rest),
                       l_max + np.log(np.exp(-l_max) + rest))
    return out


def _series_mask(nu, kappa, *orders):
    """Where the power series is used for all orders nu + d, d in ``orders``."""
    x = 0.25 * kappa * kappa
    mask = x <= _SERIES_X_OVER_B * (nu + 1.0)
    for d in orders:
        with np.errstate(under="ignore"):
            mask |= ~(special.ive(nu + d, kappa) > _IVE_TINY)
    return mask


def _log_iv_pieces(nu, kappa, mask):
    """log 0F1(; nu+1; kappa^2/4) where ``mask``, log ive(nu, kappa) elsewhere."""
    out = np.empty_like(kappa)
    out[mask] = _log_hyp0f1(nu[mask] + 1.0, 0.25 * kappa[mask] ** 2)
    out[~mask] = np.log(special.ive(nu[~mask], kappa[~mask]))
    return out


def _bessel_quantities(p, kappa, with_log_normalizer=False):
    """A_p, A_p/kappa, 1 - p A_p/kappa, dA_p/dkappa and 1 - A_p on flat arrays.

    In the series region A_p / kappa = exp(L(nu+2) - L(nu+1)) / p with
    L(b) = log 0F1(; b; kappa^2/4), because I_{nu+1}/I_nu = (kappa/2)/(nu+1)
    0F1(; nu+2; x)/0F1(; nu+1; x) and 2 (nu+1) = p; then 1 - p A_p/kappa =
    -expm1(L(nu+2) - L(nu+1)) without cancellation. Elsewhere A_p is the
    ratio of ``ive`` values. dA_p/dkappa = (1 - p A/kappa) + A/kappa - A^2
    (the Riccati identity of :func:`d_bessel_ratio_dkappa`). At large kappa
    (``_asymptotic_region``) dA_p/dkappa and 1 - A_p, differences of nearly
    equal numbers, come from the asymptotic series of A_p instead. With
    ``with_log_normalizer`` a sixth item, :func:`_log_normalizer_scaled`,
    from the same ``ive`` values and series (the values are those of the
    separate calls, at a third of the ``ive`` evaluations).
    """
    nu = 0.5 * p - 1.0
    with np.errstate(under="ignore"):
        iv0 = special.ive(nu, kappa)
        iv1 = special.ive(nu + 1.0, kappa)
    small = 0.25 * kappa * kappa <= _SERIES_X_OVER_B * (nu + 1.0)
    mask0 = small | ~(iv0 > _IVE_TINY)   # the series for order nu (normalizer)
    mask = mask0 | ~(iv1 > _IVE_TINY)    # ... and for orders nu, nu + 1 (ratio)
    a = np.empty_like(kappa)
    a_over_k = np.empty_like(kappa)
    omega = np.empty_like(kappa)
    log_f1 = np.empty_like(kappa)
    if np.any(mask):
        ks, nus = kappa[mask], nu[mask]
        x = 0.25 * ks * ks
        log_f1[mask] = _log_hyp0f1(nus + 1.0, x)
        diff = _log_hyp0f1(nus + 2.0, x) - log_f1[mask]
        aok = np.exp(diff) / p[mask]
        a_over_k[mask] = aok
        a[mask] = aok * ks
        omega[mask] = -np.expm1(diff)
    if np.any(~mask):
        ks = kappa[~mask]
        av = iv1[~mask] / iv0[~mask]
        a[~mask] = av
        a_over_k[~mask] = av / ks
        omega[~mask] = 1.0 - p[~mask] * av / ks
    da = omega + a_over_k - a * a
    one_minus_a = 1.0 - a
    c = 0.5 * (p - 1.0)
    asym = kappa >= np.maximum(_ASYM_KAPPA_MIN, _ASYM_KAPPA_PER_C * c)
    if np.any(asym):
        one_minus_a[asym], da[asym] = _ratio_asymptotic(c[asym], kappa[asym])
    if not with_log_normalizer:
        return a, a_over_k, omega, da, one_minus_a
    pieces = np.empty_like(kappa)
    pieces[mask0] = log_f1[mask0]
    with np.errstate(divide="ignore"):
        pieces[~mask0] = np.log(iv0[~mask0])
    return (a, a_over_k, omega, da, one_minus_a,
            _log_normalizer_from_pieces(p, nu, kappa, mask0, pieces))


def vmf_point_quantities(p, kappa):
    """A, A/kappa, 1 - p A/kappa, dA/dkappa, d(A/kappa)/dkappa, entropy of vMF(kappa).

    The quantities the inner ascent of the mixture of experts needs at one
    dimension p (float) for the concentrations ``kappa`` (float64, shape
    (K,)): those of :func:`_bessel_quantities` with the normalizer, plus
    d(A_p/kappa)/dkappa and the entropy H = -log C_p - kappa A_p, in one
    compiled pass (the NumPy version costs ~40 array operations per call, and
    the ascent makes ~20 calls per iteration): :func:`vmf_point_quantities_into`,
    the kernel the compiled ascent calls, when SciPy exports ``ive`` to
    compiled code, else :func:`_point_kernel` after two ``ive`` evaluations
    (the same numbers). Equal to :func:`_bessel_quantities` to rounding
    (checked in tests/test_experts_vmf.py).
    """
    p = float(p)
    kappa = np.ascontiguousarray(kappa, dtype=np.float64)
    coef = _asymptotic_coefficients(0.5 * (p - 1.0))
    if _IVE is not None:
        out = np.empty((6, kappa.shape[0]))
        vmf_point_quantities_into(p, kappa, coef, out)
        return out
    nu = 0.5 * p - 1.0
    with np.errstate(under="ignore"):
        iv0 = special.ive(nu, kappa)
        iv1 = special.ive(nu + 1.0, kappa)
    return _point_kernel(p, kappa, iv0, iv1, coef)


@njit(error_model="numpy")
def _log_hyp0f1_one(b, x):
    """:func:`_log_hyp0f1` of one (b, x), with 30 + 3 sqrt(x) terms."""
    if not x > 0.0:
        return 0.0
    n_terms = int(30.0 + math.ceil(3.0 * math.sqrt(x)))
    log_x = math.log(x)
    log_t = np.empty(n_terms - 1)
    lt = 0.0
    l_max = 0.0
    for m in range(1, n_terms):
        lt += log_x - math.log(m) - math.log(b + m - 1.0)
        log_t[m - 1] = lt
        if lt > l_max:
            l_max = lt
    rest = 0.0
    for j in range(n_terms - 1):
        rest += math.exp(log_t[j] - l_max)
    if l_max == 0.0:
        return math.log1p(rest)
    return l_max + math.log(math.exp(-l_max) + rest)


@njit(error_model="numpy")
def _point_kernel(p, kappa, iv0, iv1, coef):
    """:func:`vmf_point_quantities` from given ``ive`` values (when SciPy does
    not export ``ive`` to compiled code): :func:`_point_one` per element."""
    K = kappa.shape[0]
    out = np.empty((6, K))
    for i in range(K):
        _point_one(p, kappa[i], iv0[i], iv1[i], coef, out, i)
    return out


@njit(inline="always")
def _point_one(p, k, iv0, iv1, coef, out, i):
    """The branches of :func:`_bessel_quantities` (series / ``ive`` ratio /
    asymptotic series) and :func:`_log_normalizer_from_pieces` at one
    concentration ``k``, from iv0 = ive(p/2 - 1, k) and iv1 = ive(p/2, k),
    into column ``i`` of ``out`` (6, K): A, A/kappa, 1 - p A/kappa, dA/dkappa,
    d(A/kappa)/dkappa, entropy."""
    nu = 0.5 * p - 1.0
    c = 0.5 * (p - 1.0)
    asym_from = _ASYM_KAPPA_PER_C * c
    if not asym_from > _ASYM_KAPPA_MIN:
        asym_from = _ASYM_KAPPA_MIN
    half_log_2pi_p = 0.5 * p * _LOG_2PI
    small = 0.25 * k * k <= _SERIES_X_OVER_B * (nu + 1.0)
    mask0 = small or not (iv0 > _IVE_TINY)
    mask = mask0 or not (iv1 > _IVE_TINY)
    log_f1 = 0.0
    if mask:
        x = 0.25 * k * k
        log_f1 = _log_hyp0f1_one(nu + 1.0, x)
        diff = _log_hyp0f1_one(nu + 2.0, x) - log_f1
        aok = math.exp(diff) / p
        a = aok * k
        omega = -math.expm1(diff)
    else:
        a = iv1 / iv0
        aok = a / k
        omega = 1.0 - p * a / k
    da = omega + aok - a * a
    one_minus_a = 1.0 - a
    if k >= asym_from:
        one_minus_a, da = _asymptotic_one(coef, k)
    if mask0:
        series_const = nu * math.log(2.0) + math.lgamma(nu + 1.0) - half_log_2pi_p
        log_c = series_const - log_f1 + k
    else:
        log_c = ((0.0 if nu == 0.0 else nu * math.log(k)) - half_log_2pi_p
                 - math.log(iv0))
    if k > p:
        num = da - aok
    else:
        num = omega - a * a
    out[0, i] = a
    out[1, i] = aok
    out[2, i] = omega
    out[3, i] = da
    out[4, i] = num / k if k > 0.0 else 0.0
    out[5, i] = -log_c + k * one_minus_a


# scipy.special.ive for jitted code (None if this SciPy does not export it)
_IVE = scipy_special("__pyx_fuse_1ive", numba.float64, numba.float64, numba.float64)


@njit(error_model="numpy")
def vmf_point_quantities_into(p, kappa, coef, out):
    """:func:`vmf_point_quantities` from jitted code, into ``out`` (6, K).

    ``coef`` = ``_asymptotic_coefficients((p - 1) / 2)``. The two ``ive``
    evaluations are SciPy's own (its Cython export,
    :func:`skbinvi._numba.scipy_special`), so the values equal those of
    :func:`vmf_point_quantities` bit for bit. Only call it when ``_IVE`` is
    not None.
    """
    nu = 0.5 * p - 1.0
    for i in range(kappa.shape[0]):
        k = kappa[i]
        _point_one(p, k, _IVE(nu, k, 0), _IVE(nu + 1.0, k, 0), coef, out, i)


@functools.lru_cache(maxsize=64)
def _asymptotic_coefficients(c):
    """a_1..a_T of the series A_p ~ sum_n a_n kappa^{-n} for one c (cached)."""
    coef = [1.0, -c]
    for n in range(1, _ASYM_TERMS):
        s = sum(coef[i] * coef[n + 1 - i] for i in range(1, n + 1))
        coef.append(0.5 * ((n - 2.0 * c) * coef[n] - s))
    return np.asarray(coef[1:_ASYM_TERMS + 1])


def _ratio_asymptotic(c, kappa):
    """1 - A_p and dA_p/dkappa from A_p ~ sum_n a_n kappa^{-n}, c = (p-1)/2 [D].

    Substituting the series into the Riccati equation A' = 1 - A^2 - 2c A /
    kappa and matching powers of 1/kappa gives a_0 = 1, a_1 = -c and
    2 a_{n+1} = (n - 2c) a_n - sum_{i=1}^{n} a_i a_{n+1-i}; then
    1 - A = -sum_{n>=1} a_n kappa^{-n} and A' = -sum_n n a_n kappa^{-n-1}.
    For kappa >= max(100, 5 c) 40 terms agree with mpmath to ~1e-13
    relative for p <= 201 (tests/test_experts_vmf.py). The coefficients
    depend on c only and are computed once per distinct c; both sums are
    evaluated by Horner's rule.
    """
    one_minus_a = np.empty_like(kappa)
    da = np.empty_like(kappa)
    for cv in np.unique(c):
        sel = c == cv
        one_minus_a[sel], da[sel] = _asymptotic_sums(
            _asymptotic_coefficients(float(cv)), np.ascontiguousarray(kappa[sel]))
    return one_minus_a, da


@njit(error_model="numpy")
def _asymptotic_sums(coef, kappa):
    """-sum_n a_n kappa^-n and -sum_n n a_n kappa^-(n+1) by Horner's rule.

    Checked against mpmath's Bessel ratio (the NumPy/mpmath reference) in
    ``tests/test_experts_vmf.py::test_bessel_ratio_and_derivative_match_reference``.
    """
    m = kappa.shape[0]
    one_minus_a = np.empty(m)
    da = np.empty(m)
    for i in range(m):
        one_minus_a[i], da[i] = _asymptotic_one(coef, kappa[i])
    return one_minus_a, da


@njit(error_model="numpy")
def _asymptotic_one(coef, kappa):
    """(1 - A_p, dA_p/dkappa) at one kappa from the asymptotic series (Horner)."""
    inv = 1.0 / kappa
    acc_a = 0.0
    acc_d = 0.0
    for n in range(coef.shape[0], 0, -1):
        acc_a = (acc_a + coef[n - 1]) * inv
        acc_d = (acc_d + n * coef[n - 1]) * inv
    return -acc_a, -acc_d * inv


def _log_normalizer_scaled(p, kappa):
    """log C_p(kappa) + kappa on flat arrays, O(log kappa) in size.

    Series region: nu log 2 + log Gamma(nu+1) - (p/2) log(2 pi)
    - log 0F1(; nu+1; kappa^2/4) + kappa; elsewhere
    nu log kappa - (p/2) log(2 pi) - log ive(nu, kappa).
    """
    nu = 0.5 * p - 1.0
    mask = _series_mask(nu, kappa, 0.0)
    return _log_normalizer_from_pieces(p, nu, kappa, mask,
                                       _log_iv_pieces(nu, kappa, mask))


def _log_normalizer_from_pieces(p, nu, kappa, mask, pieces):
    """:func:`_log_normalizer_scaled` from ``pieces``: log 0F1(; nu+1; kappa^2/4)
    where ``mask`` (the series), log ive(nu, kappa) elsewhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        series = (nu * np.log(2.0) + special.gammaln(nu + 1.0)
                  - 0.5 * p * _LOG_2PI - pieces + kappa)
        direct = (np.where(nu == 0.0, 0.0, nu * np.log(kappa)) - 0.5 * p * _LOG_2PI
                  - pieces)
    return np.where(mask, series, direct)


def _prepare_p_kappa(p, kappa):
    p = _as_dim(p)
    kappa = _as_kappa(kappa)
    p_b, k_b = np.broadcast_arrays(p, kappa)
    return p_b.ravel().astype(np.float64), k_b.ravel().astype(np.float64), p_b.shape


# ---------------------------------------------------------------------------
# public: Bessel functions, normalizer
# ---------------------------------------------------------------------------


def log_normalizer(p, kappa):
    """log C_p(kappa), the log normalizer of vMF(mu, kappa) on S^{p-1} in R^p.

    Parameters
    ----------
    p : int or array_like of int
        Dimension, p >= 2.
    kappa : float or array_like
        Concentration, kappa >= 0, finite; broadcast against ``p``.

    Returns
    -------
    log_c : float or ndarray of float64
        log C_p(kappa) = (p/2 - 1) log kappa - (p/2) log(2 pi)
        - log I_{p/2-1}(kappa) ([MJ] chapter 9), so that
        C_p(kappa) exp(kappa mu^T x) integrates to 1 against the surface
        measure of the unit sphere of R^p. At kappa = 0 the limit
        -log |S^{p-1}| = -log(2 pi^{p/2} / Gamma(p/2)), the uniform density.

    Notes
    -----
    [D] With nu = p/2 - 1 and the series of I_nu,
    log C_p = nu log 2 + log Gamma(nu+1) - (p/2) log(2 pi)
    - log 0F1(; nu+1; kappa^2/4); at kappa = 0 this is
    -log 2 - (p/2) log pi + log Gamma(p/2), minus the log area of the unit
    sphere of R^p. Computed as (log C_p + kappa) - kappa, where
    log C_p + kappa = nu log kappa - (p/2) log(2 pi) - log ive(nu, kappa) is
    O(log kappa) outside the series region. The
    [Xie] supplement's item (VIII) writes 2 pi^{(p+1)/2} / Gamma((p+1)/2),
    which is the area of the unit sphere of R^{p+1}, not of R^p.
    Special cases: p = 2, C = 1 / (2 pi I_0(kappa));
    p = 3, C = kappa / (4 pi sinh kappa).
    """
    p_f, k_f, shape = _prepare_p_kappa(p, kappa)
    out = _log_normalizer_scaled(p_f, k_f) - k_f
    return _scalar_or_array(out.reshape(shape))


def vmf_entropy(p, kappa):
    """Differential entropy of vMF(mu, kappa) on S^{p-1}, in nats.

    Parameters
    ----------
    p : int or array_like of int
        Dimension, p >= 2.
    kappa : float or array_like
        Concentration, kappa >= 0, finite; broadcast against ``p``.

    Returns
    -------
    entropy : float or ndarray of float64
        H = -E[log vMF(x | mu, kappa)] = -log C_p(kappa) - kappa A_p(kappa),
        relative to the surface measure (so it is log |S^{p-1}| at kappa = 0,
        negative when the sphere's area is below 1, i.e. p >= 19 [D]).

    Notes
    -----
    [D] E[mu^T x] = A_p(kappa) (item (I) of the [Xie] supplement). The
    supplement's Eq. 7 gives E_q[log q(a~)] = kappa^ A_p(kappa^) ||a^||^2 and
    leaves out log C_p(kappa^), which depends on the variational
    concentration kappa^ and therefore cannot be dropped when kappa^ is
    optimized; E_q[log q] = log C_p(kappa^) + kappa^ A_p(kappa^) = -H.
    """
    p_f, k_f, shape = _prepare_p_kappa(p, kappa)
    one_minus_a = _bessel_quantities(p_f, k_f)[4]
    # -log C - kappa A = -(log C + kappa) + kappa (1 - A): no cancellation of
    # two O(kappa) numbers at large kappa
    out = -_log_normalizer_scaled(p_f, k_f) + k_f * one_minus_a
    return _scalar_or_array(out.reshape(shape))


# ---------------------------------------------------------------------------
# public: moments
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# public: cross entropy, KL and its gradient
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# public: sampling
# ---------------------------------------------------------------------------


def sample_vmf(mu, kappa, size=1, random_state=None):
    """Draw samples from vMF(mu, kappa) on S^{p-1}.

    Parameters
    ----------
    mu : array_like of shape (p,)
        Mean direction, a unit vector, p >= 2.
    kappa : float
        Concentration, >= 0 (0 draws uniform directions).
    size : int, default=1
        Number of samples.
    random_state : int, RandomState instance or None, default=None
        Seed or generator (scikit-learn convention).

    Returns
    -------
    samples : ndarray of float64 of shape (size, p)
        Unit rows.

    Notes
    -----
    Wood's rejection sampler [Wood] for kappa > 0 (``_sample_vmf_wood``, the
    algorithm that ``scipy.stats.vonmises_fisher`` implements too). Its draws
    are mapped to the mu frame by one Householder reflection: O(p) time and
    memory per draw. SciPy's sampler rotates them with the QR factorization
    of a dense p x p matrix at every call, O(p^3) time and several p x p
    arrays (20 s and 0.3 GB for one vector in 3,000 dimensions, against 4 ms
    and 0.2 MB here), which the ancestral draws of the MABN prior (one call
    per vector, :func:`~skbinvi.experts._mcmc.sample_mabn_type1_prior`, the
    Metropolis-Hastings start on wide data) cannot afford. kappa = 0 draws
    normalized standard normal vectors, i.e. uniform directions. Also used
    for Monte Carlo checks of the variational bound.
    """
    mu2, kappa_arr, single = _check_mu_kappa(mu, kappa)
    if not single:
        raise ValueError("sample_vmf takes a single mean direction of shape (p,).")
    size = int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0; got {size}.")
    rng = check_random_state(random_state)
    p = mu2.shape[1]
    direction = mu2[0]
    if size == 0:
        return np.empty((0, p))
    k = float(kappa_arr[0])
    if k == 0.0:
        out = rng.normal(size=(size, p))
        return out / np.linalg.norm(out, axis=1, keepdims=True)
    return _sample_vmf_wood(direction, k, size, rng)


def _sample_vmf_wood(mu, kappa, size, rng):
    """Wood's (1994) rejection sampler for vMF(mu, kappa), kappa > 0, mu unit (p,).

    The component w = mu^T x has density proportional to
    exp(kappa w) (1 - w^2)^{(p-3)/2} on [-1, 1]; it is drawn by rejection
    from the envelope w = (1 - (1+b) z) / (1 - (1-b) z), z ~ Beta((p-1)/2,
    (p-1)/2), with b = (p-1) / (2 kappa + sqrt(4 kappa^2 + (p-1)^2)) (the
    cancellation-free form of Wood's b), x0 = (1-b)/(1+b),
    c = kappa x0 + (p-1) log(1 - x0^2), accepting when
    kappa w + (p-1) log(1 - x0 w) - c >= log u. Then
    x = w e_p + sqrt(1 - w^2) (v, 0) with v uniform on S^{p-2}, and the
    Householder reflection swapping e_p and mu maps x to the mu frame.
    1 - w = 2 b z / (1 - (1-b) z) is used for sqrt(1 - w^2) (large kappa).
    """
    p = mu.shape[0]
    m1 = p - 1.0
    b = m1 / (2.0 * kappa + np.sqrt(4.0 * kappa * kappa + m1 * m1))
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + m1 * np.log1p(-x0 * x0)
    w_acc, one_minus_w_acc = [], []
    n_acc = 0
    while n_acc < size:
        n_draw = max(16, 2 * (size - n_acc))
        z = rng.beta(0.5 * m1, 0.5 * m1, size=n_draw)
        u = rng.uniform(size=n_draw)
        denom = 1.0 - (1.0 - b) * z
        w = (1.0 - (1.0 + b) * z) / denom
        one_minus_w = 2.0 * b * z / denom
        with np.errstate(divide="ignore"):
            ok = kappa * w + m1 * np.log1p(-x0 * w) - c >= np.log(u)
        w_acc.append(w[ok])
        one_minus_w_acc.append(one_minus_w[ok])
        n_acc += int(ok.sum())
    w = np.concatenate(w_acc)[:size]
    one_minus_w = np.concatenate(one_minus_w_acc)[:size]
    v = rng.normal(size=(size, p - 1))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    radius = np.sqrt(np.maximum(one_minus_w * (1.0 + w), 0.0))
    x = np.empty((size, p))
    x[:, :-1] = radius[:, None] * v
    x[:, -1] = w
    e_p = np.zeros(p)
    e_p[-1] = 1.0
    h = e_p - mu
    hh = h @ h
    if hh > 1e-30:
        x -= (2.0 / hh) * (x @ h)[:, None] * h[None, :]
    return x
