"""The inner ascent of "vi" and "pr": q of one set of K vectors at fixed auxiliaries.

At fixed auxiliaries (phi, xi, c, d) the objective of the variational fit
(user guide :ref:`experts`, section "The algorithm") splits into one term per
set of vectors (experts beta, gates eta), each a function of the vMF x Gamma
parameters (mu, kappa, r, s) of its K vectors:

    F_set = L_set(mu, kappa, r, s)              likelihood bound, from the
                                                statistics (b, v, Q) or the data
          + D(mu, kappa)                        direction prior: Type II MABN
                                                bound + vMF entropy ("vi"), or
                                                -KL to vMF(mu0, kappa0) +
                                                lambda Omega ("pr")
          - sum_k KL(Gamma(r_k, s_k) || magnitude prior), see set_alphas.

This module evaluates F_set and its gradient with no input validation (the
estimator validates its parameters once, at its boundary) and with every
quantity that depends on one field only cached on the point: the Bessel
functions of kappa (one ``scipy.special.ive`` evaluation per new kappa), the
Gamma functions of r, the MABN chord constants (once per fit). A trial step
on mu therefore costs one (K, p, p) x (K, p) product and O(K p) more, a step
on r or s O(K) scalar functions; this is what removes the fixed Python cost
of the former inner loop (8 blocks x 10 rounds x about 40 validated NumPy
calls per evaluation). When the likelihood comes from the statistics
(b, v, Q), :func:`ascend` runs the same steps in one compiled kernel
(:func:`_ascend_kernel`), which calls SciPy's ``ive``, ``psi`` and
``gammaln`` through their Cython exports: no Python per evaluation at all.

The formulas are those of :mod:`skbinvi.experts._bounds` (derivations
there); they are checked against the NumPy reference
``variational_objective`` of tests/_reference/experts.py (value) and against
central finite differences in every coordinate (gradient), in
``tests/test_experts_variational.py::test_fast_objective_matches_reference``
and ``tests/test_experts_gradients.py``.
"""

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from scipy import special

from .._math import trigamma
from .._numba import njit, scipy_special
from ._angular import PARALLEL_TOL, value_and_grad_unchecked
from ._vmf import (
    _IVE,
    _asymptotic_coefficients,
    log_normalizer,
    vmf_point_quantities,
    vmf_point_quantities_into,
)

__all__ = ["ObjectiveConfig", "Point", "PriorConstants", "SetObjective", "ascend",
           "direction_parts", "prior_constants", "set_prior"]

# bounds on the per-block step h (the largest entry of each preconditioned
# block moves by h: log kappa, log r, log s, or mu along the tangent)
MAX_STEP = 1.0
MIN_STEP = 1e-12
INIT_STEP = 0.25
# concentrations are kept in [KAPPA_MIN, KAPPA_MAX]: beyond 1e8 a vMF is a point
# mass to double precision (angular spread 1e-4 rad) and scipy.special.ive is NaN
# from about 1e9
KAPPA_MIN = 1e-8
KAPPA_MAX = 1e8


class ObjectiveConfig(NamedTuple):
    """Settings of the "vi" / "pr" objective (the former 6-value ``cfg`` tuple).

    Attributes
    ----------
    method : {"vi", "pr"}
        "vi": Type II MABN prior on the directions; "pr": independent
        vMF(mu0, kappa_prior) priors plus the angular regularizer.
    kappa_prior : float
        MABN diversity strength ("vi") or independent vMF concentration ("pr").
    mu0 : ndarray of shape (p,)
        Unit mean direction of the MABN root / independent prior.
    alpha1, alpha2 : float or ndarray of shape (2,)
        Shape and rate of the Gamma prior of every magnitude; a pair gives
        the experts' then the gates' (:func:`set_alphas`).
    gamma : float
        Variance weight of Omega ("pr").
    alpha3 : float or ndarray of shape (2,), default=0.0
        With ``alpha3 > 0`` (and ``alpha2 = 0``) the magnitude prior is
        p(g) proportional to g^(alpha1 - 1) exp(-alpha3 g^2) instead of the
        Gamma: with ``alpha1 = p`` and ``alpha3 = 1/2`` the chi distribution of
        ||a|| under N(0, I_p), so that with a uniform direction the vector's
        prior is N(0, I_p) exactly.
    intercept_scale : float, default=1.0
        The experts' design has its last column (the constant 1 of
        ``fit_intercept``) multiplied by this number, the gates' does not:
        an expert's intercept is ``intercept_scale`` times its last
        coordinate, so its prior is that many times broader than the other
        coordinates' (liblinear's ``intercept_scaling``, for the experts
        alone). 1: one design for both sets.
    """

    method: str
    kappa_prior: float
    mu0: np.ndarray
    alpha1: float
    alpha2: float
    gamma: float
    alpha3: float = 0.0
    intercept_scale: float = 1.0


def design_scale(intercept_scale, p):
    """The column scale s (p,) of the experts' design: ``intercept_scale``
    (:class:`ObjectiveConfig`) on the last column, 1 elsewhere; None when it
    is 1. The experts see X diag(s), the gates X."""
    c = float(intercept_scale)
    if c == 1.0:
        return None
    s = np.ones(p)
    s[-1] = c
    return s


def norm_shift(scale):
    """How much the experts' squared row norms exceed the gates' under the
    scale of :func:`design_scale` (its last column is the constant 1 of
    ``fit_intercept``): ``scale[-1]^2 - 1``, 0 without a scale."""
    return 0.0 if scale is None else float(scale[-1] ** 2 - 1.0)


