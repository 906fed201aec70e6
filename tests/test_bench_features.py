"""The quick mode of benchmarks/bench_features.py runs and writes sound JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_features.py"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(),
                                reason="benchmarks/ is not in this checkout")

METHODS = {"lsa", "lda", "nmf", "raw", "acp", "avi"}


def _check_accuracy_block(block, labels):
    assert set(block) == set(labels)
    for value in block.values():
        assert 0.0 <= value <= 1.0


def test_draws_hold_every_class_and_are_shared_between_methods():
    import numpy as np

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_features
    finally:
        sys.path.remove(str(SCRIPT.parent))
    y = np.repeat(np.arange(8), [500, 200, 50, 20, 10, 5, 3, 2])
    idx = bench_features.draw_labelled(y, 20, seed=0, draw=3)
    assert idx.size == 20 and np.unique(idx).size == 20
    assert np.unique(y[idx]).size == 8
    np.testing.assert_array_equal(idx, bench_features.draw_labelled(y, 20, 0, 3))
    few = bench_features.draw_labelled(y, 5, seed=1, draw=0)
    assert few.size == 5 and np.unique(y[few]).size >= 2
    Y = np.zeros((100, 3), dtype=int)
    Y[::2, 0] = 1
    assert bench_features.draw_labelled(Y, 10, 0, 0).size == 10


@pytest.mark.slow
def test_quick_mode_writes_the_json(tmp_path):
    out = tmp_path / "bench_features_quick.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test accuracy (%)" in proc.stdout
    res = json.loads(out.read_text())

    for key in ("date", "cpu_count", "numpy", "scipy", "sklearn", "numba",
                "skbinvi", "git_commit"):
        assert key in res["machine"]
    settings = res["settings"]
    assert settings["corpora"] == ["headline"]
    assert settings["components"] == [20]
    assert settings["seeds"] == [0]
    labels = [str(n) for n in settings["labels"]]
    assert labels == ["20", "all"]
    assert res["corpora"]["headline"]["multilabel"] is True
    assert res["tables"]

    runs = res["runs"]
    assert {r["method"] for r in runs} == METHODS
    assert len(runs) == len(METHODS)
    for r in runs:
        assert "error" not in r, r
        assert r["corpus"] == "headline" and r["seed"] == 0
        assert r["K"] == (None if r["method"] == "raw" else 20)
        for variant in ("plain", "scaled"):
            _check_accuracy_block(r["accuracy"][variant], labels)
            assert len(r["accuracy_draws"][variant]["20"]) == 5
            assert len(r["accuracy_draws"][variant]["all"]) == 1
        for key in labels:
            head = r["headline"][key]
            assert 0.0 <= head["accuracy"] <= 1.0
            if r["method"] in ("acp", "avi"):
                assert head["variant"] == "plain"
            else:
                assert head["accuracy"] == max(r["accuracy"]["plain"][key],
                                               r["accuracy"]["scaled"][key])
        assert r["fit_seconds"] >= 0 and r["fit_cpu_seconds"] >= 0
        for variant in ("plain", "scaled"):
            assert r["classifier_convergence_warnings"][variant] >= 0
        if r["method"] != "raw":
            assert r["n_features_out"] == 20
            assert r["transform_test_seconds"] >= 0
        if r["method"] in ("acp", "avi"):
            assert r["test_elbo"] < 0
            assert 0 <= r["causes_in_use"] <= 20


def test_transform_outputs_of_the_study_are_their_definitions():
    """The outputs compared by ``--sections transforms`` are what their names say,
    computed from the logits alone (and the training statistics)."""
    import numpy as np
    from scipy.special import expit

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_features
    finally:
        sys.path.remove(str(SCRIPT.parent))
    outputs = bench_features._transform_outputs()
    assert set(bench_features.TRANSFORMS) == set(outputs)
    rng = np.random.default_rng(0)
    L = rng.normal(-5, 6, size=(40, 3))

    class Model:
        prior_ = np.array([0.1, 0.2, 0.3])

    st = {"mean": L.mean(0), "std": L.std(0), "global_std": L.std(),
          "global_rms": np.sqrt(np.mean(L**2))}
    out = {k: f(L, Model, st) for k, (_, f) in outputs.items()}
    np.testing.assert_array_equal(out["logit"], L)
    np.testing.assert_allclose(out["probability"], expit(L))
    np.testing.assert_allclose(out["logit_standardized"].std(0), 1.0)
    np.testing.assert_allclose(out["logit_global_std"].std(), 1.0)
    np.testing.assert_allclose(np.mean(out["logit_global_rms"] ** 2), 1.0)
    np.testing.assert_allclose(np.exp(out["log_q_log_1mq"]).reshape(40, 2, 3).sum(1),
                               1.0)
    np.testing.assert_allclose(out["softplus_logit"], -np.log1p(-expit(L)),
                               rtol=1e-9)
    assert out["q_logit"].shape == (40, 6)
    assert np.abs(out["logit_clip5"]).max() <= 5.0


def test_transform_study_parses_its_options(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_features
    finally:
        sys.path.remove(str(SCRIPT.parent))
    with pytest.raises(SystemExit):
        bench_features.main(["--sections", "transforms", "--transform-outputs",
                             "no_such_output", "--corpora", "headline",
                             "--out", str(tmp_path / "t.json")])
    with pytest.raises(SystemExit):  # one JSON file per section
        bench_features.main(["--sections", "methods", "transforms",
                             "--out", str(tmp_path / "t.json")])


@pytest.mark.slow
def test_epochs_section_scores_warm_fits_beside_lsa(tmp_path):
    """--sections epochs --quick: LSA and the default noisy-OR after 10 and 20
    epochs (warm fits of 10), every accuracy a fraction, the CPU seconds
    cumulative and the test ELBO finite."""
    out = tmp_path / "epochs.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", "epochs", "--quick",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["settings"]["epochs"] == [10, 20]
    runs = res["runs"]
    assert [r["method"] for r in runs] == ["lsa", "acp", "acp"]
    acp = runs[1:]
    assert [r["epochs"] for r in acp] == [10, 20]
    assert 0 < acp[0]["fit_cpu_seconds"] < acp[1]["fit_cpu_seconds"]
    for r in acp:
        _check_accuracy_block(r["accuracy"]["plain"], ["20", "all"])
        assert r["test_elbo"] < 0
    _check_accuracy_block({k: v["accuracy"] for k, v in runs[0]["headline"].items()},
                          ["20", "all"])
    assert "by epochs of noisy-OR training" in res["tables"][0]


def test_effective_dims_count_uncorrelated_directions():
    """The span study's effective number of dimensions is K for uncorrelated
    features and 1 for features that are multiples of one direction."""
    import numpy as np

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_features
    finally:
        sys.path.remove(str(SCRIPT.parent))
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((20000, 6))
    assert abs(bench_features._effective_dims(Z) - 6.0) < 0.05
    line = rng.standard_normal((500, 1)) * np.array([1.0, -3.0, 0.5, 7.0])
    assert abs(bench_features._effective_dims(line) - 1.0) < 1e-9
    # two independent blocks of two copies each: two directions
    a, b = rng.standard_normal((2, 20000, 1))
    blocks = np.hstack([a, 2 * a, b, -b])
    assert abs(bench_features._effective_dims(blocks) - 2.0) < 0.05


@pytest.mark.slow
def test_span_section_writes_the_json(tmp_path):
    out = tmp_path / "span.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", "span", "--quick", "--out",
         str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "What the noisy-OR features keep" in proc.stdout
    res = json.loads(out.read_text())
    (run,) = res["runs"]
    assert run["corpus"] == "headline" and run["K"] == 20 and run["method"] == "acp"
    assert set(run["features"]) == {"transform", "loadings", "svd", "lsa"}
    # cosines of principal angles between two K-dimensional spans
    cos = run["principal_cosines"]
    assert len(cos) == 20 and all(0.0 <= c <= 1.0 + 1e-9 for c in cos)
    assert cos == sorted(cos, reverse=True)
    for name, ev in run["features"].items():
        assert 1.0 <= run["effective_dims"][name] <= 20.0 + 1e-9
        for n in ("20", "all"):
            head = ev["headline"][n]
            plain, scaled = ev["accuracy"]["plain"][n], ev["accuracy"]["scaled"][n]
            if name == "transform":
                assert head["accuracy"] == plain
            else:
                assert head["accuracy"] == max(plain, scaled)
    assert res["tables"]
