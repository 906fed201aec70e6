"""Stochastic training of LatentFeatureRelational: complete networks given by
their links (``unlisted_pairs="nonlinks"``), minibatches of entities
(``batch_size``) and ``partial_fit`` on chunks of pairs."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import linear_sum_assignment
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score

from skbinvi import LatentFeatureRelational
from skbinvi.datasets import make_relational, make_sparse_relational
from skbinvi.relational import _estimator, _kernels
from skbinvi.relational._estimator import _PairStore


def _complete(N, R, links):
    """Every triple (i, j, r), i != j, and its link (from the link triples)."""
    i, j = np.nonzero(~np.eye(N, dtype=bool))
    r = np.repeat(np.arange(R), i.size)
    X = np.column_stack([np.tile(i, R), np.tile(j, R), r]).astype(np.int64)
    code = (X[:, 0] * N + X[:, 1]) * R + X[:, 2]
    lcode = (links[:, 0] * N + links[:, 1]) * R + links[:, 2]
    return X, np.isin(code, lcode).astype(np.float64)


def _small_network(monkeypatch, seed=0, N=8, R=2, D=3):
    """A fitted state on a small complete network, 4 sampled non-links per
    entity and role (the private ``_N_NONLINK_SAMPLES``)."""
    monkeypatch.setattr(_estimator, "_N_NONLINK_SAMPLES", 4)
    rng = np.random.RandomState(seed)
    X, x = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    x = (rng.random_sample(x.size) < 0.25).astype(np.float64)
    links = X[x > 0.5]
    model = LatentFeatureRelational(
        D, unlisted_pairs="nonlinks", n_entities=N, random_state=0,
    )
    # a fitted state to evaluate the kernels at: deterministic features
    # (logits +-30, so z = 1{u < q} is the same for every sample) and random
    # full weights
    model.n_entities_, model.n_relations_ = N, R
    model._partial = False
    model._logits = np.where(rng.random_sample((N, D)) < 0.5, -30.0, 30.0)
    model._b = rng.normal(-0.5, 0.3, size=R)
    model._W = rng.normal(0.0, 1.0, size=(R, D, D))
    # the ridge in force, one per relation as fit sets it
    model.alpha_ = np.linspace(0.5, 2.0, R)
    store = _PairStore.build(links, np.ones(len(links)), N, R, True)
    return model, store, X, x


def test_sample_nonlinks_are_uniform_non_links():
    N, R = 7, 2
    links = np.array([[0, 1, 0], [0, 2, 1], [0, 3, 0], [4, 0, 1]], dtype=np.int64)
    keys = _kernels.link_keys(links[:, 0], links[:, 1], links[:, 2], N, R)
    store = _PairStore.build(links, np.ones(len(links)), N, R, True)
    m = 60_000
    for as_sender in (True, False):
        role = ((store.out_ptr, store.out_order, store.rcv) if as_sender
                else (store.in_ptr, store.in_order, store.snd))
        other, rel = _kernels.sample_nonlinks(
            np.array([0], dtype=np.int64), np.array([5]), m, N, R, *role, store.rel, 3
        )
        assert np.all(other != 0)
        snd, rcv = (np.zeros(m, int), other) if as_sender else (other, np.zeros(m, int))
        code = (snd * N + rcv) * R + rel
        assert not np.isin(code, keys).any()
        counts = np.bincount(other * R + rel, minlength=N * R)
        allowed = counts > 0
        # (N - 1) R combinations minus the center's links in that role
        n_links = 3 if as_sender else 1
        assert allowed.sum() == (N - 1) * R - n_links
        expected = m / allowed.sum()
        assert np.all(np.abs(counts[allowed] - expected) < 5 * np.sqrt(expected))


def _sparse_holdout(N, D):
    """A sparse planted network with the degree of the benchmark's (intercept
    Phi^-1(10 Phi(-4.3)), about 11 links per entity) and its held-out split:
    X, the mask of the 10% held-out links, 20,000 random pairs as
    non-links, and the labels of (held-out links, those pairs)."""
    from scipy.special import ndtr, ndtri

    intercept = float(ndtri(ndtr(-4.3) * 10))
    X, _ = make_sparse_relational(N, D, intercept=intercept, random_state=0)
    rng = np.random.RandomState(1)
    held = rng.random_sample(len(X)) < 0.1
    s, t = rng.randint(N, size=22_000), rng.randint(N, size=22_000)
    non = np.column_stack([s, t])[s != t][:20_000]
    return X, held, non, np.r_[np.ones(int(held.sum())), np.zeros(len(non))]


def _planted_state(N, D, b, w=None, diag=False, n_samples=1):
    """A sparse planted network of one relation: features Z (each on with
    probability 0.3), links with probability Phi(b + 2 |Z_i & Z_j|). The
    model's state has q at 0 or 1 (z = Z in every sample) and weights b and
    ``w`` I (random normal W, diagonal if ``diag``, when ``w`` is None).
    Returns the model, the store of the links, q, uniforms (``n_samples``,
    N, D) and the full sweep's estimates over every pair of the complete
    network (every non-link's flip terms summed exactly)."""
    from scipy.special import logit, ndtr

    rng = np.random.RandomState(0)
    Z = rng.random_sample((N, D)) < 0.3
    i, j = np.nonzero(~np.eye(N, dtype=bool))
    link = rng.random_sample(i.size) < ndtr(b + 2.0 * (Z[i] & Z[j]).sum(axis=1))
    links = np.column_stack([i[link], j[link], np.zeros(link.sum(), dtype=int)])
    model = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                    weights="diagonal" if diag else "full",
                                    random_state=0)
    model.n_entities_, model.n_relations_ = N, 1
    model._partial = False
    model._logits = np.where(Z, 30.0, -30.0)  # z = Z in every sample
    if w is None:
        W = rng.normal(size=(1, D, D))
        W = W * np.eye(D) if diag else W
    else:
        W = (w * np.eye(D))[None]
    model._b, model._W = np.array([b]), W
    store = _PairStore.build(links, np.ones(len(links)), N, 1, True)
    q = expit(model._logits)
    u = np.random.RandomState(1).random_sample((n_samples, N, D))
    X, x = _complete(N, 1, links)
    full = np.empty((N, D))
    _kernels.mcvi_mean_deltas(
        X[:, 0], X[:, 1], X[:, 2], *_kernels.pair_keys(X[:, 0], X[:, 2], N),
        *_kernels.pair_keys(X[:, 1], X[:, 2], N), x, q,
        float(logit(model.feature_prior)), model._b, model._W, diag, u,
        _kernels.NO_WEIGHT, _kernels.NO_WEIGHT, full)
    return model, store, q, u, full