def set_alphas(cfg, which):
    """(alpha1, alpha2, alpha3) of the magnitude prior of set ``which`` (0
    experts, 1 gates): log p(g) = (alpha1 - 1) log g - alpha2 g - alpha3 g^2
    + const (:class:`ObjectiveConfig`)."""
    return (float(np.broadcast_to(cfg.alpha1, 2)[which]),
            float(np.broadcast_to(cfg.alpha2, 2)[which]),
            float(np.broadcast_to(cfg.alpha3, 2)[which]))


def magnitude_log_normalizer(alpha1, alpha2, alpha3):
    """log of the normalizer of the magnitude prior of :func:`set_alphas`:
    log Gamma(alpha1) - alpha1 log alpha2 (Gamma, ``alpha3 = 0``), or
    log Gamma(alpha1 / 2) - log 2 - (alpha1 / 2) log alpha3 (``alpha2 = 0``).
    Raises ValueError for both ``alpha2`` and ``alpha3`` positive."""
    if alpha3 > 0.0:
        if alpha2 != 0.0:
            raise ValueError("a magnitude prior with alpha3 > 0 needs alpha2 = 0.")
        return (special.gammaln(0.5 * alpha1) - np.log(2.0)
                - 0.5 * alpha1 * np.log(alpha3))
    return special.gammaln(alpha1) - alpha1 * np.log(alpha2)


class PriorConstants(NamedTuple):
    """Quantities of the prior that depend on (K, p, kappa_prior) only.

    ``f0`` = log |S^{p-1}| = -log C_p(0); ``slope[i]`` the chord slope
    (f(i) - f0) / i of node i + 1 (0 for the root), f(r) = -log C_p(kappa r);
    ``root`` = log C_p(kappa_prior).
    """

    f0: float
    slope: np.ndarray
    root: float


def prior_constants(cfg, K, p):
    """The :class:`PriorConstants` of a fit (Bessel functions evaluated once).

    Memoized on (kappa_prior, K, p): the estimator asks for them at every
    iteration (2 ms each at K = 4, 40% of a compiled inner ascent); the
    returned ``slope`` is read-only.
    """
    return _prior_constants(float(cfg.kappa_prior), int(K), float(p))


@functools.lru_cache(maxsize=32)
def _prior_constants(kappa_prior, K, p):
    R = np.arange(K, dtype=np.float64)
    f0 = -float(log_normalizer(p, 0.0))
    slope = np.zeros(K)
    if K > 1:
        fR = -np.asarray(log_normalizer(p, kappa_prior * R[1:]), dtype=np.float64)
        slope[1:] = (fR.reshape(-1) - f0) / R[1:]
    slope.flags.writeable = False
    root = float(log_normalizer(p, kappa_prior))
    return PriorConstants(f0, slope, root)


class Point:
    """q of one set of K vectors, with lazily computed, cached derived quantities.

    ``mu`` (K, p) unit rows, ``kappa``, ``r``, ``s`` (K,) positive. A point is
    never modified; :meth:`replace` returns a new one that keeps the caches
    that do not depend on the changed field.
    """

    __slots__ = ("mu", "kappa", "r", "s", "_bessel", "_gamma", "_direction", "_lik",
                 "_line")

    def __init__(self, mu, kappa, r, s):
        self.mu, self.kappa, self.r, self.s = mu, kappa, r, s
        self._bessel = self._gamma = self._direction = self._lik = None
        # the steps h (K,) when mu is a trial of the line search of the ascent
        # (see _FixedAuxLikelihood.line)
        self._line = None

    def replace(self, field, value):
        new = Point(self.mu, self.kappa, self.r, self.s)
        setattr(new, field, value)
        if field != "kappa":
            new._bessel = self._bessel
        if field in ("mu", "kappa"):
            new._gamma = self._gamma
        else:
            new._direction = self._direction
        return new

    def bessel(self):
        """(A, A/kappa, 1 - p A/kappa, A', d(A/kappa)/dkappa, entropy) of the kappas."""
        if self._bessel is None:
            # d(A/kappa)/dkappa = (dA - A/kappa) / kappa (large kappa) or
            # (1 - p A/kappa - A^2) / kappa; H[vMF] = -log C_p(kappa) - kappa A =
            # -(log C_p + kappa) + kappa (1 - A): one compiled pass
            self._bessel = tuple(vmf_point_quantities(self.mu.shape[1], self.kappa))
        return self._bessel

    def gamma(self, alpha1, alpha2, alpha3=0.0):
        """(E g, E g^2, KL(q(g_k) || prior) per vector), shapes (K,); the prior
        of :func:`set_alphas` (the Gamma(alpha1, alpha2) with ``alpha3 = 0``)."""
        if self._gamma is None:
            r, s = self.r, self.s
            eg, eg2 = r / s, (r + r * r) / (s * s)
            kl = ((r - alpha1) * special.digamma(r) - special.gammaln(r)
                  + alpha1 * np.log(s) - r + alpha2 * eg + alpha3 * eg2
                  + magnitude_log_normalizer(alpha1, alpha2, alpha3))
            self._gamma = (eg, eg2, kl)
        return self._gamma


