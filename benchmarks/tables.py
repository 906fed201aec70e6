"""Tables of the recorded benchmark results, for the README and the user guide.

The benchmark scripts write their measurements to ``benchmarks/results/*.json``;
this module is the one place that turns them into tables. The user guide's
"Benchmarks" page renders them at build time (the ``bench-table`` directive of
``doc/sphinxext/bench_tables.py``) and the README keeps one of them between
the markers ``<!-- table: NAME -->`` and ``<!-- /table -->``, written by::

    python benchmarks/tables.py            # rewrite the README's tables
    python benchmarks/tables.py --check    # exit 1 if the README disagrees
    python benchmarks/tables.py --show NAME

``tests/test_benchmark_tables.py`` fails when the README's table and the JSON
disagree, so a re-measurement edits one file and reruns this script.
"""

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass
class Table:
    """A rendered table: a header row, body rows of strings, and its source."""

    header: list
    rows: list
    source: str  # what produced the JSON: the command, for the caption

    def markdown(self):
        right = ["---:" if _numeric_column(self.rows, j) else "---"
                 for j in range(len(self.header))]
        lines = ["| " + " | ".join(self.header) + " |", "|" + "|".join(right) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def rst(self):
        lines = [".. list-table::", "   :header-rows: 1", ""]
        for row in [self.header, *self.rows]:
            lines.append("   * - " + (row[0] or r"\ "))
            lines += ["     - " + (cell or r"\ ") for cell in row[1:]]
        return "\n".join(lines)


def _numeric_column(rows, j):
    return all(re.fullmatch(r"[-+]?[\d.,]+( ?[-–] ?[-+]?[\d.,]+)?( s)?", row[j] or "0")
               for row in rows)


def load(name):
    """The JSON document ``benchmarks/results/NAME.json``."""
    with open(RESULTS / f"{name}.json") as f:
        return json.load(f)


def _mean(values):
    return statistics.fmean(values)


def _span(values, fmt="{:d}"):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


# -- the tables ----------------------------------------------------------------


def noisy_or_vs_lda():
    """Default noisy-OR features against online LDA on Reuters bodies and R8.

    From ``bench_noisy_or_ttq_body.json`` and ``bench_noisy_or_ttq_r8.json``
    (``bench_noisy_or.py --sections ttq``): mean over the seeds of the fit
    seconds and of the test accuracy of ``LogisticRegression`` on the
    features (exact match of the three labels on the bodies), the test ELBO
    in nats per document, and the range over the seeds of the causes whose
    prior ends above 0.01.
    """
    rows = []
    for corpus, label in (("body", "Reuters bodies"), ("r8", "R8")):
        fits = load(f"bench_noisy_or_ttq_{corpus}")["ttq"].values()
        for K in sorted({fit["config"]["K"] for fit in fits}):
            cells = [label, str(K)]
            for method in ("lda", "acp", "avi"):
                runs = [fit for fit in fits
                        if (fit["config"]["K"], fit["config"]["method"]) == (K, method)]
                cells += [f"{_mean([r['fit_seconds'] for r in runs]):.1f}",
                          f"{_mean([r['accuracy'] for r in runs]):.3f}"]
                if method != "lda":
                    cells += [f"{_mean([r['test_elbo'] for r in runs]):.2f}",
                              _span([r["causes_in_use"] for r in runs])]
            rows.append(cells)
    header = ["corpus", "K", "LDA fit s", "LDA accuracy",
              "ACP fit s", "ACP accuracy", "ACP test ELBO", "ACP causes in use",
              "AVI fit s", "AVI accuracy", "AVI test ELBO", "AVI causes in use"]
    return Table(header, rows, "python benchmarks/bench_noisy_or.py --sections ttq "
                 "--corpora body --components 50 100 150 --seeds 0 1 2 (and r8)")


_CORPUS_LABELS = {"body": "Reuters bodies", "r8": "R8", "headline": "Reuters headlines",
                  "mnist": "binary MNIST", "r52": "R52", "news": "news articles",
                  "tweets": "health tweets", "rare": "Reuters, rare topics",
                  "r7": "Reuters, R8 without earn", "parl-de": "Bundestag speeches"}


_FEATURES_COMMAND = ("python benchmarks/bench_features.py --corpora body --components "
                     "50 100 --seeds 0 1 2, then --corpora r8 headline mnist r52 news "
                     "--components 50 100 --seeds 0 --resume")


def _feature_runs():
    data = load("bench_features")
    groups = {}
    for run in data["runs"]:
        groups.setdefault((run["corpus"], run["K"], run["method"]), []).append(run)
    # raw words have no K: the same runs stand beside every K
    for (corpus, K, method) in list(groups):
        if method != "raw":
            groups.setdefault((corpus, K, "raw"), groups.get((corpus, None, "raw")))
    corpora = [c for c in data["settings"]["corpora"]
               if any(key[0] == c for key in groups)]
    return data, groups, corpora


def _headline_accuracy(runs, n):
    return _mean([run["headline"][str(n)]["accuracy"] for run in runs])


def document_features():
    """Noisy-OR features against LSA and raw words, by number of labels.

    From ``bench_features.json`` (``bench_features.py``): each feature model
    fitted on all training documents without labels, then a
    ``LogisticRegression`` trained on n labelled ones (mean of 5 draws; one
    per label on multi-label corpora). Noisy-OR: the default pipeline, no
    scaler; LSA and raw words: the better of with and without a
    ``StandardScaler``. Accuracy in percent, mean over seeds; fit seconds of
    the feature model (wall).
    """
    _, groups, corpora = _feature_runs()
    rows = []
    for corpus in corpora:
        for K in sorted({key[1] for key in groups
                         if key[0] == corpus and key[1] is not None}):
            runs = {m: groups[(corpus, K, m)] for m in ("lsa", "raw", "acp", "avi")}
            cells = [_CORPUS_LABELS.get(corpus, corpus), str(K), str(len(runs["acp"]))]
            for n in (20, 100):
                cells += [f"{100 * _headline_accuracy(runs[m], n):.1f}"
                          for m in ("lsa", "acp", "avi")]
            cells += [f"{100 * _headline_accuracy(runs[m], 'all'):.1f}"
                      for m in ("lsa", "raw", "acp", "avi")]
            cells += [f"{_mean([r['fit_seconds'] for r in runs[m]]):.1f}"
                      for m in ("lsa", "acp")]
            rows.append(cells)
    header = ["corpus", "K", "seeds",
              "20 labels: LSA", "ACP", "AVI", "100 labels: LSA", "ACP", "AVI",
              "all labels: LSA", "raw words", "ACP", "AVI", "fit s: LSA", "ACP"]
    return Table(header, rows, _FEATURES_COMMAND)


def document_features_all_labels():
    """Every method with all labels, and the fit seconds of each.

    From ``bench_features.json``: accuracy in percent (noisy-OR: default
    pipeline; LSA, LDA, NMF, raw words: the better of with and without a
    ``StandardScaler``), mean over seeds; fit seconds (wall / CPU) of the
    feature model.
    """
    _, groups, corpora = _feature_runs()
    methods = ("lsa", "lda", "nmf", "raw", "acp", "avi")
    rows = []
    for corpus in corpora:
        for K in sorted({key[1] for key in groups
                         if key[0] == corpus and key[1] is not None}):
            cells = [_CORPUS_LABELS.get(corpus, corpus), str(K)]
            cells += [f"{100 * _headline_accuracy(groups[(corpus, K, m)], 'all'):.1f}"
                      for m in methods]
            for m in ("lsa", "lda", "nmf", "acp", "avi"):
                runs = groups[(corpus, K, m)]
                cells.append(f"{_mean([r['fit_seconds'] for r in runs]):.1f} / "
                             f"{_mean([r['fit_cpu_seconds'] for r in runs]):.1f}")
            rows.append(cells)
    header = ["corpus", "K", "LSA", "LDA", "NMF", "raw words", "ACP", "AVI",
              "fit s LSA", "LDA", "NMF", "ACP", "AVI"]
    return Table(header, rows, _FEATURES_COMMAND)


def document_features_vs_lsa():
    """The default noisy-OR pipeline against LSA at every number of labels.

    From ``bench_features.json``: accuracy in percent of the default pipeline
    ``NoisyORFactorizer(K) -> LogisticRegression()`` (ACP) and of LSA (the
    better of the classifier with and without a ``StandardScaler``) with
    20, 50, 100, 500 and all labelled documents, mean over seeds; the last
    column is ACP's fit time as a multiple of LSA's (wall).
    """
    _, groups, corpora = _feature_runs()
    labels = (20, 50, 100, 500, "all")
    rows = []
    for corpus in corpora:
        for K in sorted({key[1] for key in groups
                         if key[0] == corpus and key[1] is not None}):
            lsa, acp = groups[(corpus, K, "lsa")], groups[(corpus, K, "acp")]
            cells = [_CORPUS_LABELS.get(corpus, corpus), str(K), str(len(acp))]
            for n in labels:
                cells += [f"{100 * _headline_accuracy(runs, n):.1f}"
                          for runs in (lsa, acp)]
            ratio = (_mean([r["fit_seconds"] for r in acp])
                     / _mean([r["fit_seconds"] for r in lsa]))
            cells.append(f"{ratio:.0f}")
            rows.append(cells)
    header = ["corpus", "K", "seeds"]
    for n in labels:
        header += [f"{n} labels: LSA", "ACP"]
    header.append("ACP fit / LSA fit")
    return Table(header, rows, _FEATURES_COMMAND)


def noisy_or_epochs():
    """Default noisy-OR features by epochs of training, beside LSA's.

    From ``bench_features_epochs.json`` (``bench_features.py --sections
    epochs``): for each corpus and K, LSA (the better of the classifier with
    and without a scaler) and the default ``NoisyORFactorizer`` after 5,
    7, 10, 20, ... epochs (warm fits): test ELBO in nats per document, fit CPU
    seconds, and the accuracy in percent of ``LogisticRegression`` trained on
    n labelled documents (mean of 5 draws; mean over seeds).
    """
    data = load("bench_features_epochs")
    labels = [str(n) for n in data["settings"]["labels"]]
    groups = {}
    for run in data["runs"]:
        key = (run["corpus"], run["K"], run["method"], run.get("epochs"))
        groups.setdefault(key, []).append(run)
    rows = []
    for (corpus, K, method, epochs), runs in groups.items():
        cells = [_CORPUS_LABELS.get(corpus, corpus), str(K)]
        if method == "lsa":
            cells += ["LSA", "", ""]
            acc = [_headline_accuracy(runs, n) for n in labels]
        else:
            cells += [f"{method.upper()}, {epochs} epochs",
                      f"{_mean([r['test_elbo'] for r in runs]):.2f}",
                      f"{_mean([r['fit_cpu_seconds'] for r in runs]):.1f}"]
            acc = [_mean([r["accuracy"]["plain"][n] for r in runs]) for n in labels]
        rows.append(cells + [f"{100 * a:.1f}" for a in acc])
    header = ["corpus", "K", "features", "test ELBO", "fit CPU s",
              *[f"{n} labels" for n in labels]]
    return Table(header, rows, "python benchmarks/bench_features.py --sections "
                 "epochs --epochs 5 7 10 20 30 40 --corpora body r8 headline mnist "
                 "r52 --components 50 100 --seeds 0 --labels 20 100 500 all")


def noisy_or_span():
    """What the default noisy-OR features keep of the words.

    From ``bench_features_span.json`` (``bench_features.py --sections
    span``): accuracy in percent of ``LogisticRegression`` trained on 500
    and on all labelled documents (500: mean of 5 draws) on the default
    features (``transform``, no scaler), on the binary words projected on
    the causes' loadings (``X @ components_.T``, a linear map), on the K
    directions of an SVD of the binary words and on LSA's (tf-idf, then SVD;
    the last three the better of with and without a ``StandardScaler``);
    the number of principal angles between the loadings' span and the binary
    SVD's with a cosine of 0.5 or more (out of K), and the test ELBO.
    """
    data = load("bench_features_span")
    rows = []
    for run in data["runs"]:
        if "error" in run:
            continue
        cells = [_CORPUS_LABELS.get(run["corpus"], run["corpus"]), str(run["K"])]
        for n in ("500", "all"):
            cells += [f"{100 * run['features'][f]['headline'][n]['accuracy']:.1f}"
                      for f in ("transform", "loadings", "svd", "lsa")]
        cells += [str(sum(c >= 0.5 for c in run["principal_cosines"])),
                  f"{run['test_elbo']:.2f}"]
        rows.append(cells)
    header = ["corpus", "K", "500 labels: features", "loadings", "binary SVD", "LSA",
              "all labels: features", "loadings", "binary SVD", "LSA",
              "shared directions", "test ELBO"]
    return Table(header, rows, "python benchmarks/bench_features.py --sections span "
                 + " ".join(data["command"].split(" --sections span ")[1:]))


def mixture_tables():
    """The default mixture of experts against one logistic regression and
    gradient boosting on real binary tables.

    From the ``tables`` section of ``bench_moe.json`` (``bench_moe.py
    --sections tables``): stratified 5-fold cross-validated accuracy (mean
    over the folds), the share of the gap from logistic regression to
    boosting that the mixture closes where boosting leads, fit CPU and wall
    seconds per fold (CPU / wall) and the experts in use per fold; the last
    row sums the fit seconds of every fold of every table.
    """
    section = load("bench_moe")["tables"]
    rows = []
    total = {m: [0.0, 0.0] for m in ("mixture", "HistGradientBoosting")}
    for name, t in section["tables"].items():
        mix, lr, hgb = (t[m]["mean"] for m in
                        ("mixture", "LogisticRegression", "HistGradientBoosting"))
        closed = f"{100 * (mix - lr) / (hgb - lr):.0f}%" if hgb > lr + 0.005 else ""
        in_use = "/".join(str(f["n_active"]) for f in t["mixture"]["folds"])
        secs = []
        for m in total:
            cpu, wall = t[m]["cpu_seconds"], t[m]["wall_seconds"]
            total[m][0] += sum(cpu)
            total[m][1] += sum(wall)
            secs.append(f"{_mean(cpu):.2f} / {_mean(wall):.2f}")
        rows.append([name, f"{t['n']} x {t['p']}", f"{mix:.3f}", f"{lr:.3f}",
                     f"{hgb:.3f}", f"{mix - lr:+.3f}", closed, *secs, in_use])
    rows.append(["all folds of all tables, summed", "", "", "", "", "", "",
                 *(f"{cpu:.1f} / {wall:.1f}" for cpu, wall in total.values()), ""])
    header = ["table", "rows x features", "mixture", "logistic regression",
              "gradient boosting", "mixture - LR", "gap closed",
              "mixture s (CPU / wall)", "boosting s (CPU / wall)", "experts in use"]
    return Table(header, rows, "python benchmarks/bench_moe.py --sections tables")


def first_fit():
    """Import, compile and fit: every estimator's first fit in a fresh process.

    From ``bench_first_fit.json`` (``bench_first_fit.py``): wall seconds of a
    fresh process with an empty Numba cache (import, data, compilation and
    the fit), of the same process on the cache a first one wrote, and the
    fit once compiled (the fastest repeat, wall / CPU).
    """
    doc = load("bench_first_fit")
    rows = []
    for name, r in doc["estimators"].items():
        cold, cached = r["cold"], r["cached"]
        warm = cached["fits"][1:] or cached["fits"]
        rows.append([name, f"{cold['wall_seconds']:.1f}",
                     f"{cold['fits'][0]['wall']:.1f}", f"{cached['wall_seconds']:.1f}",
                     f"{min(f['wall'] for f in warm):.2f} / "
                     f"{min(f['cpu'] for f in warm):.2f}"])
    header = ["estimator", "fresh process, empty cache s", "of which the first fit s",
              "fresh process, cached s", "fit once compiled s (wall / CPU)"]
    return Table(header, rows, "python benchmarks/bench_first_fit.py")


def relational_global():
    """One global model against one model per relation, on the same splits.

    From ``bench_relational_global.json`` (defaults): the mean of
    the per-relation held-out AUCs and the pooled AUC of all held-out pairs,
    mean over the seeds with their range, and CPU seconds per fit (mean over
    the seeds; one model per relation: all of them).
    """
    rows = []
    for name, data in load("bench_relational_global")["data"].items():
        R = data["n_relations"]
        N = round((1 + (1 + 4 * data["n_triples"] / R) ** 0.5) / 2)
        for setting, text in (("global", "one global model"),
                              ("single", "one model per relation")):
            fits = [seed[setting] for seed in data["seeds"] if setting in seed]
            if not fits:
                continue
            mean = [f["mean_auc"] for f in fits]
            pooled = [f["pooled_auc"] for f in fits]
            rows.append([
                name, f"{N} x {R}", text,
                "/".join(str(seed["seed"]) for seed in data["seeds"]
                         if setting in seed),
                f"{_mean(mean):.4f}", f"{min(mean):.4f}-{max(mean):.4f}",
                f"{_mean(pooled):.4f}", f"{min(pooled):.4f}-{max(pooled):.4f}",
                f"{_mean([f['cpu_seconds'] for f in fits]):.0f}",
            ])
    header = ["data set", "entities x relations", "model", "seeds",
              "mean per-relation AUC", "range", "pooled AUC", "range", "CPU s"]
    return Table(header, rows, "python benchmarks/bench_relational.py --sections "
                 "global --triples-dir NATIONS UMLS --seeds 0 1 2 3 4")


def relational_global_paired():
    """The same comparison, paired: global minus per-relation AUC.

    From ``bench_relational_global.json``: for each seed, the mean over the
    relations scored by both models of the difference of their held-out
    AUCs (global minus one model per relation), over the relations with 10
    held-out links or more and over the others, and the difference of the
    pooled AUCs; mean over the seeds with its standard error (the seeds'
    standard deviation over the square root of their number), and the
    relations (summed over the seeds) where the global model is ahead and
    behind.
    """
    rows = []
    for name, data in load("bench_relational_global")["data"].items():
        parts = {"large": [], "small": [], "pooled": []}
        ahead = behind = 0
        for seed in data["seeds"]:
            if "global" not in seed or "single" not in seed:
                continue
            g, s = seed["global"], seed["single"]
            held = seed["heldout_links_per_relation"]
            diffs = {"large": [], "small": []}
            for r, (a, b) in enumerate(zip(g["auc_per_relation"],
                                           s["auc_per_relation"], strict=True)):
                if a is None or b is None or a != a or b != b:  # None or NaN
                    continue
                diffs["large" if held[r] >= 10 else "small"].append(a - b)
                ahead += a > b
                behind += a < b
            for key, values in diffs.items():
                if values:
                    parts[key].append(_mean(values))
            parts["pooled"].append(g["pooled_auc"] - s["pooled_auc"])
        if not parts["pooled"]:
            continue
        cells = [name, str(len(parts["pooled"]))]
        for key in ("large", "small", "pooled"):
            values = parts[key]
            se = (statistics.stdev(values) / len(values) ** 0.5
                  if len(values) > 1 else float("nan"))
            cells.append(f"{_mean(values):+.4f} ± {se:.4f}")
        cells.append(f"{ahead} / {behind}")
        rows.append(cells)
    header = ["data set", "seeds", "relations with >= 10 held-out links",
              "relations with fewer", "pooled AUC", "relations ahead / behind"]
    return Table(header, rows, "python benchmarks/bench_relational.py --sections "
                 "global --triples-dir NATIONS UMLS --seeds 0 1 2 3 4")


def relational_sparse():
    """Stochastic fits of large sparse networks given by their links.

    From ``bench_relational_sparse.json`` (100,000 entities) and
    ``bench_relational_sparse_1m.json`` (1,000,000): the default
    ``LatentFeatureRelational(10, unlisted_pairs="nonlinks")``, epochs run
    (and whether the ``tol`` rule ended the fit), fit wall seconds, peak
    memory, held-out AUC of 10% of the links against 100,000 random pairs
    beside that of the true probabilities, and the AUC with which each
    planted feature is recovered by its matched feature (lowest and mean).
    """
    rows = []
    for name in ("bench_relational_sparse", "bench_relational_sparse_1m"):
        r = load(name)
        matched = r["matched_feature_auc"]
        rows.append([
            f"{r['n_entities']:,}", f"{r['n_links']:,}",
            f"{r['epochs']} ({'converged' if r['converged'] else 'not converged'})",
            f"{r['fit_seconds']:.0f}", f"{r['peak_memory_gib']:.2f}",
            f"{r['heldout_auc']:.4f}", f"{r['true_probability_auc']:.4f}",
            f"{min(matched):.3f}", f"{_mean(matched):.3f}",
        ])
    header = ["entities", "links", "epochs", "fit s", "peak GiB", "held-out AUC",
              "true-probability AUC", "lowest feature AUC", "mean feature AUC"]
    return Table(header, rows, "python benchmarks/bench_relational.py --sections "
                 "sparse --max-iter 40 --n-mc-samples 10 (1,000,000: --n-entities "
                 "1000000 and the --max-iter in the file)")


TABLES = {
    "first_fit": first_fit,
    "noisy_or_epochs": noisy_or_epochs,
    "noisy_or_span": noisy_or_span,
    "mixture_tables": mixture_tables,
    "document_features": document_features,
    "document_features_all_labels": document_features_all_labels,
    "document_features_vs_lsa": document_features_vs_lsa,
    "noisy_or_vs_lda": noisy_or_vs_lda,
    "relational_global": relational_global,
    "relational_global_paired": relational_global_paired,
    "relational_sparse": relational_sparse,
}


def render(name, fmt="markdown"):
    """Table ``name`` as Markdown (``fmt="markdown"``) or reStructuredText."""
    table = TABLES[name]()
    return table.markdown() if fmt == "markdown" else table.rst()


_BLOCK = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(<!-- /table -->)", re.S)


def update_readme(text):
    """``text`` with every marked table block re-rendered from the JSON."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + "\n" + m.group(4),
                      text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the README's tables differ from the JSON")
    parser.add_argument("--show", metavar="NAME", choices=sorted(TABLES),
                        help="print one table as Markdown")
    args = parser.parse_args(argv)
    if args.show:
        print(render(args.show))
        return 0
    text = README.read_text()
    new = update_readme(text)
    if args.check:
        if new != text:
            print("README.md tables differ from benchmarks/results: "
                  "run python benchmarks/tables.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
