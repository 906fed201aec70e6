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
    for text in ("headline", "body"):
        bundled = read_bundled(f"reuters_{text}.npz")
        assert set(rebuilt[text]) == set(bundled)
        for key, value in rebuilt[text].items():
            assert value.dtype == bundled[key].dtype, key
            np.testing.assert_array_equal(value, bundled[key], err_msg=key)