class SetObjective:
    """F_set at fixed auxiliaries for one set of vectors (0 experts, 1 gates).

    Parameters
    ----------
    lik : object
        ``statistics(which)`` -> (b (K, p), v (K,), Q (K, p, p)) or None, and,
        when it returns None, ``moments_value(which, mu, c1, c2, c3)`` and
        ``moments_gradient(which, mu, c1, c3)`` passing over the data
        (:class:`~skbinvi.experts._variational._FixedAuxLikelihood`).
    which : int
        0 (experts) or 1 (gates).
    cfg : ObjectiveConfig
    consts : PriorConstants
    lam : float
        Weight of Omega ("pr"; 0 for "vi").
    """

    def __init__(self, lik, which, cfg, consts, lam):
        self.lik, self.which, self.cfg, self.consts = lik, which, cfg, consts
        self.lam = float(lam)
        self.stats = lik.statistics(which)
        # (mu, Q mu, mu^T b, mu^T Q mu) of the last mu seen: the kappa, r and s
        # blocks of the ascent move with mu fixed, so most evaluations reuse it
        self._mu_cache = None

    def _mu_products(self, mu):
        """(Q mu (K, p), mu^T b (K,), mu^T Q mu (K,)) from the statistics."""
        cache = self._mu_cache
        if cache is not None and (cache[0] is mu or np.array_equal(cache[0], mu)):
            return cache[1:]
        b, _, Q = self.stats
        qm = np.matmul(Q, mu[:, :, None])[:, :, 0]
        out = (qm, np.einsum("kp,kp->k", mu, b), np.einsum("kp,kp->k", mu, qm))
        self._mu_cache = (mu.copy(),) + out
        return out

    # ---------------------------------------------------------------- pieces
    def _coefficients(self, pt):
        a, aok, omega = pt.bessel()[:3]
        eg, eg2, _ = pt.gamma(*set_alphas(self.cfg, self.which))
        return eg * a, eg2 * aok, eg2 * omega

    def likelihood(self, pt):
        """Likelihood bound of each vector (K,), nats (up to a constant)."""
        if pt._lik is None:
            c1, c2, c3 = self._coefficients(pt)
            if self.stats is not None:
                _, mb, mqm = self._mu_products(pt.mu)
                pt._lik = c1 * mb + c2 * self.stats[1] + c3 * mqm
            else:
                pt._lik = self.lik.moments_value(self.which, pt.mu, c1, c2, c3,
                                                 pt._line)
        return pt._lik

    def direction(self, pt):
        """(direction prior of each vector (K,), coupling term), nats."""
        if pt._direction is None:
            pt._direction = direction_parts(pt, self.cfg, self.consts, self.lam)
        return pt._direction

    def parts(self, pt):
        """(separable part of each vector (K,), coupling term of the set)."""
        sep, coupled = self.direction(pt)
        sep = sep + self.likelihood(pt) - pt.gamma(*set_alphas(self.cfg, self.which))[2]
        return sep, coupled

    def value(self, pt):
        sep, coupled = self.parts(pt)
        return float(np.sum(sep)) + coupled

    # -------------------------------------------------------------- gradient
    def gradient(self, pt, need_mu=True):
        """dF_set/d(mu, kappa, r, s) at ``pt`` (mu Euclidean).

        ``need_mu=False``: the first entry is None (without the statistics,
        dF/dmu costs a pass over the data that the kappa, r and s blocks of
        the ascent do not need).
        """
        cfg = self.cfg
        mu, kappa, r, s = pt.mu, pt.kappa, pt.r, pt.s
        a, aok, omega, da, d_aok, _ = pt.bessel()
        alpha1, alpha2, alpha3 = set_alphas(cfg, self.which)
        eg, eg2, _ = pt.gamma(alpha1, alpha2, alpha3)
        c1, c3 = eg * a, eg2 * omega
        p = mu.shape[1]
        if self.stats is not None:
            b, v, _ = self.stats
            qm, g_c1, g_c3 = self._mu_products(mu)
            g_mu = c1[:, None] * b + 2.0 * c3[:, None] * qm
            g_c2 = v
        else:
            g_mu, g_c1, g_c2, g_c3 = self.lik.moments_gradient(self.which, mu, c1, c3,
                                                               need_mu)
        de_g2_dr = (2.0 * r + 1.0) / (s * s)
        g_kappa = g_c1 * eg * da + (g_c2 - p * g_c3) * eg2 * d_aok
        g_r = g_c1 * a / s + de_g2_dr * (g_c2 * aok + g_c3 * omega)
        g_s = -g_c1 * eg * a / s - 2.0 * eg2 / s * (g_c2 * aok + g_c3 * omega)
        # vMF entropy: dH/dkappa = -kappa A'
        g_kappa = g_kappa - kappa * da
        if cfg.method == "pr":
            g_kappa = g_kappa + cfg.kappa_prior * da * (mu @ cfg.mu0)
            if g_mu is not None:
                g_mu = g_mu + cfg.kappa_prior * a[:, None] * cfg.mu0[None, :]
                if self.lam != 0.0 and mu.shape[0] > 1:
                    g_mu = g_mu + self.lam * _omega(mu, cfg.gamma, True)[1]
        else:
            G = _mabn(a[:, None] * mu, cfg, self.consts, True)[1]
            g_kappa = g_kappa + da * np.einsum("kp,kp->k", mu, G)
            if g_mu is not None:
                g_mu = g_mu + a[:, None] * G
        # -KL: d/dr = -[(r - alpha1) psi'(r) + alpha2/s - 1 + alpha3 (2r + 1)/s^2],
        #      d/ds = -[alpha1/s - r alpha2/s^2 - 2 alpha3 r (r + 1)/s^3]
        g_r = g_r - ((r - alpha1) * special.polygamma(1, r) + alpha2 / s - 1.0
                     + alpha3 * de_g2_dr)
        g_s = g_s - (alpha1 / s - r * alpha2 / (s * s) - 2.0 * alpha3 * eg2 / s)
        return g_mu, g_kappa, g_r, g_s


