"""Loader for the bundled UCI Adult data in the a9a encoding (123 binary features)."""

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch
from sklearn.utils._param_validation import StrOptions, validate_params

from ._base import _resource

__all__ = ["load_adult"]

_MISSING = 255  # code of a missing value in the bundled file
_TARGET_NAMES = ("<=50K", ">50K")


def _read_npz():
    with _resource("data", "adult.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as z:
            return {key: z[key] for key in z.files}


def _design_matrix(codes, offsets, n_features):
    """CSR float64 one-hot design from the (n_rows, n_attributes) codes."""
    present = codes != _MISSING
    # boolean indexing walks the rows in order and, within a row, the
    # attributes in order: the columns of a row come out sorted
    indices = (codes.astype(np.int64) + offsets)[present].astype(np.int32)
    indptr = np.zeros(codes.shape[0] + 1, dtype=np.int32)
    np.cumsum(present.sum(axis=1), out=indptr[1:])
    return sp.csr_matrix(
        (np.ones(indices.size, dtype=np.float64), indices, indptr),
        shape=(codes.shape[0], n_features),
    )


@validate_params(
    {"subset": [StrOptions({"train", "test"})], "return_X_y": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def load_adult(*, subset="train", return_X_y=False):
    """Load the UCI Adult (census income) data in the a9a binary encoding.

    Predict whether a person earns more than 50K US dollars a year from 14
    census attributes (Kohavi [1]_), encoded as 123 binary features as in
    Platt's a9a data set [2]_ distributed by LIBSVM [3]_: the 8 categorical
    attributes one-hot encoded, the 6 continuous ones cut into bins, one
    feature per bin. The data are bundled with the package (nothing is
    downloaded); read more in ``load_adult().DESCR``.

    =================  ==================================================
    rows               32,561 train (``adult.data``) / 16,281 test
                       (``adult.test``), the original UCI split
    features           123 binary, one active feature per non-missing
                       attribute (11 to 14 per row)
    positive rate      24.08% train (7,841) / 23.62% test (3,846)
    missing values     2,399 train / 1,221 test rows (all-zero attribute)
    =================  ==================================================

    Parameters
    ----------
    subset : {"train", "test"}, default="train"
        Which part of the UCI split to load: ``"train"`` (the file
        ``adult.data``, a9a) or ``"test"`` (``adult.test``, a9a.t).
    return_X_y : bool, default=False
        If True, return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with the following attributes.

        data : scipy.sparse.csr_matrix of shape (n_rows, 123), float64
            Binary features, 1.0 or 0.0; ``n_rows`` is 32,561 for
            ``"train"`` and 16,281 for ``"test"``. Sparse, like the a9a
            files (about 11% of the entries are 1); canonical format (sorted
            column indices, no duplicates). Use ``data.toarray()`` for a
            dense array. Rows are in the order of the source file.
        target : ndarray of shape (n_rows,), int64
            1 if the income is ``>50K``, 0 if ``<=50K``.
        feature_names : ndarray of str of shape (123,)
            ``"<attribute>=<value>"`` for the categorical attributes (e.g.
            ``"workclass=Private"``) and ``"<attribute>=<interval>"`` for
            the binned ones (e.g. ``"age=(-inf, 25]"``, ``"age=(25, 32]"``,
            ``"capital-gain=(0, inf)"``), attributes in the order of
            ``adult.names`` (the column order of a9a).
        target_names : ndarray of str of shape (2,)
            ``["<=50K", ">50K"]``, the labels of target 0 and 1.
        bin_edges : dict of str to ndarray of float64
            For each continuous attribute (age, fnlwgt, education-num,
            capital-gain, capital-loss, hours-per-week), the right edges
            ``e_1 < ... < e_k`` of its bins ``(-inf, e_1], (e_1, e_2], ...,
            (e_k, inf)``, computed on the training part only.
        DESCR : str
            Full description of the data set.

    (data, target) : tuple if ``return_X_y`` is True
        The ``data`` and ``target`` described above.

    Raises
    ------
    ValueError
        If ``subset`` is not ``"train"`` or ``"test"``, or ``return_X_y`` is
        not a bool (raised as
        ``sklearn.utils._param_validation.InvalidParameterError``, a
        ``ValueError`` subclass, whose message names the parameter).

    Notes
    -----
    Encoding (``tools/build_datasets.py adult``; details and bin counts in
    ``DESCR``):

    * workclass (8 values), education (16), marital-status (7), occupation
      (14), relationship (6), race (5), sex (2) and native-country (41):
      one feature per value listed in ``adult.names``, in that order; a
      missing value ``?`` (workclass, occupation, native-country) leaves the
      attribute all zero;
    * age, fnlwgt, education-num and hours-per-week: 5 bins whose cuts lie
      just below the training quintiles, moved up to the next distinct value
      when tied values would make two cuts coincide; edges age 25, 32, 40,
      49; fnlwgt 106627, 158656, 196332, 259865; education-num 8, 9, 10, 12;
      hours-per-week 34, 39, 40, 47;
    * capital-gain and capital-loss (92% and 95% zeros): 2 bins, zero and
      positive (edge 0).

    The bin edges of a9a are not documented; these reproduce, feature for
    feature, the first 99 rows of ``a9a`` and the first 10 of ``a9a.t``
    checked against public copies. ``data`` uses 0-based columns (column j
    is a9a feature j + 1) and the target is 0 / 1 instead of -1 / +1.
    education-num is a recoding of education (the two carry the same
    information); both are kept, as in a9a. A linear model reaches about
    85% test accuracy (``LogisticRegression()``: 0.85).

    Source: ``adult.data.gz``, ``adult.test.gz`` and ``adult.names`` of the
    UCI repository [4]_ (CC BY 4.0), converted into the bundled file
    ``data/adult.npz`` (about 220 kB), which records the SHA-256 of the
    source files.

    References
    ----------
    .. [1] R. Kohavi, "Scaling up the accuracy of naive-Bayes classifiers: a
       decision-tree hybrid", Proceedings of KDD-96, 202-207, 1996.
    .. [2] J. C. Platt, "Fast training of support vector machines using
       sequential minimal optimization", in Advances in Kernel Methods:
       Support Vector Learning, MIT Press, 185-208, 1998.
    .. [3] C.-C. Chang, C.-J. Lin, "LIBSVM: a library for support vector
       machines", ACM TIST 2(3):27, 2011; data sets a1a-a9a at
       https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html
    .. [4] B. Becker, R. Kohavi, "Adult", UCI Machine Learning Repository,
       1996, https://doi.org/10.24432/C5XW20

    Examples
    --------
    >>> from skbinvi.datasets import load_adult
    >>> adult = load_adult(subset="train")
    >>> adult.data.shape, adult.data.dtype, adult.data.format
    ((32561, 123), dtype('float64'), 'csr')
    >>> int(adult.target.sum())
    7841
    >>> [str(name) for name in adult.feature_names[:3]]
    ['age=(-inf, 25]', 'age=(25, 32]', 'age=(32, 40]']
    >>> X_test, y_test = load_adult(subset="test", return_X_y=True)
    >>> X_test.shape, round(float(y_test.mean()), 4)
    ((16281, 123), 0.2362)
    """
    arrays = _read_npz()
    n_features = arrays["feature_names"].size
    data = _design_matrix(arrays[f"{subset}_codes"], arrays["offsets"], n_features)
    target = arrays[f"{subset}_target"].astype(np.int64)
    if return_X_y:
        return data, target

    bounds = np.concatenate([[0], np.cumsum(arrays["n_bin_edges"])])
    bin_edges = {
        str(attr): arrays["bin_edges"][lo:hi]
        for attr, lo, hi in zip(
            arrays["binned_attributes"], bounds[:-1], bounds[1:], strict=True
        )
    }
    descr = _resource("descr", "adult.rst").read_text(encoding="utf-8")
    return Bunch(
        data=data,
        target=target,
        feature_names=arrays["feature_names"],
        target_names=np.array(_TARGET_NAMES),
        bin_edges=bin_edges,
        DESCR=descr,
    )
