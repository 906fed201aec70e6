"""NoisyORFactorizer: the noisy-OR factor model with amortized variational inference."""

import inspect
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, logit
from sklearn.base import (
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import normalize
from sklearn.random_projection import SparseRandomProjection
from sklearn.utils import gen_batches
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import validate_data

from .._base import FIT_LOOP_CONSTRAINTS, BaseVariational, single_threaded_blas
from .._optim import Adam
from .._validation import IntInterval, check_binary
from . import _encoder, _jaakkola_jordan, _kernels

# Weight of a seed row's features in init="data": large enough that Adam grows
# the weights quickly (softplus is linear above ~1, flat near 0), small enough
# that a seed row mixing several true causes does not lock them together.
_SEED_WEIGHT = 0.3
# Largest total seed weight of one cause (nats of evidence for the cause in a
# copy of its seed row): on long rows the per-feature weight shrinks to
# _SEED_EVIDENCE / (active features), so that a cause seeded on a 60-word
# document does not start as a detector of that document's near-duplicates
# (such causes end used by a handful of rows and their prior falls below 0.01).
_SEED_EVIDENCE = 3.0


def _seed_weights(X, seeds):
    """Dense (n_features, len(seeds)) seed weights of the rows ``seeds`` of X."""
    rows = X[seeds]
    length = np.maximum(np.diff(rows.indptr), 1)
    weight = np.minimum(_SEED_WEIGHT, _SEED_EVIDENCE / length)
    return (rows.multiply(weight[:, None])).toarray().T


# init="k-means++" picks its seed rows among a uniform subsample of this many
# rows (or of 2 K if larger): the seeding costs O(rows K log K nnz_per_row),
# 0.13 s for K = 150 on the 5,485 R8 training documents.
_SPREAD_ROWS = 10_000


def _spread_seeds(X, n_seeds, rng):
    """Indices of ``n_seeds`` rows of X spread over the data, by k-means++.

    k-means++ seeding (Arthur and Vassilvitskii, SODA 2007; scikit-learn's
    :func:`~sklearn.cluster.kmeans_plusplus`) on the rows scaled to unit
    Euclidean norm: a row far from the seeds already chosen is likely to be
    the next one, so the seeds start on different groups of rows rather than
    on near-duplicates in the largest group. Among a uniform subsample of at
    most max(_SPREAD_ROWS, 2 n_seeds) rows; with no more rows than seeds,
    the seeds are drawn uniformly (with replacement if fewer).
    """
    n_samples = X.shape[0]
    if n_samples <= n_seeds:
        return rng.choice(n_samples, size=n_seeds, replace=n_samples < n_seeds)
    candidates = np.arange(n_samples)
    cap = max(_SPREAD_ROWS, 2 * n_seeds)
    if n_samples > cap:
        candidates = np.sort(rng.choice(n_samples, size=cap, replace=False))
    rows = normalize(sp.csr_matrix(X[candidates], dtype=np.float64))
    _, chosen = kmeans_plusplus(rows, n_seeds, random_state=rng.randint(2**31 - 1))
    return candidates[chosen]


# init="cooccurrence": the candidate seed features are those active in at
# least max(_SEED_MIN_ROWS, _SEED_MIN_SHARE n) of the n rows read (and not in
# every row); k-means++ spreads them on a random projection of their
# co-occurrence profiles to _PROFILE_DIMS dimensions (exact profiles when there
# are no more features than that). 0.15 s for K = 150 on the 5,048 Reuters
# bodies, 5,142 words.
_SEED_MIN_ROWS = 5
_SEED_MIN_SHARE = 0.002
_PROFILE_DIMS = 256


def _cooccurrence_seeds(X, n_seeds, rng):
    """Dense (n_features, n_seeds) seed weights from feature co-occurrence.

    Reads a uniform subsample of at most ``_SPREAD_ROWS`` rows of the binary
    CSR matrix X. The profile of feature j is its lift over every feature i,
    ``(P(x_i | x_j) - P(x_i)) / (1 - P(x_i))``: 1 for j itself and for a
    feature always on with j, 0 for one independent of j. k-means++ seeding
    (:func:`~sklearn.cluster.kmeans_plusplus`) on the profiles scaled to unit
    norm (through a :class:`~sklearn.random_projection.SparseRandomProjection`
    when there are more than ``_PROFILE_DIMS`` features) picks ``n_seeds``
    candidate features (see ``_SEED_MIN_ROWS``) that co-occur with different
    groups of features. Seed k puts weight ``_SEED_WEIGHT`` times the positive
    part of the lift of its feature on every feature, scaled down to at most
    ``_SEED_EVIDENCE`` nats in all, as ``_seed_weights`` caps a seed row: the
    cause starts on the features that come with its seed feature rather than
    on one row. When fewer features are candidates than seeds are asked for,
    the rest are seed rows drawn uniformly (``_seed_weights``).
    """
    n_samples, n_features = X.shape
    rows = np.arange(n_samples)
    if n_samples > _SPREAD_ROWS:
        rows = np.sort(rng.choice(n_samples, size=_SPREAD_ROWS, replace=False))
    Xs = sp.csr_matrix(X[rows], dtype=np.float64)
    n = Xs.shape[0]
    count = np.asarray(Xs.sum(axis=0)).ravel()
    freq = count / n
    room = np.maximum(1.0 - freq, 1.0 / n)  # 1 - P(x_i), > 0 for the always-on
    varying = (count > 0) & (count < n)
    candidates = np.flatnonzero(varying & (count >= max(_SEED_MIN_ROWS,
                                                        _SEED_MIN_SHARE * n)))
    if candidates.size < n_seeds:
        candidates = np.flatnonzero(varying)
    n_words = min(n_seeds, candidates.size)
    weights = np.zeros((n_features, n_seeds))
    if n_words:
        Xc = Xs[:, candidates].tocsc()
        scaled = sp.csr_matrix(Xs.multiply(1.0 / room[None, :]))
        if n_features <= _PROFILE_DIMS:
            profile = (Xc.T @ scaled).toarray() / count[candidates, None]
            profile -= freq / room
        else:
            projection = SparseRandomProjection(
                _PROFILE_DIMS, dense_output=True, random_state=rng.randint(2**31 - 1))
            projected = projection.fit_transform(scaled)
            profile = Xc.T @ projected / count[candidates, None]
            profile -= projection.transform((freq / room)[None, :])
        _, chosen = kmeans_plusplus(normalize(profile), n_words,
                                    random_state=rng.randint(2**31 - 1))
        words = candidates[chosen]
        together = (Xs[:, words].T @ Xs).toarray() / count[words, None]
        lift = np.maximum(together - freq, 0.0) / room
        total = _SEED_WEIGHT * lift.sum(axis=1)
        scale = _SEED_WEIGHT * np.minimum(1.0, _SEED_EVIDENCE / np.maximum(total, 1e-300))
        weights[:, :n_words] = (lift * scale[:, None]).T
    if n_words < n_seeds:
        missing = n_seeds - n_words
        extra = rng.choice(n_samples, size=missing, replace=n_samples < missing)
        weights[:, n_words:] = _seed_weights(X, extra)
    return weights


def _release_free_bits(g_logit_q, logit_q, logit_prior, free_bits):
    r"""Free bits: drop the KL gradient of the causes under ``free_bits``, in place.

    ``g_logit_q`` (B, K) is the gradient of the summed ELBO of a minibatch
    with respect to the posterior logits ``logit_q`` (B, K); its KL part is
    :math:`-\partial \mathrm{KL}_{bk} / \partial l_{bk} = -q(1 - q)(l - c)`
    with :math:`l` = ``logit_q``, :math:`c` = ``logit_prior`` (K,). For every
    cause whose KL averaged over the B rows is below ``free_bits`` (nats)
    that part is added back where it pulls a logit down (:math:`l > c`), so
    that switching the cause on costs no KL while the pull up towards the
    prior stays: the KL term of those causes becomes
    :math:`\mathrm{KL}_{bk} [l_{bk} < c_k]`, continuous with its derivative
    at :math:`l = c`. A one-sided variant of free bits (Kingma et al.,
    NeurIPS 2016), whose two-sided form lets the posteriors of the released
    causes fall to 0 and empties rare causes on short documents (User Guide,
    "Free bits"). Returns the boolean mask (K,) of the causes released.
    """
    q = expit(logit_q)
    diff = logit_q - logit_prior
    # _math.kl_bernoulli_logits (a Numba scalar), on the whole (B, K) array
    kl = q * diff - np.logaddexp(0.0, logit_q) + np.logaddexp(0.0, logit_prior)
    free = kl.mean(axis=0) < free_bits
    if free.any():
        # only the pull towards "off" (logit above the prior's) is released
        g_logit_q[:, free] += (q[:, free] * (1.0 - q[:, free])) * np.maximum(
            diff[:, free], 0.0)
    return free


def _softplus_inverse(y):
    return y + np.log(-np.expm1(-y))


def _csr_arrays(X):
    """CSR structure as int64 arrays: the one signature every kernel compiles for."""
    return X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int64, copy=False)


# "svi": step size of the damped natural-gradient (mean-field) steps on a row's
# logits (1 would be the parallel mean-field update, which can oscillate), and
# the largest logit change at which transform stops iterating a row.
_LOCAL_STEP = 0.5
_LOCAL_TOL = 1e-4
# A cause whose prior probability ends below this value is unused.
_DEAD_PRIOR = 0.01
# n_fit_refine_steps="auto" and free_bits="auto" by inference method: "avi"
# trains semi-amortized (1 local step) with one-sided free bits of 0.02 nats,
# which together keep 92-100% of the causes above a prior of 0.01 on Reuters
# bodies and R8 at K = 50-150 (75-91% with neither; User Guide, "Unused
# causes"); "acp" keeps 94-100% with neither, and either lowers its held-out
# ELBO.
_AUTO_FIT_REFINE_STEPS = {"acp": 0, "avi": 1}
_AUTO_FREE_BITS = {"acp": 0.0, "avi": 0.02}
# A cause whose prior ends below this value, or below 1 / n_samples when that
# is larger (up to _DEAD_PRIOR, so that an empty cause is never one of the
# n_active_components_ in use), is empty: on in fewer than one training row in
# a thousand (or in less than one row) in expectation. AVI on 44,328 health
# news tweets (K = 50, seeds 0-2) ended with 7 to 11 such causes (priors 2e-4
# to 3e-4, on in about one tweet each; switching them and the other causes
# below 0.01 off moved the test ELBO by at most 0.17 nats per tweet), all
# above 1 / n_samples = 2.3e-5; the rare causes of the default fits on the
# Reuters corpora stay above it (user guide, "Unused causes" and "Many short
# documents").
_EMPTY_PRIOR = 1e-3
# Split moves (split_moves=True; see NoisyORFactorizer._split_causes): training
# rows on which the moves are scored, most rows scored per move, Monte Carlo
# samples of the true ELBO, least gain in nats per scored row, heaviest words
# of a cause on which its documents are clustered, smallest weight of a split
# cause (keeps softplus^-1 finite), the share of max_iter during which moves
# are made, and K / (most moves per epoch).
_SPLIT_ROWS = 1000
_SPLIT_EVAL_ROWS = 200
_SPLIT_SAMPLES = 10
_SPLIT_MARGIN = 0.01
_SPLIT_TOP_WORDS = 30
_SPLIT_FLOOR = 1e-6
_SPLIT_UNTIL = 0.8
_SPLIT_SHARE = 20
# "jj": relative gain of the bound below which a row's E-step stops in transform
_JJ_TOL = 1e-10

# Cost of one delayed Adam update of an entry of theta (softplus, moments,
# streaming five (n_features, K) arrays) in units of one multiply-add of the
# ELBO kernel: measured ~21 ns against ~2.7 ns on the development machine with
# the C library's exp and log1p. The vectorized softplus (skbinvi._math.
# softplus_sigmoid) brought the update to ~14 ns against ~4 ns, but the
# constant stays: with the re-measured 3.5 the window falls from 2 to 1 on
# corpora of about 800 documents (K >= 100, or "avi"), which in 12 fits on two
# such corpora (K = 100 and 150, seeds 0 and 1) raised the test ELBO in 9 but
# lowered the accuracy of the features in 8, in the same fit time.
_DELAYED_UPDATE_COST = 8.0


