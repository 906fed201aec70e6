"""Tests for the bundled Reuters-21578 data set and its loader."""

import doctest
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _dataset_helpers import load_build_script, read_bundled

from skbinvi.datasets import _reuters, load_reuters

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT.parent / "shared" / "data" / "reuters21578"
BUILD_SCRIPT = REPO_ROOT / "tools" / "build_datasets.py"

N_TRAIN, N_TEST = 5048, 1982
N_WORDS = {"headline": 939, "body": 5142}
NNZ_ALL = {"headline": 27146, "body": 233254}
N_EMPTY = {"headline": 38, "body": 0}
CATEGORIES = ["acq", "earn", "money-fx"]
# documents (train, test) carrying each category, standard ModApte numbers
PER_CATEGORY = {"acq": (1650, 719), "earn": (2877, 1087), "money-fx": (538, 179)}

# R8 (Cardoso-Cachopo 2007): documents (train, test) per class, the published counts
R8_TRAIN, R8_TEST = 5485, 2189
R8_PER_CATEGORY = {
    "acq": (1596, 696),
    "crude": (253, 121),
    "earn": (2840, 1083),
    "grain": (41, 10),
    "interest": (190, 81),
    "money-fx": (206, 87),
    "ship": (108, 36),
    "trade": (251, 75),
}
R8_CATEGORIES = list(R8_PER_CATEGORY)
R8_WORDS, R8_NNZ = 5809, 268268


@pytest.mark.parametrize("text", ["headline", "body"])
@pytest.mark.parametrize(
    "subset, n_docs", [("train", N_TRAIN), ("test", N_TEST), ("all", N_TRAIN + N_TEST)]
)
def test_counts_and_types(subset, n_docs, text):
    bunch = load_reuters(subset=subset, text=text)
    X, y = bunch.data, bunch.target
    assert isinstance(X, sp.csr_matrix)
    assert X.dtype == np.float64
    assert X.shape == (n_docs, N_WORDS[text])
    assert X.has_canonical_format
    assert np.all(X.data == 1.0)
    assert y.dtype == np.int64
    assert y.shape == (n_docs, 3)
    assert set(np.unique(y)) <= {0, 1}
    assert np.all(y.sum(axis=1) >= 1)
    assert bunch.target_names == CATEGORIES
    assert bunch.feature_names.shape == (N_WORDS[text],)
    assert all(isinstance(w, str) for w in bunch.feature_names)
    assert bunch.newid.shape == (n_docs,)
    assert "Reuters-21578" in bunch.DESCR
    assert "research purposes" in bunch.DESCR


@pytest.mark.parametrize("text", ["headline", "body"])
def test_vocabulary_and_split(text):
    train = load_reuters(subset="train", text=text)
    test = load_reuters(subset="test", text=text)
    full = load_reuters(subset="all", text=text)
    vocab = full.feature_names
    assert len(vocab) == N_WORDS[text]
    assert list(vocab) == sorted(vocab)
    assert len(set(vocab)) == len(vocab)
    assert all(w.isalpha() and w.islower() and len(w) >= 2 for w in vocab)
    np.testing.assert_array_equal(train.feature_names, vocab)
    np.testing.assert_array_equal(test.feature_names, vocab)
    # train and test partition "all"; rows are in increasing NEWID order
    assert not set(train.newid) & set(test.newid)
    assert np.all(np.diff(full.newid) > 0)
    order = np.argsort(np.concatenate([train.newid, test.newid]))
    stacked = sp.vstack([train.data, test.data]).tocsr()[order]
    assert (stacked != full.data).nnz == 0
    np.testing.assert_array_equal(
        np.concatenate([train.target, test.target])[order], full.target
    )
    assert full.data.nnz == NNZ_ALL[text]
    n_empty = int(np.sum(np.diff(full.data.indptr) == 0))
    assert n_empty == N_EMPTY[text]
    # every word occurs in some document
    assert np.all(np.asarray(full.data.sum(axis=0)).ravel() >= 1)


def test_label_counts():
    for subset, k in [("train", 0), ("test", 1)]:
        y = load_reuters(subset=subset).target
        for j, c in enumerate(CATEGORIES):
            assert y[:, j].sum() == PER_CATEGORY[c][k]
    y = load_reuters(subset="all").target
    assert np.sum(y.sum(axis=1) == 2) == 20


def test_body_larger_than_headline():
    head = load_reuters(subset="all", text="headline")
    body = load_reuters(subset="all", text="body")
    assert body.data.shape[1] > head.data.shape[1]
    assert body.data.nnz > head.data.nnz
    np.testing.assert_array_equal(head.target, body.target)
    np.testing.assert_array_equal(head.newid, body.newid)


def test_return_X_y():
    bunch = load_reuters(subset="test", text="body")
    X, y = load_reuters(subset="test", text="body", return_X_y=True)
    assert isinstance(X, sp.csr_matrix)
    assert (X != bunch.data).nnz == 0
    np.testing.assert_array_equal(y, bunch.target)