def direction_parts(pt, cfg, consts, lam):
    """Direction part of the prior term of one set, nats: (per vector (K,), coupling).

    "vi": the vMF entropies per vector and the Type II MABN lower bound of the
    mean directions (which couples them); "pr": -KL(vMF(mu_k, kappa_k) ||
    vMF(mu0, kappa_prior)) per vector and lam Omega(mu).
    """
    a, _, _, _, _, entropy = pt.bessel()
    if cfg.method == "pr":
        # -KL(q || vMF(mu0, kappa0)) = H + log C_p(kappa0) + kappa0 A mu0.mu
        sep = entropy + consts.root + cfg.kappa_prior * a * (pt.mu @ cfg.mu0)
        coupled = 0.0
        if lam != 0.0 and pt.mu.shape[0] > 1:
            coupled = lam * _omega(pt.mu, cfg.gamma, False)[0]
        return sep, coupled
    return entropy, _mabn(a[:, None] * pt.mu, cfg, consts, False)[0]


def set_prior(pt, cfg, consts, lam, which=0):
    """Whole prior term of set ``which`` (0 experts, 1 gates): direction part -
    sum_k KL of the magnitudes."""
    sep, coupled = direction_parts(pt, cfg, consts, lam)
    kl = pt.gamma(*set_alphas(cfg, which))[2]
    return float(np.sum(sep)) + coupled - float(np.sum(kl))


def _mabn(m, cfg, consts, need_grad):
    """Type II MABN lower bound sum_i L_i of the mean directions m (K, p) and dL/dm.

    The formulas of :func:`~skbinvi.experts._bounds.mabn_expected_log_prior_lower_bound`
    with the chord constants precomputed (checked against it in the tests),
    in one compiled pass (:func:`_mabn_kernel`).
    """
    m = np.ascontiguousarray(m, dtype=np.float64)
    grad = np.empty(m.shape if need_grad else (0, m.shape[1]))
    value = _mabn_kernel(m, float(cfg.kappa_prior),
                         np.ascontiguousarray(cfg.mu0, dtype=np.float64),
                         float(consts.f0), consts.slope, float(consts.root), grad)
    return value, (grad if need_grad else None)


@njit(error_model="numpy")
def _mabn_kernel(m, kp, mu0, f0, slope, root, grad):
    """Value of the Type II MABN bound; its gradient into ``grad`` (K, p), unless
    ``grad`` has no rows (shape (0, p): the value only).

    With S_i = sum_{j<i} m_j, Q_i = max(i + ||S_i||^2 - sum_{j<i} ||m_j||^2, 0):
    value = kp mu0.m_0 - kp sum_i S_i.m_i - (-root + sum_{i>=1} [f0 + slope_i
    sqrt(Q_i)]); dvalue/dm_i = -kp (sum_j m_j - m_i) + [i = 0] kp mu0 -
    (sum_{l>i} c_l S_l - (sum_{l>i} c_l) m_i), c_l = slope_l / sqrt(Q_l)
    (0 where Q_l = 0 and for l = 0).
    """
    K, p = m.shape
    # one pass over the rows: S_i, the sums of the pass and sum_i m_i (each
    # loop over the p coordinates fuses what would otherwise be separate ones)
    S = np.empty((K, p))
    total = np.zeros(p)
    energy = 0.0
    for j in range(p):
        energy += kp * mu0[j] * m[0, j]
    z = -root
    coef = np.zeros(K)
    sumsq = 0.0
    for i in range(K):
        ss = 0.0
        sm = 0.0
        mm = 0.0
        for j in range(p):
            s_ij = S[i - 1, j] + m[i - 1, j] if i > 0 else 0.0
            S[i, j] = s_ij
            ss += s_ij * s_ij
            sm += s_ij * m[i, j]
            mm += m[i, j] * m[i, j]
            total[j] += m[i, j]
        energy -= kp * sm
        if i >= 1:
            q = i + ss - sumsq
            root_q = math.sqrt(0.0 if 0.0 > q else q)
            z += f0 + slope[i] * root_q
            if root_q > 0.0:
                coef[i] = slope[i] / root_q
        sumsq += mm
    if grad.shape[0] > 0:
        tail_cs = np.zeros(p)
        tail_c = 0.0
        for i in range(K - 1, -1, -1):
            for j in range(p):
                grad[i, j] = (-kp * (total[j] - m[i, j])
                              - (tail_cs[j] - tail_c * m[i, j]))
                tail_cs[j] += coef[i] * S[i, j]
            tail_c += coef[i]
        for j in range(p):
            grad[0, j] += kp * mu0[j]
    return energy - z


def _omega(mu, gamma, need_grad):
    """Omega of unit rows (no validation): value and gradient, as in _angular."""
    return value_and_grad_unchecked(mu, np.linalg.norm(mu, axis=1), gamma, need_grad)


_FIELDS = ("mu", "kappa", "r", "s")


def _scaled_direction(pt, grad, f):
    """Block f of the ascent direction, each vector's largest entry 1.

    Tangent to the sphere for mu, in log scale for kappa, r, s.
    """
    g = grad[f]
    if f == 0:
        d = g - np.sum(g * pt.mu, axis=1, keepdims=True) * pt.mu
        m = np.max(np.abs(d), axis=1)
    else:
        d = getattr(pt, _FIELDS[f]) * g
        m = np.abs(d)
    ok = (m > 0.0) & np.isfinite(m)
    if not np.any(ok):
        return None
    scale = np.where(ok, 1.0 / np.where(ok, m, 1.0), 0.0)
    return d * (scale[:, None] if f == 0 else scale)