@pytest.mark.parametrize("control_variate", [False, True])
def test_stochastic_deltas_are_unbiased_for_the_full_sweep(monkeypatch,
                                                           control_variate):
    """Averaged over the non-link samples, a center's estimate of E[Delta_id]
    from its links and weighted sampled non-links (with or without the
    control variate of the non-links) equals the full sweep's over every
    pair of the complete network."""
    model, store, X, x = _small_network(monkeypatch)
    model._cv_coef = (np.array([[0.3, -0.2], [-0.5, 0.1]]) if control_variate
                      else None)
    N, D = model._logits.shape
    q = expit(model._logits)
    u = np.random.RandomState(1).random_sample((1, N, D))
    full = np.empty((N, D))
    _kernels.mcvi_mean_deltas(
        X[:, 0], X[:, 1], X[:, 2],
        *_kernels.pair_keys(X[:, 0], X[:, 2], N),
        *_kernels.pair_keys(X[:, 1], X[:, 2], N),
        x, q, 0.0, model._b, model._W, False, u,
        _kernels.NO_WEIGHT, _kernels.NO_WEIGHT, full,
    )
    rng = np.random.RandomState(2)
    centers = np.array([1, 4, 6])
    draws = []
    for _ in range(600):
        local = model._local_pairs(store, centers, rng, sampled=True)
        ents, lcen = local[6], local[7]
        out = model._center_deltas(store, centers, local, q[ents], u[:, ents])
        draws.append(out[lcen])
    draws = np.array(draws)
    mean, se = draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - full[centers]) <= 4 * se + 1e-9)
    assert se.max() > 0  # the non-links were really sampled



def test_fitted_control_variate_cuts_the_noise_of_sampled_nonlinks(monkeypatch):
    """On a sparse planted network, the control variate fitted on one step's
    sampled non-links (the flip terms of their first joint sample) makes
    the centers' estimates of the next steps several times less noisy than
    without it, and they stay unbiased: the rare partners that share a
    feature with the center, whose terms are large, are what h follows."""
    monkeypatch.setattr(_estimator, "_N_NONLINK_SAMPLES", 5)
    N, D = 500, 3
    model, store, q, u, full = _planted_state(N, D, -3.0, 2.0)
    rng = np.random.RandomState(2)
    local = model._local_pairs(store, np.arange(0, N, 7), rng, sampled=True)
    lsnd, lrcv, rel, xl, ents = local[0], local[1], local[2], local[3], local[6]
    model._fit_control_variate(lsnd, lrcv, rel, xl, q[ents], u[:, ents])
    fitted = model._cv_coef.copy()
    # the pairs' weights gathered a few pairs at a time: the same fit
    monkeypatch.setattr(_estimator, "_CV_GATHER_ENTRIES", 7 * D * D)
    model._fit_control_variate(lsnd, lrcv, rel, xl, q[ents], u[:, ents])
    assert_array_equal(model._cv_coef, fitted)
    centers = np.array([3, 100, 250, 401])
    draws = {}
    for name, coef in (("none", None), ("fitted", fitted)):
        model._cv_coef = coef
        rng = np.random.RandomState(3)
        out = []
        for _ in range(400):
            local = model._local_pairs(store, centers, rng, sampled=True)
            ents, lcen = local[6], local[7]
            out.append(model._center_deltas(store, centers, local, q[ents],
                                            u[:, ents])[lcen])
        draws[name] = np.array(out)
    sd_none, sd_fitted = draws["none"].std(axis=0), draws["fitted"].std(axis=0)
    assert sd_none.min() > 0
    assert sd_fitted.mean() < 0.25 * sd_none.mean()
    se = sd_fitted / np.sqrt(400)
    assert np.all(np.abs(draws["fitted"].mean(axis=0) - full[centers])
                  <= 4 * se + 1e-9)

def test_stochastic_weight_statistics_are_unbiased(monkeypatch):
    """The weight step's statistics from random minibatches of centers,
    scaled by N / B, average to those of the complete network."""
    model, store, X, x = _small_network(monkeypatch, seed=1)
    N, D = model._logits.shape
    R = model._b.size
    q = expit(model._logits)
    full = _kernels.weight_system(
        X[:, 0], X[:, 1], X[:, 2], q, R, False, _kernels.pair_keys(X[:, 0], X[:, 2], N)
    )
    rng = np.random.RandomState(3)
    draws = []
    for _ in range(1500):
        centers = np.sort(rng.choice(N, 3, replace=False))
        lsnd, lrcv, rel, xl, ws, wr, ents, lcen = model._local_pairs(store, centers,
                                                                     rng)
        sel = ws > 0
        A = _kernels.weight_system(
            lsnd[sel], lrcv[sel], rel[sel], q[ents], R, False,
            _kernels.pair_keys(lsnd[sel], rel[sel], ents.size), ws[sel] * N / 3,
        )
        draws.append(A)
    draws = np.array(draws)
    mean, se = draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - full) <= 4.5 * se + 1e-9)


def test_weighted_kernels_with_unit_weights_equal_the_unweighted():
    X, y, _ = make_relational(12, 3, directed=True, n_relations=2, full_weights=True,
                              random_state=0)
    N, D, R = 12, 3, 2
    rng = np.random.RandomState(0)
    q = rng.uniform(0.1, 0.9, size=(N, D))
    b, W = rng.normal(size=R), rng.normal(size=(R, D, D))
    u = rng.random_sample((3, N, D))
    x = y.astype(np.float64)
    args = (X[:, 0], X[:, 1], X[:, 2], *_kernels.pair_keys(X[:, 0], X[:, 2], N),
            *_kernels.pair_keys(X[:, 1], X[:, 2], N), x, q)
    ones = np.ones(len(x))
    a, c = np.empty((N, D)), np.empty((N, D))
    _kernels.mcvi_mean_deltas(*args, 0.1, b, W, False, u, _kernels.NO_WEIGHT,
                              _kernels.NO_WEIGHT, a)
    _kernels.mcvi_mean_deltas(*args, 0.1, b, W, False, u, ones, ones, c)
    assert_allclose(a, c, rtol=1e-12)
    # weight 2 on the sender end doubles the senders' data terms
    _kernels.mcvi_mean_deltas(*args, 0.1, b, W, False, u, 2 * ones,
                              np.zeros(len(x)), c)
    s_only = np.empty((N, D))
    _kernels.mcvi_mean_deltas(*args, 0.1, b, W, False, u, ones, np.zeros(len(x)),
                              s_only)
    assert_allclose(c - 0.1, 2 * (s_only - 0.1), rtol=1e-10, atol=1e-12)
    r0, rW, s0, sW = np.empty(R), np.empty((R, D, D)), np.empty(R), np.empty((R, D, D))
    _kernels.mc_weight_rhs(*args, b, W, False, u, _kernels.NO_WEIGHT, False, r0, rW)
    _kernels.mc_weight_rhs(*args, b, W, False, u, 3 * ones, False, s0, sW)
    assert_allclose(3 * r0, s0, rtol=1e-12)
    assert_allclose(3 * rW, sW, rtol=1e-12)
    skeys = _kernels.pair_keys(X[:, 0], X[:, 2], N)
    for diag in (False, True):
        A = _kernels.weight_system(X[:, 0], X[:, 1], X[:, 2], q, R, diag, skeys)
        B = _kernels.weight_system(X[:, 0], X[:, 1], X[:, 2], q, R, diag, skeys,
                                   0.5 * ones)
        assert_allclose(0.5 * A, B, rtol=1e-12)


