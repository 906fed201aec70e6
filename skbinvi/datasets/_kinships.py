"""Loader for the bundled Alyawarra kinship data (25 relations among 104 people)."""

from numbers import Integral

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils._param_validation import validate_params

from ._base import _resource

__all__ = ["load_kinships"]

_FEATURE_NAMES = ["head", "tail"]


def _load_arrays():
    """Unpack the bundled file: (adjacency (R, N, N) bool, entity, relation names)."""
    with _resource("data", "kinships.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as z:
            packed = z["adjacency"]
            shape = tuple(int(v) for v in z["shape"])
            entity_names = z["entity_names"]
            relation_names = z["relation_names"]
    adjacency = np.unpackbits(packed, axis=-1, count=shape[-1]).astype(bool)
    return adjacency.reshape(shape), entity_names, relation_names


def _relation_index(relation, relation_names):
    """Index of ``relation`` (a name or an index); ValueError listing valid names."""
    names = [str(r) for r in relation_names]
    if isinstance(relation, str):
        if relation in names:
            return names.index(relation)
    elif isinstance(relation, Integral) and not isinstance(relation, (bool, np.bool_)):
        if 0 <= int(relation) < len(names):
            return int(relation)
    raise ValueError(
        'relation must be None, "all", a relation name or an index in '
        f"0..{len(names) - 1}; got {relation!r}. Valid names (index order): "
        f"{names}."
    )


@validate_params(
    {"return_X_y": ["boolean"]},  # relation: checked by _relation_index
    prefer_skip_nested_validation=True,
)
def load_kinships(*, relation=None, return_X_y=False):
    """Load the Alyawarra kinship data: 25 kinship terms among 104 people.

    Denham's kinship data of the Alyawarra (Central Australia), in the form
    used by Kemp et al. [1]_ and Miller et al. [2]_: a binary tensor
    ``Y[r, i, j]`` that is 1 when the triple (person i, kinship term r,
    person j) is recorded. The data are bundled with the package (nothing is
    downloaded); read more in ``load_kinships().DESCR``.

    The tensor is returned as ``adjacency``; ``data`` lists every ordered
    pair of distinct people and ``target`` tells whether the pair is linked
    in the chosen relation, a ready-made link-prediction problem.

    ==================  ===============================================
    people              104 (``person0`` ... ``person103``)
    relations           25 (``term0`` ... ``term25``; no ``term23``)
    ones in the tensor  10,686 (directed triples; no self links)
    ordered pairs       10,712 = 104 x 103 (rows of ``data``)
    ==================  ===============================================

    Parameters
    ----------
    relation : str, int or None, default=None
        The relation defining ``target``: a name of ``relation_names`` (e.g.
        ``"term7"``) or an index into it (0 to 24; index 23 is ``"term24"``).
        ``"all"``: every relation at once, the multi-relational problem of
        Miller et al. [2]_: ``data`` then holds the triples ``(i, j, r)``
        (267,800 rows = 25 x 10,712, shape (n, 3)) and ``target`` whether
        ``adjacency[r, i, j]``, the input of ``LatentFeatureRelational`` for
        one feature set shared by all relations. None means "linked in any
        relation". Every ordered pair of people
        carries at most one kinship term and all but 26 carry one, so with
        None the target is 1 for 10,686 of the 10,712 pairs: choose a
        relation for a meaningful link-prediction task.
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with the following attributes.

        data : ndarray of shape (10712, 2) or (267800, 3), int64
            All ordered pairs ``(i, j)`` of distinct people, ``i != j``, as
            entity indices (into ``entity_names``), in row-major order: sorted
            by ``i``, then by ``j``. Column 0 is the head ``i`` and column 1
            the tail ``j`` of a triple (i, r, j). Both ``(i, j)`` and
            ``(j, i)`` are present. With ``relation="all"``, the pairs are
            repeated for every relation r (sorted by r first) and column 2
            holds r (an index into ``relation_names``).
        target : ndarray of shape (10712,) or (267800,), int64
            1 if ``adjacency[r, i, j]`` for the chosen relation r (for any r
            when ``relation`` is None; for the row's r with "all"), else 0.
        adjacency : ndarray of shape (25, 104, 104), bool
            The full tensor ``Y[r, i, j]`` (head i, tail j); directed, not
            symmetric. Its diagonal ``Y[:, i, i]`` is all False.
        feature_names : list of str
            ``["head", "tail"]`` (``["head", "tail", "relation"]`` with
            ``relation="all"``), the names of the columns of ``data``.
        relation_names : ndarray of str of shape (25,)
            ``term0`` ... ``term25`` (no ``term23``), in increasing numeric
            order; position r names ``adjacency[r]``.
        entity_names : ndarray of str of shape (104,)
            ``person0`` ... ``person103``, in increasing numeric order.
        relation : str or None
            The name of the relation defining ``target`` (None for any,
            ``"all"`` for every relation).
        DESCR : str
            Full description of the data set.

    (data, target) : tuple if ``return_X_y`` is True
        The ``data`` and ``target`` described above.

    Raises
    ------
    ValueError
        If ``relation`` is not None, "all", a valid name or a valid index (the
        message lists the valid names), or if ``return_X_y`` is not a bool.

    Notes
    -----
    Relations are directed: ``adjacency[r, i, j]`` need not equal
    ``adjacency[r, j, i]`` (a term and its reciprocal are usually different
    terms). The ``LatentFeatureRelational`` model of this package treats a
    pair and its reverse as one observation (undirected links, one term per
    pair ``i < j``) by default; use, e.g.,
    ``data[data[:, 0] < data[:, 1]]`` for one row per unordered pair, and
    decide how to combine the two directions of the target.

    Source: the ``train.txt``, ``valid.txt`` and ``test.txt`` triple files of
    the PyKEEN redistribution (a split of the same tensor; their union is
    used), converted by ``tools/build_datasets.py kinships`` into the bundled
    bit-packed file ``data/kinships.npz`` (8 kB), which records the entity and
    relation names and the SHA-256 of each source file.

    References
    ----------
    .. [1] C. Kemp, J. B. Tenenbaum, T. L. Griffiths, T. Yamada, N. Ueda,
       "Learning systems of concepts with an infinite relational model",
       AAAI 2006.
    .. [2] K. T. Miller, T. L. Griffiths, M. I. Jordan, "Nonparametric latent
       feature models for link prediction", NIPS 2009.

    Examples
    --------
    >>> from skbinvi.datasets import load_kinships
    >>> kin = load_kinships(relation="term7")
    >>> kin.data.shape, kin.target.shape, kin.adjacency.shape
    ((10712, 2), (10712,), (25, 104, 104))
    >>> int(kin.target.sum()), int(kin.adjacency.sum())
    (817, 10686)
    >>> X, y = load_kinships(relation=0, return_X_y=True)
    >>> int(y.sum())
    228
    >>> X, y = load_kinships(relation="all", return_X_y=True)
    >>> X.shape, int(y.sum())
    ((267800, 3), 10686)
    """
    adjacency, entity_names, relation_names = _load_arrays()
    n_entities = adjacency.shape[1]
    i, j = np.nonzero(~np.eye(n_entities, dtype=bool))  # row-major, i != j
    if isinstance(relation, str) and relation == "all":
        R = adjacency.shape[0]
        r = np.repeat(np.arange(R), i.size)
        data = np.column_stack([np.tile(i, R), np.tile(j, R), r]).astype(np.int64)
        target = adjacency[r, data[:, 0], data[:, 1]].astype(np.int64)
        name = "all"
    elif relation is None:
        linked = adjacency.any(axis=0)
        name = None
    else:
        r = _relation_index(relation, relation_names)
        linked = adjacency[r]
        name = str(relation_names[r])
    if name != "all":
        data = np.column_stack([i, j]).astype(np.int64)
        target = linked[i, j].astype(np.int64)
    if return_X_y:
        return data, target

    descr = _resource("descr", "kinships.rst").read_text(encoding="utf-8")
    return Bunch(
        data=data,
        target=target,
        adjacency=adjacency,
        feature_names=list(_FEATURE_NAMES) + (["relation"] if name == "all" else []),
        relation_names=relation_names,
        entity_names=entity_names,
        relation=name,
        DESCR=descr,
    )
