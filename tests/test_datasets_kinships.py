"""Bundled Alyawarra kinship data (load_kinships)."""

import doctest
import hashlib
import re
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from _dataset_helpers import load_build_script, read_bundled
from numpy.testing import assert_array_equal

from skbinvi.datasets import _kinships, load_kinships

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT.parent / "shared" / "data" / "relational" / "kinships"
SOURCE_FILES = ("train.txt", "valid.txt", "test.txt")
BUILD_SCRIPT = REPO_ROOT / "tools" / "build_datasets.py"
BUNDLED = files("skbinvi.datasets") / "data" / "kinships.npz"

N_PEOPLE, N_RELATIONS, N_ONES = 104, 25, 10686
N_PAIRS = N_PEOPLE * (N_PEOPLE - 1)  # 10,712 ordered pairs i != j


def _need_source():
    if not all((SOURCE / n).is_file() for n in SOURCE_FILES):
        pytest.skip(f"kinships source files not found in {SOURCE}")


@pytest.fixture(scope="module")
def kin():
    return load_kinships()


def test_shapes_dtypes_and_names(kin):
    assert kin.data.shape == (N_PAIRS, 2) and kin.data.dtype == np.int64
    assert kin.target.shape == (N_PAIRS,) and kin.target.dtype == np.int64
    assert kin.adjacency.shape == (N_RELATIONS, N_PEOPLE, N_PEOPLE)
    assert kin.adjacency.dtype == bool
    assert kin.feature_names == ["head", "tail"]
    assert kin.relation is None
    assert kin.entity_names.shape == (N_PEOPLE,)
    assert kin.relation_names.shape == (N_RELATIONS,)
    assert list(kin.entity_names) == [f"person{k}" for k in range(N_PEOPLE)]
    expected = [f"term{k}" for k in range(26) if k != 23]
    assert list(kin.relation_names) == expected


def test_tensor_facts(kin):
    Y = kin.adjacency
    assert int(Y.sum()) == N_ONES
    # no self links
    assert not Y[:, np.arange(N_PEOPLE), np.arange(N_PEOPLE)].any()
    # every relation occurs; the documented counts per relation
    counts = Y.sum(axis=(1, 2))
    assert_array_equal(
        counts,
        [
            228,
            489,
            231,
            379,
            493,
            508,
            453,
            817,
            805,
            462,
            505,
            739,
            299,
            447,
            43,
            943,
            1256,
            392,
            569,
            13,
            272,
            142,
            193,
            2,
            6,
        ],
    )
    # at most one term per ordered pair; 26 ordered pairs have none
    per_pair = Y.sum(axis=0)
    assert per_pair.max() == 1
    assert int(per_pair.sum()) == N_PAIRS - 26
    # directed: no relation is symmetric
    assert not any(np.array_equal(Y[r], Y[r].T) for r in range(N_RELATIONS))


def test_pairs_order_and_no_self_pairs(kin):
    i, j = kin.data[:, 0], kin.data[:, 1]
    assert np.all(i != j)
    assert i.min() == 0 and i.max() == N_PEOPLE - 1
    # row-major over i then j: strictly increasing flat index i * N + j
    assert np.all(np.diff(i * N_PEOPLE + j) > 0)
    assert len({(a, b) for a, b in kin.data.tolist()}) == N_PAIRS
    # each person is the head of 103 pairs and the tail of 103 pairs
    assert_array_equal(np.bincount(i), np.full(N_PEOPLE, N_PEOPLE - 1))
    assert_array_equal(np.bincount(j), np.full(N_PEOPLE, N_PEOPLE - 1))


def test_target_any_relation(kin):
    i, j = kin.data.T
    assert_array_equal(kin.target, kin.adjacency.any(axis=0)[i, j])
    assert int(kin.target.sum()) == N_ONES  # one term at most per pair


@pytest.mark.parametrize("relation", ["term7", 7, np.int64(7)])
def test_target_named_relation(kin, relation):
    sub = load_kinships(relation=relation)
    assert sub.relation == "term7"
    i, j = sub.data.T
    assert_array_equal(sub.target, kin.adjacency[7, i, j])
    assert int(sub.target.sum()) == 817
    assert_array_equal(sub.data, kin.data)
    assert_array_equal(sub.adjacency, kin.adjacency)


def test_index_after_gap_is_term24(kin):
    sub = load_kinships(relation=23)
    assert sub.relation == "term24"
    assert int(sub.target.sum()) == 2
    assert_array_equal(sub.target, load_kinships(relation="term24").target)


def test_target_sum_matches_every_relation(kin):
    total = 0
    for r, name in enumerate(kin.relation_names):
        _, y = load_kinships(relation=str(name), return_X_y=True)
        assert int(y.sum()) == int(kin.adjacency[r].sum())
        total += int(y.sum())
    assert total == N_ONES


