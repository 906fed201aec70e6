"""Synthetic data with known ground truth, for tests, examples and benchmarks."""

from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

from .._validation import IntInterval


@validate_params(
    {
        "n_samples": [IntInterval(1, None, closed="left")],
        "n_features": [IntInterval(1, None, closed="left")],
        "n_components": [IntInterval(1, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="right")],
        "prior": [Interval(Real, 0, 1, closed="both"), "array-like"],
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
    prior : float in [0, 1] or array-like of shape (n_components,), default=0.2
        Prior probability mu_k of each cause being on: the same for all k, or
        one per cause (for causes used unequally, as the topics of a corpus
        are).
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
    ValueError
        If an array ``prior`` does not have shape (n_components,) or has an
        entry outside [0, 1].

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
    if np.ndim(prior) == 0:
        mu = np.full(n_components, float(prior))
    else:
        mu = np.array(prior, dtype=np.float64)  # a copy: truth.prior is ours
        if mu.shape != (n_components,):
            raise ValueError(f"prior must be a float or have shape ({n_components},) "
                             f"(one per cause); got shape {mu.shape}.")
        if not np.all((mu >= 0.0) & (mu <= 1.0)):
            raise ValueError("every prior must be in [0, 1].")
    rng = check_random_state(random_state)
    n_on = max(1, int(round(density * n_features)))
    theta = np.zeros((n_components, n_features))
    for k in range(n_components):
        cols = rng.choice(n_features, size=n_on, replace=False)
        theta[k, cols] = rng.uniform(0.5 * weight, 1.5 * weight, size=n_on)
    theta_0 = np.full(n_features, -np.log1p(-leak))
    X, z = _sample_noisy_or(n_samples, theta, leak, mu, rng)
    if not sparse:
        X = X.toarray()
    truth = Bunch(components=theta, leak=theta_0, prior=mu, latent=z)
    return X, truth


# The 8 default patterns of make_noisy_or_patterns, as 8 x 8 ASCII art ("#" = on).
# Four border bars of length 6 (corners left free so that the bars never
# overlap), the two diagonals (disjoint on an even grid), a centred 4 x 4
# square outline and four 2-pixel "ticks" just inside the middle of each side. Largest
# overlap: 2 pixels (each diagonal with the square's corners); every pattern
# has at least 6 pixels that no other pattern covers; 8 pixels belong to no
# pattern (only the leak switches them on).
_PATTERN_ART = {
    "top bar": (
        ".######.",
        "........",
        "........",
        "........",
        "........",
        "........",
        "........",
        "........",
    ),
    "bottom bar": (
        "........",
        "........",
        "........",
        "........",
        "........",
        "........",
        "........",
        ".######.",
    ),
    "left bar": (
        "........",
        "#.......",
        "#.......",
        "#.......",
        "#.......",
        "#.......",
        "#.......",
        "........",
    ),
    "right bar": (
        "........",
        ".......#",
        ".......#",
        ".......#",
        ".......#",
        ".......#",
        ".......#",
        "........",
    ),
    "diagonal": (
        "#.......",
        ".#......",
        "..#.....",
        "...#....",
        "....#...",
        ".....#..",
        "......#.",
        ".......#",
    ),
    "anti-diagonal": (
        ".......#",
        "......#.",
        ".....#..",
        "....#...",
        "...#....",
        "..#.....",
        ".#......",
        "#.......",
    ),
    "square": (
        "........",
        "........",
        "..####..",
        "..#..#..",
        "..#..#..",
        "..####..",
        "........",
        "........",
    ),
    "ticks": (
        "........",
        "...##...",
        "........",
        ".#....#.",
        ".#....#.",
        "........",
        "...##...",
        "........",
    ),
}


def _default_patterns():
    """The 8 default patterns: (names, bool array of shape (8, 8, 8))."""
    names = list(_PATTERN_ART)
    patterns = np.array(
        [[[c == "#" for c in row] for row in _PATTERN_ART[n]] for n in names],
        dtype=bool,
    )
    return names, patterns


def _check_patterns(patterns):
    """Validate user patterns: a non-empty 3-D 0/1 array, no empty pattern."""
    try:
        arr = np.asarray(patterns)
    except Exception as exc:  # ragged nested lists, etc.
        raise ValueError(
            "patterns must be an array-like of shape (n_components, height, width) "
            f"with 0/1 values; got {patterns!r}."
        ) from exc
    if arr.ndim != 3 or 0 in arr.shape:
        raise ValueError(
            "patterns must be an array-like of shape (n_components, height, width) "
            f"with n_components, height, width >= 1; got shape {arr.shape}."
        )
    if arr.dtype == object or not (
        arr.dtype == bool or np.issubdtype(arr.dtype, np.number)
    ):
        raise ValueError(f"patterns must hold 0/1 values; got dtype {arr.dtype}.")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError("patterns must hold only 0/1 (or boolean) values.")
    arr = arr.astype(bool)
    empty = np.flatnonzero(~arr.reshape(arr.shape[0], -1).any(axis=1))
    if empty.size:
        raise ValueError(
            f"every pattern must switch on at least one pixel; patterns "
            f"{empty.tolist()} are empty."
        )
    return arr


@validate_params(
    {
        "n_samples": [IntInterval(1, None, closed="left")],
        "patterns": [None, "array-like"],
        "prior": [Interval(Real, 0, 1, closed="both"), "array-like"],
        "weight": [Interval(Real, 0, None, closed="neither")],
        "leak": [Interval(Real, 0, 1, closed="left")],
        "sparse": ["boolean"],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_noisy_or_patterns(
    n_samples=1000,
    *,
    patterns=None,
    prior=0.2,
    weight=2.0,
    leak=0.01,
    sparse=False,
    random_state=None,
):
    r"""Sample noisy-OR data whose causes are known image-like patterns.

    Synthetic data for the parameter-recovery experiment of Yan, Ailem & Sha
    [1]_ (supplement section 4.1 and Figure 1, "The recovered parameters after
    training with 1000 data points"): each of the K causes switches on a
    fixed pattern of pixels of a small image, so learned weights
    ``components_[k].reshape(image_shape)`` can be compared with the truth by
    eye. The data are drawn exactly from the noisy-OR model

    .. math::

        z_{nk} \sim \mathrm{Bernoulli}(\mu_k), \qquad
        p(x_{ni} = 0 \mid z_n) = \exp\Big(-\theta_{i0} - \sum_k \theta_{ik} z_{nk}\Big),

    with :math:`\theta_{ik}` equal to ``weight`` on the pixels of pattern k and
    0 elsewhere, and :math:`\theta_{i0} = -\log(1 - \mathrm{leak})` for every
    pixel. The sampler is the one of :func:`make_noisy_or`.

    The supplement does not list the patterns it used (its figures are not
    part of the text). By default this function uses 8 patterns on an 8 x 8
    grid, chosen so that they are all distinct and overlap little::

        top bar       bottom bar    left bar      right bar
        .######.      ........      ........      ........
        ........      ........      #.......      .......#
        ........      ........      #.......      .......#
        ........      ........      #.......      .......#
        ........      ........      #.......      .......#
        ........      ........      #.......      .......#
        ........      ........      #.......      .......#
        ........      .######.      ........      ........

        diagonal      anti-diagonal square        ticks
        #.......      .......#      ........      ........
        .#......      ......#.      ........      ...##...
        ..#.....      .....#..      ..####..      ........
        ...#....      ....#...      ..#..#..      .#....#.
        ....#...      ...#....      ..#..#..      .#....#.
        .....#..      ..#.....      ..####..      ........
        ......#.      .#......      ........      ...##...
        .......#      #.......      ........      ........

    Sizes 6, 6, 6, 6, 8, 8, 12 and 8 pixels. Only the diagonals and the
    square overlap (2 pixels each: the square's corners); the two diagonals
    are disjoint, every pattern has at least 6 pixels of its own, and 8
    pixels belong to no pattern (only the leak switches them on).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of images N (the paper uses :math:`N_{train} = 1000`).
    patterns : array-like of shape (n_components, height, width), default=None
        Boolean (or 0/1) masks of the causes. None uses the 8 patterns on an
        8 x 8 grid shown above. Every pattern must have at least one pixel on.
    prior : float in [0, 1] or array-like of shape (n_components,), default=0.2
        Prior probability :math:`\mu_k` of each cause being on.
    weight : float > 0, default=2.0
        Weight :math:`\theta_{ik}` of a cause on each pixel of its pattern; an
        active cause switches each of its pixels on with probability
        ``1 - exp(-weight)`` (0.865 for the default).
    leak : float in [0, 1), default=0.01
        Probability ``1 - exp(-theta_i0)`` that a pixel is on with no cause.
    sparse : bool, default=False
        Return X as a ``scipy.sparse.csr_matrix`` instead of a dense array.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output. See :term:`Glossary <random_state>`.

    Returns
    -------
    X : ndarray or csr_matrix of shape (n_samples, height * width), float64
        Binary (0.0 / 1.0) images, flattened in row-major (C) order.
    ground_truth : :class:`~sklearn.utils.Bunch`
        In the parametrization of :class:`skbinvi.NoisyORFactorizer`
        (``components_``, ``leak_``, ``prior_``):

        components : ndarray of shape (n_components, height * width), float64
            :math:`\theta`: ``weight`` on the pattern pixels, 0 elsewhere.
        leak : ndarray of shape (height * width,), float64
            :math:`\theta_0 = -\log(1 - \mathrm{leak})`.
        prior : ndarray of shape (n_components,), float64
            :math:`\mu`.
        latent : ndarray of shape (n_samples, n_components), int8
            The sampled causes z.
        patterns : ndarray of shape (n_components, height, width), bool
            The pattern masks.
        pattern_names : list of str
            Names of the default patterns (``"top bar"``, ...), or
            ``"pattern 0"``, ``"pattern 1"``, ... for user patterns.
        image_shape : tuple of int
            ``(height, width)``, e.g. for ``X[n].reshape(image_shape)``.

    Raises
    ------
    ValueError
        If a parameter is out of range (raised as
        ``sklearn.utils._param_validation.InvalidParameterError``, a
        ``ValueError`` subclass), if ``patterns`` is not a 3-D array of 0/1
        values with no empty pattern, or if an array ``prior`` does not have
        shape (n_components,) with values in [0, 1].

    See Also
    --------
    make_noisy_or : noisy-OR data with random sparse weights.

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641
       (arXiv:1906.02428); supplement section 4.1.

    Examples
    --------
    >>> from skbinvi.datasets import make_noisy_or_patterns
    >>> X, truth = make_noisy_or_patterns(1000, random_state=0)
    >>> X.shape, truth.components.shape, truth.image_shape
    ((1000, 64), (8, 64), (8, 8))
    >>> truth.pattern_names[:3]
    ['top bar', 'bottom bar', 'left bar']
    """
    if patterns is None:
        names, masks = _default_patterns()
    else:
        masks = _check_patterns(patterns)
        names = [f"pattern {k}" for k in range(masks.shape[0])]
    n_components, height, width = masks.shape

    mu = np.array(prior, dtype=np.float64)  # a copy: truth.prior is ours
    if mu.ndim == 0:
        mu = np.full(n_components, float(mu))
    if mu.shape != (n_components,) or not np.all((mu >= 0) & (mu <= 1)):
        raise ValueError(
            "prior must be a float in [0, 1] or an array-like of shape "
            f"(n_components,) = ({n_components},) with values in [0, 1]; "
            f"got {prior!r}."
        )

    rng = check_random_state(random_state)
    theta = np.where(masks.reshape(n_components, -1), float(weight), 0.0)
    theta_0 = np.full(height * width, -np.log1p(-leak))
    X, z = _sample_noisy_or(n_samples, theta, leak, mu, rng)
    if not sparse:
        X = X.toarray()
    truth = Bunch(
        components=theta,
        leak=theta_0,
        prior=mu,
        latent=z,
        patterns=masks,
        pattern_names=names,
        image_shape=(height, width),
    )
    return X, truth

def _sample_noisy_or(n_samples, theta, leak, mu, rng):
    """Draw latent causes and binary data exactly from a noisy-OR model.

    Shared sampler of :func:`make_noisy_or` and :func:`make_noisy_or_patterns`.
    Draws, in this order from ``rng``: the causes ``z`` (one uniform per entry),
    the leak events (:func:`_bernoulli_process` over the ``n_samples *
    n_features`` entries), then for each cause k the firing events on the rows
    where ``z[:, k] = 1`` and the features where ``theta[k] > 0``. Feature i of
    row n is on when the leak or any active cause fires on it, each
    independently, which is exactly ``p(x_ni = 0 | z_n) = exp(-theta_0 -
    theta^T z_n)`` with ``theta_0 = -log(1 - leak)``.

    Parameters
    ----------
    n_samples : int
        Number of rows N.
    theta : ndarray of shape (n_components, n_features), float64
        Non-negative weights; zeros mean "this cause never fires on i".
    leak : float in [0, 1)
        Probability that the leak alone switches a feature on (the same for
        every feature).
    mu : ndarray of shape (n_components,), float64
        Prior probabilities of the causes.
    rng : numpy.random.RandomState
        Source of randomness (advanced in place).

    Returns
    -------
    X : csr_matrix of shape (n_samples, n_features), float64
        Binary data with sorted indices and all stored values equal to 1.0.
    z : ndarray of shape (n_samples, n_components), int8
        The sampled causes.
    """
    n_components, n_features = theta.shape
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
    return X, z


# below this success probability _bernoulli_process draws the count first
_TINY_P = 1e-12


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
    if p < _TINY_P:
        # numpy's geometric overflows int64 below p of about 1e-18: draw the
        # number of successes, then their distinct positions
        k = int(rng.binomial(n_trials, p))
        chosen = set()
        while len(chosen) < k:
            chosen.add(int(rng.randint(n_trials)))
        return np.array(sorted(chosen), dtype=np.int64)
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
