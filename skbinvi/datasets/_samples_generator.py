"""Synthetic data with known ground truth, for tests, examples and benchmarks."""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="right")],
        "prior": [Interval(Real, 0, 1, closed="both")],
        "weight": [Interval(Real, 0, None, closed="neither")],
        "leak": [Interval(Real, 0, 1, closed="left")],
        "sparse": ["boolean"],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_noisy_or(
    n_samples=1000,
    n_features=100,
    n_components=10,
    *,
    density=0.1,
    prior=0.2,
    weight=2.0,
    leak=0.01,
    sparse=False,
    random_state=None,
):
    r"""Sample binary data from a noisy-OR factor model with known parameters.

    Each component k switches on a random set of about ``density * n_features``
    features; the data are drawn exactly from the model of [1]_:

    .. math::

        z_{nk} \sim \mathrm{Bernoulli}(\mu_k), \qquad
        p(x_{ni} = 0 \mid z_n) = \exp\Big(-\theta_{i0} - \sum_k \theta_{ik} z_{nk}\Big).

    Sampling uses the OR decomposition of the model (feature i is on when the
    leak or any active cause fires on it, each independently), so it costs
    O(nnz + n_components * n_features) and never forms an
    ``(n_samples, n_features)`` dense array when ``sparse=True``.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of rows.
    n_features : int, default=100
        Number of binary features D.
    n_components : int, default=10
        Number of latent causes K.
    density : float in (0, 1], default=0.1
        Fraction of features that each cause can switch on (at least one).
    prior : float in [0, 1], default=0.2
        Prior probability mu_k of each cause being on (the same for all k).
    weight : float > 0, default=2.0
        Weight theta_ik of the features a cause switches on; the cause then
        fires on each of them with probability ``1 - exp(-weight)``. Weights
        are drawn uniformly in ``[weight / 2, 3 * weight / 2]``.
    leak : float in [0, 1), default=0.01
        Probability ``1 - exp(-theta_i0)`` that a feature is on with no cause.
    sparse : bool, default=False
        Return X as a ``scipy.sparse.csr_matrix`` instead of a dense array.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output. See :term:`Glossary <random_state>`.

    Returns
    -------
    X : ndarray or csr_matrix of shape (n_samples, n_features), float64
        Binary data.
    ground_truth : :class:`~sklearn.utils.Bunch`
        ``components`` (theta, ndarray of shape (n_components, n_features)),
        ``leak`` (theta_0, shape (n_features,)), ``prior`` (mu, shape
        (n_components,)) and ``latent`` (z, int8 array of shape (n_samples,
        n_components)), in the parametrization of
        :class:`skbinvi.NoisyORFactorizer` (``components_``, ``leak_``,
        ``prior_``).

    Raises
    ------
    sklearn.utils._param_validation.InvalidParameterError
        (a ``ValueError``) if a parameter is out of range.

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641.

    Examples
    --------
    >>> from skbinvi.datasets import make_noisy_or
    >>> X, truth = make_noisy_or(200, 30, 4, random_state=0)
    >>> X.shape, truth.components.shape
    ((200, 30), (4, 30))
    """
    rng = check_random_state(random_state)
    n_on = max(1, int(round(density * n_features)))
    theta = np.zeros((n_components, n_features))
    for k in range(n_components):
        cols = rng.choice(n_features, size=n_on, replace=False)
        theta[k, cols] = rng.uniform(0.5 * weight, 1.5 * weight, size=n_on)
    theta_0 = np.full(n_features, -np.log1p(-leak))
    mu = np.full(n_components, float(prior))
    z = (rng.random_sample((n_samples, n_components)) < mu).astype(np.int8)

    rows, cols = [], []
    flat = _bernoulli_process(n_samples * n_features, leak, rng)
    rows.append(flat // n_features)
    cols.append(flat % n_features)
    for k in range(n_components):
        on_rows = np.flatnonzero(z[:, k])
        on_cols = np.flatnonzero(theta[k])
        fire = rng.random_sample((on_rows.size, on_cols.size)) < -np.expm1(
            -theta[k, on_cols]
        )
        r, c = np.nonzero(fire)
        rows.append(on_rows[r])
        cols.append(on_cols[c])
    rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.intp)
    cols = np.concatenate(cols) if cols else np.zeros(0, dtype=np.intp)
    X = sp.csr_matrix(
        (np.ones(rows.size), (rows, cols)), shape=(n_samples, n_features)
    )
    X.data[:] = 1.0  # duplicates (several causes on one entry) were summed
    X.sort_indices()
    if not sparse:
        X = X.toarray()
    truth = Bunch(components=theta, leak=theta_0, prior=mu, latent=z)
    return X, truth


def _bernoulli_process(n_trials, p, rng):
    """Indices of the successes among n_trials Bernoulli(p) trials, in O(successes).

    The gaps between successive successes are independent Geometric(p)
    variables, so drawing gaps and taking their cumulative sum gives exactly
    the successes of the trials ``0 .. n_trials - 1`` without touching the
    failures. Equivalent in distribution to
    ``np.flatnonzero(rng.random_sample(n_trials) < p)``.
    """
    if p <= 0.0 or n_trials == 0:
        return np.zeros(0, dtype=np.int64)
    positions = []
    last = -1
    while True:
        expected = (n_trials - last) * p
        size = int(expected + 6.0 * np.sqrt(expected) + 16)
        steps = np.cumsum(rng.geometric(p, size=size)) + last
        inside = steps[steps < n_trials]
        positions.append(inside)
        if inside.size < size:
            return np.concatenate(positions).astype(np.int64)
        last = int(steps[-1])