def test_return_x_y_and_fresh_arrays(kin):
    X, y = load_kinships(relation="term0", return_X_y=True)
    sub = load_kinships(relation="term0")
    assert_array_equal(X, sub.data)
    assert_array_equal(y, sub.target)
    # every call returns fresh arrays
    X[0, 0] = 99
    sub.adjacency[:] = True
    fresh = load_kinships(relation="term0")
    assert fresh.data[0, 0] == 0
    assert int(fresh.adjacency.sum()) == N_ONES


def test_descr(kin):
    for text in (
        "Alyawarra",
        "Denham",
        "Kemp",
        "Miller",
        "PyKEEN",
        "train.txt",
        "valid.txt",
        "test.txt",
        "directed",
        "LatentFeatureRelational",
        "tools/build_datasets.py kinships",
        "10,686",
    ):
        assert text in kin.DESCR, text


@pytest.mark.parametrize(
    "relation", ["term23", "foo", "", 25, -1, True, 1.0, ["term0"], b"term0"]
)
def test_bad_relation_raises(relation):
    with pytest.raises(ValueError, match=r"relation must be .*'term0'.*'term25'"):
        load_kinships(relation=relation)


def test_bad_return_x_y_raises():
    with pytest.raises(ValueError, match="return_X_y"):
        load_kinships(return_X_y="yes")


def test_bundled_file_is_compact_with_provenance():
    with BUNDLED.open("rb") as f:
        size = len(f.read())
    assert size < 20_000  # about 8 kB
    arrays = read_bundled("kinships.npz")
    assert set(arrays) == {
        "adjacency",
        "shape",
        "entity_names",
        "relation_names",
        "source_files",
        "source_sha256",
        "script",
    }
    assert arrays["adjacency"].dtype == np.uint8
    assert arrays["adjacency"].shape == (N_RELATIONS, N_PEOPLE, 13)
    assert_array_equal(arrays["shape"], [N_RELATIONS, N_PEOPLE, N_PEOPLE])
    assert list(arrays["source_files"]) == [
        f"relational/kinships/{n}" for n in SOURCE_FILES
    ]
    assert all(re.fullmatch(r"[0-9a-f]{64}", str(h)) for h in arrays["source_sha256"])
    assert str(arrays["script"]) == "tools/build_datasets.py"


def test_tensor_matches_source_files(kin):
    """Independent of the build script: parse the triple files here."""
    _need_source()
    Y = np.zeros_like(kin.adjacency)
    n_lines = 0
    for name in SOURCE_FILES:
        for line in (SOURCE / name).read_text(encoding="ascii").splitlines():
            head, rel, tail = line.split("\t")
            r = list(kin.relation_names).index(rel)
            Y[r, int(head.removeprefix("person")), int(tail.removeprefix("person"))] = 1
            n_lines += 1
    assert n_lines == N_ONES  # no repeated triple: the split is a partition
    assert_array_equal(Y, kin.adjacency)
    digests = [
        hashlib.sha256((SOURCE / n).read_bytes()).hexdigest() for n in SOURCE_FILES
    ]
    assert list(read_bundled("kinships.npz")["source_sha256"]) == digests
    for digest in digests:
        assert digest in kin.DESCR


def test_rebuild_equals_bundled(tmp_path):
    _need_source()
    build = load_build_script()
    rebuilt = build.build_kinships(SOURCE)
    bundled = read_bundled("kinships.npz")
    assert set(rebuilt) == set(bundled)
    for key in bundled:
        assert_array_equal(rebuilt[key], bundled[key], err_msg=key)
    # the sub-command writes the same arrays
    assert (
        build.main(["kinships", "--source", str(SOURCE), "--output-dir", str(tmp_path)])
        == 0
    )
    with np.load(tmp_path / "kinships.npz", allow_pickle=False) as z:
        for key in bundled:
            assert_array_equal(z[key], bundled[key], err_msg=key)


def test_docstring_examples():
    result = doctest.testmod(_kinships, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_all_relations_give_the_multi_relational_triples():
    kin = load_kinships(relation="all")
    X, y = kin.data, kin.target
    R = len(kin.relation_names)
    assert X.shape == (R * N_PAIRS, 3) and X.dtype == np.int64
    assert_array_equal(y, kin.adjacency[X[:, 2], X[:, 0], X[:, 1]])
    assert int(y.sum()) == N_ONES
    assert np.all(X[:, 0] != X[:, 1])
    assert kin.feature_names == ["head", "tail", "relation"] and kin.relation == "all"
    # relation r's rows are the single-relation problem of r
    Xr, yr = load_kinships(relation=3, return_X_y=True)
    assert_array_equal(X[X[:, 2] == 3, :2], Xr)
    assert_array_equal(y[X[:, 2] == 3], yr)
