"""The tables of recorded benchmark results (benchmarks/tables.py).

The README's table and the user guide's "Benchmarks" page are rendered from
``benchmarks/results/*.json``: the README must hold what the JSON holds, and
every rendered cell must be the statistic of the JSON that its header names.
"""

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402


def test_readme_tables_equal_the_results():
    text = (ROOT / "README.md").read_text()
    names = re.findall(r"<!-- table: (\w+) -->", text)
    assert names, "the README has no rendered table"
    for name in names:
        assert tables.render(name) in text, (
            f"the README's table {name} is empty or stale")
    assert tables.update_readme(text) == text, (
        "README.md tables differ from benchmarks/results: run "
        "python benchmarks/tables.py")


def test_docs_name_known_tables():
    used = set()
    for path in (ROOT / "doc").rglob("*.rst"):
        used |= set(re.findall(r"\.\. bench-table:: (\w+)", path.read_text()))
    assert used, "no page renders a benchmark table"
    assert used <= set(tables.TABLES), sorted(used - set(tables.TABLES))


@pytest.mark.parametrize("name", sorted(tables.TABLES))
def test_tables_render(name):
    table = tables.TABLES[name]()
    assert table.rows and all(len(row) == len(table.header) for row in table.rows)
    assert tables.render(name).count("\n") == len(table.rows) + 1
    assert tables.render(name, "rst").startswith(".. list-table::")


def test_noisy_or_vs_lda_cells_are_the_json_means():
    table = tables.noisy_or_vs_lda()
    col = {h: j for j, h in enumerate(table.header)}
    with open(ROOT / "benchmarks" / "results" / "bench_noisy_or_ttq_r8.json") as f:
        fits = json.load(f)["ttq"].values()
    for K in (50, 100):
        row = next(r for r in table.rows if r[0] == "R8" and r[1] == str(K))
        for method, name in (("lda", "LDA"), ("acp", "ACP"), ("avi", "AVI")):
            runs = [fit for fit in fits
                    if fit["config"]["K"] == K and fit["config"]["method"] == method]
            assert len(runs) == 3
            acc = statistics.fmean(r["accuracy"] for r in runs)
            assert row[col[f"{name} accuracy"]] == f"{acc:.3f}"
            seconds = statistics.fmean(r["fit_seconds"] for r in runs)
            assert row[col[f"{name} fit s"]] == f"{seconds:.1f}"
        elbo = statistics.fmean(r["test_elbo"] for r in runs)
        assert row[col["AVI test ELBO"]] == f"{elbo:.2f}"


def test_document_features_vs_lsa_cells_are_the_json_means():
    table = tables.document_features_vs_lsa()
    col = {h: j for j, h in enumerate(table.header)}
    with open(ROOT / "benchmarks" / "results" / "bench_features.json") as f:
        runs = json.load(f)["runs"]
    body = [r for r in runs if r["corpus"] == "body" and r["K"] == 50]
    row = next(r for r in table.rows if r[0] == "Reuters bodies" and r[1] == "50")
    for method, first in (("lsa", "500 labels: LSA"), ("acp", None)):
        chosen = [r for r in body if r["method"] == method]
        acc = statistics.fmean(r["headline"]["500"]["accuracy"] for r in chosen)
        j = col[first] if first else col["500 labels: LSA"] + 1
        assert row[j] == f"{100 * acc:.1f}"
    lsa = statistics.fmean(r["fit_seconds"] for r in body if r["method"] == "lsa")
    acp = statistics.fmean(r["fit_seconds"] for r in body if r["method"] == "acp")
    assert row[col["ACP fit / LSA fit"]] == f"{acp / lsa:.0f}"


def test_relational_tables_cells_are_the_json_statistics():
    table = tables.relational_global()
    col = {h: j for j, h in enumerate(table.header)}
    with open(ROOT / "benchmarks" / "results" / "bench_relational_global.json") as f:
        data = json.load(f)["data"]
    for name, setting, text in (("kinship", "global", "one global model"),
                                ("umls", "single", "one model per relation")):
        row = next(r for r in table.rows if r[0] == name and r[2] == text)
        fits = [seed[setting] for seed in data[name]["seeds"]]
        assert row[col["mean per-relation AUC"]] == (
            f"{statistics.fmean(f['mean_auc'] for f in fits):.4f}")
        assert row[col["pooled AUC"]] == (
            f"{statistics.fmean(f['pooled_auc'] for f in fits):.4f}")
    assert row[col["entities x relations"]] == "135 x 46"
    sparse = tables.relational_sparse()
    with open(ROOT / "benchmarks" / "results" / "bench_relational_sparse.json") as f:
        run = json.load(f)
    first = sparse.rows[0]
    assert first[0] == f"{run['n_entities']:,}"
    assert first[5] == f"{run['heldout_auc']:.4f}"
    assert first[7] == f"{min(run['matched_feature_auc']):.3f}"


def test_paired_relational_table_is_global_minus_single():
    """The paired table's cells, recomputed with NumPy from the per-relation
    AUCs of the JSON (NaN where a relation has no held-out link)."""
    import numpy as np

    table = tables.relational_global_paired()
    with open(ROOT / "benchmarks" / "results" / "bench_relational_global.json") as f:
        data = json.load(f)["data"]
    for row in table.rows:
        seeds = data[row[0]]["seeds"]
        g = np.array([s["global"]["auc_per_relation"] for s in seeds], dtype=float)
        s_ = np.array([s["single"]["auc_per_relation"] for s in seeds], dtype=float)
        held = np.array([s["heldout_links_per_relation"] for s in seeds])
        d = g - s_
        large = np.array([np.nanmean(np.where(h >= 10, di, np.nan))
                          for di, h in zip(d, held, strict=True)])
        pooled = np.array([s["global"]["pooled_auc"] - s["single"]["pooled_auc"]
                           for s in seeds])
        for cell, values in ((row[2], large), (row[4], pooled)):
            mean, se = cell.split(" ± ")
            assert float(mean) == pytest.approx(values.mean(), abs=6e-5)
            assert float(se) == pytest.approx(
                values.std(ddof=1) / np.sqrt(len(values)), abs=6e-5)
        ahead, behind = (int(x) for x in row[5].split(" / "))
        assert (ahead, behind) == (int(np.sum(d > 0)), int(np.sum(d < 0)))