def test_links_only_equals_listing_every_pair():
    """With "nonlinks", listing the non-links changes nothing: only the links
    are kept (memory O(links)), and the fits are identical."""
    N = 40
    X, y, _ = make_relational(N, 3, directed=True, full_weights=True, intercept=-1.5,
                              random_state=0)
    kw = dict(unlisted_pairs="nonlinks", n_entities=N, max_iter=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = LatentFeatureRelational(3, **kw).fit(X, y)
        b = LatentFeatureRelational(3, **kw).fit(X[y == 1], np.ones(int(y.sum()), int))
    assert_array_equal(a.latent_features_, b.latent_features_)
    assert_array_equal(a.weights_, b.weights_)
    assert a.elbo_ == b.elbo_ and np.isfinite(a.elbo_)
    assert_array_equal(a.classes_, [0, 1])
    assert b.predict_proba(X).shape == (len(X), 2)


def test_a_relation_without_links_is_trained_on_its_non_links():
    """With "nonlinks" the network is complete, so a relation below the
    largest listed one but without a link is observed (all its pairs are
    non-links): the fit equals the one that lists every pair, and it predicts
    that relation (low link probabilities) instead of refusing it as not
    seen in fit."""
    N, R = 12, 3
    rng = np.random.RandomState(0)
    X, x = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    x = ((rng.random_sample(x.size) < 0.3) & (X[:, 2] != 1)).astype(np.float64)
    kw = dict(unlisted_pairs="nonlinks", n_entities=N, max_iter=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        every = LatentFeatureRelational(2, **kw).fit(X, x)
        links = LatentFeatureRelational(2, **kw).fit(X[x > 0.5], np.ones(int(x.sum())))
    assert links.n_relations_ == every.n_relations_ == R
    assert_array_equal(links.intercept_, every.intercept_)
    assert_array_equal(links.weights_, every.weights_)
    pairs = X[X[:, 2] == 1]
    p_link = links.predict_proba(pairs)[:, 1]
    assert_array_equal(p_link, every.predict_proba(pairs)[:, 1])
    assert p_link.max() < 0.05
    assert links.transform(pairs).shape == (len(pairs), 4)


@pytest.mark.slow
def test_batch_size_steps_reach_the_full_sweeps_quality():
    """Minibatches of entities (exact per-entity terms over the listed pairs)
    on a directed network with held-out pairs: held-out AUC at least that of
    full sweeps less 0.02 (measured: 0.928 against 0.878 at seed 0), and
    close to the true link probabilities' AUC (0.929)."""
    X, y, truth = make_relational(150, 4, directed=True, full_weights=True,
                                  intercept=-2.0, random_state=0)
    test = np.random.RandomState(0).random_sample(len(y)) < 0.2
    auc = {}
    for batch_size in (None, 30):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = LatentFeatureRelational(4, batch_size=batch_size, max_iter=60,
                                        random_state=0).fit(X[~test], y[~test])
        auc[batch_size] = roc_auc_score(y[test], m.predict_proba(X[test])[:, 1])
    best = roc_auc_score(y[test], truth.link_probability[test])
    assert auc[30] >= auc[None] - 0.02, auc
    assert auc[30] > best - 0.03, (auc, best)


def _matched_auc(Z, q):
    """Mean AUC of the planted features against their best-matched learned
    features (Hungarian matching of the D x D' AUC matrix)."""
    A = np.array([[roc_auc_score(Z[:, d], q[:, e]) for e in range(q.shape[1])]
                  for d in range(Z.shape[1])])
    rows, cols = linear_sum_assignment(-A)
    return A[rows, cols].mean()


@pytest.mark.slow
@pytest.mark.parametrize("init", ["auto", "nmf"])
def test_sparse_network_recovers_the_planted_features(init):
    """A sparse network given by its links (N = 3,000, about 14 links per
    entity; memory O(links)): the learned features match the planted ones
    (matched AUC, measured 0.83 with the default start at seed 0; 0.5 is
    chance) and held-out links are ranked above random non-links."""
    N, D = 3000, 4
    X, truth = make_sparse_relational(N, D, density=0.2, intercept=-3.0,
                                      random_state=0)
    rng = np.random.RandomState(1)
    held = rng.random_sample(len(X)) < 0.1
    model = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                    init=init, max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X[~held], np.ones(int((~held).sum()), int))
    assert model._store is None  # fit keeps no copy of the data
    Z = truth.latent_features.astype(bool)
    assert _matched_auc(Z, model.latent_features_) > 0.7
    s, t = rng.randint(N, size=5000), rng.randint(N, size=5000)
    keep = s != t
    non = np.column_stack([s[keep], t[keep]])
    p_link = model.predict_proba(X[held])[:, 1]
    p_non = model.predict_proba(non)[:, 1]
    labels = np.r_[np.ones(p_link.size), np.zeros(p_non.size)]
    assert roc_auc_score(labels, np.r_[p_link, p_non]) > 0.8


@pytest.mark.slow
def test_few_sampled_nonlinks_suffice_with_the_control_variate(monkeypatch):
    """The default _N_NONLINK_SAMPLES against 5 on a 10,000-entity network of
    10 planted features (about 11 links per entity; true-probability AUC
    about 0.90): each sampled non-link stands for about N / m of them, but
    the control variate carries their exact expected sum, so after 3 epochs
    from the two-hop start both reach a held-out AUC above 0.85 and 5
    samples lose at most half a point (before the control variate, 20
    samples lost two points against 100)."""
    N, D = 10_000, 10
    X, held, non, labels = _sparse_holdout(N, D)
    auc = {}
    default = _estimator._N_NONLINK_SAMPLES
    # the features' steps on the sampled non-links, not on the patterns
    monkeypatch.setattr(_estimator, "_PATTERN_MAX_FEATURES", 0)
    for m in (5, default):
        monkeypatch.setattr(_estimator, "_N_NONLINK_SAMPLES", m)
        model = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                        n_mc_samples=3,
                                        max_iter=3, tol=None, random_state=0)
        model.fit(X[~held], np.ones(int((~held).sum()), int))
        score = np.r_[model.predict_proba(X[held])[:, 1],
                      model.predict_proba(non)[:, 1]]
        auc[m] = roc_auc_score(labels, score)
    assert min(auc.values()) > 0.85, auc
    assert auc[5] > auc[default] - 0.005, auc


@pytest.mark.slow
def test_partial_fit_on_chunks_trains_the_model():
    """Chunks of links streamed through partial_fit (three passes) reach the
    held-out quality of fit on the same links, and keep O(links) memory."""
    N, D = 1500, 4
    X, truth = make_sparse_relational(N, D, density=0.2, intercept=-2.6,
                                      random_state=0)
    rng = np.random.RandomState(0)
    order = rng.permutation(len(X))
    held, train = order[: len(X) // 10], order[len(X) // 10 :]
    model = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                    random_state=0)
    chunks = np.array_split(train, 5)
    for _ in range(3):
        for chunk in chunks:
            model.partial_fit(X[chunk], np.ones(chunk.size, int))
    assert model.elbo_history_.shape == (15,)
    assert model.n_iter_ == 15 and not model.converged_
    assert model._store.n_rows == train.size  # repeated chunks are not stored twice
    s, t = rng.randint(N, size=3000), rng.randint(N, size=3000)
    non = np.column_stack([s[s != t], t[s != t]])
    labels = np.r_[np.ones(held.size), np.zeros(len(non))]

    def auc(m):
        return roc_auc_score(labels, np.r_[m.predict_proba(X[held])[:, 1],
                                           m.predict_proba(non)[:, 1]])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                         max_iter=15, random_state=0)
        fitted.fit(X[train], np.ones(train.size, int))
    assert auc(model) > 0.75
    assert auc(model) > auc(fitted) - 0.05
    # the model can be pickled between chunks and goes on
    import pickle

    again = pickle.loads(pickle.dumps(model))
    again.partial_fit(X[chunks[0]], np.ones(chunks[0].size, int))
    assert again.elbo_history_.shape == (16,)