def _step(pt, f, direction, h):
    if f == 0:
        new = pt.mu + h[:, None] * direction
        new /= np.linalg.norm(new, axis=1, keepdims=True)
        return pt.replace("mu", new)
    old = getattr(pt, _FIELDS[f])
    new = old * np.exp(h * direction)
    if f == 1:
        new = np.clip(new, KAPPA_MIN, KAPPA_MAX)
    return pt.replace(_FIELDS[f], new)


def ascend(objectives, points, steps, n_rounds, tol):
    """Blockwise gradient ascent on q at fixed auxiliaries, one step size per vector.

    Parameters
    ----------
    objectives : sequence of 2 SetObjective
        Experts and gates.
    points : sequence of 2 Point
        Current q of each set.
    steps : ndarray of shape (8, K)
        Step size of each block (set x field) and vector, updated in place.
    n_rounds : int
        Maximum rounds over the 8 blocks.
    tol : float
        Stop when a round gains less than ``tol`` nats.

    Returns
    -------
    points : list of 2 Point
    gain : float
        Increase of the fixed-auxiliary objective (nats, >= 0).
    accepted : bool
        Whether any step was accepted.

    Notes
    -----
    Each block (mu, kappa, r, s of the experts, then of the gates) moves
    along its gradient, projected on the tangent space for mu (retraction
    mu <- (mu + h d) / ||.||) and in log scale for the positive parameters,
    every vector's direction rescaled so that its largest entry is 1 (a
    positive factor per vector: still an ascent direction) and moved with
    its own step h_k. The trial is accepted when the set's objective does
    not decrease; otherwise the steps of the vectors whose own (separable)
    part decreased are halved (all of them when only the coupling term of
    the prior decreased) and the trial repeated. Accepted steps double (up
    to 1). The objective never decreases ([AM] section 4.2 for the
    retraction). One step size per vector matters: with one per block, the
    vector with the steepest gradient (typically an unused expert drifting
    to its prior) set the pace of all the others.

    When both sets have their statistics (b, v, Q) and SciPy exports the
    special functions (``COMPILED``), the whole ascent runs in one compiled
    kernel, :func:`_ascend_kernel`: on the two-regime task of the user guide
    (2,000 rows, 21 features, K = 4) the former Python loop took 16-20 ms
    per outer iteration, about 90 evaluations of the objective. Otherwise
    (moments from the data) :func:`_ascend_python`, the same steps, is used;
    both are checked against each other in the tests.
    """
    if COMPILED and all(obj.stats is not None for obj in objectives):
        return _ascend_compiled(objectives, points, steps, n_rounds, tol)
    return _ascend_python(objectives, points, steps, n_rounds, tol)


def _ascend_python(objectives, points, steps, n_rounds, tol):
    """:func:`ascend` with :class:`SetObjective` and :class:`Point` (any likelihood)."""

    points = list(points)
    values = [objectives[j].value(points[j]) for j in range(2)]
    start = sum(values)
    accepted = False
    for _ in range(int(n_rounds)):
        round_start = sum(values)
        for b in range(8):
            j, f = divmod(b, 4)
            pt, obj = points[j], objectives[j]
            direction = _scaled_direction(pt, obj.gradient(pt, need_mu=f == 0), f)
            if direction is None:
                continue
            # without the statistics, the trials of mu are priced from the
            # projections of mu and of the direction (one pass over the data)
            line = f == 0 and obj.stats is None
            if line:
                obj.lik.line(obj.which, pt.mu, direction)
            sep0 = obj.parts(pt)[0]
            h = steps[b].copy()
            while True:
                live = h >= MIN_STEP
                if not np.any(live):
                    steps[b] = INIT_STEP * 1e-3
                    break
                with np.errstate(all="ignore"):
                    new = _step(pt, f, direction, np.where(live, h, 0.0))
                    if line:
                        new._line = np.where(live, h, 0.0)
                    sep, coupled = obj.parts(new)
                    cand = float(np.sum(sep)) + coupled
                if np.isfinite(cand) and cand >= values[j]:
                    points[j], values[j] = new, cand
                    accepted = True
                    steps[b] = np.where(live, np.minimum(2.0 * h, MAX_STEP),
                                        INIT_STEP * 1e-3)
                    break
                bad = live & ~(sep >= sep0)
                if not np.any(bad):
                    bad = live
                h[bad] *= 0.5
        if sum(values) - round_start <= tol:
            break
    return points, sum(values) - start, accepted


def _ascend_compiled(objectives, points, steps, n_rounds, tol):
    """:func:`ascend` through :func:`_ascend_kernel` (statistics of both sets)."""
    cfg, consts = objectives[0].cfg, objectives[0].consts
    mu = np.stack([pt.mu for pt in points])
    pos = np.array([[getattr(pt, f) for f in _FIELDS[1:]] for pt in points])
    stacked = getattr(objectives[0].lik, "stacked_stats", None)
    if stacked is None or objectives[1].lik is not objectives[0].lik:
        stacked = [np.stack([obj.stats[i] for obj in objectives]) for i in range(3)]
    b, v, Q = (np.ascontiguousarray(a) for a in stacked)
    p = mu.shape[2]
    gain, accepted = _ascend_kernel(
        mu, pos, b, v, Q, np.array([obj.lam for obj in objectives]),
        float(cfg.kappa_prior), np.ascontiguousarray(cfg.mu0, dtype=np.float64),
        float(consts.f0), np.ascontiguousarray(consts.slope, dtype=np.float64),
        float(consts.root), float(cfg.gamma) if cfg.method == "pr" else None,
        np.array([(*alphas, magnitude_log_normalizer(*alphas))
                  for alphas in (set_alphas(cfg, 0), set_alphas(cfg, 1))]),
        _asymptotic_coefficients(0.5 * (p - 1.0)), steps, int(n_rounds), float(tol))
    return [Point(mu[j], *pos[j]) for j in range(2)], gain, accepted