def _update_window(estimator, nnz_per_batch, n_batches):
    """Minibatches between the delayed updates of theta and the leak.

    A delayed update touches every row of theta and the leak: n_features *
    (K + 1) entries, each costing about ``_DELAYED_UPDATE_COST`` multiply-adds.
    A minibatch costs about nnz_per_batch * (M K + P) multiply-adds, with
    P = K + 1 + H_1 (+ H_last + 1 for "acp") parameters per active feature
    ("svi": P = K + 1, plus M K per local step).
    The window is the smallest number of minibatches whose work is at least
    one delayed update, so the delayed updates at most double the cost of an
    epoch, which stays proportional to nnz. It is 1 (every row of theta and
    the leak updated at every step) whenever a minibatch does more work than
    a full update (Reuters headlines and bodies), and grows on wide, sparse
    data; the end of an epoch always applies the delayed updates.
    """
    K = estimator.n_components
    M = estimator.n_mc_samples
    if estimator.inference == "svi":
        # no encoder; each visit also runs n_local_steps local sweeps
        n_per_row = K + 1
        per_nnz = M * K * (1 + estimator.n_local_steps) + n_per_row
    else:
        sizes = estimator._hidden_sizes()
        n_per_row = K + 1 + sizes[0]
        if estimator.inference == "acp":
            n_per_row += sizes[-1] + 1
        per_nnz = M * K + n_per_row
    batch_work = max(nnz_per_batch, 1.0) * per_nnz
    update_work = _DELAYED_UPDATE_COST * estimator.n_features_in_ * (K + 1)
    return max(1, min(int(np.ceil(update_work / batch_work)), n_batches))