def test_partial_fit_on_listed_pairs_and_growing_ids():
    X, y, _ = make_relational(60, 3, directed=True, full_weights=True, random_state=0)
    model = LatentFeatureRelational(3, random_state=0)
    first = X[:, 0] < 30  # the first chunk only knows senders 0..29
    model.partial_fit(X[first & (X[:, 1] < 30)], y[first & (X[:, 1] < 30)])
    assert model.n_entities_ == 30
    model.partial_fit(X, y)
    assert model.n_entities_ == 60 and model.latent_features_.shape == (60, 3)
    assert np.isfinite(model.elbo_history_).all()
    with pytest.raises(ValueError, match="classes"):
        model.partial_fit(X[:10], np.where(y[:10] == 1, "a", "b"))
    # the pair-data version of check_estimators_partial_fit_n_features
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(np.column_stack([X, np.zeros(len(X), int)]), y)
    # a first chunk with one class needs classes=
    one = LatentFeatureRelational(3, random_state=0)
    one.partial_fit(X[y == 0][:20], y[y == 0][:20], classes=[0, 1])
    assert_array_equal(one.classes_, [0, 1])
    one.partial_fit(X, y)
    # later chunks may hold one class only, without classes=
    one.partial_fit(X[y == 1][:5], y[y == 1][:5])
    one.partial_fit(X[y == 0][:5], y[y == 0][:5])
    assert_array_equal(one.classes_, [0, 1])
    assert np.isfinite(one.elbo_history_).all()


@pytest.mark.parametrize("batch_size", [None, 7, 40])
def test_every_listed_row_counts_with_minibatches(batch_size):
    """A pair listed twice with opposite labels is one link and one non-link
    whatever the batch size: the fitted probability of every pair stays near
    1/2, and elbo_ is the ELBO of all the rows, which cannot exceed
    log(1/2) per pair. (Minibatches used to keep the last label only.)"""
    X, y, _ = make_relational(30, 3, density=0.3, random_state=0)
    X2, y2 = np.r_[X, X], np.r_[y, 1 - y]
    model = LatentFeatureRelational(3, max_iter=20, tol=None, batch_size=batch_size,
                                    random_state=0)
    model.fit(X2, y2)  # no pair carries information: no feature is needed
    assert np.abs(model.predict_proba(X)[:, 1] - 0.5).max() < 0.1
    assert model.elbo_ <= np.log(0.5) + 1e-9
    assert_allclose(model.elbo(X2, y2), model.elbo_, rtol=0.02)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(unlisted_pairs="nonlinks", inference="cavi", weights="diagonal"),
         "needs inference='mcvi'"),
        (dict(batch_size=10, inference="score"), "needs inference='mcvi'"),
        (dict(unlisted_pairs="nonlinks", early_stopping=True), "early_stopping"),
    ],
)
def test_stochastic_modes_refuse_what_they_cannot_do(params, match):
    X, y, _ = make_relational(20, 2, random_state=0)
    with pytest.raises(ValueError, match=match):
        LatentFeatureRelational(2, **params).fit(X, y)