# ---------------------------------------------------------------------------
# the same ascent in one compiled kernel (statistics path)
# ---------------------------------------------------------------------------

_PSI = scipy_special("__pyx_fuse_1psi", numba.float64, numba.float64)
_GAMMALN = scipy_special("gammaln", numba.float64, numba.float64)
#: Whether :func:`ascend` can run :func:`_ascend_kernel` (SciPy exports the
#: special functions it calls).
COMPILED = _IVE is not None and _PSI is not None and _GAMMALN is not None


@njit(error_model="numpy")
def _gamma_into(r, s, alphas, out):
    """:meth:`Point.gamma` into ``out`` (3, K): E g, E g^2, KL(q(g_k) || prior),
    the prior of ``alphas`` = (alpha1, alpha2, alpha3, log normalizer)
    (:func:`set_alphas`, :func:`magnitude_log_normalizer`)."""
    alpha1, alpha2, alpha3, log_z = alphas[0], alphas[1], alphas[2], alphas[3]
    for k in range(r.shape[0]):
        rk, sk = r[k], s[k]
        eg, eg2 = rk / sk, (rk + rk * rk) / (sk * sk)
        out[0, k] = eg
        out[1, k] = eg2
        out[2, k] = ((rk - alpha1) * _PSI(rk, 0) - _GAMMALN(rk, 0)
                     + alpha1 * math.log(sk)
                     - rk + alpha2 * eg + alpha3 * eg2 + log_z)


@njit(error_model="numpy")
def _products_into(Q, b, mu, qm, mb, mqm):
    """Q mu (K, p), mu^T b, mu^T Q mu (K,) of :meth:`SetObjective._mu_products`."""
    K, p = mu.shape
    for k in range(K):
        t_b = 0.0
        t_q = 0.0
        for i in range(p):
            acc = 0.0
            for j in range(p):
                acc += Q[k, i, j] * mu[k, j]
            qm[k, i] = acc
            t_b += mu[k, i] * b[k, i]
            t_q += mu[k, i] * acc
        mb[k] = t_b
        mqm[k] = t_q


@njit(error_model="numpy")
def _omega_kernel(mu, gamma, grad):
    """Omega of the rows of ``mu`` and its gradient into ``grad`` (K, p), unless
    ``grad`` has no rows (shape (0, p): the value only):
    :func:`~skbinvi.experts._angular.value_and_grad_unchecked` without the
    (K, K, p) array of perpendicular components (each is formed when
    needed). K >= 2."""
    K, p = mu.shape
    U = np.empty((K, p))
    for i in range(K):
        nrm = 0.0
        for t in range(p):
            nrm += mu[i, t] * mu[i, t]
        nrm = math.sqrt(nrm)
        for t in range(p):
            U[i, t] = mu[i, t] / nrm
    cos = np.empty((K, K))
    sin = np.empty((K, K))
    theta = np.zeros((K, K))
    for i in range(K):
        for j in range(K):
            c = 0.0
            for t in range(p):
                c += U[i, t] * U[j, t]
            cos[i, j] = min(max(c, -1.0), 1.0)
    for i in range(K):
        for j in range(K):
            ac = abs(cos[i, j])
            sgn = 1.0 if cos[i, j] >= 0.0 else -1.0
            ss = 0.0
            for t in range(p):
                e = sgn * U[j, t] - ac * U[i, t]
                ss += e * e
            sin[i, j] = math.sqrt(ss)
            theta[i, j] = math.atan2(sin[i, j], ac)
    M = K * (K - 1) // 2
    total = 0.0
    for i in range(K):
        for j in range(i + 1, K):
            th = 0.5 * (theta[i, j] + theta[j, i])
            theta[i, j] = th
            theta[j, i] = th
            total += th
    mean = total / M
    var = 0.0
    for i in range(K):
        for j in range(i + 1, K):
            var += (theta[i, j] - mean) ** 2
    var /= M
    if grad.shape[0] > 0:
        for i in range(K):
            for t in range(p):
                grad[i, t] = 0.0
            for j in range(K):
                if j == i or not (sin[i, j] > 0.0 and theta[i, j] > PARALLEL_TOL
                                  and cos[i, j] != 0.0):
                    continue
                coef = (1.0 - 2.0 * gamma * (theta[i, j] - mean)) / M / sin[i, j]
                ac = abs(cos[i, j])
                sgn = 1.0 if cos[i, j] >= 0.0 else -1.0
                for t in range(p):
                    grad[i, t] -= coef * (sgn * U[j, t] - ac * U[i, t])
            nrm = math.sqrt(np.sum(mu[i] * mu[i]))
            radial = 0.0
            for t in range(p):
                grad[i, t] /= nrm
                radial += grad[i, t] * U[i, t]
            for t in range(p):
                grad[i, t] -= radial * U[i, t]
    return mean - gamma * var