class NoisyORFactorizer(ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                        BaseVariational):
    r"""Noisy-OR factor model of binary data with amortized variational inference.

    The model [1]_ explains each binary row x (a document's word presence, a
    binarized image) by K binary latent causes and an always-on leak:

    .. math::

        z_k \sim \mathrm{Bernoulli}(\mu_k), \qquad
        p(x_i = 0 \mid z) = \exp\Big(-\theta_{i0} - \sum_{k=1}^K \theta_{ik} z_k\Big),

    where :math:`\theta_{ik} \ge 0` is the weight of cause k on feature i
    (``components_``), :math:`\theta_{i0} \ge 0` the leak (``leak_``) and
    :math:`\mu_k` the prior probability of cause k (``prior_``). The
    parameters are learned by maximizing the evidence lower bound (ELBO)

    .. math::

        \mathcal{L}(x) = \mathbb{E}_q\Big[\sum_{i: x_i = 1}
            \log\big(1 - e^{-\theta_{i0} - \sum_k \theta_{ik} z_k}\big)\Big]
            - \sum_{i: x_i = 0}\Big(\theta_{i0} + \sum_k \theta_{ik} q_k\Big)
            - \sum_k \mathrm{KL}\big(\mathrm{Bern}(q_k) \,\|\, \mathrm{Bern}(\mu_k)\big)

    under a factorized posterior :math:`q(z \mid x) = \prod_k
    \mathrm{Bern}(q_k)`. With amortized inference an encoder network computes
    the parameters of q from x:

    - ``inference="acp"`` (amortized conjugate posterior, [1]_ supplement
      Eq. 5): the encoder outputs the dual variables
      :math:`\psi_i = \mathrm{softplus}(\mathrm{MLP}(x)_i) > 0` of the
      Jaakkola-Jordan bound :math:`\log(1 - e^{-u}) \le \psi u - g(\psi)` and
      :math:`q_k = \sigma\big(\sum_{i: x_i=1} \psi_i \theta_{ik} -
      \sum_{i: x_i=0} \theta_{ik} + \operatorname{logit} \mu_k\big)`;
    - ``inference="avi"`` (amortized VI): the encoder outputs
      :math:`\operatorname{logit} q_k` directly.

    The encoder's input is the binary row divided by the square root of its
    number of active features (unit Euclidean norm), so that documents of
    any length give hidden activations of the same scale. In :meth:`transform`
    and :meth:`score` the encoder's logits are the start of ``n_refine_steps``
    local mean-field steps (the "svi" steps below) that close the amortization
    gap (semi-amortized inference, Kim et al., ICML 2018); a row keeps its
    refined logits only if they raise its ELBO.

    Without amortization, ``inference="svi"`` (stochastic VI) gives every row
    its own free logits :math:`\lambda = \operatorname{logit} q`, optimized
    with the model fixed by damped natural-gradient steps
    :math:`\lambda \leftarrow \lambda + \tfrac12 (\lambda^* - \lambda)`,
    where :math:`\lambda^*_k = \operatorname{logit}\mu_k +
    \mathbb{E}_{q_{-k}}[\sum_{i: x_i=1} f(u_i \mid z_k{=}1) - f(u_i \mid
    z_k{=}0)] - \sum_{i: x_i=0}\theta_{ik}` is the mean-field update
    (:math:`f(u) = \log(1 - e^{-u})`, the expectation over
    ``n_mc_samples`` exact samples, z_k summed out exactly). In ``fit`` each
    minibatch first takes ``n_local_steps`` such steps on its rows' logits
    (kept from the previous epoch), then one step on the model; ``transform``
    runs up to ``n_transform_steps`` steps from the prior for new rows, as
    :class:`~sklearn.decomposition.LatentDirichletAllocation` runs its E-step.

    ``inference="jj"`` is variational EM on the Jaakkola-Jordan lower bound
    ([3]_, [4]_; LB-CDI in [1]_): by concavity of f, with weights
    :math:`r_{ik} \ge 0`, :math:`\sum_k r_{ik} = 1` for each active feature,
    :math:`f(\theta_{i0} + \sum_k \theta_{ik} z_k) \ge \sum_k r_{ik}[z_k
    f(\theta_{i0} + \theta_{ik}/r_{ik}) + (1 - z_k) f(\theta_{i0})]`, which
    is linear in z. The E-step alternates the closed-form q update and the
    optimal r (``n_local_steps`` sweeps per row and iteration in ``fit``, up
    to ``n_transform_steps`` in ``transform``); the M-step maximizes the
    bound over theta, the leak (per feature, projected Newton steps on a
    concave function) and mu (closed form). One ``max_iter`` iteration is one
    E-step and one M-step on all the rows; the bound never decreases. It has
    no minibatches, temperature or learning rate, and no ``partial_fit``.
    Each r update solves a root per cause and active feature, so an
    iteration costs far more than an epoch of the other methods, even with
    the rows of the E-step split between threads: on 2,651 news
    articles of 136 distinct words (K = 50) its 10 iterations took 187 s on
    two threads against 9 s for a default "acp" fit, with a worse test ELBO
    (User Guide). It is the paper's baseline, not a method for long
    documents.

    Training follows [1]_ Algorithm 1: minibatches, Adam, ``n_mc_samples``
    binary-Concrete (Gumbel-softmax) relaxed samples of z per row with a
    temperature decayed exponentially from ``temperature`` to
    ``min_temperature``, and gradients with respect to theta, the leak, mu and
    the encoder jointly (derived by hand, run in Numba kernels); "svi" uses
    the same relaxed gradient for theta, the leak and mu.

    Read more in the :ref:`User Guide <noisy_or>`.

    Parameters
    ----------
    n_components : int, default=50
        Number of latent causes K.
    inference : {"acp", "avi", "svi", "jj"}, default="acp"
        Inference method (see above).
    init : {"data", "k-means++", "cooccurrence", "random"}, default="data"
        Initialization of the weights theta. All start from small random
        weights (column sums of order one) and a leak that explains each
        feature's frequency alone. With "data", each cause also gets weight
        min(0.3, 3 / m) on the m active features of a random training row
        (at most 3 nats of evidence in all), so that causes start sparse and
        different without starting as detectors of one long document's
        near-duplicates; "random" has only the small weights. Measured
        (K = 50, 60 epochs, seed 0): on Reuters headlines "random" reaches a
        similar test ELBO (-19.66 against -19.55 nats per document) but
        features that classify far worse (exact match 0.672 against 0.865);
        on the synthetic recovery data of the test suite 2 of 6 seeds
        recover every pattern, against 3 of 6 with "data".
        "k-means++" seeds like "data" but chooses the seed rows by k-means++
        (Arthur and Vassilvitskii, SODA 2007; scikit-learn's
        :func:`~sklearn.cluster.kmeans_plusplus`) on the rows scaled to unit
        norm, among at most 10,000 of them, so that the seeds start on
        different groups of rows. On Reuters documents it gives a better
        held-out ELBO (bodies and R8, K = 100 and 150, ACP and AVI, seeds 0
        and 1: higher in 15 of 16 default fits, by 0.65 nats per document on
        average) with about the same classification accuracy; on synthetic
        documents where a few causes are on in most rows it is worse (by 1 to
        21 nats per document), and on the 8 overlapping patterns of the
        recovery data above no seed recovers every pattern (ACP and AVI),
        which is why it is not the default. Compare the two on held-out rows
        with :meth:`score`, for example in
        :class:`~sklearn.model_selection.GridSearchCV`; see the user guide,
        "Initialization and restarts".
        "cooccurrence" seeds each cause on a feature rather than on a row:
        cause k starts with weight 0.3 times the lift of every feature i
        over its seed feature j, max(P(x_i | x_j) - P(x_i), 0) / (1 - P(x_i))
        (1 on j itself, 0 on a feature independent of j), scaled down to at
        most 3 nats in all, so it starts on the features that come with j.
        k-means++ on the features' co-occurrence profiles (randomly
        projected to 256 dimensions) chooses seed features that come with
        different groups of features, among those active in at least
        max(5, 0.002 n) of the n rows read (at most 10,000). It costs about
        0.15 s for K = 150 on 5,000 Reuters bodies. Measured with default
        settings otherwise, ACP and AVI, seeds 0 and 1, against "data": on
        synthetic documents with known causes (K = 50 and 100; flat,
        Zipf-like and steep priors; 24 fits) the test ELBO is higher in every
        fit, by 3.4 to 26.8 nats per document, and 7 to 53 more true causes
        are recovered; on Reuters headlines (K = 50) +0.6 to +1.0 nats per
        document and +1.2 to +4.9 points of exact match; on binarized MNIST
        (K = 50) +4.7 to +9.8 nats per image, accuracy -0.9 to +0.7 points;
        on Reuters bodies and R8 (K = 100 and 150) +1.5 to +3.5 nats per
        document with ACP and -0.8 to +1.0 with AVI, accuracy -0.9 to +1.0
        points; on four corpora with a vocabulary built from raw Reuters text
        (K = 50 and 100, 32 fits) higher in 29 fits (-1.0 to +6.1), but the
        features classify worse on the smallest: -2.1 to -9.9 points on 817
        documents of 24 topics, -4.0 to +2.3 on 771 long documents of 4
        topics (+1.0 and +0.2 points on average on the two larger corpora).
        A better model of the words is not always a better classifier.
        On Reuters bodies and R8 fewer causes keep a prior above 0.01 (ACP:
        72 to 82 of 100 or 150, against 85 to 135): once the frequent causes
        explain the documents well, the likelihood switches the rare ones
        off, so at K = 150 a fit can warn that more than half of them are
        unused. And on few, overlapping patterns (the 8 patterns of 64
        pixels of the test suite, K = 8, 6 seeds) 1 run of 6 recovers all of
        them, against 3 with "data". For these reasons it is not the
        default; see the user guide,
        "Initialization and restarts" and "Unused causes".
    hidden_layer_sizes : array-like of int, default=(100,)
        Sizes of the encoder's hidden layers (at least one layer); not used
        by "svi" and "jj". The first layer and the "acp" head cost O(H) per
        active feature of a row whatever ``n_components`` is: on long
        documents with ``n_components`` of 50 or less, ``(n_components,)``
        makes an "acp" fit 1.1 to 2.5 times faster for about the same test
        ELBO and features on eight corpora, though not on every corpus (a
        small one of 771 long documents lost 1.1 points of accuracy on
        average); see the User Guide, "Small K and the encoder's width".
        "avi" loses test ELBO with a narrower encoder.
    activation : {"relu", "tanh"}, default="relu"
        Activation of the encoder's hidden layers.
    n_mc_samples : int, default=3
        Monte Carlo samples of z per row and step: relaxed samples in
        training (M in [1]_, who use 10), exact samples of the local steps
        ("svi", and the refinement of "acp"/"avi"). 3 costs 20% less per
        epoch than 10 and learns as well per second (see the User Guide).
    temperature : float, default=0.5
        Initial temperature tau of the binary Concrete relaxation.
    min_temperature : float, default=0.2
        Floor of the temperature. The temperature at epoch t (counted from 0
        over all calls to ``fit``/``partial_fit`` since the last ``fit``) is
        ``max(min_temperature, temperature * exp(-temperature_decay * t))``.
    temperature_decay : float, default=0.05
        Exponential decay rate of the temperature per epoch.
    batch_size : int or "auto", default="auto"
        Rows per minibatch (clipped to the number of rows). "auto" is
        ``min(256, max(32, n_samples // 16))``: 256 on corpora of 4,096 rows
        or more, and at least 16 minibatches (Adam steps) per epoch on
        smaller ones, so that the default 10 epochs take at least 160 steps
        (on 880 documents of 60 words, K = 20: ACP accuracy 0.878 with
        batches of 256, 0.919 with "auto").
    learning_rate : float, default=3e-2
        Step size of Adam. A ``warm_start`` fit or a later ``partial_fit``
        call uses the value set now (with the Adam moments of the fit before,
        so lowering it continues the same run with smaller steps).
    max_iter : int, default=10
        Number of epochs (passes over the training data), as the 10 passes
        of :class:`~sklearn.decomposition.LatentDirichletAllocation`: with the
        default ``tol=None`` a fixed budget, without a convergence test. The
        posterior features are as good as LDA's after a few epochs; the ELBO
        keeps improving for tens of epochs, so raise ``max_iter`` (with
        ``early_stopping=True``) for a better density model.
    n_init : int, default=1
        Number of initializations. The run with the highest final training
        ELBO (``elbo_``) is kept, as in :class:`~sklearn.mixture.GaussianMixture`.
        Like every gradient-trained latent variable model, the noisy-OR model
        has local optima (for example two causes merged into one); restarts
        are the standard remedy.
    tol : float or None, default=None
        Tolerance in nats per row. Training stops when the monitored ELBO
        (the epoch's training ELBO, or the validation ELBO when
        early stopping is used) has not improved on its best value by more
        than ``tol`` for ``n_iter_no_change`` consecutive epochs, and a
        ``ConvergenceWarning`` is issued if that does not happen within
        ``max_iter`` epochs. None (the default, as LDA's passes and
        :class:`~sklearn.linear_model.SGDClassifier` with ``tol=None``): no
        convergence test, ``max_iter`` epochs are run and ``converged_`` is
        False, except that with ``early_stopping=True`` training stops when
        the validation ELBO has not improved on its best for
        ``n_iter_no_change`` epochs (a tolerance of 0). The training ELBO
        improves by more than 1e-3 nats per row per epoch for tens of epochs
        on the corpora of the user guide, so a float ``tol`` with the default
        10 epochs only adds the warning.
    n_iter_no_change : int, default=10
        Number of epochs without improvement before stopping (not used with
        ``tol=None`` without early stopping).
    warm_start : bool, default=False
        If True, :meth:`fit` continues from the fitted model (parameters,
        optimizer state, temperature schedule) instead of initializing;
        ``n_init`` is then ignored. With "acp" and "avi", 2 epochs and a warm
        fit of 2 more are the 4 epochs of one fit, to the last digit. "svi"
        and "jj" keep the training rows' local variational parameters only
        during a fit (kept in the model, they would make it grow with the
        training set), so a warm fit starts them again from the prior and
        its epochs differ slightly from those of one longer fit.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows, monitor their true ELBO
        (``n_elbo_samples`` discrete samples) after every epoch, stop when it
        has not improved by ``tol`` (0 with ``tol=None``) for
        ``n_iter_no_change`` epochs, and keep
        the parameters of the best epoch. Measured on Reuters headlines (5048
        documents, 60 epochs, seed 0) it raises the held-out ELBO by 0.08
        nats per document at K = 50 and 0.23 at K = 150, where the model
        overfits more. Off by default, so that ``fit`` learns from all the
        rows within the default budget of 10 epochs (the validation ELBO of
        every epoch costs about half an epoch); use it with a larger
        ``max_iter``.
    validation_fraction : float, default=0.1
        Fraction of rows held out when early stopping is used.
    binarize : float or None, default=0.0
        Values of X strictly greater than ``binarize`` count as 1, the others
        as 0 (as in :class:`~sklearn.naive_bayes.BernoulliNB`), so counts or
        tf-idf weights become presence/absence. With ``None``, X must contain
        only 0 and 1. Negative values are always an error.
    n_local_steps : int, default=5
        "svi": natural-gradient steps on the logits of a minibatch's rows
        each time ``fit`` visits them (from where the previous visit left
        them; from the prior on the first visit and in ``partial_fit``, which
        then takes ``n_transform_steps``). "jj": E-step sweeps per row and EM
        iteration. Not used by the amortized methods.
    n_transform_steps : int, default=50
        "svi" and "jj": maximal number of local steps (E-step sweeps) on a
        new row in :meth:`transform`, :meth:`score` and :meth:`score_samples`
        (a row stops when no logit moves by more than 1e-4, or for "jj" when
        the bound gains less than 1e-10 relative); "svi" uses
        ``n_mc_samples`` common random numbers fixed at fit time. "jj"
        starts a new row where the "svi" steps end (with the Jensen weights
        optimal for that q), then runs the E-step sweeps, which never lower
        its bound. The result is deterministic and does not depend on the
        other rows.
    n_refine_steps : int, default=5
        "acp" and "avi": local mean-field steps (those of "svi", with
        ``n_mc_samples`` common random numbers fixed at fit time) that
        :meth:`transform`, :meth:`score` and :meth:`score_samples` take from
        the encoder's logits of every row (semi-amortized inference); a row
        keeps them only if they raise its ELBO (estimated with
        ``n_elbo_samples`` common samples independent of those of
        :meth:`score_samples`). 0 gives the encoder's output alone. Measured
        on Reuters bodies and R8 (see the User Guide) they raise the test
        ELBO by 2 to 7 nats per document, most for "avi". Not used by "svi"
        and "jj"; in training see ``n_fit_refine_steps``.
    n_fit_refine_steps : int or "auto", default="auto"
        "acp" and "avi": local mean-field steps (those of "svi", with fresh
        Monte Carlo samples) that ``fit`` takes from the encoder's logits of
        every minibatch row (semi-amortized training [6]_ [7]_). The weights
        theta, the leak and the priors then take the gradient of the
        relaxed ELBO at the refined logits, the encoder the gradient at its
        own logits (and with "acp" theta and the priors also their share
        through the encoder), so that the model is fitted to better
        posteriors than the encoder alone gives and does not co-adapt to
        the encoder's limits. 0 is plain amortized training; "auto" is 1
        for "avi" and 0 for "acp"; "svi" and "jj" ignore it; a negative
        value raises a ``ValueError``. Each step costs about one pass of the
        gradient kernel. Measured with 1 step (User Guide, "Semi-amortized
        training"; seeds 0 and 1): with "avi" on Reuters bodies and R8 at
        K = 100 and 150, 86% to 96% of the causes end above a prior of 0.01
        (75% to 89% with 0), 7 to 22 more on in at least 10 training
        documents, test ELBO 0.5 to 1.3 nats per document lower, accuracy
        -1.0 to +0.8 points; on seven other data sets (28 fits) the test
        ELBO rises in 24 (mean +1.1 nats) and the accuracy in 19 (mean +0.8
        points); fits take 1.2 to 2.5 times as long (median 1.7). With
        "avi" it is the default together with ``free_bits=0.02``, which
        takes the share of causes in use to 92% to 100% (User Guide,
        "Unused causes"). With "acp" the counts rise (100% at K = 100 and
        150) but the test ELBO falls by 0.6 to 1.4 nats, and ACP keeps 94%
        to 100% without it.
    transform_output : {"logit", "probability"}, default="logit"
        What :meth:`transform` returns: the posterior logits
        :math:`\operatorname{logit} q(z_k = 1 \mid x)` or the probabilities
        :math:`q(z_k = 1 \mid x)`. On documents longer than a headline the
        posterior is confident (logits of -10 to -40), and the probabilities
        are 0 or 1 to double precision: a linear classifier on the logits is
        4 to 5 points more accurate (see the User Guide). The logits are
        computed directly, never as ``logit(expit(.))``.
    split_moves : bool, default=False
        "acp" only: after each of the first 80% of the ``max_iter`` epochs,
        try to split the most used causes in two, each into the slot of the
        least used cause, and keep a split only if it raises the true ELBO of
        a subsample of the training rows (a split-merge step with an
        accept/reject rule; Ueda et al., 2000; Hughes, Kim and Sudderth,
        2015). It separates causes that merged two groups of documents with
        different words, a local optimum that gradient steps do not leave.
        Measured (User Guide, "Split moves"; seeds 0 and 1): on synthetic
        documents whose 50 or 100 causes are equally frequent it recovers 6
        to 14 more true causes and raises the test ELBO by 2.4 to 12.5 nats
        per document; with Zipf-distributed cause frequencies it lowers the
        test ELBO by 2.4 to 4.7; on Reuters bodies and R8 (K = 100, 150) the
        test ELBO changes by -0.07 to +0.23 and the features' accuracy by
        -0.007 to +0.002; fit times change by -12% to +32% (median +7%).
        Off by default; compare both on held-out data (``score`` is the
        ELBO), for example with :class:`~sklearn.model_selection.GridSearchCV`.
    prior_smoothing : float, default=0.003
        Additive smoothing of the causes' priors :math:`\mu_k`, in
        pseudo-documents per document: ``fit`` maximizes the ELBO plus
        ``prior_smoothing`` :math:`\times \sum_k \log \mu_k` per document,
        the MAP estimate of the priors under a
        :math:`\mathrm{Beta}(1 + a N, 1)` prior with :math:`a` =
        ``prior_smoothing`` and :math:`N` documents. Each cause is counted as
        on in an extra :math:`a N` documents, so its prior's optimum is
        :math:`(\bar q_k + a) / (1 + a)`, at least :math:`a / (1 + a)`
        ("jj" sets the prior to that optimum in closed form at every M-step;
        the gradient methods move towards it). A negative value raises a
        ``ValueError``. ``elbo_``, :meth:`score` and the
        validation ELBO of ``early_stopping`` are the ELBO alone. 0 is
        maximum likelihood, whose priors of rare causes fall below 0.01 on
        large corpora at K = 100 or more (User Guide, "Unused causes").
        Measured (User Guide, "Smoothing the priors"; Reuters bodies and R8,
        K = 100 and 150, seeds 0 and 1, 8 fits a method): with the default
        0.003, ACP keeps 94 to 100% of the causes above a prior of 0.01
        (with 0.0: 82 to 97%) and AVI 75 to 89% (53 to 72%), for a test ELBO
        0.35 nats per document lower at most (mean 0.1); the features'
        accuracy changes by -0.6 to +0.7 points. A cause must still be on in
        about 0.7% of the documents to pass 0.01, so the count stays a
        measure of use. It costs more where every cause is real (synthetic
        documents: up to 2.5 nats per document with ACP at K = 100); set
        0.0 for the maximum-likelihood fit and compare with :meth:`score`.
        Values near 0.01 put the floor :math:`a / (1 + a)` at 0.01 itself,
        so every cause passes that threshold whether used or not. With
        "avi", 0.007 takes the prior count to 98-100% but the causes on
        (q > 1/2) in at least 10 training documents by only 1 to 5 (User
        Guide, "Smoothing the priors": it raises the priors, not the use).
    free_bits : float or "auto", default="auto"
        Free bits (a one-sided form of [5]_), in nats per document and
        cause, for "acp" and "avi" ("svi" and "jj" ignore it). In ``fit``,
        for a cause whose
        :math:`\mathrm{KL}(\mathrm{Bern}(q_k) \| \mathrm{Bern}(\mu_k))`,
        averaged over the rows of a minibatch, is below ``free_bits``, the
        posterior logits (the encoder, and for "acp" theta through them) get
        no gradient from the part of that KL term that pulls a logit down
        towards the prior's: switching the cause on costs no KL, while the
        pull up towards the prior stays. The prior :math:`\mu_k` keeps its
        gradient, so it still follows the posteriors. This counters the
        amortized model's tendency to leave causes unused (User Guide,
        "Free bits"). 0 trains on the ELBO itself; "auto" is 0.02 for "avi"
        and 0 for "acp"; ``elbo_``, :meth:`score` and the validation ELBO of
        ``early_stopping`` are always the ELBO. Measured with "avi" and
        plain amortized training (``n_fit_refine_steps=0``; Reuters bodies
        and R8, K = 100 and 150, seeds 0 and 1): 0.02 keeps 94% to 99% of
        the causes above a prior of 0.01 (75% to 89% with 0) and puts 5 to
        14 more to work, for a test ELBO 0.11 to 0.85 nats per document
        lower and the features' accuracy -0.7 to +0.4 points; on seven
        other data sets it lowers the accuracy in 15 of 28 fits (mean -0.3
        points). Together with 1 semi-amortized step (the "avi" default)
        it keeps 92% to 100% of the causes in use on the bodies and R8 at
        K = 50 to 150 (seeds 0-2); on the seven other data sets, against
        plain amortized training, the accuracy rises in 16 of 28 fits (mean
        +0.4 points, -3.7 to +5.6) and the test ELBO in 20 (mean +1.1 nats;
        User Guide, "Unused causes"). A negative value raises a
        ``ValueError``.
    n_elbo_samples : int, default=100
        Exact discrete samples of q per row used to estimate the ELBO: by
        :meth:`score`, :meth:`score_samples`, :meth:`elbo`, ``elbo_`` and the
        validation ELBO of ``early_stopping`` (100 in [1]_). Called
        ``n_score_samples`` before version 0.2.
    random_state : int, RandomState instance or None, default=None
        Controls the initialization, the minibatch order, the Monte Carlo
        noise and the common random numbers of :meth:`score_samples`. Pass an
        int for reproducible results. See :term:`Glossary <random_state>`.
    verbose : int, default=0
        If positive, print the training ELBO (and the validation ELBO with
        early stopping) and the elapsed time after every epoch, in the format
        shared by the package's estimators.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Weights theta_ik >= 0 of the causes (``components_[k, i]`` is
        theta_ik of [1]_); a read-only view of the fitted weights.
    leak_ : ndarray of shape (n_features,)
        Leak weights theta_i0 >= 0.
    prior_ : ndarray of shape (n_components,)
        Prior probabilities mu_k of the causes.
    n_active_components_ : int
        Number of causes in use: with a prior above 0.01, the count that
        :class:`~skbinvi.UnusedLatentWarning` reports when fewer than half
        are in use (User Guide, "Unused causes"). The warning about *empty*
        causes counts those above its own floor (a prior of 0.001, or 1 /
        n_samples between 100 and 1,000 rows, or 0.01 below 100 rows, so
        that it never counts fewer than this) and names this count beside
        it. Updated by :meth:`partial_fit` too.
    elbo_ : float
        True ELBO of the training rows at the end of :meth:`fit`, nats per
        row: equal to ``score`` (and :meth:`elbo`) of the rows trained on
        (without the validation rows when early stopping is used; for the
        kept run when ``n_init > 1``; not updated by :meth:`partial_fit`).
    elbo_history_ : ndarray of shape (`n_iter_`,)
        Mean true ELBO per training row in nats for every epoch, estimated
        along the way with one exact discrete sample of q per row and step
        (an unbiased estimate of the objective that :meth:`score` reports,
        with the parameters moving during the epoch). For "jj", the mean
        Jaakkola-Jordan bound per row after every EM iteration, which EM
        maximizes (non-decreasing, below the true ELBO).
    validation_scores_ : ndarray of shape (`n_iter_`,) or None
        Validation ELBO (nats per row) after every epoch when early stopping
        was used, else None; NaN for epochs without one (``partial_fit``
        calls, and a ``warm_start`` history from before early stopping).
    best_validation_score_ : float or None
        Best value of ``validation_scores_``, else None.
    n_iter_ : int
        Number of epochs run.
    converged_ : bool
        Whether the stopping rule (``tol``, ``n_iter_no_change``) was met
        before ``max_iter`` epochs; always False with ``tol=None`` and no
        early stopping (a fixed budget).
    encoder_coefs_ : list of ndarray
        Encoder weights: the hidden layers, shape (fan_in, fan_out) each, then
        the output layer, shape (hidden_layer_sizes[-1], n_components) for
        "avi", or (n_features, hidden_layer_sizes[-1]) for "acp" (stored
        transposed so that the rows of active features are contiguous).
    encoder_intercepts_ : list of ndarray
        Encoder intercepts, one per layer (the "acp" output layer has one per
        feature). Both lists are empty for "svi", which has no encoder.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    sklearn.decomposition.LatentDirichletAllocation : Topic model of counts.
    sklearn.neural_network.BernoulliRBM : Binary latent features with an
        undirected model.

    Notes
    -----
    **Cost.** With the identity :math:`\sum_{i: x_i=0} \theta_{ik} =
    \sum_i \theta_{ik} - \sum_{i: x_i=1} \theta_{ik}`, the ELBO of a row and
    its gradient cost O(nnz(x) K M), not O(n_features K). The ACP encoder
    evaluates psi only at the active features, and a minibatch updates only
    the parameter rows of the features active in it (theta, the leak, the
    encoder's per-feature layers; lazy Adam). The gradient part that every
    feature's theta and leak receive is given to the other rows, summed
    exactly, every few minibatches and at the end of every epoch, so an epoch
    costs O(nnz K M) plus O(n_features K) (see the User Guide).

    **Threads.** Large passes (the gradient kernels, the true ELBO and the
    local steps, the encoder, the Adam sweeps) are split between threads,
    as many as the environment variable ``NUMBA_NUM_THREADS`` (by default
    the number of CPUs; joblib's worker processes lower it). The results
    are the same to the last bit with any number of threads, and a process
    that fitted a model can still ``fork``.

    **Units.** :meth:`score_samples` returns the ELBO of each row in nats;
    :meth:`score` its mean (nats per row). Both use ``n_elbo_samples`` exact
    samples of q with common random numbers fixed at fit time, so they are
    deterministic and the value of a row does not depend on the other rows.

    **Parametrization.** theta = softplus(a), theta_0 = softplus(b) and
    mu = sigmoid(c); Adam works on a, b, c and the encoder weights.

    **Printed-equation errors.** Eq. 4 of the supplement of [1]_ drops an
    exp inside the bracket; the posterior (Eq. 5), used here, is right.

    References
    ----------
    .. [1] Y. Yan, M. Ailem, F. Sha, "Amortized Inference of Variational
       Bounds for Learning Noisy-OR", AISTATS 2020, PMLR 108:3632-3641.
    .. [2] E. Jang, S. Gu, B. Poole, "Categorical Reparameterization with
       Gumbel-Softmax", ICLR 2017.
    .. [3] T. Jaakkola, M. Jordan, "Variational probabilistic inference and
       the QMR-DT network", JAIR 10, 1999.
    .. [4] T. Singliar, M. Hauskrecht, "Noisy-OR component analysis and its
       application to link analysis", JMLR 7, 2006.
    .. [5] D. P. Kingma, T. Salimans, R. Jozefowicz, X. Chen, I. Sutskever,
       M. Welling, "Improved Variational Inference with Inverse
       Autoregressive Flow", NeurIPS 2016 (the "free bits" objective of
       its appendix).
    .. [6] R. G. Krishnan, D. Liang, M. D. Hoffman, "On the challenges of
       learning with inference networks on sparse, high-dimensional data",
       AISTATS 2018, PMLR 84:143-151.
    .. [7] Y. Kim, S. Wiseman, A. C. Miller, D. Sontag, A. M. Rush,
       "Semi-Amortized Variational Autoencoders", ICML 2018.

    Examples
    --------
    >>> from skbinvi import NoisyORFactorizer
    >>> from skbinvi.datasets import make_noisy_or
    >>> X, truth = make_noisy_or(300, 40, 4, random_state=0)
    >>> model = NoisyORFactorizer(n_components=4, max_iter=20, random_state=0)
    >>> logits = model.fit_transform(X)  # posterior logits of the 4 causes
    >>> logits.shape
    (300, 4)
    >>> Q = model.set_params(transform_output="probability").transform(X)
    >>> bool(((Q >= 0) & (Q <= 1)).all())
    True
    """

    _structural_params = ("n_components", "inference", "hidden_layer_sizes")

    def _same_structure(self, name, now, fitted):
        if name == "hidden_layer_sizes" and self._fitted_structure.get(
                "inference") in ("svi", "jj"):
            return True  # no encoder: the layer sizes shape nothing
        return super()._same_structure(name, now, fitted)

    _parameter_constraints: dict = {
        **FIT_LOOP_CONSTRAINTS,
        "n_components": [IntInterval(1, None, closed="left")],
        "inference": [StrOptions({"acp", "avi", "svi", "jj"})],
        "init": [StrOptions({"data", "k-means++", "cooccurrence", "random"})],
        "hidden_layer_sizes": ["array-like", IntInterval(1, None, closed="left")],
        "activation": [StrOptions({"relu", "tanh"})],
        "n_mc_samples": [IntInterval(1, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "min_temperature": [Interval(Real, 0, None, closed="neither")],
        "temperature_decay": [Interval(Real, 0, None, closed="left")],
        "batch_size": [IntInterval(1, None, closed="left"),
                       StrOptions({"auto"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "binarize": [None, Interval(Real, 0, None, closed="left")],
        "n_local_steps": [IntInterval(1, None, closed="left")],
        "n_transform_steps": [IntInterval(1, None, closed="left")],
        "n_refine_steps": [IntInterval(0, None, closed="left")],
        "n_fit_refine_steps": [IntInterval(0, None, closed="left"),
                               StrOptions({"auto"})],
        "transform_output": [StrOptions({"logit", "probability"})],
        "split_moves": ["boolean"],
        "prior_smoothing": [Interval(Real, 0, None, closed="left")],
        "free_bits": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "n_elbo_samples": [IntInterval(1, None, closed="left")],
    }

    def __init__(
        self,
        n_components=50,
        *,
        inference="acp",
        init="data",
        hidden_layer_sizes=(100,),
        activation="relu",
        n_mc_samples=3,
        temperature=0.5,
        min_temperature=0.2,
        temperature_decay=0.05,
        batch_size="auto",
        learning_rate=3e-2,
        max_iter=10,
        tol=None,
        n_iter_no_change=10,
        n_init=1,
        warm_start=False,
        early_stopping=False,
        validation_fraction=0.1,
        binarize=0.0,
        n_local_steps=5,
        n_transform_steps=50,
        n_refine_steps=5,
        n_fit_refine_steps="auto",
        transform_output="logit",
        split_moves=False,
        prior_smoothing=0.003,
        free_bits="auto",
        n_elbo_samples=100,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.inference = inference
        self.init = init
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.n_mc_samples = n_mc_samples
        self.temperature = temperature
        self.min_temperature = min_temperature
        self.temperature_decay = temperature_decay
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.n_init = n_init
        self.warm_start = warm_start
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.binarize = binarize
        self.n_local_steps = n_local_steps
        self.n_transform_steps = n_transform_steps
        self.n_refine_steps = n_refine_steps
        self.n_fit_refine_steps = n_fit_refine_steps
        self.transform_output = transform_output
        self.split_moves = split_moves
        self.prior_smoothing = prior_smoothing
        self.free_bits = free_bits
        self.n_elbo_samples = n_elbo_samples
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _check_X(self, X, *, reset):
        X = validate_data(
            self, X, reset=reset, accept_sparse="csr", dtype=np.float64
        )
        return check_binary(X, binarize=self.binarize, whom=type(self).__name__)

    def _hidden_sizes(self):
        sizes = np.atleast_1d(np.asarray(self.hidden_layer_sizes))
        if (
            sizes.ndim != 1
            or sizes.size == 0
            or not np.issubdtype(sizes.dtype, np.integer)
            or np.any(sizes < 1)
        ):
            raise ValueError(
                "hidden_layer_sizes must be a non-empty sequence of positive "
                f"integers; got {self.hidden_layer_sizes!r}."
            )
        return [int(s) for s in sizes]

    # ------------------------------------------------------------------- init
    def _initialize(self, X, y, rng):
        """Set the initial parameters from the first training data X (binary CSR)."""
        n_samples, n_features = X.shape
        K = self.n_components
        # the encoder's layers: not used (nor checked) by "svi" and "jj"
        sizes = self._hidden_sizes() if self.inference in ("acp", "avi") else []
        # Leak: the marginal frequency of each feature, as if no cause were on.
        freq = np.asarray(X.sum(axis=0)).ravel() / n_samples
        freq = np.clip(freq, 1.0 / (n_samples + 1), 0.5)
        self._leak_raw = _softplus_inverse(-np.log1p(-freq))
        # Causes: small random weights with column sums of order one, so that
        # q is neither saturated on nor off for the first rows; with
        # init="data", cause k also starts with weight min(0.3, 3 / m) on the m
        # active features of a random training row (a seed, as k-means seeds on
        # data points; see _SEED_EVIDENCE); with init="k-means++" the seed
        # rows are chosen by k-means++ (_spread_seeds); with
        # init="cooccurrence" each cause starts on the features that come with
        # one seed feature (_cooccurrence_seeds).
        theta0 = rng.uniform(0.5, 1.5, size=(n_features, K)) / n_features
        if self.init == "data":
            seeds = rng.choice(n_samples, size=K, replace=n_samples < K)
            theta0 += _seed_weights(X, seeds)
        elif self.init == "k-means++":
            theta0 += _seed_weights(X, _spread_seeds(X, K, rng))
        elif self.init == "cooccurrence":
            theta0 += _cooccurrence_seeds(X, K, rng)
        self._theta_raw = _softplus_inverse(theta0)
        self._logit_prior = np.full(K, logit(min(0.5, 5.0 / K) if K > 1 else 0.5))
        fan_in = [n_features] + sizes[:-1] if sizes else []  # no encoder: []
        self.encoder_coefs_, self.encoder_intercepts_ = [], []
        for a, b in zip(fan_in, sizes, strict=True):
            coef, intercept = _encoder.init_layer(a, b, rng)
            self.encoder_coefs_.append(coef)
            self.encoder_intercepts_.append(intercept)
        if self.inference == "avi":
            coef, intercept = _encoder.init_layer(sizes[-1], K, rng)
            # q starts near the prior, as the ACP logits do
            intercept[:] = self._logit_prior
        elif self.inference == "acp":
            coef, intercept = _encoder.init_layer(sizes[-1], n_features, rng)
            coef = np.ascontiguousarray(coef.T)
            # psi starts near 1 (softplus(0.55) = 1): the neutral dual value.
            intercept = np.full(n_features, 0.55)
        if self.inference in ("acp", "avi"):
            self.encoder_coefs_.append(coef)
            self.encoder_intercepts_.append(intercept)
        # common random numbers of the local optimization of new rows ("svi")
        # and of the refinement of the encoder's output ("acp", "avi")
        self._local_uniforms = rng.random_sample((1, self.n_mc_samples, K))
        self._local_logits = self._jj_weights = None
        self._theta, self._theta_slope = np.empty_like(theta0), np.empty_like(theta0)
        self._leak, self._leak_slope = np.empty(n_features), np.empty(n_features)
        self._colsum, self._leak_sum = np.empty(K), np.empty(1)
        self._sync_constrained()
        self._optimizer = Adam(self._parameters(), learning_rate=self.learning_rate)
        self._last_update = np.zeros(n_features, dtype=np.int64)
        # scratch of _kernels.compact_columns (-1 everywhere between calls)
        self._column_marker = np.full(n_features, -1, dtype=np.int64)
        self._score_uniforms = rng.random_sample((self.n_elbo_samples, K))
        # common random numbers of the safeguard of the refinement (_refine)
        self._safeguard_uniforms = rng.random_sample((self.n_elbo_samples, K))
        self._epoch = 0

    def _parameters(self):
        """The arrays Adam updates, in the order of :meth:`_batch_gradients`."""
        return [
            self._theta_raw,
            self._leak_raw,
            self._logit_prior,
            *self.encoder_coefs_,
            *self.encoder_intercepts_,
        ]

    def _row_parameters(self):
        """Positions in :meth:`_parameters` of the arrays with one row per feature.

        Returns the softplus-parametrized ones (theta, leak) and the others
        (first encoder layer; with "acp" also the output layer and its
        intercepts).
        """
        n_layers = len(self.encoder_coefs_)
        if self.inference in ("svi", "jj"):
            return [0, 1], []
        others = [3]
        if self.inference == "acp":
            others += [2 + n_layers, 2 + 2 * n_layers]
        return [0, 1], others

    def _sync_constrained(self):
        """Recompute theta, the leak, their slopes and column sums from the raw
        parameters.

        O(n_features K); needed after the raw parameters are set directly
        (initialization, restoring the best epoch, tests).
        """
        for raw, value, slope in ((self._theta_raw, self._theta, self._theta_slope),
                                  (self._leak_raw, self._leak, self._leak_slope)):
            _kernels.softplus_and_slope(raw.reshape(-1), value.reshape(-1),
                                        slope.reshape(-1))
        self._sync_column_sums()

    def _set_public_parameters(self):
        self.leak_ = self._leak.copy()
        self.prior_ = expit(self._logit_prior)

    # --------------------------------------------------------------- encoder
    def _encode(self, X, indptr, indices, theta, head=None):
        """Posterior logits for a binary CSR batch, and what backprop needs.

        ``indptr``, ``indices`` are the int64 CSR arrays of X, or of X with
        its columns renumbered to the rows of compact arrays: ``theta`` and
        ``head`` (the ACP output layer's weights and intercepts, by default
        the full ones) are indexed by ``indices``. The hidden layers always
        read X itself. Returns ``logit_q`` (B, K) and a cache tuple.
        """
        n_hidden = len(self.encoder_coefs_) - 1
        hidden = _encoder.forward(
            _encoder.normalize_rows(X, indptr),
            self.encoder_coefs_[:n_hidden],
            self.encoder_intercepts_[:n_hidden],
            self.activation,
        )
        if self.inference == "avi":
            logits = hidden[-1] @ self.encoder_coefs_[-1] + self.encoder_intercepts_[-1]
            return logits, (hidden, None, None)
        coef_out, intercept_out = head or (self.encoder_coefs_[-1],
                                           self.encoder_intercepts_[-1])
        pre = np.empty(indices.shape[0])
        psi = np.empty(indices.shape[0])
        _kernels.acp_psi_rows(indptr, indices, hidden[-1], coef_out, intercept_out, pre,
                              psi)
        logit_q = np.empty((X.shape[0], self.n_components))
        _kernels.acp_logits_rows(indptr, indices, psi, theta, self._colsum,
                                 self._logit_prior, logit_q)
        return logit_q, (hidden, pre, psi)

    def _batch_columns(self, X):
        """The compact columns of a minibatch: its active features and their rows.

        Returns ``indptr`` (int64), ``features`` (the A active features,
        sorted, int64), ``local`` (the CSR column indices renumbered to
        0..A-1), the rows of theta and the leak of those features, and for
        "acp" the rows of the encoder's output layer (else None).
        """
        indptr = X.indptr.astype(np.int64, copy=False)
        features, local = _kernels.compact_columns(X.indices, self._column_marker)
        head = None
        if self.inference == "acp":
            head = (self.encoder_coefs_[-1][features],
                    self.encoder_intercepts_[-1][features])
        return (indptr, features, local, self._theta[features], self._leak[features],
                head)

    def _amortized_option(self, value, auto):
        """An option of the amortized methods' training: ``auto[inference]``
        when ``value`` is "auto", 0 for "svi" and "jj" (which ignore it)."""
        if self.inference not in ("acp", "avi"):
            return 0
        return auto[self.inference] if value == "auto" else value

    def _fit_refine_steps(self):
        """Local steps per minibatch in training: ``n_fit_refine_steps``
        ("auto": 1 for "avi", 0 for "acp"; 0 for "svi" and "jj")."""
        return self._amortized_option(self.n_fit_refine_steps, _AUTO_FIT_REFINE_STEPS)

    def _free_bits(self):
        """Free bits in nats: ``free_bits`` ("auto": 0.02 for "avi", 0 for
        "acp"; 0 for "svi" and "jj")."""
        return float(self._amortized_option(self.free_bits, _AUTO_FREE_BITS))

    def _batch_gradients(self, X, uniforms, temperature, logit_q=None,
                         refine_uniforms=None):
        """Relaxed ELBO gradients of one minibatch (sum over its rows), row-sparse.

        Only the A features active in the batch get a row of gradient: the
        cost is O(nnz K M + nnz H), independent of n_features.

        Parameters
        ----------
        X : csr_matrix of shape (B, n_features), binary
        uniforms : ndarray of shape (B, n_mc_samples, n_components)
            Uniform draws in (0, 1) for the logistic noise of the relaxed
            samples.
        temperature : float
        logit_q : ndarray of shape (B, n_components), optional
            "svi": the rows' free logits (held fixed; no gradient is returned
            for them). The amortized methods compute them with the encoder.
        refine_uniforms : ndarray of shape (B, n_mc_samples, n_components), optional
            Amortized methods: uniform draws for :meth:`_fit_refine_steps`
            local steps from the encoder's logits (semi-amortized training).
            The encoder then gets the gradient at its own logits, and theta,
            the leak and the prior the gradient at the refined ones; the
            returned ELBOs are those of the refined logits. None (or no
            steps): every gradient at the encoder's logits.

        Returns
        -------
        features : ndarray of shape (A,), int64
            The active features, sorted.
        grads : list of ndarray
            Gradients of the summed relaxed ELBO, in the order of
            :meth:`_parameters`. The arrays with one row per feature (see
            :meth:`_row_parameters`) get only the rows of ``features``
            (shape (A, ...)); theta and the leak get the gradient with respect
            to their value (not the raw parameter), without the dense part.
        g_theta_dense : ndarray of shape (n_components,)
            Dense part of the theta gradient, received by every feature;
            the leak's dense part is ``-B`` for every feature.
        elbo_relaxed, elbo_discrete : ndarray of shape (B,)
            Relaxed ELBO and one-sample true ELBO estimate of every row.
        """
        B = X.shape[0]
        K = self.n_components
        indptr, features, local, theta, leak, head = self._batch_columns(X)
        g_theta = np.empty_like(theta)
        g_leak = np.empty_like(leak)
        g_theta_dense = np.empty(K)
        g_logit_q = np.empty((B, K))
        g_logit_prior = np.empty(K)
        elbo_relaxed = np.empty(B)
        elbo_discrete = np.empty(B)
        model_logit_q = logit_q
        if self.inference != "svi":
            logit_q, (hidden, pre, psi) = self._encode(X, indptr, local, theta, head)
            model_logit_q = logit_q
            n_steps = self._fit_refine_steps() if refine_uniforms is not None else 0
            if n_steps > 0:
                # semi-amortized training: the encoder's gradient at its own
                # logits (the row pass alone), the model's at the refined ones
                _kernels.relaxed_elbo_logit_grad_rows(
                    indptr, local, theta, leak, self._colsum, self._leak_sum[0],
                    logit_q, self._logit_prior, uniforms, temperature, g_logit_q,
                    elbo_relaxed, elbo_discrete)
                model_logit_q = logit_q.copy()
                _kernels.local_optimize_rows(
                    indptr, local, theta, leak, self._colsum, self._logit_prior,
                    refine_uniforms, n_steps, _LOCAL_STEP, 0.0, model_logit_q)
        g_model_logit_q = g_logit_q if model_logit_q is logit_q else np.empty((B, K))
        _kernels.relaxed_elbo_grad_rows(
            indptr, local, theta, leak, self._colsum, self._leak_sum[0],
            model_logit_q, self._logit_prior, uniforms, temperature, g_theta,
            g_leak, g_theta_dense, g_model_logit_q, g_logit_prior, elbo_relaxed,
            elbo_discrete,
        )
        if self.prior_smoothing > 0:
            # d/d logit(mu) of B * a * sum_k log mu_k (the Beta prior's share)
            g_logit_prior += B * self.prior_smoothing * expit(-self._logit_prior)
        if self.inference == "svi":
            grads = [g_theta, g_leak, g_logit_prior]
            return features, grads, g_theta_dense, elbo_relaxed, elbo_discrete
        free_bits = self._free_bits()
        if free_bits > 0:
            _release_free_bits(g_logit_q, logit_q, self._logit_prior, free_bits)
        encoder_grads = self._encoder_backward(
            X, indptr, local, features.shape[0], g_logit_q, (hidden, pre, psi),
            head, theta, g_theta, g_theta_dense, g_logit_prior)
        grads = [g_theta, g_leak, g_logit_prior, *encoder_grads]
        return features, grads, g_theta_dense, elbo_relaxed, elbo_discrete

    def _encoder_backward(self, X, indptr, local, n_active, g_logit_q, cache, head,
                          theta, g_theta, g_theta_dense, g_logit_prior):
        """Back-propagate d/d logit_q of a batch through the encoder.

        ``cache`` and ``head`` are those of :meth:`_encode` on the compact
        columns ``local`` of the ``n_active`` features active in the batch.
        With "acp" the logits also depend on theta and the prior: their share
        is added to ``g_theta``, ``g_theta_dense`` and ``g_logit_prior`` (in
        place). Returns the gradients of the encoder's coefficients then
        intercepts, in the order of :meth:`_parameters` (rows of the active
        features for the per-feature layers).
        """
        hidden, pre, psi = cache
        if self.inference == "avi":
            coef_out = self.encoder_coefs_[-1]
            g_coef_out = hidden[-1].T @ g_logit_q
            g_intercept_out = g_logit_q.sum(axis=0)
            g_hidden = g_logit_q @ coef_out.T
        else:
            coef_out = head[0]
            g_coef_out = np.empty_like(coef_out)
            g_intercept_out = np.empty(coef_out.shape[0])
            g_hidden = np.empty_like(hidden[-1])
            _kernels.acp_backward_rows(
                indptr, local, g_logit_q, psi, pre, theta, hidden[-1], coef_out,
                g_theta, g_theta_dense, g_coef_out, g_intercept_out, g_hidden,
            )
            g_logit_prior += g_logit_q.sum(axis=0)
        n_hidden = len(self.encoder_coefs_) - 1
        # the first layer's gradient X.T @ delta, on the active features only
        X_local = sp.csr_matrix(
            (_encoder.normalize_rows(X, indptr).data, local, indptr),
            shape=(X.shape[0], n_active),
        )
        g_coefs, g_intercepts = _encoder.backward(
            X_local, hidden, self.encoder_coefs_[:n_hidden], g_hidden, self.activation
        )
        return [*g_coefs, g_coef_out, *g_intercepts, g_intercept_out]

    def _full_gradients(self, X, uniforms, temperature, logit_q=None,
                        refine_uniforms=None):
        """Dense gradients of the summed relaxed ELBO with respect to every parameter.

        Same order and shapes as :meth:`_parameters` (raw parameters: the
        softplus slopes applied). O(n_features (K + H)): a reference for the
        row-sparse :meth:`_batch_gradients`, used by the tests.
        """
        features, grads, g_theta_dense, *elbos = self._batch_gradients(
            X, uniforms, temperature, logit_q, refine_uniforms)
        full = []
        softplus_rows, other_rows = self._row_parameters()
        for i, (param, grad) in enumerate(zip(self._parameters(), grads, strict=True)):
            if i in softplus_rows or i in other_rows:
                expanded = np.zeros_like(param)
                expanded[features] = grad
                grad = expanded
            full.append(grad)
        full[0] = (full[0] + g_theta_dense) * self._theta_slope
        full[1] = (full[1] - X.shape[0]) * self._leak_slope
        return full, *elbos

    # --------------------------------------------------------------- training
    def _batch_size(self, n_samples):
        """Rows per minibatch of an epoch over n_samples rows (at most n_samples)."""
        if self.batch_size == "auto":
            return min(256, max(32, n_samples // 16), n_samples)
        return min(self.batch_size, n_samples)

    def _temperature(self):
        tau = self.temperature * np.exp(-self.temperature_decay * self._epoch)
        return max(self.min_temperature, tau)

    def _run_epoch(self, X, rng):
        """One pass over X in shuffled minibatches; returns the mean true ELBO.

        For "jj", one iteration of variational EM instead (:meth:`_em_iteration`).

        At each minibatch Adam updates the small parameters and the rows of
        the per-feature parameters (theta, the leak, the encoder's
        per-feature layers) of the features active in it. The encoder rows of
        the other features have a zero gradient and are skipped (lazy Adam,
        as PyTorch's ``SparseAdam``). Theta and the leak have a dense gradient
        part that every feature receives; the rows not updated get it every
        ``window`` minibatches and at the end of the epoch, as one Adam step
        with the sum of the parts they missed, which is exact because their
        parameters did not move in the meantime (see :func:`_update_window`).
        """
        if self.inference == "jj":
            return self._em_iteration(X)
        n_samples = X.shape[0]
        K = self.n_components
        tau = self._temperature()
        order = rng.permutation(n_samples)
        batch_size = self._batch_size(n_samples)
        n_batches = -(-n_samples // batch_size)
        window = _update_window(self, X.nnz / n_batches, n_batches)
        opt = self._optimizer
        softplus_rows, other_rows = self._row_parameters()
        dense = [i for i in range(len(opt.params))
                 if i not in softplus_rows and i not in other_rows]
        last = self._last_update
        last[:] = 0
        all_rows = np.arange(self._theta.shape[0], dtype=np.int64)
        grad_rows = np.full(self._theta.shape[0], -1, dtype=np.int64)
        # running sums of the dense gradient parts over the window's steps
        delayed_theta = np.zeros((window + 1, K))
        delayed_leak = -np.arange(window + 1, dtype=np.float64)
        now = 0
        row_elbo = np.empty(n_samples)
        refine = self._fit_refine_steps() > 0
        for b, batch in enumerate(gen_batches(n_samples, batch_size)):
            rows = order[batch]
            X_batch = X[rows]
            B = X_batch.shape[0]
            logit_q = None
            if self.inference == "svi":
                logit_q = self._local_step(X_batch, rows, rng)
            uniforms = rng.random_sample((B, self.n_mc_samples, K))
            refine_uniforms = None
            if refine:
                refine_uniforms = rng.random_sample((B, self.n_mc_samples, K))
            features, grads, g_dense, _, elbo_discrete = self._batch_gradients(
                X_batch, uniforms, tau, logit_q, refine_uniforms)
            now += 1
            delayed_theta[now] = delayed_theta[now - 1] + g_dense / B
            opt.tick()
            if now == window or b == n_batches - 1:
                # the end of the window: every row gets its delayed step, the
                # active ones with their gradient, in one pass in row order
                grad_rows[features] = np.arange(features.shape[0])
                self._update_theta_and_leak(all_rows, grads, B, delayed_theta,
                                            delayed_leak, now, grad_rows,
                                            sums_recomputed=True)
                grad_rows[features] = -1
                last[:] = 0
                self._sync_column_sums()
                now = 0
            else:
                self._update_theta_and_leak(features, grads, B, delayed_theta,
                                            delayed_leak, now)
                last[features] = now
            for i in other_rows:
                opt.update_rows(i, features, grads[i] / B)
            for i in dense:
                opt.update(i, grads[i] / B)
            row_elbo[rows] = elbo_discrete
        self._epoch += 1
        self._revive_unused_causes(X, row_elbo, rng)
        if self.split_moves:
            self._split_causes(X, rng)
        return float(row_elbo.mean())

    def _revive_unused_causes(self, X, row_elbo, rng):
        """Re-seed the causes whose prior fell below 0.01, in the first epochs.

        As :class:`~sklearn.cluster.KMeans` relocates empty clusters, and as
        unused codebook vectors are re-initialized in vector-quantized
        autoencoders, an unused cause k is given a fresh start on the rows the
        model explains worst: theta_k (``init="data"``-style, seeded on one of
        the 10% rows with the lowest ELBO of the epoch), the initial prior, zero
        Adam moments, and for "avi" a fresh column of the encoder's output
        layer. Only during the first half of ``max_iter`` epochs, so that a
        revived cause has time to become a real one or to die for good (then
        :meth:`fit` warns). Cost O(n_features (number of revived causes)).
        """
        if self._epoch > self.max_iter // 2:
            return
        dead = np.flatnonzero(self._logit_prior < logit(_DEAD_PRIOR))
        if dead.size == 0:
            return
        n_features, K = self._theta.shape
        worst = np.argsort(row_elbo)[: max(dead.size, X.shape[0] // 10)]
        seeds = rng.choice(worst, size=dead.size, replace=worst.size < dead.size)
        theta = rng.uniform(0.5, 1.5, size=(n_features, dead.size)) / n_features
        theta += _seed_weights(X, seeds)
        self._theta_raw[:, dead] = _softplus_inverse(theta)
        self._logit_prior[dead] = logit(min(0.5, 5.0 / K) if K > 1 else 0.5)
        opt = self._optimizer
        for m in (opt.m, opt.v):
            m[0][:, dead] = 0.0
            m[2][dead] = 0.0
        if self.inference == "avi":
            coef, _ = _encoder.init_layer(self.encoder_coefs_[-1].shape[0],
                                          dead.size, rng)
            self.encoder_coefs_[-1][:, dead] = coef
            self.encoder_intercepts_[-1][dead] = self._logit_prior[dead]
            n_layers = len(self.encoder_coefs_)
            for m in (opt.m, opt.v):
                m[2 + n_layers][:, dead] = 0.0
                m[2 + 2 * n_layers][dead] = 0.0
        self._sync_constrained()

    def _split_causes(self, X, rng):
        """Split moves ("acp"): free the least used causes to split popular ones.

        A cause k that explains two groups of documents with different words
        (two true causes merged into one: a local optimum that gradient steps
        do not leave) is split in two. Its documents (q_k > 1/2 in a subsample
        of ``_SPLIT_ROWS`` training rows) are clustered in two by 2-means
        (:class:`~sklearn.cluster.KMeans`) on its ``_SPLIT_TOP_WORDS``
        heaviest words; the weight theta_dk of each word is shared between k
        and a freed cause j as theta_dk f_c(d) / max_c' f_c'(d), with f_c(d)
        the word's frequency in cluster c, and the prior mu_k in proportion to
        the cluster sizes. The freed cause j is the least used one (lowest
        mean q), so a move discards it.

        A move is kept only if it raises the true ELBO of the subsample
        (Monte Carlo with ``_SPLIT_SAMPLES`` common random numbers) by more
        than ``_SPLIT_MARGIN`` nats per row, computed with the posterior the
        model itself gives after the move: ACP's logits are linear in the
        weights, sum_d (psi_d + 1) theta_dk over the active features, minus
        the column sum, plus logit mu_k, with the encoder's psi unchanged. It
        is scored on the rows where k or j is on with probability above
        sigmoid(-3) before or after the move (at most ``_SPLIT_EVAL_ROWS`` of
        them, scaled up). This is a split-merge step with an accept/reject
        rule on the objective (Ueda et al., Neural Computation 12, 2000, for
        mixtures; Hughes, Kim and Sudderth, AISTATS 2015, for variational
        inference). Up to max(1, K // _SPLIT_SHARE) moves, among as many
        candidate parents (the most used causes), after each of the first
        ``_SPLIT_UNTIL`` of ``max_iter`` epochs and after the re-seeding of
        unused causes; the Adam moments of the moved causes restart at 0.
        The candidates are ranked with one set of common random numbers and
        each accepted move is checked with a second, independent one. Only
        with ``split_moves=True`` and "acp": with AVI the encoder, not the
        weights, gives the posterior, and the split moves tried for it
        (output columns moved apart along the clusters' mean hidden
        activations) lowered the test ELBO.
        Cost per epoch O(_SPLIT_ROWS nnz_per_row (K + H) + K / _SPLIT_SHARE
        _SPLIT_EVAL_ROWS _SPLIT_SAMPLES (nnz_per_row + K)), H the last hidden
        layer.
        """
        # (fit and partial_fit reject split_moves=True without "acp")
        if self.n_components < 2 or self._epoch > _SPLIT_UNTIL * self.max_iter:
            return
        n_samples = X.shape[0]
        K = self.n_components
        n_sub = min(n_samples, _SPLIT_ROWS)
        sub = np.sort(rng.choice(n_samples, size=n_sub, replace=False))
        Xs = X[sub]
        indptr, indices = _csr_arrays(Xs)
        logit_q, (_, _, psi) = self._encode(Xs, indptr, indices, self._theta)
        weighted = sp.csr_matrix((psi + 1.0, Xs.indices, Xs.indptr), shape=Xs.shape)
        theta, colsum = self._theta.copy(), self._colsum.copy()
        logit_prior = self._logit_prior.copy()
        # two independent sets of common random numbers: the candidates are
        # ranked with the first, and the best one is checked with the second,
        # so that the largest of several noisy gains is not taken at face value
        draws = self._safeguard_uniforms
        if draws.shape[0] < 2 * _SPLIT_SAMPLES:
            draws = np.random.RandomState(0).random_sample((2 * _SPLIT_SAMPLES, K))
        rank_uniforms = draws[:_SPLIT_SAMPLES]
        check_uniforms = draws[_SPLIT_SAMPLES: 2 * _SPLIT_SAMPLES]

        def elbo(rows, theta, colsum, logit_prior, logit_q, uniforms):
            out = np.empty(rows.size)
            _kernels.discrete_elbo_rows(*_csr_arrays(Xs[rows]), theta, self._leak,
                                        colsum, self._leak_sum[0], logit_q,
                                        logit_prior, uniforms, out)
            return out

        all_rows = np.arange(n_sub)
        row_elbo = elbo(all_rows, theta, colsum, logit_prior, logit_q, rank_uniforms)
        n_moves = max(1, K // _SPLIT_SHARE)
        order = np.argsort(expit(logit_q).mean(axis=0), kind="stable")
        victims = list(order[:n_moves])
        parents = [k for k in order[::-1] if k not in victims][:n_moves]

        def propose(k):
            on = np.flatnonzero(logit_q[:, k] > 0)
            if on.size > _SPLIT_EVAL_ROWS:
                on = np.sort(rng.choice(on, _SPLIT_EVAL_ROWS, replace=False))
            if on.size < 10:
                return None
            Xon = Xs[on]
            words = np.argsort(-theta[:, k])[:_SPLIT_TOP_WORDS]
            with warnings.catch_warnings():
                # fewer distinct rows than clusters: caught by the size check
                warnings.simplefilter("ignore", ConvergenceWarning)
                labels = KMeans(2, n_init=1, random_state=rng.randint(2**31 - 1)
                                ).fit_predict(Xon[:, words].toarray())
            sizes = np.bincount(labels, minlength=2)
            if sizes.min() < 3:
                return None
            freq = np.vstack([np.asarray(Xon[labels == c].mean(axis=0)).ravel()
                              for c in (0, 1)])
            share = freq / np.maximum(freq.max(axis=0), 1e-300)
            new_theta = theta[:, k, None] * share.T + _SPLIT_FLOOR
            return new_theta, logit(expit(logit_prior[k]) * sizes / sizes.sum())

        def score(j, k, move, uniforms):
            new_theta, new_logit_prior = move
            cols = [k, j]
            # the two causes' logits after the move, on every row
            moved = weighted @ new_theta - new_theta.sum(axis=0) + new_logit_prior
            # rows where either cause is on with probability above sigmoid(-3)
            # before or after the move: on the others the ELBO barely changes
            rows = np.flatnonzero((logit_q[:, cols] > -3.0).any(axis=1)
                                  | (moved > -3.0).any(axis=1))
            scale = 1.0
            if rows.size > _SPLIT_EVAL_ROWS:
                scale = rows.size / _SPLIT_EVAL_ROWS
                rows = np.sort(rng.choice(rows, _SPLIT_EVAL_ROWS, replace=False))
            theta1, colsum1 = theta.copy(), colsum.copy()
            theta1[:, cols] = new_theta
            colsum1[cols] = new_theta.sum(axis=0)
            logit_prior1 = logit_prior.copy()
            logit_prior1[cols] = new_logit_prior
            logit_q1 = logit_q[rows]
            logit_q1[:, cols] = moved[rows]
            after = elbo(rows, theta1, colsum1, logit_prior1, logit_q1, uniforms)
            gain = scale * (after.sum() - row_elbo[rows].sum()) / n_sub
            return gain, rows, after, theta1, colsum1, logit_prior1, logit_q1

        proposals = []
        for k in parents:
            move = propose(k)
            if move is not None:
                gain = score(victims[0], k, move, rank_uniforms)[0]
                proposals.append((gain, k, move))
        proposals.sort(key=lambda p: -p[0])
        moved = []
        row_elbo = elbo(all_rows, theta, colsum, logit_prior, logit_q, check_uniforms)
        for gain, k, move in proposals:
            if gain <= _SPLIT_MARGIN or not victims:
                break
            j = victims[0]
            gain, rows, after, *state = score(j, k, move, check_uniforms)
            if gain <= _SPLIT_MARGIN:
                continue
            victims.pop(0)
            moved += [k, j]
            theta, colsum, logit_prior, logit_q[rows] = state
            row_elbo[rows] = after
        if not moved:
            return
        self._theta_raw[:, moved] = _softplus_inverse(theta[:, moved])
        self._logit_prior[moved] = logit_prior[moved]
        opt = self._optimizer
        for m in (opt.m, opt.v):
            m[0][:, moved] = 0.0
            m[2][moved] = 0.0
        self._sync_constrained()

    def _em_iteration(self, X):
        """"jj": one E-step and one M-step on all of X; returns the bound per row.

        E-step: ``n_local_steps`` coordinate-ascent sweeps per row on q and
        the Jensen weights r, from their values of the previous iteration
        (``_local_logits``, ``_jj_weights``). M-step: theta, the leak and mu
        maximize the summed bound (see :mod:`skbinvi.noisy_or._jaakkola_jordan`). Both
        halves never decrease the bound, so the returned mean is
        non-decreasing over iterations. Cost O(nnz K) per sweep.
        """
        indptr, indices = _csr_arrays(X)
        if self._jj_weights is None:
            self._jj_weights = _jaakkola_jordan.jj_init_r(indptr, indices, self._theta)
        out = np.empty(X.shape[0])
        _jaakkola_jordan.jj_e_step(indptr, indices, self._theta, self._leak,
                      self._colsum, self._leak_sum[0], self._local_logits,
                      self._logit_prior, self._jj_weights, self.n_local_steps, 0.0,
                      out)
        # the leak of a word seen once in n + 1 rows, the clip of the initial
        # leak (_initialize): without it a word absent from X gets leak 1e-10
        # and costs a held-out row about 23 nats
        leak_min = -np.log1p(-1.0 / (X.shape[0] + 1))
        _jaakkola_jordan.jj_m_step(indptr, indices, self._local_logits,
                      self._jj_weights, self._theta, self._leak, self._logit_prior,
                      10, 1e-12, leak_min, self.prior_smoothing)
        # keep the raw (softplus) parameters in step; theta may be exactly 0
        with np.errstate(divide="ignore"):
            self._theta_raw[...] = _softplus_inverse(self._theta)
            self._leak_raw[...] = _softplus_inverse(self._leak)
        self._sync_constrained()
        _jaakkola_jordan.jj_bound(indptr, indices, self._theta, self._leak,
                     self._colsum, self._leak_sum[0], self._local_logits,
                     self._logit_prior, self._jj_weights, out)
        self._epoch += 1
        return float(out.mean())

    def _local_step(self, X, rows, rng):
        """"svi": update and return the logits of the rows ``rows`` of the training set.

        In ``fit`` the logits of the training rows are kept between epochs
        (``_local_logits``) and take ``n_local_steps`` steps per visit; in
        ``partial_fit`` (``_local_logits`` is None) the rows are new and start
        from the prior with ``n_transform_steps`` steps. The Monte Carlo
        samples are fresh at every visit.
        """
        B, K = X.shape[0], self.n_components
        uniforms = rng.random_sample((B, self.n_mc_samples, K))
        if self._local_logits is None:
            logit_q = np.tile(self._logit_prior, (B, 1))
            n_steps = self.n_transform_steps
        else:
            logit_q = self._local_logits[rows]
            n_steps = self.n_local_steps
        indptr, indices = _csr_arrays(X)
        _kernels.local_optimize_rows(indptr, indices, self._theta, self._leak,
                                     self._colsum, self._logit_prior, uniforms, n_steps,
                                     _LOCAL_STEP, 0.0, logit_q)
        if self._local_logits is not None:
            self._local_logits[rows] = logit_q
        return logit_q

    def _update_theta_and_leak(self, rows, grads, B, delayed_theta, delayed_leak, now,
                               grad_rows=None, sums_recomputed=False):
        """The current Adam step on the rows ``rows`` of theta and the leak.

        ``grads[0]``, ``grads[1]`` are the minibatch's (B rows) row-sparse
        gradients; row ``grad_rows[j]`` of them (-1: none; by default j)
        belongs to ``rows[j]``. Each row also gets its delayed dense part
        (see :func:`_update_window`). ``sums_recomputed=True``: the caller
        recomputes the column sums of theta afterwards
        (:meth:`_sync_column_sums`), so a large update may run on threads.
        """
        opt = self._optimizer
        last = self._last_update
        opt.update_softplus_rows(0, rows, grads[0] / B, delayed_theta, last, now,
                                 self._theta, self._theta_slope, self._colsum,
                                 grad_rows, colsum_recomputed=sums_recomputed)
        opt.update_softplus_rows(1, rows, grads[1] / B, delayed_leak, last, now,
                                 self._leak, self._leak_slope, self._leak_sum,
                                 grad_rows)

    def _sync_column_sums(self):
        """Recompute the column sums of theta and the leak's sum exactly (they
        are updated incrementally between the ends of the update windows)."""
        self._colsum[:] = self._theta.sum(axis=0)
        self._leak_sum[0] = self._leak.sum()

    def _posterior_logits(self, X):
        """logit q(z | x) of every row of a binary CSR matrix, deterministic.

        Amortized methods: the encoder's output, refined by up to
        ``n_refine_steps`` local steps (semi-amortized inference; see
        :meth:`_refine`). "svi": up to ``n_transform_steps`` local steps from
        the prior with the common random numbers fixed at initialization,
        each row on its own. "jj": the "svi" steps, then the optimal Jensen
        weights for that q and up to ``n_transform_steps`` E-step sweeps.
        """
        indptr, indices = _csr_arrays(X)
        if self.inference in ("svi", "jj"):
            logit_q = np.tile(self._logit_prior, (X.shape[0], 1))
            _kernels.local_optimize_rows(
                indptr, indices, self._theta, self._leak, self._colsum,
                self._logit_prior, self._local_uniforms, self.n_transform_steps,
                _LOCAL_STEP, _LOCAL_TOL, logit_q,
            )
            if self.inference == "jj":
                # The E-step's fixed point depends on its start. From the
                # Jensen weights that are tight at q = 1 (jj_init_r) it ends
                # far below the training rows' posteriors, which co-evolved
                # with the model (Reuters bodies, K = 20: bound -144.5 nats per
                # document against -111.6 in training). So a new row starts
                # where "svi" ends, with the Jensen weights optimal for that q,
                # and the E-step sweeps raise the bound from there (-110.2).
                weights = _jaakkola_jordan.jj_init_r(indptr, indices, self._theta)
                _jaakkola_jordan.jj_update_r(indptr, indices, self._theta,
                                             self._leak, logit_q, weights)
                _jaakkola_jordan.jj_e_step(
                    indptr, indices, self._theta, self._leak, self._colsum,
                    self._leak_sum[0], logit_q, self._logit_prior, weights,
                    self.n_transform_steps, _JJ_TOL, np.empty(X.shape[0]),
                )
        else:
            with single_threaded_blas():
                logit_q = self._encode(X, indptr, indices, self._theta)[0]
            if self.n_refine_steps > 0:
                self._refine(indptr, indices, logit_q)
        return logit_q

    def _discrete_elbo(self, indptr, indices, logit_q, uniforms):
        out = np.empty(logit_q.shape[0])
        _kernels.discrete_elbo_rows(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._leak_sum[0], logit_q, self._logit_prior, uniforms, out,
        )
        return out

    def _refine(self, indptr, indices, logit_q):
        """Semi-amortized inference: local steps from the encoder's logits, in place.

        Up to ``n_refine_steps`` damped mean-field steps on every row's logits
        (:func:`_kernels.local_optimize`, the "svi" machinery, with the common
        random numbers fixed at fit time), then a safeguard: a row keeps its
        refined logits only if they raise its ELBO estimated with
        ``n_elbo_samples`` common random numbers drawn at fit time,
        independent of those of :meth:`score_samples` (so that the reported
        ELBO has no selection bias). Monte Carlo targets can overshoot a row
        that the encoder already placed near its optimum.
        """
        start = logit_q.copy()
        _kernels.local_optimize_rows(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._logit_prior, self._local_uniforms, self.n_refine_steps,
            _LOCAL_STEP, _LOCAL_TOL, logit_q,
        )
        uniforms = self._safeguard_uniforms
        elbo_start = self._discrete_elbo(indptr, indices, start, uniforms)
        elbo = self._discrete_elbo(indptr, indices, logit_q, uniforms)
        worse = ~(elbo >= elbo_start)
        logit_q[worse] = start[worse]

    def _elbo_rows(self, X, n_samples=None):
        """True ELBO of every row of a binary CSR matrix (nats), deterministic.

        Inside :meth:`fit_transform` the rows' posterior logits are kept
        (``_final_logits``): the last call of a fit is the final ELBO of the
        training rows, and the state of the kept run carries its logits.
        """
        indptr, indices = _csr_arrays(X)
        logit_q = self._posterior_logits(X)
        if getattr(self, "_keep_final_logits", False):
            self._final_logits = logit_q
        uniforms = self._common_uniforms(n_samples or self.n_elbo_samples)
        return self._discrete_elbo(indptr, indices, logit_q, uniforms)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the noisy-OR model and the encoder from binary data.

        The shared fit loop of the package runs the epochs: ``max_iter``,
        ``tol`` with ``n_iter_no_change``, ``early_stopping``, ``n_init`` and
        ``warm_start`` have the same meaning for every estimator (see the
        User Guide).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; binarized as described by ``binarize``.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : object
            Fitted estimator.

        Raises
        ------
        ValueError
            If X is empty, not 2-D, contains NaN or infinity, negative values,
            or (with ``binarize=None``) values other than 0 and 1; if early
            stopping leaves no training or no validation row; if
            ``split_moves=True`` with an inference other than "acp"; if training
            diverges (a non-finite ELBO, for example with a too large
            ``learning_rate``).

        Warns
        -----
        ConvergenceWarning
            If ``max_iter`` epochs ran without meeting the stopping criterion
            (never with ``tol=None`` and no early stopping).
        skbinvi.UnusedLatentWarning
            If more than half of the causes end unused (prior below 0.01), or
            if a cause ends empty: prior below 0.001 (on in fewer than one
            training row in a thousand in expectation), or below 1 / n_samples
            on 100 to 1,000 rows (on in less than one row); below 100 rows
            the floor of an empty cause is the prior of 0.01 of an unused one.
        """
        self._check_split_moves()
        X = self._check_X(X, reset=not (self.warm_start and self._is_initialized()))
        return self._fit_loop(X)

    def _check_split_moves(self):
        if self.split_moves and self.inference != "acp":
            raise ValueError(
                f"{type(self).__name__}: split_moves=True needs inference='acp' "
                f"(got inference={self.inference!r}): the moves are scored with "
                "ACP's posterior, which follows the causes' weights."
            )

    # ------------------------------------------------- hooks of the fit loop
    def _iterate(self, X, y, rng):
        """One epoch (one EM iteration for "jj"); the training ELBO per row."""
        if self.inference in ("svi", "jj") and not getattr(self, "_online", False) and (
            self._local_logits is None or self._local_logits.shape[0] != X.shape[0]
        ):
            # the training rows' logits, kept between epochs
            self._local_logits = np.tile(self._logit_prior, (X.shape[0], 1))
            self._jj_weights = None
        # a warm start or partial_fit continues the moments with the step
        # size set now (the optimizer was made at the first fit)
        self._optimizer.learning_rate = float(self.learning_rate)
        # Minibatch matrices are small: threaded BLAS only adds overhead
        # (3x slower per epoch on 2 busy cores), as in scikit-learn's KMeans.
        with single_threaded_blas():
            value = self._run_epoch(X, rng)
        self._check_parameters_after_epoch()
        return value

    def _check_parameters_after_epoch(self):
        """Raise the divergence error if the epoch's last steps broke the model.

        The value an epoch returns is averaged over its minibatches before
        their updates, so it can stay finite while the last updates leave NaN
        parameters (every output NaN) or, for the gradient methods, a leak
        that underflowed to exactly 0 (log p(x) = -inf for the rows with a
        feature no sampled cause explains). The data start keeps every leak
        positive and a stable run does not drive ``softplus(raw)`` below the
        smallest double, so either is a divergence. O(n_features K).
        """
        arrays = [self._theta, self._leak, self._logit_prior,
                  *self.encoder_coefs_, *self.encoder_intercepts_]
        if any(np.isnan(a).any() for a in arrays):
            problem = "model parameters became NaN"
        elif self.inference != "jj" and not np.all(self._leak > 0):
            problem = "leak of some features underflowed to 0"
        else:
            return
        raise ValueError(
            f"{type(self).__name__}: the {problem} in epoch {self._epoch}: "
            f"training diverged. {self._divergence_hint()}"
        )

    def _elbo_per_sample(self, X, y=None):
        return float(self._elbo_rows(X).mean())

    def fit_transform(self, X, y=None):
        """Fit the model and return the posterior of the training rows.

        Equal to ``fit(X).transform(X)``, but the posterior logits computed
        for the final training ELBO (``elbo_``) are returned instead of being
        computed a second time: with the default semi-amortized inference
        this saves the encoder pass and the refinement of every training row
        (about a fifth of a default fit). With ``early_stopping=True`` the
        final ELBO covers only the training part of X, and the rows are
        transformed afresh.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; binarized as described by ``binarize``.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        features : ndarray of shape (n_samples, n_components), float64
            As :meth:`transform`: logits or probabilities by
            ``transform_output``.

        Raises
        ------
        ValueError
            As :meth:`fit`.
        """
        if self.early_stopping:
            # the final ELBO covers only the training part of X
            return self.fit(X, y).transform(X)
        self._keep_final_logits = True
        try:
            self.fit(X, y)
        finally:
            self.__dict__.pop("_keep_final_logits", None)
        logit_q = self.__dict__.pop("_final_logits")
        if self.transform_output == "probability":
            return expit(logit_q)
        return logit_q

    def _check_elbo_input(self, X, y):
        return self._check_X(X, reset=False), None

    def _divergence_hint(self):
        if self.inference == "jj":
            return "Check the input data (variational EM has no step size)."
        default = inspect.signature(type(self)).parameters["learning_rate"].default
        if self.learning_rate == default:
            return f"Lower learning_rate (now {default}, the default)."
        return (
            f"Lower learning_rate (now {self.learning_rate}); the default is {default}."
        )

    def _after_fit(self, X, y):
        # the training rows' local logits are not part of the model
        self._local_logits = self._jj_weights = None
        self._set_public_parameters()
        self._warn_unused_causes(X.shape[0])

    def _warn_unused_causes(self, n_samples):
        """Set ``n_active_components_`` (causes above a prior of 0.01), and
        warn when more than half the causes end below a prior of 0.01, or
        when any cause is empty: on in fewer than one of a thousand training
        rows in expectation (prior below 0.001), or on fewer than 1,000 rows
        in less than one of the ``n_samples`` rows (prior below 1 /
        n_samples, at most 0.01: below 100 rows every cause is on in less
        than one row at a prior under 1 / n_samples, up to 1 on a single
        row, and an empty cause must not be one counted in use). Not the
        latter in ``partial_fit``: a chunk's rows are not the training set,
        whose size a stream does not know."""
        n_used = int(np.sum(self.prior_ > _DEAD_PRIOR))
        self.n_active_components_ = n_used
        online = getattr(self, "_online", False)
        floor = min(max(_EMPTY_PRIOR, 1.0 / n_samples), _DEAD_PRIOR)
        n_empty = 0 if online else int(np.sum(self.prior_ < floor))
        if n_used < self.n_components / 2:
            # the rows use sum(prior) causes each in expectation, so at most
            # sum(prior) / 0.01 causes can have a prior above 0.01
            per_row = float(self.prior_.sum())
            remedy = (f"The rows use {per_row:.2g} causes each in expectation, "
                      f"room for at most {int(per_row / _DEAD_PRIOR)} above "
                      f"{_DEAD_PRIOR}: lower n_components")
            if self.inference == "acp":
                remedy += "."
            else:
                remedy += (", or use inference='acp' (its posterior, computed from "
                           "the causes' weights, keeps more causes in use) or a "
                           "smaller learning_rate.")
            if self.prior_smoothing == 0:
                remedy += (" To keep rare causes in use at some cost in held-out "
                           "ELBO, set prior_smoothing > 0 (the default is 0.003).")
            if self.inference == "avi" and (self._fit_refine_steps() == 0
                                            or self._free_bits() == 0):
                remedy += (" With 'avi', n_fit_refine_steps='auto' and "
                           "free_bits='auto' (the defaults) keep more causes in "
                           "use.")
            self._warn_unused(n_used, self.n_components, "causes",
                              f"prior > {_DEAD_PRIOR}", remedy)
        elif n_empty > 0:
            # none after the default 10 epochs on Reuters bodies, R8, headlines
            # or MNIST; they appear with more epochs, while the held-out
            # likelihood still rises (bodies, K = 150) or after it has
            # started to fall (R8, K = 100, 40 epochs), and with AVI on many
            # short documents (health news tweets, K = 50; User Guide)
            if floor == _DEAD_PRIOR:
                criterion = (f"prior >= {_DEAD_PRIOR}: below 100 rows the floor 1 / "
                             f"n_samples = {1.0 / n_samples:.3g} of an empty cause "
                             f"is capped at the prior of {_DEAD_PRIOR} of a cause "
                             "in use")
            elif floor > _EMPTY_PRIOR:
                criterion = (f"prior >= 1 / n_samples = {floor:.3g}: on in at least "
                             "one training row in expectation")
            else:
                criterion = (f"prior >= {_EMPTY_PRIOR}: on in at least one training "
                             "row in a thousand in expectation")
            remedy = "The data support fewer causes: lower n_components"
            if self.inference != "acp":
                remedy += (", or use inference='acp' (its posterior, computed from "
                           "the causes' weights, keeps more causes in use)")
            self._warn_unused(
                self.n_components - n_empty, self.n_components, "causes",
                f"{criterion}; n_active_components_ = {n_used} counts those above "
                f"a prior of {_DEAD_PRIOR}",
                remedy + ". With more epochs than the default, early_stopping=True "
                "keeps the epoch with the best held-out ELBO.",
            )

    def _learns_online(self):
        if self.inference == "jj":
            raise AttributeError(
                "partial_fit is not available with inference='jj': variational "
                "EM updates every row's posterior and the model in one pass over "
                "all the data. Use inference='acp', 'avi' or 'svi' to learn from "
                "chunks of data."
            )
        return True

    @available_if(_learns_online)
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None):
        """Run one epoch of training on X, initializing on the first call.

        The optimizer state, the temperature schedule and the random state
        carry over between calls, so a stream of chunks is trained as one
        long run. ``max_iter``, ``tol``, ``n_init`` and ``early_stopping``
        are ignored. Not available with ``inference="jj"``.

        The first call initializes the model from its chunk: the leak from
        the chunk's feature frequencies and the causes' seeds from its rows
        (``init``). Make it a representative chunk, of a hundred rows or
        more: the leak learns slowly afterwards (200 rows of
        :func:`~skbinvi.datasets.make_noisy_or` with 30 features, K = 4,
        then 10 calls on all 200: a first chunk of 1 row ends at an ELBO of
        -8.61 nats per row, of 5 rows at -5.44, of 50 at -5.04, of all 200
        at -5.00).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            A chunk of training data.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : object
            Partially fitted estimator.

        Raises
        ------
        ValueError
            As :meth:`fit`, and if X does not have ``n_features_in_`` columns.
        AttributeError
            With ``inference="jj"`` (variational EM needs all the data).

        Warns
        -----
        skbinvi.UnusedLatentWarning
            If more than half of the causes are unused (prior below 0.01).
            Unlike :meth:`fit`, not about empty causes (prior below 0.001 or
            1 / n_samples): the stream's early priors are not its last, and the
            size of the whole training set is not that of the chunk.
        """
        self._check_split_moves()
        first_time = not self._is_initialized()
        X = self._check_X(X, reset=first_time)
        self._online = True  # new rows: "svi" starts their logits from the prior
        try:
            return self._partial_fit_iteration(X)
        finally:
            self._online = False

    # -------------------------------------------------------------- inference
    def transform(self, X):
        """Posterior of the causes: logits (default) or probabilities q(z_k = 1 | x).

        Deterministic, and the result for a row does not depend on the other
        rows: "acp"/"avi" take the encoder's output refined by
        ``n_refine_steps`` local steps with common random numbers fixed at
        fit time; "svi" and "jj" optimize each row's posterior with the model
        fixed.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.

        Returns
        -------
        features : ndarray of shape (n_samples, n_components), float64
            With ``transform_output="logit"``, the logits
            ``logit q(z_k = 1 | x)`` (finite reals, computed directly, not
            through ``logit(expit(.))``); with ``"probability"``, the
            probabilities ``expit`` of them, in [0, 1].

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X has the wrong number of features or invalid values.
        """
        self._check_fitted()
        X = self._check_X(X, reset=False)
        logit_q = self._posterior_logits(X)
        if self.transform_output == "probability":
            return expit(logit_q)
        return logit_q

    def score_samples(self, X, *, method="elbo", n_samples=None):
        """Per-row lower bound on log p(x) in nats: the ELBO, or a tighter estimate.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.
        method : {"elbo", "iwae"}, default="elbo"
            "elbo": the true ELBO of q(z | x), estimated with exact discrete
            samples of q. "iwae": the importance-weighted estimate
            ``log 1/S sum_s p(x, z_s) / q(z_s | x)``, z_s ~ q (Burda et al.,
            ICLR 2016), whose expectation lies between the ELBO and log p(x)
            and tends to log p(x) as S grows: the number to compare held-out
            likelihoods with.
        n_samples : int, default=None
            Number S of samples of q per row; None means ``n_elbo_samples``
            for "elbo" and 1000 for "iwae". The samples are common random
            numbers fixed at fit time (the same for every row), so the result
            is deterministic and a row's value does not depend on the others.

        Returns
        -------
        log_likelihood_bound : ndarray of shape (n_samples,), float64
            Nats per row.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the estimator is not fitted.
        ValueError
            If X has the wrong number of features or invalid values, if
            ``method`` is unknown or ``n_samples`` is not a positive integer.
        """
        self._check_fitted()
        if method not in ("elbo", "iwae"):
            raise ValueError(
                f"method must be 'elbo' or 'iwae'; got {method!r}."
            )
        if n_samples is not None and (
            not isinstance(n_samples, Integral) or isinstance(n_samples, bool)
            or n_samples < 1
        ):
            raise ValueError("n_samples must be a positive integer; "
                             f"got {n_samples!r}.")
        X = self._check_X(X, reset=False)
        if method == "elbo":
            return self._elbo_rows(X, n_samples)
        uniforms = self._common_uniforms(1000 if n_samples is None else n_samples)
        indptr, indices = _csr_arrays(X)
        logit_q = self._posterior_logits(X)
        out = np.empty(X.shape[0])
        _kernels.importance_log_likelihood(
            indptr, indices, self._theta, self._leak, self._colsum,
            self._leak_sum[0], logit_q, self._logit_prior, uniforms, out,
        )
        return out

    def _common_uniforms(self, n_samples):
        """Uniforms (n_samples, K) from the seed drawn at fit time (deterministic)."""
        fitted_samples, K = self._score_uniforms.shape
        if n_samples == fitted_samples:
            return self._score_uniforms
        # seeded by the fit-time common random numbers: deterministic per model
        seed = int(self._score_uniforms[0, 0] * np.iinfo(np.int32).max)
        return np.random.RandomState(seed).random_sample((n_samples, K))

    def score(self, X, y=None):
        """Mean true ELBO per row, in nats (higher is better).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data, binarized as in :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        score : float
            ``score_samples(X).mean()``, nats per row.
        """
        return self.elbo(X)

    @property
    def components_(self):
        """Weights theta of the causes, shape (n_components, n_features), float64.

        A read-only view of the model's weights (no copy: they are stored
        feature-major, as the kernels read them).
        """
        view = self._theta.T.view()
        view.flags.writeable = False
        return view

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags
