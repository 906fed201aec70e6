"""First-order optimizers for the gradient-based inference methods.

:class:`Adam` updates whole arrays, or only some rows of an array: the models
with one row of parameters per feature (the noisy-OR weights, the first
encoder layer) update in a minibatch only the rows of the features active in
it, and give the other rows their delayed update every few minibatches, so
that the cost of a minibatch does not grow with the number of features.
"""

import math

import numpy as np

from ._math import SOFTPLUS_BLOCK, softplus_sigmoid
from ._numba import balanced_parts, njit, parallel_pays, part_count, run_parts


@njit(error_model="numpy", inline="always")
def _adam_moments(g, m, v, beta1, beta2, step_size, epsilon):
    """One entry of an Adam step: the new moments and the parameter's move.

    Inlined (``inline="always"``) into the loops of the update kernels, which
    stay vectorized; ``error_model="numpy"`` as theirs.
    """
    mm = beta1 * m + (1.0 - beta1) * g
    vv = beta2 * v + (1.0 - beta2) * g * g
    return mm, vv, step_size * mm / (math.sqrt(vv) + epsilon)


def _adam_update(param, grad, m, v, step_size, beta1, beta2, epsilon):
    """One Adam ascent step on flat views, in place, in NumPy.

    ``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g**2;
    param += step_size * m / (sqrt(v) + epsilon)``, in the order of
    operations of :func:`_adam_moments` (so the same numbers as the row
    kernels). It serves the small dense parameters (the encoder's hidden
    layers, the prior), for which a jitted loop would only add its
    compilation to the first fit.

    Checked against a NumPy Adam step in
    tests/test_noisy_or_kernels.py::test_fused_adam_matches_numpy_reference.
    """
    # silent on non-finite values, as the jitted kernels (a diverging fit is
    # reported by the estimator's checks)
    with np.errstate(all="ignore"):
        m[:] = beta1 * m + (1.0 - beta1) * grad
        v[:] = beta2 * v + (1.0 - beta2) * grad * grad
        param += step_size * m / (np.sqrt(v) + epsilon)


@njit(error_model="numpy", inline="always")
def _adam_row(pp, pm, pv, gj, has_grad, step_size, beta1, beta2, epsilon):
    """The Adam step of one row (1-D views; ``gj`` unused without gradient)."""
    P = pp.shape[0]
    # the zero-gradient case in its own loop: both loops then vectorize
    if not has_grad:
        for p in range(P):
            pm[p], pv[p], move = _adam_moments(0.0, pm[p], pv[p], beta1, beta2,
                                               step_size, epsilon)
            pp[p] += move
        return
    for p in range(P):
        pm[p], pv[p], move = _adam_moments(gj[p], pm[p], pv[p], beta1, beta2,
                                           step_size, epsilon)
        pp[p] += move


def _adam_update_rows(param, grad, rows, m, v, step_size, beta1, beta2, epsilon):
    """Adam ascent step on the rows ``rows`` of a 2-D parameter, in place.

    ``param``, ``m``, ``v`` have shape (D, P); ``rows`` (R,) int64, distinct;
    ``grad`` has shape (R, P) (row j is the gradient of row ``rows[j]``) or
    (0, P), which means a zero gradient: the step then moves the rows by their
    momentum alone, as dense Adam does for a parameter with no gradient.
    All rows in one call of :func:`_adam_rows_range` (compiled with
    ``error_model="numpy"``, so that its loops vectorize). Every row is updated on
    its own (:meth:`Adam.update_rows` splits a large update between threads,
    with the same numbers).

    Checked against a NumPy Adam step in
    tests/test_noisy_or_kernels.py::test_fused_adam_matches_numpy_reference and,
    within training, against the dense reference epoch of tests/test_noisy_or_tr
    aining.py::test_row_sparse_epochs_match_dense_reference.
    """
    _adam_rows_range(0, rows.shape[0], param, grad, rows, m, v, step_size, beta1,
                     beta2, epsilon)


@njit(error_model="numpy", nogil=True)
def _adam_rows_range(lo, hi, param, grad, rows, m, v, step_size, beta1, beta2, epsilon):
    """:func:`_adam_update_rows` of ``rows[lo:hi]``."""
    # the rows as 1-D views: the inner loops then vectorize (0.29 ms per call
    # for 2,500 rows of 100 entries, against 0.95 ms for one loop with the
    # division check)
    has_grad = grad.shape[0] > 0
    for j in range(lo, hi):
        i = rows[j]
        # without a gradient the row itself stands in for it (not read)
        _adam_row(param[i], m[i], v[i], grad[j] if has_grad else param[i],
                  has_grad, step_size, beta1, beta2, epsilon)


# Entries from which an Adam sweep over the rows of a softplus-parametrized
# matrix runs on threads. Measured on two cores (Intel Xeon, 2026-12-04; it
# depends on the machine) by running each sweep of default noisy-OR fits on
# one thread or two at random (``benchmarks/bench_noisy_or.py --sections
# threads``): 1.1 to 2.4 times the one-thread time at 16,000 to 50,000
# entries, 0.79-0.90 at 103,000 to 125,000, 0.63-0.74 from 150,000 on.
PARALLEL_MIN_ENTRIES = 100_000
# A plain row update (no softplus to compute: memory-bound) pays later, as a
# multiple of PARALLEL_MIN_ENTRIES (same measurements): 1.0 to 2.9 times the
# one-thread time at 51,000 to 230,000 entries (the encoder rows of the
# features active in a minibatch), 0.62 at 937,000.
ROWS_SCALE = 5.0


def _adam_update_softplus_rows(raw, value, slope, colsum, rows, grad_rows, grad,
                               delayed, last, now, m, v, step_size, beta1, beta2,
                               epsilon):
    """Adam ascent step on rows of a softplus-parametrized matrix, with delayed
    gradient.

    The parameter is ``value = softplus(raw)`` (shape (D, P)); the objective's
    gradient with respect to ``value`` is row-sparse plus a part that every
    row receives at every minibatch. ``delayed[s]`` (shape (S, P)) is the
    running sum of that dense part over the minibatches 1..s of the current
    update window, and row i last received it at minibatch ``last[i]``.
    Because ``raw[i]`` has not moved since, the delayed gradient of row i is
    exactly ``slope[i] * (delayed[now] - delayed[last[i]])``. The step uses
    ``slope * (grad[grad_rows[j]] + delayed[now] - delayed[last[i]])`` for
    row ``i = rows[j]``, without the ``grad`` term when ``grad_rows[j] < 0``
    or ``grad`` has no rows (shape (0, P)), then refreshes ``value``,
    ``slope = sigmoid(raw)`` (by the vectorized
    :func:`~skbinvi._math.softplus_sigmoid`) and the column sums ``colsum``
    (P,) of ``value`` in place (incrementally). ``last`` is left to the
    caller. One call can thus update the rows of a minibatch's active
    features and give every other row its delayed step in a single pass over
    the arrays in memory order (``rows`` = all rows): the update is
    memory-bound (five (D, P) arrays), and one sequential sweep takes 0.57
    times the time of two sweeps over the active and the other rows (23,100
    rows of 50, 12,000 active). :func:`_softplus_rows_range` runs the rows:
    its loops over P call no math library and check no division by zero
    (``error_model="numpy"``) and run over 1-D row views, so that they
    compile to SIMD instructions; rows are refreshed about ``SOFTPLUS_BLOCK``
    entries at a time.

    :meth:`Adam.update_softplus_rows` can split the same steps between
    threads (:func:`_softplus_rows_range`) for a caller that recomputes
    ``colsum``.

    Checked against the dense reference epoch (plain Adam on every row at every
    step) of tests/test_noisy_or_training.py::test_row_sparse_epochs_match_dense
    _reference, and against a NumPy step in
    tests/test_noisy_or_kernels.py::test_softplus_adam_rows_match_numpy_reference.
    """
    _softplus_rows_range(0, rows.shape[0], raw, value, slope, colsum, True, rows,
                         grad_rows, grad, delayed, last, now, m, v, step_size,
                         beta1, beta2, epsilon)


@njit(error_model="numpy", nogil=True)
def _softplus_rows_range(j_lo, j_hi, raw, value, slope, colsum, track, rows,
                         grad_rows, grad, delayed, last, now, m, v, step_size, beta1,
                         beta2, epsilon):
    """:func:`_adam_update_softplus_rows` of ``rows[j_lo:j_hi]`` (``j_lo`` a
    multiple of the group size); ``colsum`` is refreshed only if ``track``."""
    P = raw.shape[1]
    sparse = grad.shape[0] > 0
    dnow = delayed[now]
    # rows go through softplus_sigmoid a group at a time, gathered into one
    # contiguous buffer of about SOFTPLUS_BLOCK entries (its loops are
    # vectorized: long runs amortize their start-up)
    group = max(1, SOFTPLUS_BLOCK // P)
    work = np.empty((3, SOFTPLUS_BLOCK))
    x = np.empty(group * P)
    fresh = np.empty(group * P)
    fresh_slope = np.empty(group * P)
    g = np.empty(P)
    for j0 in range(j_lo, j_hi, group):
        j1 = min(j0 + group, j_hi)
        for j in range(j0, j1):
            i = rows[j]
            dlag = delayed[last[i]]
            si, mi, vi, ri = slope[i], m[i], v[i], raw[i]
            xs = x[(j - j0) * P:(j - j0 + 1) * P]
            k = grad_rows[j] if sparse else -1
            if k >= 0:
                gk = grad[k]
                for p in range(P):
                    g[p] = dnow[p] - dlag[p] + gk[p]
            else:
                for p in range(P):
                    g[p] = dnow[p] - dlag[p]
            for p in range(P):
                mi[p], vi[p], move = _adam_moments(g[p] * si[p], mi[p], vi[p], beta1,
                                                   beta2, step_size, epsilon)
                ri[p] += move
                xs[p] = ri[p]
        n = (j1 - j0) * P
        softplus_sigmoid(x[:n], fresh[:n], fresh_slope[:n], work)
        for j in range(j0, j1):
            i = rows[j]
            at = (j - j0) * P
            fv, fs, vl, sl = (fresh[at:at + P], fresh_slope[at:at + P], value[i],
                              slope[i])
            if track:
                for p in range(P):
                    colsum[p] += fv[p] - vl[p]
            for p in range(P):
                vl[p] = fv[p]
                sl[p] = fs[p]


def _adam_update_softplus_entries(raw, value, slope, total, rows, grad_rows, grad,
                                  delayed, last, now, m, v, step_size, beta1, beta2,
                                  epsilon):
    """:func:`_adam_update_softplus_rows` for a 1-D parameter (one entry per row).

    ``raw``, ``value``, ``slope``, ``m``, ``v`` have shape (D,), ``delayed``
    (S,), ``grad`` (G,) and ``total`` (1,) is the running sum of ``value``;
    ``rows`` are distinct. Same steps, in the same order of operations, as
    the row kernel with P = 1, as whole-array NumPy operations on the
    entries of ``rows`` (the leak of the noisy-OR model): the softplus by
    :func:`~skbinvi._math.softplus_sigmoid`, and the running sum in the
    order of ``rows`` (a cumulative sum, which adds in order).
    """
    with np.errstate(all="ignore"):  # silent, as :func:`_adam_update`
        g = delayed[now] - delayed[last[rows]]
        if grad.shape[0] > 0:
            has = grad_rows >= 0
            g[has] = g[has] + grad[grad_rows[has]]
        g *= slope[rows]
        mm = beta1 * m[rows] + (1.0 - beta1) * g
        vv = beta2 * v[rows] + (1.0 - beta2) * g * g
        m[rows] = mm
        v[rows] = vv
        x = raw[rows] + step_size * mm / (np.sqrt(vv) + epsilon)
        raw[rows] = x
        fresh, fresh_slope = np.empty_like(x), np.empty_like(x)
        softplus_sigmoid(x, fresh, fresh_slope, np.empty((3, SOFTPLUS_BLOCK)))
        total[0] = np.cumsum(np.concatenate((total, fresh - value[rows])))[-1]
        value[rows] = fresh
        slope[rows] = fresh_slope


def _rows_view(array):
    """2-D view (n_rows, -1) of a C-contiguous array (a 1-D array gets one column)."""
    return array.reshape(array.shape[0], math.prod(array.shape[1:]))


class Adam:
    """Adam (Kingma & Ba, 2015) for a list of arrays, *ascending* an objective.

    Parameters
    ----------
    params : list of ndarray
        C-contiguous float64 arrays, updated in place.
    learning_rate : float
        Step size.
    beta1, beta2 : float
        Exponential decay rates of the first and second moment estimates.
    epsilon : float
        Added to the square root of the second moment estimate.

    Notes
    -----
    :meth:`step` is one Adam step on every array. The finer interface serves
    row-sparse training: :meth:`tick` starts a step (bias-corrected step size
    of step ``t``), then :meth:`update`, :meth:`update_rows` and
    :meth:`update_softplus_rows` apply it to whole arrays or to some of their
    rows. A row left out of a step keeps its moments unchanged (as in
    PyTorch's ``SparseAdam``) until it is updated again.

    The state (``t``, ``m``, ``v``) is kept on the instance, so an estimator
    that stores its ``Adam`` resumes exactly where it stopped (``partial_fit``).
    """

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999,
                 epsilon=1e-8):
        self.params = params
        self.learning_rate = learning_rate
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.t = 0
        # np.zeros, not zeros_like: the pages are zeroed when first written
        self.m = [np.zeros(p.shape, dtype=p.dtype) for p in params]
        self.v = [np.zeros(p.shape, dtype=p.dtype) for p in params]

    @property
    def step_size(self):
        """Bias-corrected step size of the current step ``t``."""
        b1, b2 = self.beta1, self.beta2
        return (self.learning_rate * math.sqrt(1.0 - b2**self.t)
                / (1.0 - b1**self.t))

    def tick(self):
        """Start a new step (``t += 1``)."""
        self.t += 1

    def update(self, i, grad):
        """Apply the current step to the whole array ``params[i]``."""
        _adam_update(self.params[i].reshape(-1),
                     np.ascontiguousarray(grad).reshape(-1),
                     self.m[i].reshape(-1), self.v[i].reshape(-1),
                     self.step_size, self.beta1, self.beta2, self.epsilon)

    def update_rows(self, i, rows, grad=None):
        """Apply the current step to the rows ``rows`` (int64) of ``params[i]``.

        ``grad`` has one row per entry of ``rows``; None means a zero gradient
        (the rows move by their momentum).
        """
        param = _rows_view(self.params[i])
        grad = (np.empty((0, param.shape[1])) if grad is None
                else _rows_view(np.ascontiguousarray(grad)))
        args = (param, grad, rows, _rows_view(self.m[i]), _rows_view(self.v[i]),
                self.step_size, self.beta1, self.beta2, self.epsilon)
        R = rows.shape[0]
        min_entries = ROWS_SCALE * PARALLEL_MIN_ENTRIES
        if not parallel_pays(R * param.shape[1], min_entries, n_tasks=R):
            _adam_update_rows(*args)
            return
        # the rows are distinct: the parts write to disjoint rows
        run_parts(_adam_rows_range, [
            (lo, hi, *args) for lo, hi in balanced_parts(
                np.arange(R + 1), part_count(R * param.shape[1], min_entries))])

    def update_softplus_rows(self, i, rows, grad, delayed, last, now, value, slope,
                             colsum, grad_rows=None, colsum_recomputed=False):
        """Apply the current step to rows of a softplus-parametrized ``params[i]``.

        See :func:`_adam_update_softplus_rows`: ``params[i]`` is the raw
        parameter, ``value``/``slope`` its softplus and sigmoid and ``colsum``
        the column sums of ``value`` (all refreshed in place); ``grad`` is the
        row-sparse gradient with respect to ``value`` (None: none), its row
        ``grad_rows[j]`` (-1: none) belonging to ``rows[j]`` (by default row
        j), and ``delayed``, ``last``, ``now`` describe the delayed dense
        gradient. A 1-D ``params[i]`` (one entry per row; ``delayed`` and
        ``grad`` then 1-D too) goes to :func:`_adam_update_softplus_entries`.
        With ``colsum_recomputed=True`` the caller recomputes ``colsum`` after
        the call, which may then leave it stale, and ``rows`` are distinct: a
        large update is then split between threads (the same numbers).
        """
        raw = self.params[i]
        if grad is None:
            grad = np.empty((0,) + raw.shape[1:])
            grad_rows = np.empty(0, dtype=np.int64)
        else:
            grad = np.ascontiguousarray(grad)
            if grad_rows is None:
                grad_rows = np.arange(grad.shape[0], dtype=np.int64)
        if raw.ndim == 1:
            _adam_update_softplus_entries(
                raw, value, slope, colsum, rows, grad_rows, grad, delayed, last, now,
                self.m[i], self.v[i], self.step_size, self.beta1, self.beta2,
                self.epsilon,
            )
            return
        args = (rows, grad_rows, _rows_view(grad), _rows_view(delayed), last, now,
                _rows_view(self.m[i]), _rows_view(self.v[i]), self.step_size,
                self.beta1, self.beta2, self.epsilon)
        raw, value, slope = _rows_view(raw), _rows_view(value), _rows_view(slope)
        R, P = rows.shape[0], raw.shape[1]
        group = max(1, SOFTPLUS_BLOCK // P)
        if not (colsum_recomputed and parallel_pays(R * P, PARALLEL_MIN_ENTRIES,
                                                    n_tasks=R // group)):
            _adam_update_softplus_rows(raw, value, slope, colsum, *args)
            return
        # parts of whole groups of rows (the serial kernel's groups, so the
        # same numbers), the column sums left to the caller
        bounds = balanced_parts(np.arange(0, R + group, group).clip(max=R),
                                part_count(R * P, PARALLEL_MIN_ENTRIES))
        run_parts(_softplus_rows_range, [
            (lo * group, min(R, hi * group), raw, value, slope, colsum, False, *args)
            for lo, hi in bounds])

    def step(self, grads):
        """Take one ascent step along ``grads`` (same order as ``params``)."""
        self.tick()
        for i, g in enumerate(grads):
            self.update(i, g)