def test_partial_fit_errors():
    X, y, _ = make_relational(20, 2, random_state=0)
    with pytest.raises(ValueError, match="mcvi"):
        LatentFeatureRelational(2, inference="cavi", weights="diagonal").partial_fit(
            X, y)
    fitted = LatentFeatureRelational(2, max_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted.fit(X, y)
    with pytest.raises(ValueError, match="cannot continue a model trained by fit"):
        fitted.partial_fit(X, y)
    # links only are refused unless the unlisted pairs are non-links
    with pytest.raises(ValueError, match="one class.* got only 1.$"):
        LatentFeatureRelational(2).fit(X[y == 1], np.ones(int(y.sum()), int))
    with pytest.raises(ValueError, match="got only 'link'.$"):
        LatentFeatureRelational(2).fit(X[:5], np.array(["link"] * 5, dtype=object))


def test_make_sparse_relational_is_an_exact_sample():
    """Link counts per number of shared features follow the model's
    probabilities (binomial z-scores), with no self pair and no repeat."""
    N, D = 4000, 3
    b, w = -2.5, 1.2
    X, truth = make_sparse_relational(N, D, density=0.3, intercept=b, weight=w,
                                      random_state=0)
    code = X[:, 0] * N + X[:, 1]
    assert np.all(X[:, 0] != X[:, 1]) and np.unique(code).size == code.size
    Z = truth.latent_features.astype(np.int64)
    shared_links = (Z[X[:, 0]] * Z[X[:, 1]]).sum(axis=1)
    from scipy.special import ndtr

    # ordered pairs i != j by number of shared features, from feature counts
    patterns, counts = np.unique(Z, axis=0, return_counts=True)
    k = patterns @ patterns.T
    n_pairs = np.outer(counts, counts) - np.diag(counts)
    for s in range(D + 1):
        n = n_pairs[k == s].sum()
        if n == 0:
            continue
        p = ndtr(b + w * s)
        observed = np.count_nonzero(shared_links == s)
        assert abs(observed - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1, (s, observed)
    assert truth.n_pairs == N * (N - 1)


@pytest.mark.parametrize("intercept", [0.5, 3.0])
def test_make_sparse_relational_dense_blocks_are_exact_and_quick(intercept):
    """A block linking most of its many pairs is drawn by listing them: 300
    entities with every feature (one block, 89,700 pairs) returned in well
    under a second; before, drawing with replacement until enough distinct
    pairs came up took over a minute at 200 entities."""
    import time

    from scipy.special import ndtr

    N, R = 300, 2
    tic = time.perf_counter()
    X, truth = make_sparse_relational(N, 1, density=1.0, intercept=intercept,
                                      n_relations=R, random_state=0)
    assert time.perf_counter() - tic < 20  # generous: a hang is minutes
    assert np.all(X[:, 0] != X[:, 1])
    # sorted by relation, then sender, then receiver (as documented), no repeat
    code = (X[:, 2] * N + X[:, 0]) * N + X[:, 1]
    assert np.all(np.diff(code) > 0)
    n, p = N * (N - 1) * R, ndtr(intercept + 1.0)
    assert abs(len(X) - n * p) < 5 * np.sqrt(n * p * (1 - p)) + 1


def test_features_the_prior_switches_off_are_reported_not_warned(capsys):
    """A feature prior of 0.05 switches every feature off: the model working,
    reported in n_active_components_ (and by verbose), without a warning."""
    X, y, _ = make_relational(30, 1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = LatentFeatureRelational(8, feature_prior=0.05, max_iter=30,
                                        tol=None, random_state=0).fit(X, y)
    assert model.n_active_components_ == 0
    model.set_params(verbose=1).fit(X, y)
    assert "0 of 8 features in use" in capsys.readouterr().out


def _weak_sbm(seed):
    """Three assortative blocks of 40 entities, link probability 0.25 within
    and 0.03 between (weak signal: the true probabilities rank held-out
    pairs at AUC 0.75), every pair listed once; a fifth held out."""
    rng = np.random.RandomState(seed)
    block = np.repeat([0, 1, 2], 40)
    i, j = np.triu_indices(120, 1)
    p = np.where(block[i] == block[j], 0.25, 0.03)
    y = (rng.random_sample(p.size) < p).astype(int)
    test = rng.random_sample(p.size) < 0.2
    return np.c_[i, j], y, test, p


def test_a_fit_that_collapsed_to_the_prior_is_reported(capsys):
    """On a weakly assortative network, "cavi" with diagonal weights falls to
    the fixed point where every entity keeps the same feature probabilities
    and the weights vanish (held-out AUC 0.50). The spread of q across
    entities finds no feature in use: n_active_components_ is 0 and verbose
    says the fit collapsed, without a warning (0 features is also the right
    answer for pairs without structure). The defaults keep their features
    on the same data and rank the held-out pairs as well as the true
    probabilities do."""
    from sklearn.metrics import roc_auc_score

    X, y, test, p = _weak_sbm(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        collapsed = LatentFeatureRelational(inference="cavi", weights="diagonal",
                                            verbose=1, random_state=0)
        collapsed.fit(X[~test], y[~test])
    assert collapsed.n_active_components_ == 0
    assert "0 of 10 features in use: the fit collapsed" in capsys.readouterr().out
    q = collapsed.latent_features_
    assert np.all(q.max(axis=0) - q.min(axis=0) < 0.5)
    assert roc_auc_score(y[test], collapsed.decision_function(X[test])) < 0.6
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = LatentFeatureRelational(random_state=0).fit(X[~test], y[~test])
    assert model.n_active_components_ > 0
    oracle = roc_auc_score(y[test], p[test])
    assert roc_auc_score(y[test], model.decision_function(X[test])) > oracle - 0.03


def test_probit_curvature_is_minus_the_second_derivative():
    from scipy.special import log_ndtr

    from skbinvi.relational._estimator import _probit_curvature

    eta = np.linspace(-12, 12, 49)
    h = 1e-4
    for x in (0.0, 1.0):
        s = 1.0 if x else -1.0
        g = lambda e, s=s: log_ndtr(s * e)  # noqa: E731
        fd = -(g(eta + h) - 2 * g(eta) + g(eta - h)) / h**2
        assert_allclose(_probit_curvature(np.full_like(eta, x), eta), fd,
                        rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("diag", [True, False])
def test_newton_weights_maximize_the_weight_objective(diag, monkeypatch):
    """With deterministic features (logits +-30) the weight objective of a
    stochastic step is sum_p w_p g(eta_p) - alpha/2 |W|^2, exactly; Newton's
    steps (with the secant safeguard) reach its maximizer: the finite-
    difference gradient vanishes there."""
    from scipy.special import log_ndtr

    model, store, X, x = _small_network(monkeypatch, seed=4)
    model.weights = "diagonal" if diag else "full"
    N, D = model._logits.shape
    R = model._b.size
    model._W = np.zeros((R, D, D))
    rng = np.random.RandomState(0)
    centers = np.arange(N)
    lsnd, lrcv, rel, xl, ws, wr, ents, lcen = model._local_pairs(store, centers, rng)
    q = expit(model._logits[ents])
    u = rng.random_sample((2, ents.size, D))
    system = model._weight_system(store, centers, (lsnd, lrcv, rel, xl, ws), q, u)
    for _ in range(30):
        model._newton_weights(system, 1.0)
    z = (q > 0.5).astype(float)
    sel = ws > 0
    wt = ws[sel]

    def objective(b, W):
        i, j, r = lsnd[sel], lrcv[sel], rel[sel]
        eta = b[r] + np.einsum("pd,pde,pe->p", z[i], W[r], z[j])
        g = np.where(xl[sel] > 0.5, log_ndtr(eta), log_ndtr(-eta))
        ridge = (model.alpha_[:, None, None] * W**2).sum()
        return float(wt @ g) - 0.5 * float(ridge)

    b0, W0 = model._b, model._W
    h = 1e-6
    grad_b = [(objective(b0 + h * np.eye(R)[r], W0)
               - objective(b0 - h * np.eye(R)[r], W0)) / (2 * h) for r in range(R)]
    assert np.abs(grad_b).max() < 1e-3
    for r in range(R):
        for d in range(D):
            for e in range(D):
                if diag and d != e:
                    continue
                E = np.zeros_like(W0)
                E[r, d, e] = h
                fd = (objective(b0, W0 + E) - objective(b0, W0 - E)) / (2 * h)
                assert abs(fd) < 1e-3, (r, d, e, fd)


@pytest.mark.parametrize("transpose", [False, True])
def test_nonlink_control_variate_matches_enumeration(transpose, monkeypatch):
    """The control variate of the sampled non-links: for every center and
    sample, the exact sum over all its non-links (each z_j enumerated over
    its 2^D patterns) of h(eta^{id=1}) - h(eta^{id=0}), minus the weighted
    sum over the sampled ones, averaged over the samples; the same numbers
    when the centers are split into parts (threads)."""
    import itertools

    N, R, D, S, m = 7, 2, 3, 3, 4
    rng = np.random.RandomState(4)
    X, x = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    links = X[rng.random_sample(x.size) < 0.3]
    store = _PairStore.build(links, np.ones(len(links)), N, R, True)
    q_all = rng.uniform(0.1, 0.9, size=(N, D))
    b, W = rng.normal(size=R), rng.normal(size=(R, D, D))
    h1, h2 = rng.normal(size=R), rng.normal(size=R)
    centers = np.array([1, 3, 6])
    # local entities: all of them, shuffled
    ents = rng.permutation(N)
    local = np.argsort(ents)  # global -> local
    lcen = local[centers]
    partners = rng.randint(N, size=centers.size * m)
    prel = rng.randint(R, size=partners.size)
    n_non = rng.uniform(1.0, 5.0, size=centers.size)
    u = rng.random_sample((S, N, D))
    lq = q_all[ents]
    V = W.transpose(0, 2, 1).copy() if transpose else W
    ptr, order, other = ((store.in_ptr, store.in_order, store.snd) if transpose
                         else (store.out_ptr, store.out_order, store.rcv))
    m_sum = q_all.T @ q_all + np.diag((q_all * (1 - q_all)).sum(axis=0))
    out = np.zeros((N, D))
    _kernels.nonlink_control_variate(
        centers, lcen, n_non, local[partners], prel, q_all, q_all.sum(axis=0),
        m_sum, ptr, order, other, store.rel, lq, u, b, V, h1, h2, out,
    )
    linked = {tuple(t) for t in links}
    patterns = np.array(list(itertools.product([0.0, 1.0], repeat=D)))

    def h_diff(zi, zj, r, d):
        z1, z0 = zi.copy(), zi.copy()
        z1[d], z0[d] = 1.0, 0.0
        e1, e0 = b[r] + z1 @ V[r] @ zj, b[r] + z0 @ V[r] @ zj
        return h1[r] * (e1 - e0) + h2[r] * (e1**2 - e0**2)

    expected = np.zeros((N, D))
    for k, i in enumerate(centers):
        for s in range(S):
            zi = (u[s, lcen[k]] < lq[lcen[k]]).astype(float)
            for d in range(D):
                exact = 0.0
                for j in range(N):
                    for r in range(R):
                        pair = (j, i, r) if transpose else (i, j, r)
                        if j == i or pair in linked:
                            continue
                        prob = np.prod(np.where(patterns, q_all[j], 1 - q_all[j]),
                                       axis=1)
                        exact += sum(p * h_diff(zi, zj, r, d)
                                     for p, zj in zip(prob, patterns, strict=True))
                sampled = 0.0
                for t in range(k * m, (k + 1) * m):
                    lj = local[partners[t]]
                    zj = (u[s, lj] < lq[lj]).astype(float)
                    sampled += h_diff(zi, zj, prel[t], d)
                expected[lcen[k], d] += (exact - n_non[k] / m * sampled) / S
    assert_allclose(out, expected, rtol=1e-10, atol=1e-10)

    monkeypatch.setattr(_kernels, "_parts", lambda n, work, least: [(0, 1), (1, n)])
    split = np.zeros((N, D))
    _kernels.nonlink_control_variate(
        centers, lcen, n_non, local[partners], prel, q_all, q_all.sum(axis=0),
        m_sum, ptr, order, other, store.rel, lq, u, b, V, h1, h2, split,
        zs=_kernels.sample_codes(u, lq),
    )
    assert_array_equal(split, out)


@pytest.mark.parametrize("diag", [False, True])
def test_pattern_nonlink_deltas_match_enumeration(diag, monkeypatch):
    """The non-link sums over feature patterns: for every center and sample,
    the tables over the population's patterns minus the center and its
    listed partners equal the sum over every non-link (j != i, every
    relation, not listed, in both roles) of g(eta^{id=1}) - g(eta^{id=0}),
    g = log Phi(-eta), each j with its pattern in the population sample,
    averaged over the samples; the same numbers in parts (threads)."""
    from scipy.special import log_ndtr

    N, R, D, S = 9, 2, 3, 4
    rng = np.random.RandomState(7)
    X, x = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    links = X[rng.random_sample(x.size) < 0.3]
    store = _PairStore.build(links, np.ones(len(links)), N, R, True)
    b, W = rng.normal(size=R), rng.normal(size=(R, D, D))
    if diag:
        W = W * np.eye(D)
    population = _kernels.pattern_codes(rng.random_sample((N, D)) < 0.5)
    counts = np.bincount(population, minlength=2**D).astype(np.float64)
    codes = np.flatnonzero(counts)
    centers = np.array([0, 4, 8])
    lcen = np.array([2, 0, 1])
    z = rng.random_sample((S, centers.size, D)) < 0.5
    a_codes = np.ascontiguousarray(_kernels.pattern_codes(z).T)
    table_codes = np.unique(a_codes)
    snd_t, rcv_t = np.empty((table_codes.size, D)), np.empty((table_codes.size, D))
    _kernels.pattern_flip_sums(table_codes, *_kernels.pattern_fields(codes, W),
                               counts[codes], b, snd_t, rcv_t)
    rows = np.searchsorted(table_codes, a_codes)
    out = np.zeros((3, D))
    _kernels.pattern_nonlink_deltas(
        centers, lcen, a_codes, rows, snd_t, rcv_t, population, store.out_ptr,
        store.out_order, store.rcv, store.in_ptr, store.in_order, store.snd,
        store.rel, b, W, out)

    bits = (population[:, None] >> np.arange(D)) & 1
    linked = {tuple(t) for t in links}
    expected = np.zeros((3, D))
    for k, i in enumerate(centers):
        for s in range(S):
            zi = z[s, k].astype(float)
            for d in range(D):
                z1, z0 = zi.copy(), zi.copy()
                z1[d], z0[d] = 1.0, 0.0
                total = 0.0
                for j in range(N):
                    for r in range(R):
                        zj = bits[j]
                        if j != i and (i, j, r) not in linked:
                            total += (log_ndtr(-(b[r] + z1 @ W[r] @ zj))
                                      - log_ndtr(-(b[r] + z0 @ W[r] @ zj)))
                        if j != i and (j, i, r) not in linked:
                            total += (log_ndtr(-(b[r] + zj @ W[r] @ z1))
                                      - log_ndtr(-(b[r] + zj @ W[r] @ z0)))
                expected[lcen[k], d] += total / S
    assert_allclose(out, expected, rtol=1e-10, atol=1e-10)

    monkeypatch.setattr(_kernels, "_parts", lambda n, work, least: [(0, 1), (1, n)])
    split_snd, split_rcv = np.empty_like(snd_t), np.empty_like(rcv_t)
    _kernels.pattern_flip_sums(table_codes, *_kernels.pattern_fields(codes, W),
                               counts[codes], b, split_snd, split_rcv)
    assert_array_equal(split_snd, snd_t)
    split = np.zeros((3, D))
    _kernels.pattern_nonlink_deltas(
        centers, lcen, a_codes, rows, snd_t, rcv_t, population, store.out_ptr,
        store.out_order, store.rcv, store.in_ptr, store.in_order, store.snd,
        store.rel, b, W, split)
    assert_array_equal(split, out)


@pytest.mark.parametrize("diag", [False, True])
def test_pattern_nonlink_deltas_equal_the_full_sweep(diag, monkeypatch):
    """With q at 0 or 1 (every joint sample the same), a step's features'
    estimates from the population's feature patterns equal the full sweep's
    over every pair of the complete network: the non-links are summed
    exactly, not sampled, whatever the sampled non-links of the step."""

    model, store, q, u, full = _planted_state(300, 3, -3.0, diag=diag,
                                              n_samples=2)
    model._patterns = _estimator._PatternNonlinks(q, model._b, model._W,
                                                  np.random.RandomState(2))
    centers = np.array([3, 100, 250, 299])
    for seed in (3, 4):
        local = model._local_pairs(store, centers, np.random.RandomState(seed),
                                   sampled=True)
        ents, lcen = local[6], local[7]
        out = model._center_deltas(store, centers, local, q[ents], u[:, ents])
        assert_allclose(out[lcen], full[centers], rtol=1e-9, atol=1e-8)


def test_nonlink_control_variate_has_mean_zero(monkeypatch):
    """With random q, the correction of the control variate averages to zero
    over the samples of z and the sampled non-links (so it adds no bias),
    while a single draw is far from zero."""
    model, store, X, x = _small_network(monkeypatch, seed=2)
    N, D = model._logits.shape
    model._logits = np.random.RandomState(5).normal(0.0, 1.0, size=(N, D))
    q = expit(model._logits)
    model._cv_coef = np.array([[0.3, -0.2], [-0.5, 0.1]])
    rng = np.random.RandomState(6)
    centers = np.array([0, 2, 5])
    draws = []
    for _ in range(2000):
        local = model._local_pairs(store, centers, rng, sampled=True)
        ents, lcen = local[6], local[7]
        u = rng.random_sample((1, ents.size, D))
        with_cv = model._center_deltas(store, centers, local, q[ents], u)
        model._cv_coef, saved = None, model._cv_coef
        without = model._center_deltas(store, centers, local, q[ents], u)
        model._cv_coef = saved
        draws.append((with_cv - without)[lcen])
    draws = np.array(draws)
    mean, se = draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean) <= 4 * se)
    assert np.abs(draws).max() > 0.1


def test_q_moments_updated_row_by_row_equal_recomputed_ones():
    """_QMoments.update (the rows of a step's centers) leaves q and the sums
    of the control variate equal to those computed from scratch."""
    rng = np.random.RandomState(0)
    logits = rng.normal(0.0, 3.0, size=(500, 6))
    moments = _estimator._QMoments(logits)
    for _ in range(50):
        rows = rng.choice(500, size=40, replace=False)
        logits[rows] = rng.normal(0.0, 3.0, size=(40, 6))
        moments.update(rows, expit(logits[rows]))
    fresh = _estimator._QMoments(logits)
    assert_array_equal(moments.q, fresh.q)
    assert_allclose(moments.q_sum, fresh.q_sum, rtol=1e-12)
    assert_allclose(moments.m_sum, fresh.m_sum, rtol=1e-12)
    q = expit(logits)
    assert_allclose(fresh.m_sum, q.T @ q + np.diag((q * (1 - q)).sum(axis=0)))


def test_every_step_sees_the_moments_of_the_current_q(monkeypatch):
    """The control variate of every step of a stochastic epoch gets q and the
    sums of the current logits (kept step by step, not recomputed), and the
    fitted model keeps no (N, D) copy of them."""
    X, _ = make_sparse_relational(300, 4, intercept=-2.5, random_state=0)
    seen = []
    original = _kernels.nonlink_control_variate

    def spy(centers, lcen, n_non, partners, prel, q_all, q_sum, m_sum, *args,
            **kwargs):
        seen.append((q_all.copy(), q_sum.copy(), m_sum.copy(),
                     expit(model._logits)))
        return original(centers, lcen, n_non, partners, prel, q_all, q_sum, m_sum,
                        *args, **kwargs)

    monkeypatch.setattr(_kernels, "nonlink_control_variate", spy)
    # sampled non-links (the control variate's path) at any number of features
    monkeypatch.setattr(_estimator, "_PATTERN_MAX_FEATURES", 0)
    model = LatentFeatureRelational(
        4, unlisted_pairs="nonlinks", n_entities=300, batch_size=50, max_iter=2,
        tol=None, random_state=0,
    )
    model.fit(X, np.ones(len(X), dtype=np.int64))
    assert len(seen) > 10
    for q_all, q_sum, m_sum, q in seen:
        assert_array_equal(q_all, q)
        assert_allclose(q_sum, q.sum(axis=0), rtol=1e-12)
        assert_allclose(m_sum, q.T @ q + np.diag((q * (1 - q)).sum(axis=0)),
                        rtol=1e-12)
    assert getattr(model, "_q_moments", None) is None


def test_two_hop_product_equals_the_explicit_matrix():
    """The start's implicit product equals (S + c (S^2 - diag S^2)) @ A."""
    import scipy.sparse as sp

    rng = np.random.RandomState(7)
    N = 30
    s, t = rng.randint(N, size=80), rng.randint(N, size=80)
    s, t = s[s != t], t[s != t]
    S = sp.csr_matrix((np.ones(2 * s.size), (np.r_[s, t], np.r_[t, s])),
                      shape=(N, N))
    S.sum_duplicates()
    S.data[:] = 1.0
    dense = S.toarray()
    two = dense @ dense
    np.fill_diagonal(two, 0.0)
    M = dense + _estimator._TWO_HOP_WEIGHT * two
    A = rng.random_sample((N, 4))
    got = _estimator._two_hop_product(S, np.asarray(S.sum(axis=1)), A)
    assert_allclose(got, M @ A, rtol=1e-12)


def test_the_nonlinks_start_finds_every_planted_feature():
    """On a sparse network with a few links per entity (about 7), the start
    of a "nonlinks" fit (two-hop NMF) orders the entities by every planted
    feature (Hungarian-matched AUC per feature), where the NMF of the links
    alone misses some."""
    N, D = 3000, 4
    X, truth = make_sparse_relational(N, D, density=0.15, intercept=-3.2,
                                      random_state=0)
    pairs = _PairStore.build(np.column_stack([X, np.zeros(len(X), int)]),
                             np.ones(len(X)), N, 1, True)
    Z = truth.latent_features

    def matched(start):
        q = start(pairs, N, 1, D, np.random.RandomState(0))
        auc = np.array([[roc_auc_score(Z[:, d], q[:, e]) for e in range(D)]
                        for d in range(D)])
        rows, cols = linear_sum_assignment(-auc)
        return auc[rows, cols]

    assert matched(_estimator._two_hop_nmf_start).min() > 0.98
    assert matched(_estimator._nmf_start).min() < 0.95


@pytest.mark.parametrize("n_links", [30, 120, 400])
def test_monitor_sample_has_as_many_pairs_as_links_within_bounds(monkeypatch, n_links):
    """The fixed sample of the "nonlinks" ELBO: M links and M non-links, M the
    number of links clipped to ``_MONITOR_SIZE``; distinct links, non-links
    that are no links and no self-pairs; inverse-probability weights that
    sum to the number of links and of non-links (so that the weighted sum of
    any pair function is an unbiased estimate of its sum over all pairs),
    and the weighted mean of a pair function near its exact mean."""
    monkeypatch.setattr(_estimator, "_MONITOR_SIZE", (100, 250))
    N, R = 60, 2
    rng = np.random.RandomState(n_links)
    X, _ = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    links = X[np.sort(rng.choice(len(X), n_links, replace=False))]
    store = _PairStore.build(links, np.ones(n_links), N, R, True)
    pairs, weight = _estimator._monitor_sample(store, np.random.RandomState(0))
    M = min(max(n_links, 100), 250)
    is_link = pairs.x > 0.5
    assert is_link.sum() == min(n_links, M) and (~is_link).sum() == M
    code = (pairs.snd * N + pairs.rcv) * R + pairs.rel
    lcode = (links[:, 0] * N + links[:, 1]) * R + links[:, 2]
    assert np.unique(code[is_link]).size == is_link.sum()
    assert np.isin(code[is_link], lcode).all()
    assert not np.isin(code[~is_link], lcode).any()
    assert (pairs.snd != pairs.rcv).all()
    assert_allclose(weight[is_link].sum(), n_links)
    assert_allclose(weight[~is_link].sum(), N * (N - 1) * R - n_links)
    # a pair function: the weighted estimate of its total over the non-links
    f = np.sin(pairs.snd + 0.5 * pairs.rcv + 0.25 * pairs.rel)
    exact = np.sin(X[:, 0] + 0.5 * X[:, 1] + 0.25 * X[:, 2])
    exact_non = exact.sum() - exact[np.isin((X[:, 0] * N + X[:, 1]) * R + X[:, 2],
                                            lcode)].sum()
    estimate = f[~is_link] @ weight[~is_link]
    # sd of the estimate: (number of non-links) * sd(f) / sqrt(M)
    assert abs(estimate - exact_non) < 4 * len(X) * exact.std() / np.sqrt(M)


def test_warm_started_epochs_continue_one_fit_exactly():
    """One-epoch fits with ``warm_start=True`` give the fit of as many epochs
    at once ("nonlinks"; the parameters to the last bit, the ELBO to
    rounding): the ELBO's monitoring sample is
    drawn with the ELBO's own seed (the same pairs at every fit of the model,
    so consecutive ELBO values differ by the fit's progress only) and
    draws nothing from the training stream."""
    X, _ = make_sparse_relational(1500, 3, intercept=-2.5, random_state=0)
    y = np.ones(len(X), dtype=np.int64)
    kw = dict(unlisted_pairs="nonlinks", n_entities=1500, tol=None, random_state=0)
    whole = LatentFeatureRelational(3, max_iter=3, **kw).fit(X, y)
    warm = LatentFeatureRelational(3, max_iter=1, warm_start=True, **kw)
    history = []
    for _ in range(3):
        history.append(warm.fit(X, y).elbo_)
    assert_array_equal(warm.latent_features_, whole.latent_features_)
    assert_allclose(history, whole.elbo_history_, rtol=1e-13)
    assert_array_equal(warm.weights_, whole.weights_)


def test_monitor_standard_error_matches_the_spread_over_samples(monkeypatch):
    """The standard error of the monitoring estimate (:func:`_stratified_
    standard_error`, which the stopping rule of "nonlinks" fits reads) is
    the spread of the estimate over independent monitoring samples, in each
    stratum: 300 of the 400 links without replacement (the finite population
    correction halves their error), 300 of the 2,720 non-links with
    replacement (no correction)."""
    monkeypatch.setattr(_estimator, "_MONITOR_SIZE", (300, 300))
    N, R = 40, 2
    rng = np.random.RandomState(0)
    X, _ = _complete(N, R, np.zeros((0, 3), dtype=np.int64))
    links = X[np.sort(rng.choice(len(X), 400, replace=False))]
    store = _PairStore.build(links, np.ones(len(links)), N, R, True)
    for link_scale in (10.0, 0.0):  # the links' stratum, then the non-links' alone
        estimates, errors = [], []
        for seed in range(1000):
            pairs, weight = _estimator._monitor_sample(store,
                                                       np.random.RandomState(seed))
            f = np.where(pairs.x > 0.5, link_scale, 1.0) * np.sin(
                pairs.snd + 0.5 * pairs.rcv + 0.25 * pairs.rel)
            estimates.append(f @ weight)
            errors.append(_estimator._stratified_standard_error(f, pairs.x, weight))
        assert np.std(estimates) == pytest.approx(np.mean(errors), rel=0.05)
    # every link in the sample: the link stratum adds no error
    monkeypatch.setattr(_estimator, "_MONITOR_SIZE", (500, 500))
    pairs, weight = _estimator._monitor_sample(store, np.random.RandomState(0))
    f = np.where(pairs.x > 0.5, 1.0, 0.0) * pairs.snd
    assert _estimator._stratified_standard_error(f, pairs.x, weight) == 0.0


@pytest.mark.parametrize("setting", ["default", "many_patterns", "many_features"])
def test_patterns_or_sampled_nonlinks_choose_the_features_steps(setting,
                                                                  monkeypatch):
    """A "nonlinks" fit's feature steps sum the non-links over the feature
    patterns by default; with more distinct patterns than
    _PATTERN_MAX_PATTERNS, or more features than _PATTERN_MAX_FEATURES,
    they take the sampled non-links and their control variate."""
    X, _ = make_sparse_relational(300, 4, intercept=-2.5, random_state=0)
    calls = {"patterns": 0, "sampled": 0}
    def counting(original, key):
        def spy(*args, **kwargs):
            calls[key] += 1
            return original(*args, **kwargs)
        return spy

    for name, key in (("pattern_nonlink_deltas", "patterns"),
                      ("nonlink_control_variate", "sampled")):
        monkeypatch.setattr(_kernels, name, counting(getattr(_kernels, name), key))
    if setting == "many_patterns":
        monkeypatch.setattr(_estimator, "_PATTERN_MAX_PATTERNS", 1)
    if setting == "many_features":
        monkeypatch.setattr(_estimator, "_PATTERN_MAX_FEATURES", 3)
    model = LatentFeatureRelational(
        4, unlisted_pairs="nonlinks", n_entities=300, batch_size=50, max_iter=2,
        tol=None, random_state=0,
    ).fit(X, np.ones(len(X), dtype=np.int64))
    if setting == "default":
        assert calls["patterns"] == 12 and calls["sampled"] == 0
    else:
        assert calls["patterns"] == 0 and calls["sampled"] > 0
    assert getattr(model, "_patterns", None) is None  # not kept with the model


@pytest.mark.slow
def test_pattern_nonlink_sums_keep_the_features_where_sampled_ones_drift(
        monkeypatch):
    """With 2 sampled non-links per entity and role, each standing for about
    10,000 (20,000 entities, 10 planted features, about 11 links each), the
    sampled non-links' noise switches features on that the data do not
    support; the exact sums over the feature patterns do not. After 4
    epochs the pattern path has fewer features on per entity, a higher
    ELBO and a held-out AUC at least a point higher."""
    N, D = 20_000, 10
    X, held, non, labels = _sparse_holdout(N, D)
    monkeypatch.setattr(_estimator, "_N_NONLINK_SAMPLES", 2)
    result = {}
    for name, cap in (("patterns", _estimator._PATTERN_MAX_FEATURES),
                      ("sampled", 0)):
        monkeypatch.setattr(_estimator, "_PATTERN_MAX_FEATURES", cap)
        model = LatentFeatureRelational(D, unlisted_pairs="nonlinks", n_entities=N,
                                        n_mc_samples=3, max_iter=4, tol=None,
                                        random_state=0)
        model.fit(X[~held], np.ones(int((~held).sum()), int))
        score = np.r_[model.predict_proba(X[held])[:, 1],
                      model.predict_proba(non)[:, 1]]
        result[name] = (roc_auc_score(labels, score), model.elbo_,
                        model.latent_features_.sum(axis=1).mean())
    (auc_p, elbo_p, on_p), (auc_s, elbo_s, on_s) = result["patterns"], result["sampled"]
    assert auc_p > auc_s + 0.01, result
    assert elbo_p > elbo_s + 0.2, result
    assert on_p < on_s - 0.2, result


def test_pattern_draw_in_blocks_equals_one_draw(monkeypatch):
    """The epoch's first draw of every entity's pattern, a block of rows at
    a time, gives the codes of one draw of the whole (N, D) array: bit i of
    entity j's code is 1{u_ji < q_ji}."""
    q = np.random.RandomState(0).random_sample((1000, 5))
    b, W = np.zeros(1), np.zeros((1, 5, 5))
    monkeypatch.setattr(_estimator, "_PATTERN_DRAW_ROWS", 7)
    blocks = _estimator._PatternNonlinks(q, b, W, np.random.RandomState(5)).current
    rng = np.random.RandomState(5)
    u = np.random.default_rng(rng.randint(2**31 - 1)).random(q.shape)
    assert_array_equal(blocks, ((u < q) * 2 ** np.arange(5)).sum(axis=1))
