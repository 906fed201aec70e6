"""Input checks shared by the estimators: binary data, binarization, counts."""

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_non_negative


class IntInterval(Interval):
    """An integer range for ``_parameter_constraints`` that refuses booleans.

    scikit-learn's ``Interval(Integral, ...)`` accepts ``True`` and ``False``
    (``bool`` is an ``Integral``), so ``n_components=True`` passed validation
    and failed later with NumPy's "an integer is required". This constraint
    refuses them with the usual ``InvalidParameterError`` (a ``ValueError``
    and ``TypeError``).

    Parameters
    ----------
    left, right : int or None
        Bounds of the range (None: unbounded).
    closed : {"left", "right", "both", "neither"}, default="left"
        Which bounds belong to the range.
    """

    def __init__(self, left, right=None, *, closed="left"):
        super().__init__(Integral, left, right, closed=closed)

    def is_satisfied_by(self, val):
        if isinstance(val, (bool, np.bool_)):
            return False
        return super().is_satisfied_by(val)

    def __str__(self):
        return super().__str__().replace("an int ", "an int (not a bool) ", 1)


def check_binary(X, *, binarize, whom):
    """Return a binary copy-or-view of X (float64 CSR) following the policy.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        Finite, already validated by ``validate_data`` (float64).
    binarize : float or None
        Values strictly greater than ``binarize`` map to 1, the others to 0.
        ``None`` means X must already hold only the values 0 and 1.
    whom : str
        Name of the caller, used in error messages.

    Returns
    -------
    X_bin : scipy.sparse.csr_matrix of shape (n_samples, n_features), float64
        Binary matrix with sorted indices, no explicit zeros, int32 or int64
        index arrays as scipy chooses. X itself is never modified.

    Raises
    ------
    ValueError
        If X has negative values, or, with ``binarize=None``, values other
        than 0 and 1.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X)  # copy-free when already CSR
        if not X.has_canonical_format:
            # repeated (row, column) entries mean their sum, as in scipy:
            # merge them (on a copy) before reading X.data entry by entry
            X = X.copy()
            X.sum_duplicates()
        values = X.data
    else:
        values = np.asarray(X)
    check_non_negative(X, whom)
    if binarize is None:
        bad = (values != 0) & (values != 1)
        if np.any(bad):
            example = values[bad].flat[0]
            raise ValueError(
                f"{whom} requires binary data (only 0 and 1) when binarize=None; "
                f"got the value {example.item()!r}. Pass binarize=<threshold> to map "
                "values above the threshold to 1."
            )
        threshold = 0.0
    else:
        threshold = float(binarize)
    if sp.issparse(X):
        X_bin = X.copy()
        X_bin.data = (X.data > threshold).astype(np.float64)
        X_bin.eliminate_zeros()
    else:
        X_bin = sp.csr_matrix((values > threshold).astype(np.float64))
    X_bin.sort_indices()
    return X_bin