@njit(error_model="numpy")
def _set_terms(mu, pos, b, v, bes, gam, qm, mb, mqm, kappa_prior, mu0, f0, slope, root,
               gamma, lam, alphas, sep, g_mu, g_pos):
    """:meth:`SetObjective.parts` of one set into ``sep`` (K,), returning the
    coupling term, and, unless ``g_mu`` has no rows (shape (0, p): the parts
    only), :meth:`SetObjective.gradient` into ``g_mu`` (K, p) and ``g_pos``
    (3, K), the gradients in (kappa, r, s) = ``pos`` (3, K). ``gamma`` None:
    "vi" (MABN prior), else "pr" with Omega's variance weight ``gamma`` (as
    in :func:`_ascend_kernel`)."""
    K, p = mu.shape
    grad = g_mu.shape[0] > 0
    # the mean directions A_k mu_k (the argument of the MABN bound of "vi")
    m = np.empty((K, p))
    for k in range(K):
        a, aok, omega, da, d_aok = bes[0, k], bes[1, k], bes[2, k], bes[3, k], bes[4, k]
        eg, eg2 = gam[0, k], gam[1, k]
        g_c1, g_c2, g_c3 = mb[k], v[k], mqm[k]
        lik = (eg * a) * g_c1 + (eg2 * aok) * g_c2 + (eg2 * omega) * g_c3
        direction = bes[5, k]
        dot = 0.0
        if gamma is not None:
            for t in range(p):
                dot += mu[k, t] * mu0[t]
            direction = direction + root + kappa_prior * a * dot
        else:
            for t in range(p):
                m[k, t] = a * mu[k, t]
        sep[k] = direction + lik - gam[2, k]
        if not grad:
            continue
        c1, c3 = eg * a, eg2 * omega
        for t in range(p):
            g_mu[k, t] = c1 * b[k, t] + 2.0 * c3 * qm[k, t]
        rk, sk = pos[1, k], pos[2, k]
        de_g2_dr = (2.0 * rk + 1.0) / (sk * sk)
        g_pos[0, k] = g_c1 * eg * da + (g_c2 - p * g_c3) * eg2 * d_aok - pos[0, k] * da
        alpha1, alpha2, alpha3 = alphas[0], alphas[1], alphas[2]
        g_pos[1, k] = (g_c1 * a / sk + de_g2_dr * (g_c2 * aok + g_c3 * omega)
                       - ((rk - alpha1) * trigamma(rk) + alpha2 / sk - 1.0
                          + alpha3 * de_g2_dr))
        g_pos[2, k] = (-g_c1 * eg * a / sk
                       - 2.0 * eg2 / sk * (g_c2 * aok + g_c3 * omega)
                       - (alpha1 / sk - rk * alpha2 / (sk * sk)
                          - 2.0 * alpha3 * eg2 / sk))
        if gamma is not None:
            for t in range(p):
                g_mu[k, t] += kappa_prior * a * mu0[t]
            g_pos[0, k] += kappa_prior * da * dot
    G = np.empty((K, p) if grad else (0, p))
    if gamma is not None:
        if not (lam != 0.0 and K > 1):
            return 0.0
        coupled = lam * _omega_kernel(mu, gamma, G)
        if grad:
            for k in range(K):
                for t in range(p):
                    g_mu[k, t] += lam * G[k, t]
        return coupled
    coupled = _mabn_kernel(m, kappa_prior, mu0, f0, slope, root, G)
    if grad:
        for k in range(K):
            dot = 0.0
            for t in range(p):
                g_mu[k, t] += bes[0, k] * G[k, t]
                dot += mu[k, t] * G[k, t]
            g_pos[0, k] += bes[3, k] * dot
    return coupled


