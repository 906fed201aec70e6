"""Synthetic relational data (undirected or directed, one or many relations)
from a latent feature (probit) model."""

from numbers import Real

import numpy as np
from scipy.special import ndtr
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, validate_params

from .._validation import IntInterval

__all__ = ["make_relational", "make_sparse_relational"]


@validate_params(
    {
        "n_entities": [IntInterval(2, None, closed="left")],
        "n_components": [IntInterval(1, None, closed="left")],
        "density": [Interval(Real, 0, 1, closed="both")],
        "weights": ["array-like", None],
        "intercept": [Interval(Real, None, None, closed="neither")],
        "weight_scale": [Interval(Real, 0, None, closed="neither")],
        "directed": ["boolean"],
        "n_relations": [IntInterval(1, None, closed="left")],
        "full_weights": ["boolean"],
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
    directed=False,
    n_relations=1,
    full_weights=False,
    random_state=None,
):
    r"""Sample a network from a latent feature relational model with known truth.

    Each entity i has binary features :math:`z_{id}`; a link from sender i
    to receiver j in relation r follows the probit model of Miller et al.
    [1]_ (finite version):

    .. math::

        z_{id} \sim \mathrm{Bernoulli}(\rho), \qquad
        p(x_{ijr} = 1 \mid z) = \Phi\big(b + z_i^\top W_r z_j\big),

    with :math:`\Phi` the standard normal CDF. By default (one relation,
    diagonal weights, ``directed=False``) :math:`W = \mathrm{diag}(w)` and
    links are undirected: one observation per unordered pair i < j and no
    self links. ``directed=True`` lists every ordered pair i != j (both
    (i, j) and (j, i), with independent links); ``full_weights=True`` draws
    full, non-symmetric weight matrices (links then depend on the direction);
    ``n_relations=R`` draws one weight matrix per relation over the same
    features and lists every pair once per relation.

    Cost O(n_rows * n_components) time and O(n_rows) memory for the
    outputs; no ``(n_entities, n_entities, n_components)`` array and no dense
    float ``(n_entities, n_entities)`` matrix is formed (the linear predictor
    is computed one entity i at a time).

    Parameters
    ----------
    n_entities : int >= 2, default=100
        Number of entities N.
    n_components : int >= 1, default=5
        Number of latent binary features D.
    density : float in [0, 1], default=0.3
        Prior probability :math:`\rho` that an entity has a given feature.
    weights : array-like, default=None
        The weights: shape (D,) (diagonal, every relation), (D, D) (full,
        every relation; also when R == D), (R, D) (one diagonal per
        relation) or (R, D, D) (one matrix per relation); finite floats.
        None draws them: diagonal weights uniformly in
        ``[weight_scale / 2, 3 * weight_scale / 2]`` (positive, so sharing a
        feature raises the link probability), or with ``full_weights`` every
        entry uniformly in ``[-weight_scale, weight_scale]`` plus the diagonal
        above.
    intercept : float, default=-1.0
        The bias :math:`b`; ``Phi(intercept)`` is the link probability of
        two entities whose features do not interact (0.159 for the default).
    weight_scale : float > 0, default=2.0
        Scale of the random weights; ignored when ``weights`` is given.
    directed : bool, default=False
        List every ordered pair (i, j), i != j, instead of the pairs i < j.
    n_relations : int >= 1, default=1
        Number of relations R; with R > 1, X has a third column (relation).
    full_weights : bool, default=False
        Draw full D x D weight matrices (when ``weights`` is None).
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output. See :term:`Glossary <random_state>`.
        The features are drawn first (one uniform per entry of Z, row-major),
        then the weights (if ``weights`` is None), then one uniform per row
        of ``X``, in order; so, for a given seed, passing ``weights`` leaves
        Z unchanged.

    Returns
    -------
    X : ndarray of shape (n_rows, 2) or (n_rows, 3), int64
        Pairs ``(i, j)`` (and the relation r when ``n_relations > 1``), sorted
        by relation, then i, then j. Undirected: i < j, N (N - 1) / 2 pairs
        per relation; directed: i != j, N (N - 1) per relation.
    y : ndarray of shape (n_rows,), int64
        The links (0 or 1).
    ground_truth : :class:`~sklearn.utils.Bunch`
        latent_features : ndarray of shape (n_entities, n_components), int8
            The sampled features Z (0 or 1).
        weights : ndarray
            The weights as drawn or given: (D,) for one relation with
            diagonal weights, (R, D) for several, (R, D, D) with
            ``full_weights=True`` (``weight_matrices`` has every case as
            (R, D, D) matrices).
        weight_matrices : ndarray of shape (n_relations, D, D)
            :math:`W_r` for every relation.
        intercept : float
            :math:`b`.
        link_probability : ndarray of shape (n_rows,), float64
            :math:`\Phi(b + z_i^\top W_r z_j)` for each row of ``X``.
        rho : float
            The feature prior ``density``.

    Raises
    ------
    ValueError
        If a parameter is out of range (raised as
        ``sklearn.utils._param_validation.InvalidParameterError``, a
        ``ValueError`` subclass), if ``intercept`` is not finite, or if
        ``weights`` does not have one of the shapes above or is not finite.

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
    >>> X, y, truth = make_relational(20, 3, directed=True, n_relations=2,
    ...                               full_weights=True, random_state=0)
    >>> X.shape, truth.weight_matrices.shape
    ((760, 3), (2, 3, 3))
    """
    intercept = float(intercept)
    if not np.isfinite(intercept):
        raise ValueError(f"intercept must be a finite float; got {intercept!r}.")
    D, R = n_components, n_relations
    shapes = [(D,), (D, D), (R, D), (R, D, D)]
    message = (
        "weights must be None or an array-like of shape (n_components,), "
        "(n_components, n_components), (n_relations, n_components) or "
        f"(n_relations, n_components, n_components) = {shapes} of finite floats; "
        "got {!r}."
    )
    if weights is not None:
        try:
            w = np.array(weights, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(message.format(weights)) from exc
        if w.shape not in shapes or not np.all(np.isfinite(w)):
            raise ValueError(message.format(weights))

    rng = check_random_state(random_state)
    rho = float(density)
    Z = rng.random_sample((n_entities, D)) < rho
    if weights is None:
        if full_weights:
            w = rng.uniform(-weight_scale, weight_scale, size=(R, D, D))
            w += np.eye(D) * rng.uniform(
                0.5 * weight_scale, 1.5 * weight_scale, size=(R, 1, D)
            )
        else:
            w = rng.uniform(
                0.5 * weight_scale, 1.5 * weight_scale, size=D if R == 1 else (R, D)
            )
    # the weight matrices (R, D, D); a 2-D array of shape (D, D) is a full
    # matrix shared by the relations (also when R == D)
    if w.ndim == 1:
        Wm = np.tile(np.diag(w), (R, 1, 1))
    elif w.ndim == 2 and w.shape == (D, D) and weights is not None:
        Wm = np.tile(w, (R, 1, 1))
    elif w.ndim == 2:  # (R, D): one diagonal per relation
        Wm = np.stack([np.diag(v) for v in w])
    else:
        Wm = w.copy()

    n = n_entities
    Zf = Z.astype(np.float64)
    per = n * (n - 1) if directed else n * (n - 1) // 2
    n_rows = R * per
    prob = np.empty(n_rows, dtype=np.float64)
    y = np.empty(n_rows, dtype=np.int64)
    snd = np.empty(n_rows, dtype=np.int64)
    rcv = np.empty(n_rows, dtype=np.int64)
    rel = np.repeat(np.arange(R, dtype=np.int64), per)
    everyone = np.arange(n)
    start = 0
    for r in range(R):
        for i in range(n):
            others = everyone[everyone != i] if directed else everyone[i + 1 :]
            if others.size == 0:
                continue
            stop = start + others.size
            # eta of the pairs (i, j): a matrix-vector product on Zf, so the
            # temporaries are O(n_entities)
            eta = intercept + Zf[others] @ (Zf[i] @ Wm[r])
            prob[start:stop] = ndtr(eta)
            y[start:stop] = rng.random_sample(stop - start) < prob[start:stop]
            snd[start:stop] = i
            rcv[start:stop] = others
            start = stop

    if R == 1:
        X = np.column_stack([snd, rcv])
    else:
        X = np.column_stack([snd, rcv, rel])
    truth = Bunch(
        latent_features=Z.astype(np.int8),
        weights=w,
        weight_matrices=Wm,
        intercept=intercept,
        link_probability=prob,
        rho=rho,
    )
    return X, y, truth


# Block pairs with more pairs than this and more than half of them linked are
# drawn by listing their pairs (see make_sparse_relational).
_DENSE_BLOCK_PAIRS = 4096


def _draw_dense_block(senders, receivers, n_links, N, R, r, rng):
    """Codes of ``n_links`` distinct pairs (s, t), s != t, drawn uniformly
    from senders x receivers by listing the pairs: O(pairs) memory, used
    when the links are more than half of the pairs."""
    s = np.repeat(senders, receivers.size)
    t = np.tile(receivers, senders.size)
    keep = s != t
    s, t = s[keep], t[keep]
    pick = rng.choice(s.size, size=n_links, replace=False)
    return (s[pick].astype(np.int64) * np.int64(N) + t[pick]) * R + r


@validate_params(
    {
        "n_entities": [IntInterval(2, None, closed="left")],
        "n_components": [IntInterval(1, 16, closed="both")],
        "density": [Interval(Real, 0, 1, closed="both")],
        "intercept": [Interval(Real, None, None, closed="neither")],
        "weight": [Interval(Real, None, None, closed="neither")],
        "n_relations": [IntInterval(1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_sparse_relational(
    n_entities=100_000,
    n_components=10,
    *,
    density=0.1,
    intercept=-4.3,
    weight=1.0,
    n_relations=1,
    random_state=None,
):
    r"""Sample the links of a large sparse directed network with planted features.

    The model of :func:`make_relational` with ``directed=True`` and diagonal
    weights ``weight`` in every relation, :math:`p(x_{ijr} = 1 \mid z) =
    \Phi(b + w\, z_i^\top z_j)`, for every ordered pair i != j, but only
    the links are returned, so that networks of 10^5-10^6 entities fit in
    memory: entities with the same feature vector form a block, the number
    of links between two blocks is drawn from its binomial distribution and
    that many distinct pairs are drawn uniformly in the block. This is an
    exact sample of the model. The defaults (N = 100,000, D = 10, rho =
    0.1, b = -4.3, w = 1) give about 10 links per entity and relation,
    about 93% of them between entities that share a feature.

    Cost O(links + N D + G^2 R) time and memory, with G <= 2^D the number
    of distinct feature vectors.

    Parameters
    ----------
    n_entities : int >= 2, default=100_000
        Number of entities N.
    n_components : int in [1, 16], default=10
        Number of latent binary features D.
    density : float in [0, 1], default=0.1
        Prior probability :math:`\rho` of every feature.
    intercept : float, default=-4.3
        The bias b (``Phi(b)``: link probability of entities that share no
        feature).
    weight : float, default=1.0
        The diagonal weight w of every feature.
    n_relations : int >= 1, default=1
        Number of relations R (independent links, same features and weights).
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.

    Returns
    -------
    X : ndarray of shape (n_links, 2) or (n_links, 3), int64
        The links (sender, receiver[, relation]), sorted by relation, then
        sender, then receiver.
    ground_truth : :class:`~sklearn.utils.Bunch`
        latent_features : ndarray of shape (n_entities, n_components), int8
        weight_matrices : ndarray of shape (n_relations, D, D)
        intercept : float
        rho : float
        n_pairs : int, the number of ordered pairs N (N - 1) R.

    Raises
    ------
    ValueError
        If a parameter is out of range or ``intercept``/``weight`` is not
        finite.

    See Also
    --------
    make_relational : every pair with its link, for small networks.

    Examples
    --------
    >>> from skbinvi.datasets import make_sparse_relational
    >>> X, truth = make_sparse_relational(2000, 4, random_state=0)
    >>> X.shape[1], truth.latent_features.shape
    (2, (2000, 4))
    """
    b, w = float(intercept), float(weight)
    if not (np.isfinite(b) and np.isfinite(w)):
        raise ValueError(
            f"intercept and weight must be finite; got {intercept!r}, {weight!r}."
        )
    rng = check_random_state(random_state)
    N, D, R = n_entities, n_components, n_relations
    Z = rng.random_sample((N, D)) < density
    patterns, inverse, counts = np.unique(
        Z, axis=0, return_inverse=True, return_counts=True
    )
    inverse = inverse.ravel()
    members = np.argsort(inverse, kind="stable")
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    P = patterns.astype(np.float64)
    prob = ndtr(b + w * (P @ P.T))  # (G, G)
    n_pairs = np.outer(counts, counts) - np.diag(counts)
    codes = []
    for r in range(R):
        target = rng.binomial(n_pairs, prob)  # links of every block pair
        # Blocks that link more than half of many pairs: drawing pairs with
        # replacement until enough are distinct is a coupon collector there
        # (200 entities with every feature: over a minute). Their pairs are
        # listed (at most twice their links) and the links drawn without
        # replacement.
        dense = (2 * target > n_pairs) & (n_pairs > _DENSE_BLOCK_PAIRS)
        listed = [_draw_dense_block(members[first[ga]:first[ga] + counts[ga]],
                                    members[first[gb]:first[gb] + counts[gb]],
                                    target[ga, gb], N, R, r, rng)
                  for ga, gb in zip(*np.nonzero(dense), strict=True)]
        target = np.where(dense, 0, target)
        got = np.zeros(0, dtype=np.int64)
        deficit = target
        while deficit.any():  # top up blocks that drew self pairs or repeats
            ga, gb = np.nonzero(deficit)
            k = deficit[ga, gb]
            ga, gb = np.repeat(ga, k), np.repeat(gb, k)
            s = members[first[ga] + rng.randint(0, counts[ga])]
            t = members[first[gb] + rng.randint(0, counts[gb])]
            keep = s != t
            code = (s[keep] * np.int64(N) + t[keep]) * R + r
            got = np.sort(np.concatenate([got, code]))
            got = got[np.concatenate([[True], got[1:] != got[:-1]])]
            G = counts.size
            block = inverse[got // R // N] * G + inverse[(got // R) % N]
            deficit = target - np.bincount(block, minlength=G * G).reshape(G, G)
        codes.append(np.sort(np.concatenate([got, *listed])) if listed else got)
    code = np.concatenate(codes)
    X = np.column_stack([code // R // N, (code // R) % N]
                        + ([code % R] if R > 1 else []))
    truth = Bunch(
        latent_features=Z.astype(np.int8),
        weight_matrices=np.tile(np.eye(D) * w, (R, 1, 1)),
        intercept=b,
        rho=float(density),
        n_pairs=int(N * (N - 1) * R),
    )
    return X.astype(np.int64), truth
