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
                        if fit["config"]["K"] == K and fit["config"]["method"] == method]
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
                 "--ttq-corpora body --components 50 100 150 (and r8)")


TABLES = {
    "noisy_or_vs_lda": noisy_or_vs_lda,
}


def render(name, fmt="markdown"):
    """Table ``name`` as Markdown (``fmt="markdown"``) or reStructuredText."""
    table = TABLES[name]()
    return table.markdown() if fmt == "markdown" else table.rst()


_BLOCK = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(\n<!-- /table -->)", re.S)


def update_readme(text):
    """``text`` with every marked table block re-rendered from the JSON."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


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