@pytest.mark.parametrize(
    "categories", [("acq",), ["money-fx"], ("money-fx", "acq"), ("earn", "money-fx")]
)
@pytest.mark.parametrize("subset", ["train", "test"])
def test_categories_subset(categories, subset):
    full = load_reuters(subset=subset)
    bunch = load_reuters(subset=subset, categories=categories)
    cols = [CATEGORIES.index(c) for c in categories]
    keep = full.target[:, cols].any(axis=1)
    assert bunch.target_names == list(categories)
    assert bunch.data.shape == (keep.sum(), full.data.shape[1])
    assert bunch.target.shape == (keep.sum(), len(categories))
    assert np.all(bunch.target.sum(axis=1) >= 1)
    np.testing.assert_array_equal(bunch.target, full.target[keep][:, cols])
    np.testing.assert_array_equal(bunch.newid, full.newid[keep])
    assert (bunch.data != full.data[np.flatnonzero(keep)]).nnz == 0
    np.testing.assert_array_equal(bunch.feature_names, full.feature_names)
    if len(categories) == 1:
        k = 0 if subset == "train" else 1
        assert bunch.data.shape[0] == PER_CATEGORY[categories[0]][k]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"subset": "validation"}, "subset"),
        ({"subset": None}, "subset"),
        ({"text": "title"}, "text"),
        ({"text": 1}, "text"),
        ({"categories": ()}, "categories"),
        ({"categories": "acq"}, "categories"),
        ({"categories": ("acq", "grain")}, "categories"),
        ({"categories": ("acq", "acq")}, "categories"),
        ({"categories": None}, "categories"),
        ({"return_X_y": "yes"}, "return_X_y"),
        ({"categories": "R8", "text": "body"}, "categories"),
        ({"categories": "r52", "text": "body"}, "categories"),
        ({"categories": "r8", "text": "headline"}, "text"),
        ({"categories": "r8"}, "text"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name) as exc:
        load_reuters(**kwargs)
    if name != "return_X_y":
        # the message lists the allowed values
        allowed = {
            "subset": "train",
            "text": "headline",
            "categories": "money-fx",
        }[name]
        assert allowed in str(exc.value)
    if name == "categories":
        assert "'r8'" in str(exc.value)
    if kwargs.get("categories") == "r8":
        assert 'text="body"' in str(exc.value)


def test_bundled_files_small_and_documented():
    data = files("skbinvi.datasets") / "data"
    total = 0
    for text in ("headline", "body"):
        res = data / f"reuters_{text}.npz"
        with res.open("rb") as f, np.load(f) as z:
            assert z["indptr"].dtype == np.int32
            assert z["indices"].dtype == np.int32
            assert z["labels"].dtype == np.uint8
            assert z["source_files"].shape == (22,)
            assert z["source_sha256"].shape == (22,)
            assert all(len(h) == 64 for h in z["source_sha256"])
            assert str(z["script"]) == "tools/build_datasets.py"
            assert str(z["lemmatizer"]).startswith("simplemma ")
            assert int(z["n_empty"]) == N_EMPTY[text]
        with res.open("rb") as f:
            total += len(f.read())
    assert total < 3_000_000


