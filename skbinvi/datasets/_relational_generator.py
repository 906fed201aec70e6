"""Synthetic undirected relational data from a latent feature (probit) model."""

from numbers import Integral, Real

import numpy as np
from scipy.special import ndtr
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

__all__ = ["make_relational"]


@validate_params(
    {
        "n_entities": [Interval(Integral, 2, None, closed="left")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="both")],
        "weights": ["array-like", None],
        "intercept": [Interval(Real, None, None, closed="neither")],
        "weight_scale": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_relational(
    n_entities=100,
    n_components=5,
    *,
    density=0.3,
    weights=None,
    intercept=-1.0,
    weight_scale=2.0,
    random_state=None,
):
    r"""Sample an undirected network from a latent feature relational model.

    Each entity i has binary features :math:`z_{id}`; two entities are linked
    with a probability that grows with the features they share (for positive
    weights), the finite, diagonal-weight latent feature relational model of
    Miller et al. [1]_:

    .. math::

        z_{id} \sim \mathrm{Bernoulli}(\rho), \qquad
        p(x_{ij} = 1 \mid z) = \Phi\Big(w_0 + \sum_d w_d z_{id} z_{jd}\Big),
        \quad i < j,

    with :math:`\Phi` the standard normal CDF. Links are undirected: one
    observation per unordered pair, ``x_ji = x_ij``, and no self links.

    Cost O(n_pairs * n_components) time and O(n_pairs) memory for the
    outputs; no ``(n_entities, n_entities, n_components)`` array and no dense
    float ``(n_entities, n_entities)`` matrix is formed (the linear predictor
    is computed one entity i at a time, for its pairs with j > i).

    Parameters
    ----------
    n_entities : int >= 2, default=100
        Number of entities N; the data have ``N * (N - 1) / 2`` pairs.
    n_components : int >= 1, default=5
        Number of latent binary features D.
    density : float in [0, 1], default=0.3
        Prior probability :math:`\rho` that an entity has a given feature.
    weights : array-like of shape (n_components,), default=None
        The weights :math:`w_d` (finite floats). None draws them uniformly in
        ``[weight_scale / 2, 3 * weight_scale / 2]``: positive, so sharing a
        feature raises the link probability.
    intercept : float, default=-1.0
        The bias :math:`w_0`; ``Phi(intercept)`` is the link probability of
        two entities that share no feature (0.159 for the default).
    weight_scale : float > 0, default=2.0
        Scale of the random weights; ignored when ``weights`` is given.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output. See :term:`Glossary <random_state>`.
        The features are drawn first (one uniform per entry of Z, row-major),
        then the weights (if ``weights`` is None), then one uniform per pair,
        in the order of the rows of ``X``; so, for a given seed, passing
        ``weights`` leaves Z unchanged.

    Returns
    -------
    X : ndarray of shape (n_pairs, 2), int64
        All pairs ``(i, j)`` with ``i < j``, in row-major order (sorted by
        ``i``, then ``j``; the order of ``np.triu_indices(n_entities, 1)``).
    y : ndarray of shape (n_pairs,), int64
        The links :math:`x_{ij}` (0 or 1).
    ground_truth : :class:`~sklearn.utils.Bunch`
        latent_features : ndarray of shape (n_entities, n_components), int8
            The sampled features Z (0 or 1).
        weights : ndarray of shape (n_components,), float64
            :math:`w`.
        intercept : float
            :math:`w_0`.
        link_probability : ndarray of shape (n_pairs,), float64
            :math:`\Phi(w_0 + \sum_d w_d z_{id} z_{jd})` for each row of ``X``.
        rho : float
            The feature prior ``density``.

    Raises
    ------
    ValueError
        If a parameter is out of range (raised as
        ``sklearn.utils._param_validation.InvalidParameterError``, a
        ``ValueError`` subclass), if ``intercept`` is not finite, or if
        ``weights`` does not have shape (n_components,) or is not finite.

    See Also
    --------
    load_kinships : real relational data (Alyawarra kinship terms).

    References
    ----------
    .. [1] K. T. Miller, T. L. Griffiths, M. I. Jordan, "Nonparametric latent
       feature models for link prediction", NIPS 2009.

    Examples
    --------
    >>> from skbinvi.datasets import make_relational
    >>> X, y, truth = make_relational(50, 3, random_state=0)
    >>> X.shape, y.shape, truth.latent_features.shape
    ((1225, 2), (1225,), (50, 3))
    >>> bool((X[:, 0] < X[:, 1]).all())
    True
    """
    intercept = float(intercept)
    if not np.isfinite(intercept):
        raise ValueError(f"intercept must be a finite float; got {intercept!r}.")

    if weights is not None:
        try:
            w = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                "weights must be None or an array-like of shape (n_components,) "
                f"= ({n_components},) of finite floats; got {weights!r}."
            ) from exc
        if w.shape != (n_components,) or not np.all(np.isfinite(w)):
            raise ValueError(
                "weights must be None or an array-like of shape (n_components,) "
                f"= ({n_components},) of finite floats; got {weights!r}."
            )
        w = w.copy()

    rng = check_random_state(random_state)
    rho = float(density)
    Z = rng.random_sample((n_entities, n_components)) < rho
    if weights is None:
        w = rng.uniform(0.5 * weight_scale, 1.5 * weight_scale, size=n_components)

    rows, cols = np.triu_indices(n_entities, k=1)
    n_pairs = rows.size
    prob = np.empty(n_pairs, dtype=np.float64)
    y = np.empty(n_pairs, dtype=np.int64)
    Zf = Z.astype(np.float64)
    start = 0
    for i in range(n_entities - 1):
        # pairs (i, j), j > i: a matrix-vector product on a view of Zf, so
        # the temporaries are O(n_entities)
        stop = start + n_entities - 1 - i
        eta = intercept + Zf[i + 1 :] @ (w * Zf[i])
        prob[start:stop] = ndtr(eta)
        y[start:stop] = rng.random_sample(stop - start) < prob[start:stop]
        start = stop

    X = np.column_stack([rows, cols]).astype(np.int64, copy=False)
    truth = Bunch(
        latent_features=Z.astype(np.int8),
        weights=w,
        intercept=intercept,
        link_probability=prob,
        rho=rho,
    )
    return X, y, truth