@njit(error_model="numpy")
def _ascend_kernel(mu, pos, b, v, Q, lams, kappa_prior, mu0, f0, slope, root, gamma,
                   alphas, coef, steps, n_rounds, tol):
    """:func:`ascend` on the statistics, both sets in one compiled pass.

    ``mu`` (2, K, p) and ``pos`` (2, 3, K), the (kappa, r, s) of each set:
    experts then gates, updated in place; ``b`` (2, K, p), ``v`` (2, K), ``Q``
    (2, K, p, p) the statistics of each set; ``gamma`` None for "vi" (the
    MABN prior), else the variance weight of Omega for "pr": Numba compiles
    only the branches of the method in use (it prunes ``gamma is None`` tests
    on the argument's type), so a "vi" fit never compiles Omega; ``lams``
    (2,) the weights of Omega; ``alphas`` (2, 4) the (alpha1, alpha2, alpha3,
    log normalizer) of each set's magnitude prior (:func:`set_alphas`,
    :func:`magnitude_log_normalizer`); ``coef`` the asymptotic
    coefficients of A_p; ``steps`` (8, K) updated in place. The steps,
    trials and acceptance rules are those of :func:`_ascend_python` (the
    derived quantities of a trial point are recomputed for the field it
    changes only; the positive fields kappa, r, s move alike, in log scale).
    Returns (gain in nats, whether any step was accepted).
    """
    _, K, p = mu.shape
    pf = float(p)
    bes = np.empty((2, 6, K))
    gam = np.empty((2, 3, K))
    qm = np.empty((2, K, p))
    mb = np.empty((2, K))
    mqm = np.empty((2, K))
    sep = np.empty((2, K))
    values = np.empty(2)
    # gradient outputs without rows: _set_terms evaluates the parts only
    no_grad, no_grad_pos = np.empty((0, p)), np.empty((0, K))
    for j in range(2):
        vmf_point_quantities_into(pf, pos[j, 0], coef, bes[j])
        _gamma_into(pos[j, 1], pos[j, 2], alphas[j], gam[j])
        _products_into(Q[j], b[j], mu[j], qm[j], mb[j], mqm[j])
        coupled = _set_terms(mu[j], pos[j], b[j], v[j], bes[j], gam[j], qm[j], mb[j],
                             mqm[j], kappa_prior, mu0, f0, slope, root, gamma, lams[j],
                             alphas[j], sep[j], no_grad, no_grad_pos)
        total = 0.0
        for k in range(K):
            total += sep[j, k]
        values[j] = total + coupled
    start = values[0] + values[1]
    accepted = False
    g_mu, g_pos = np.empty((K, p)), np.empty((3, K))
    direction = np.empty((K, p))
    t_mu, t_field = np.empty((K, p)), np.empty(K)
    t_bes, t_gam = np.empty((6, K)), np.empty((3, K))
    t_qm, t_mb, t_mqm, t_sep = np.empty((K, p)), np.empty(K), np.empty(K), np.empty(K)
    h = np.empty(K)
    for _ in range(n_rounds):
        round_start = values[0] + values[1]
        for blk in range(8):
            j, f = blk // 4, blk % 4
            _set_terms(mu[j], pos[j], b[j], v[j], bes[j], gam[j], qm[j], mb[j], mqm[j],
                       kappa_prior, mu0, f0, slope, root, gamma, lams[j], alphas[j],
                       t_sep, g_mu, g_pos)
            # the scaled ascent direction of the block (_scaled_direction)
            any_ok = False
            for k in range(K):
                if f == 0:
                    dot = 0.0
                    for t in range(p):
                        dot += g_mu[k, t] * mu[j, k, t]
                    m = 0.0
                    for t in range(p):
                        direction[k, t] = g_mu[k, t] - dot * mu[j, k, t]
                        a_t = abs(direction[k, t])
                        if a_t > m or a_t != a_t:  # NaN propagates, as np.max
                            m = a_t
                else:
                    d = pos[j, f - 1, k] * g_pos[f - 1, k]
                    direction[k, 0] = d
                    m = abs(d)
                ok = m > 0.0 and math.isfinite(m)
                any_ok = any_ok or ok
                scale = 1.0 / m if ok else 0.0
                if f == 0:
                    for t in range(p):
                        direction[k, t] *= scale
                else:
                    direction[k, 0] *= scale
            if not any_ok:
                continue
            for k in range(K):
                h[k] = steps[blk, k]
            while True:
                # a vector is live while its step is at least MIN_STEP
                n_live = 0
                for k in range(K):
                    n_live += h[k] >= MIN_STEP
                if n_live == 0:
                    for k in range(K):
                        steps[blk, k] = INIT_STEP * 1e-3
                    break
                # the trial point (_step): only the field f and what depends on it
                for k in range(K):
                    hk = h[k] if h[k] >= MIN_STEP else 0.0
                    if f == 0:
                        nrm = 0.0
                        for t in range(p):
                            x = mu[j, k, t] + hk * direction[k, t]
                            t_mu[k, t] = x
                            nrm += x * x
                        nrm = math.sqrt(nrm)
                        for t in range(p):
                            t_mu[k, t] /= nrm
                    else:
                        x = pos[j, f - 1, k] * math.exp(hk * direction[k, 0])
                        if f == 1:
                            x = KAPPA_MIN if KAPPA_MIN > x else x
                            x = KAPPA_MAX if KAPPA_MAX < x else x
                        t_field[k] = x
                # the trial's quantities: the current ones but for those of field f
                # (one call site per kernel: each site is compiled separately)
                x_mu, x_bes, x_gam, x_mb, x_mqm = mu[j], bes[j], gam[j], mb[j], mqm[j]
                if f == 0:
                    _products_into(Q[j], b[j], t_mu, t_qm, t_mb, t_mqm)
                    x_mu, x_mb, x_mqm = t_mu, t_mb, t_mqm
                elif f == 1:
                    vmf_point_quantities_into(pf, t_field, coef, t_bes)
                    x_bes = t_bes
                else:
                    x_r, x_s = (t_field, pos[j, 2]) if f == 2 else (pos[j, 1], t_field)
                    _gamma_into(x_r, x_s, alphas[j], t_gam)
                    x_gam = t_gam
                cp = _set_terms(x_mu, pos[j], b[j], v[j], x_bes, x_gam, qm[j], x_mb,
                                x_mqm, kappa_prior, mu0, f0, slope, root, gamma,
                                lams[j], alphas[j], t_sep, no_grad,
                                no_grad_pos)
                cand = 0.0
                for k in range(K):
                    cand += t_sep[k]
                cand += cp
                if math.isfinite(cand) and cand >= values[j]:
                    # element loops, not slice assignments (whose shape checks
                    # compile error-message formatting)
                    for k in range(K):
                        if f == 0:
                            for t in range(p):
                                mu[j, k, t] = t_mu[k, t]
                                qm[j, k, t] = t_qm[k, t]
                            mb[j, k] = t_mb[k]
                            mqm[j, k] = t_mqm[k]
                        else:
                            pos[j, f - 1, k] = t_field[k]
                            if f == 1:
                                for t in range(6):
                                    bes[j, t, k] = t_bes[t, k]
                            else:
                                for t in range(3):
                                    gam[j, t, k] = t_gam[t, k]
                        sep[j, k] = t_sep[k]
                    values[j] = cand
                    accepted = True
                    for k in range(K):
                        x = 2.0 * h[k]
                        steps[blk, k] = ((MAX_STEP if MAX_STEP < x else x)
                                         if h[k] >= MIN_STEP else INIT_STEP * 1e-3)
                    break
                # halve the steps of the live vectors whose own part decreased
                # (of all live vectors when none did)
                n_bad = 0
                for k in range(K):
                    n_bad += h[k] >= MIN_STEP and not (t_sep[k] >= sep[j, k])
                for k in range(K):
                    if h[k] >= MIN_STEP and (n_bad == 0 or not (t_sep[k] >= sep[j, k])):
                        h[k] *= 0.5
        if values[0] + values[1] - round_start <= tol:
            break
    return values[0] + values[1] - start, accepted