def test_docstring_examples():
    result = doctest.testmod(_reuters, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0


def test_rebuild_from_source_matches_bundled():
    if not (SOURCE / "reut2-000.sgm.gz").is_file():
        pytest.skip(f"Reuters-21578 source not found at {SOURCE}")
    if not BUILD_SCRIPT.is_file():
        pytest.skip("tools/build_datasets.py not available")
    simplemma = pytest.importorskip("simplemma")  # noqa: F841
    build = load_build_script()
    lemmatizer = str(read_bundled("reuters_headline.npz")["lemmatizer"])
    if build._lemmatizer_version() != lemmatizer:
        pytest.skip("installed simplemma differs from the one used for the build")

    rebuilt = build.build_reuters(SOURCE)
    assert set(rebuilt) == {"headline", "body", "r8"}
    for text in ("headline", "body", "r8"):
        bundled = read_bundled(f"reuters_{text}.npz")
        assert set(rebuilt[text]) == set(bundled)
        for key, value in rebuilt[text].items():
            assert value.dtype == bundled[key].dtype, key
            np.testing.assert_array_equal(value, bundled[key], err_msg=key)


def _load_r8(subset, **kwargs):
    return load_reuters(subset=subset, categories="r8", text="body", **kwargs)


@pytest.mark.parametrize(
    "subset, n_docs",
    [("train", R8_TRAIN), ("test", R8_TEST), ("all", R8_TRAIN + R8_TEST)],
)
def test_r8_counts_and_types(subset, n_docs):
    bunch = _load_r8(subset)
    X, y = bunch.data, bunch.target
    assert isinstance(X, sp.csr_matrix)
    assert X.dtype == np.float64
    assert X.indices.dtype == np.int32
    assert X.shape == (n_docs, R8_WORDS)
    assert X.has_canonical_format
    assert np.all(X.data == 1.0)
    # one label per document: a class index, not an indicator matrix
    assert y.dtype == np.int64
    assert y.shape == (n_docs,)
    assert bunch.target_names == R8_CATEGORIES
    assert bunch.feature_names.shape == (R8_WORDS,)
    assert bunch.newid.shape == (n_docs,)
    assert np.all(np.diff(bunch.newid) > 0)
    assert "R8" in bunch.DESCR and "Cardoso-Cachopo" in bunch.DESCR
    X2, y2 = _load_r8(subset, return_X_y=True)
    assert (X2 != X).nnz == 0
    np.testing.assert_array_equal(y2, y)


def test_r8_category_counts():
    for subset, k in [("train", 0), ("test", 1)]:
        counts = np.bincount(_load_r8(subset).target, minlength=9)
        expected = [R8_PER_CATEGORY[c][k] for c in R8_CATEGORIES]
        np.testing.assert_array_equal(counts, expected + [0])


def test_r8_vocabulary_and_split():
    train, test, full = _load_r8("train"), _load_r8("test"), _load_r8("all")
    vocab = full.feature_names
    assert list(vocab) == sorted(set(vocab))
    assert all(w.isalpha() and w.islower() and len(w) >= 2 for w in vocab)
    np.testing.assert_array_equal(train.feature_names, vocab)
    np.testing.assert_array_equal(test.feature_names, vocab)
    assert not set(train.newid) & set(test.newid)
    order = np.argsort(np.concatenate([train.newid, test.newid]))
    stacked = sp.vstack([train.data, test.data]).tocsr()[order]
    assert (stacked != full.data).nnz == 0
    np.testing.assert_array_equal(
        np.concatenate([train.target, test.target])[order], full.target
    )
    assert full.data.nnz == R8_NNZ
    assert np.all(np.diff(full.data.indptr) > 0)  # no empty document
    assert np.all(np.asarray(full.data.sum(axis=0)).ravel() >= 1)
    # same preprocessing, own vocabulary: larger than the body variant's
    body_vocab = load_reuters(subset="all", text="body").feature_names
    assert len(vocab) > len(body_vocab)


def test_r8_agrees_with_body_variant():
    """R8 documents labelled acq / earn / money-fx are single-label body documents.

    Both corpora come from the same text and the same analyzer, so on the
    words of both vocabularies a shared document has the same words.
    """
    r8 = _load_r8("all")
    body = load_reuters(subset="all", text="body")
    r8_names = np.array(r8.target_names)[r8.target]
    shared = np.isin(r8_names, CATEGORIES)
    np.testing.assert_array_equal(
        np.isin(r8.newid[shared], body.newid), np.ones(shared.sum(), dtype=bool)
    )
    rows = np.searchsorted(body.newid, r8.newid[shared])
    np.testing.assert_array_equal(body.newid[rows], r8.newid[shared])
    expected = np.array([[c == name for c in CATEGORIES] for name in r8_names[shared]])
    np.testing.assert_array_equal(body.target[rows], expected.astype(np.int64))
    # documents with two of the three labels are not in R8
    two = body.newid[body.target.sum(axis=1) == 2]
    assert two.size == 20 and not np.isin(two, r8.newid).any()

    common, in_r8, in_body = np.intersect1d(
        r8.feature_names, body.feature_names, return_indices=True
    )
    assert common.size > 4000
    a = r8.data[np.flatnonzero(shared)][:, in_r8]
    b = body.data[rows][:, in_body]
    assert (a != b).nnz == 0


@pytest.mark.slow
def test_r8_logistic_regression_floor():
    """Raw words carry R8: logistic regression well above the majority class.

    Measured: 0.959 test accuracy (scikit-learn defaults, C=1); the published
    R8 figures for linear classifiers on word features are 0.95-0.97.
    """
    from sklearn.dummy import DummyClassifier
    from sklearn.linear_model import LogisticRegression

    X_train, y_train = _load_r8("train", return_X_y=True)
    X_test, y_test = _load_r8("test", return_X_y=True)
    majority = DummyClassifier().fit(X_train, y_train).score(X_test, y_test)
    clf = LogisticRegression(max_iter=1000).fit(X_train, y_train)
    accuracy = clf.score(X_test, y_test)
    assert majority == pytest.approx(1083 / 2189)
    assert accuracy >= 0.95
    assert (1 - accuracy) < 0.1 * (1 - majority)


def test_r8_bundled_file_small_and_documented():
    z = read_bundled("reuters_r8.npz")
    assert z["indptr"].dtype == np.int32
    assert z["indices"].dtype == np.uint16
    assert z["labels"].dtype == np.uint8
    assert z["labels"].shape == (R8_TRAIN + R8_TEST,)
    assert list(z["categories"]) == R8_CATEGORIES
    assert str(z["text"]) == "body"
    assert "R10" in str(z["selection"])
    assert z["source_sha256"].shape == (22,)
    np.testing.assert_array_equal(
        z["source_sha256"], read_bundled("reuters_body.npz")["source_sha256"]
    )
    assert str(z["lemmatizer"]) == str(read_bundled("reuters_body.npz")["lemmatizer"])
    assert int(z["n_empty"]) == 0
    res = files("skbinvi.datasets") / "data" / "reuters_r8.npz"
    with res.open("rb") as f:
        assert len(f.read()) < 450_000
