"""Numba kernels of the latent feature relational model (probit link).

Notation (user guide ``doc/modules/relational.rst``; Ji and Sudderth's
supplement; Miller, Griffiths and Jordan, NIPS 2009): N entities with D binary
features z_id ~ Bernoulli(rho); an observed triple (i, j, r), sender i,
receiver j, relation r, has the link x in {0, 1} with

    p(x = 1 | z) = Phi(eta),    eta = b_r + z_i^T W_r z_j,

W_r a D x D weight matrix (full, or diagonal: eta = b_r + sum_d w_rd z_id z_jd).
The mean-field posterior is q(z_id = 1) = q[i, d].

Pairs are given as int64 arrays ``snd``, ``rcv``, ``rel`` (P,) and links as
float64 ``x`` (0/1). The kernels that need W z_j or W^T z_i use *keys*: the
distinct (entity, relation) combinations of the receivers (``rkey`` (P,) into
``rk_ent``, ``rk_rel`` (K_r,)) and of the senders (``skey``, ``sk_ent``,
``sk_rel``), built by :func:`pair_keys`, so that the fields W_r z_j are
computed once per key and sample, O(K D^2), and a pair costs O(D).
Weights are always stored as ``W`` of shape (R, D, D); ``diag=True`` means
only its diagonal is used (and the off-diagonal entries are zero).

Every kernel writes into preallocated ``out`` arrays and never into its
inputs. Each kernel's docstring names the NumPy reference or enumeration it
is checked against in ``tests/test_relational_kernels.py``.
"""

import math

import numpy as np

from .._math import inverse_mills_ratio, log_ndtr, sigmoid
from .._numba import njit, parallel_pays, part_count, run_parts

# Largest |logit q| that the estimator lets a posterior probability reach:
# q stays within 1e-13 of 0 and 1, so log q and log(1 - q) are finite.
MAX_LOGIT = 30.0

# An empty weight array: "every pair has weight 1" (the full-batch kernels).
NO_WEIGHT = np.zeros(0)


def _for_weights(make):
    """``(make(False), make(True))``: a kernel for full and one for diagonal
    weights, indexed by ``diag``.

    ``make(diag)`` returns a jitted closure in which ``diag`` is a constant:
    Numba prunes the other branch of every ``if diag`` before compiling, so
    a fit compiles (and caches) only the code of its weights. The two
    closures share a cache index, in which the value of ``diag`` is part of
    every entry's key.
    """
    return make(False), make(True)


def pair_keys(ent, rel, n_entities, n_relations=None):
    """Distinct (entity, relation) keys of one end of the pairs.

    Returns ``key`` (P,) int64, the key of every pair, and ``key_ent``,
    ``key_rel`` (K,) int64, the entity and relation of every key, keys in
    increasing (relation, entity) order. O(P log P); with ``n_relations``
    (the relations are ``0..n_relations - 1``) by :func:`unique_inverse`
    (the same arrays), in O(P + n_entities n_relations) when that is at
    most a few times P, as for a stochastic step's local pairs.
    """
    code = rel.astype(np.int64) * np.int64(n_entities) + ent
    if n_relations is None:
        uniq, key = np.unique(code, return_inverse=True)
        key = key.astype(np.int64).ravel()
    else:
        uniq, key = unique_inverse(code, int(n_entities) * int(n_relations))
    return (
        key,
        (uniq % n_entities).astype(np.int64),
        (uniq // n_entities).astype(np.int64),
    )


# codes per listed code up to which unique_inverse counts rather than sorts
_COUNTING_SPAN = 16


def unique_inverse(codes, n_codes):
    """``np.unique(codes, return_inverse=True)`` of int64 codes in
    ``0..n_codes - 1``, with an int64 flat inverse: by counting
    (:func:`unique_codes`, O(P + n_codes)) unless ``n_codes`` exceeds
    ``_COUNTING_SPAN`` times the number of codes, then by sorting (O(P log
    P), and no (n_codes,) array)."""
    if n_codes <= _COUNTING_SPAN * codes.shape[0] + 4096:
        return unique_codes(codes, n_codes)
    uniq, inverse = np.unique(codes, return_inverse=True)
    return uniq, inverse.astype(np.int64).ravel()



@njit(nogil=True)
def unique_codes(codes, n_codes):
    """``np.unique(codes, return_inverse=True)`` of int64 codes in
    ``0..n_codes - 1``, in O(P + n_codes) rather than O(P log P).

    Returns ``uniq`` (K,) int64, the distinct codes in increasing order, and
    ``inverse`` (P,) int64 with ``uniq[inverse] == codes``. For the local ids
    and keys of a stochastic step, where ``n_codes`` is at most a few times
    P. Checked against ``np.unique`` in
    ``test_unique_codes_and_counting_argsort_equal_numpy``.
    """
    slot = np.zeros(n_codes, np.int64)
    for c in codes:
        slot[c] = 1
    k = 0
    for c in range(n_codes):
        if slot[c]:
            slot[c] = k
            k += 1
        else:
            slot[c] = -1
    uniq = np.empty(k, np.int64)
    for c in range(n_codes):
        if slot[c] >= 0:
            uniq[slot[c]] = c
    inverse = np.empty(codes.shape[0], np.int64)
    for p in range(codes.shape[0]):
        inverse[p] = slot[codes[p]]
    return uniq, inverse


@njit(nogil=True)
def counting_argsort(keys, n_keys):
    """``np.argsort(keys, kind="stable")`` of int64 keys in ``0..n_keys - 1``,
    by a counting sort: O(P + n_keys). Checked against NumPy in
    ``test_unique_codes_and_counting_argsort_equal_numpy``.
    """
    start = np.zeros(n_keys + 1, np.int64)
    for k in keys:
        start[k + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    order = np.empty(keys.shape[0], np.int64)
    for p in range(keys.shape[0]):
        k = keys[p]
        order[start[k]] = p
        start[k] += 1
    return order


@njit
def pair_log_likelihood(x, eta):
    """g(eta) = x log Phi(eta) + (1 - x) log Phi(-eta), nats."""
    # one call of log_ndtr (compiled once into the caller, not twice)
    return log_ndtr(eta if x > 0.5 else -eta)


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit
def _mix(v):
    """SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit hash."""
    v = v + _GOLDEN
    v = (v ^ (v >> np.uint64(30))) * _M1
    v = (v ^ (v >> np.uint64(27))) * _M2
    return v ^ (v >> np.uint64(31))


@njit
def hash_uniform(seed, s, i, d):
    """A uniform number in [0, 1) that is a fixed function of (seed, s, i, d).

    Common random numbers of the ELBO estimate: sample s of feature d of
    entity i, without storing an (S, N, D) array. Checked for uniformity and
    independence in ``test_hash_uniforms_are_uniform_and_independent``.
    """
    v = _mix(np.uint64(seed))
    v = _mix(v ^ np.uint64(s))
    v = _mix(v ^ np.uint64(i))
    v = _mix(v ^ np.uint64(d))
    return np.float64(v >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(inline="always")
def _diagonal_fields(key_ent, key_rel, z, W, out):
    """``out[k] = W_r z_e``, shape (K, D), for the key k of entity e =
    key_ent[k] and relation r = key_rel[k], with a diagonal W_r (only its
    diagonal is read), O(D) per key.

    (W z_j)_d is the change of eta when the sender's z_id flips from 0 to 1;
    with W transposed, (W^T z_i)_e, that when the receiver's z_je flips.
    """
    for k in range(key_ent.shape[0]):
        e, r = key_ent[k], key_rel[k]
        for d in range(z.shape[1]):
            out[k, d] = W[r, d, d] * z[e, d]


@njit(inline="always")
def _full_fields(key_ent, key_rel, z, W, out):
    """:func:`_diagonal_fields` of full weights, O(D |z_e|) per key."""
    D = z.shape[1]
    for k in range(key_ent.shape[0]):
        e, r = key_ent[k], key_rel[k]
        for d in range(D):
            out[k, d] = 0.0
        for c in range(D):
            if z[e, c] > 0.0:
                for d in range(D):
                    out[k, d] += W[r, d, c]


@njit(inline="always")
def _sample(uniforms, q, z):
    """One joint sample z = 1{uniforms < q} of every entity's features (out)."""
    for i in range(q.shape[0]):
        for d in range(q.shape[1]):
            z[i, d] = 1.0 if uniforms[i, d] < q[i, d] else 0.0


@njit(inline="always")
def _eta(i, r, z, b, fields, k):
    """eta = b_r + z_i . (W_r z_j), with ``fields[k]`` = W_r z_j.

    Without a branch on z_id (0 or 1): a branch per feature is mispredicted
    about as often as the features of the entities differ; the products
    are not. The kernels pass the fields with a row
    index, never a row (a view of an array costs a reference count, an
    atomic operation, per pair).
    """
    value = b[r]
    for d in range(z.shape[1]):
        value += z[i, d] * fields[k, d]
    return value


# ---------------------------------------------------------------------------
# memo of the pair terms of "mcvi"
# ---------------------------------------------------------------------------
#
# Given a joint sample z, the 2 D terms of a pair in "mcvi" (its
# log-likelihood with one feature of an end flipped) depend only on the
# feature patterns z_i and z_j of its two ends, its relation and its link.
# Entities with the same pattern are frequent once q nears 0 or 1 (kinship,
# term18: about 67 patterns among 104 entities in a sample, and most recur
# in the next samples). So the kernel numbers the distinct patterns of a
# call as they appear (:func:`_pattern_ids`, up to M of them) and computes
# the terms of a key (pattern of i, pattern of j, relation, link) once, at
# its first pair, in a dense table of all 2 R M^2 keys: a lookup is an
# index, not a hash. A pair with an end whose pattern came after the first
# M, or once the values are full, or with D > 62 (a pattern needs a bit per
# feature), has its terms computed directly. (The weight step and the ELBO
# keep no memo: their one or two terms per pair cost about what a lookup
# does.)

# Largest table of the keys of one call, and of the values of its entries.
_MEMO_KEYS = 2**18
_MEMO_VALUES = 2**21


def _memo(n_pair_samples, width, n_entities, n_components, n_relations):
    """An empty memo for ``n_pair_samples`` pair terms of ``width`` values each.

    Returns ``(pslots, pkeys, pid, entry, counts, values)``: the open
    addressing table of the patterns (a power of two >= 2 M of int64 ids,
    -1 for empty), their codes ``pkeys`` (M,), the id of every entity's
    pattern in the current sample ``pid`` (N,) (-1: none), all filled by
    :func:`_pattern_ids`; the dense table of the keys, ``entry`` (2 R M^2,)
    (the key's row of ``values``, -1 for none), the numbers of patterns and
    of rows so far ``counts`` (2,), and ``values`` (rows + 1, width), whose
    last row is scratch for the terms of a pair that the memo does not
    keep. M, the most patterns numbered, is at most 2 N, 2^D and what fits
    ``_MEMO_KEYS`` keys; 0 when D > 62.
    """
    R = max(int(n_relations), 1)
    M = min(2 * int(n_entities), int(math.isqrt(_MEMO_KEYS // (2 * R))))
    if n_components > 62:
        M = 0
    elif n_components < 20:
        M = min(M, 1 << int(n_components))
    n_rows = min(2 * R * M * M, int(n_pair_samples), _MEMO_VALUES // max(int(width), 1))
    return (np.full(1 << (2 * M).bit_length(), -1, dtype=np.int64),
            np.empty(M, dtype=np.int64), np.empty(n_entities, dtype=np.int64),
            np.full(2 * R * M * M, -1, dtype=np.int64), np.zeros(2, dtype=np.int64),
            np.empty((n_rows + 1, width)))


@njit(inline="always")
def _pattern_ids(z, pslots, pkeys, pid, counts):
    """``pid[i]``: the id of the feature pattern ``sum_d 2^d 1{z_id > 0}`` of
    every entity in sample z (N, D), numbered in order of first appearance
    in the call (``counts[0]`` so far); -1 past the first ``pkeys.shape[0]``
    patterns (and always when there is no room for any)."""
    N, D = z.shape
    M = pkeys.shape[0]
    if M == 0:
        for i in range(N):
            pid[i] = -1
        return
    mask = pslots.shape[0] - 1
    for i in range(N):
        code = 0
        for d in range(D):
            if z[i, d] > 0:
                code |= 1 << d
        h = np.int64(_mix(np.uint64(code)) & np.uint64(mask))
        while pslots[h] >= 0 and pkeys[pslots[h]] != code:
            h = (h + 1) & mask
        if pslots[h] < 0 and counts[0] < M:
            pslots[h] = counts[0]
            pkeys[counts[0]] = code
            counts[0] += 1
        pid[i] = pslots[h]


@njit(inline="always")
def _memo_row(i, j, r, x, pid, entry, counts, M, capacity):
    """(row, new) of a pair: its row of the memo's values, and whether the
    row is new (its terms are for the caller to compute). Row -1 (new): the
    memo does not keep the pair's terms. ``M`` is ``pkeys.shape[0]``,
    ``capacity`` the rows of values that entries may take."""
    if pid[i] < 0 or pid[j] < 0:
        return -1, True
    key = ((2 * r + (1 if x > 0.5 else 0)) * M + pid[i]) * M + pid[j]
    e = entry[key]
    if e >= 0:
        return e, False
    if counts[1] == capacity:
        return -1, True
    entry[key] = counts[1]
    counts[1] += 1
    return entry[key], True


def _parts(n, work_per_item, min_work):
    """Contiguous ranges of ``n`` items of equal work for
    :func:`~skbinvi._numba.run_parts`: one unless threads pay
    (:func:`~skbinvi._numba.parallel_pays`)."""
    work = n * work_per_item
    if not parallel_pays(work, min_work, n):
        return [(0, n)]
    k = part_count(work, min_work)
    edges = np.linspace(0, n, k + 1).astype(np.int64)
    return [(int(lo), int(hi))
            for lo, hi in zip(edges[:-1], edges[1:], strict=True) if hi > lo]


# Evaluations of log Phi (before the memo's savings) of a pass from which it
# runs on threads: a few milliseconds of work. Each part keeps its own memo,
# so parts repeat some of each other's misses: kinship's "mcvi" passes
# (term18, 1.8 million evaluations) took 7.6 ms serial and about 4.5 ms of
# wall time on two threads, for 20% more CPU time.
_MIN_PARALLEL_WORK = 1_000_000

# Pair-samples of an ELBO pass (:func:`expected_pair_log_likelihood`) from
# which it runs on threads: about a millisecond of work. It keeps no memo,
# so its parts repeat nothing.
_MIN_PARALLEL_PAIR_SAMPLES = 100_000

# Pair-samples of a weight pass (:func:`mc_weight_rhs`) from which it runs on
# threads: each costs a log Phi, an exp and O(D) products, several times an
# ELBO pair-sample, so this is again about a millisecond of work (kinship's
# term18, 86,530 pair-samples, took about 4 ms serial). No memo.
_MIN_PARALLEL_WEIGHT_PAIR_SAMPLES = 25_000


def expected_pair_log_likelihood(
    snd, rcv, rel, rkey, rk_ent, rk_rel, x, q, b, W, diag, seed, n_draws, out
):
    """E_q[g(eta)] of every pair by Monte Carlo with common random numbers, nats.

    Sample s draws every entity's features ``z_id = 1{u(seed, s, i, d) <
    q_id}`` with :func:`hash_uniform`, the same numbers at every call, so the
    estimate is a deterministic function of (q, b, W) and a pair's value does
    not depend on the other pairs. ``out[p] = 1/S sum_s g(b_r + z_i^T W_r
    z_j)``, with the field W_r z_j computed once per receiver key (``rkey``
    (P,) into ``rk_ent``, ``rk_rel``, :func:`pair_keys`) and sample: cost
    O(S N D) hashes, O(S K_r |z_j| D) for the fields (O(S K_r D) diagonal),
    then O(S D) and one log Phi per pair. Large passes run on threads
    (:func:`~skbinvi._numba.run_parts`, ranges of pairs; the same numbers).
    Checked against a NumPy reference with the same numbers and against
    enumeration (``test_expected_pair_log_likelihood_*``).
    """
    N, D = q.shape
    P = snd.shape[0]
    z = np.empty((n_draws, N, D), dtype=np.uint8)
    _hashed_samples(q, seed, z)
    parts = _parts(P, n_draws, _MIN_PARALLEL_PAIR_SAMPLES)
    run_parts(_pair_log_likelihoods[bool(diag)], [
        (lo, hi, snd, rcv, rel, rkey, rk_ent, rk_rel, x, z, b, W, out)
        for lo, hi in parts
    ])


@njit
def _hashed_samples(q, seed, z):
    """The S joint samples ``z[s, i, d] = 1{u(seed, s, i, d) < q_id}`` (out)."""
    S = z.shape[0]
    for s in range(S):
        for i in range(q.shape[0]):
            for d in range(q.shape[1]):
                z[s, i, d] = 1 if hash_uniform(seed, s, i, d) < q[i, d] else 0


def _make_pair_log_likelihoods(diag):
    """The kernel of :func:`expected_pair_log_likelihood` for ``diag``."""

    @njit(nogil=True)
    def _pair_log_likelihoods(lo, hi, snd, rcv, rel, rkey, rk_ent, rk_rel, x, z, b,
                              W, out):
        """``out[p]`` of :func:`expected_pair_log_likelihood` for pairs lo..hi-1."""
        S, N, D = z.shape
        fr = np.empty((rk_ent.shape[0], D))  # W_r z_j of every receiver key
        arg = np.empty(hi - lo)
        for p in range(lo, hi):
            out[p] = 0.0
        for s in range(S):
            zs = z[s]
            if diag:
                _diagonal_fields(rk_ent, rk_rel, zs, W, fr)
            else:
                _full_fields(rk_ent, rk_rel, zs, W, fr)
            for p in range(lo, hi):
                eta = _eta(snd[p], rel[p], zs, b, fr, rkey[p])
                arg[p - lo] = eta if x[p] > 0.5 else -eta
            # log Phi in a loop of its own (several times faster than
            # interleaved with the fields' lookups)
            for p in range(lo, hi):
                out[p] += log_ndtr(arg[p - lo])
        for p in range(lo, hi):
            out[p] /= S

    return _pair_log_likelihoods


_pair_log_likelihoods = _for_weights(_make_pair_log_likelihoods)


@njit
def kl_features(q, rho):
    """sum_id KL(Bern(q_id) || Bern(rho)), nats: minus E_q[log p(z)] + H[q].

    Checked against NumPy in ``test_kl_features_matches_numpy``.
    """
    total = 0.0
    log_rho, log_1m_rho = math.log(rho), math.log1p(-rho)
    for i in range(q.shape[0]):
        for d in range(q.shape[1]):
            p = q[i, d]
            if p > 0.0:
                total += p * (math.log(p) - log_rho)
            if p < 1.0:
                total += (1.0 - p) * (math.log1p(-p) - log_1m_rho)
    return total


# ---------------------------------------------------------------------------
# moments of eta under q (prediction, cavi)
# ---------------------------------------------------------------------------


def pair_mean_and_variance(snd, rcv, rel, q, b, W, diag, mean, var):
    """E_q[eta] and Var_q[eta] of every pair (out).

    With v = q (1 - q) and z_i, z_j independent under q (i != j):
    ``E[eta] = b_r + q_i^T W q_j`` and ``Var[eta] = sum_e v_je (W^T q_i)_e^2
    + sum_d v_id (W q_j)_d^2 + sum_de v_id W_de^2 v_je``; for a diagonal W it
    reduces to ``sum_d w_d^2 p_d (1 - p_d)``, p_d = q_id q_jd. Cost O(D^2)
    per pair (O(D) diagonal). Checked against enumeration of z_i, z_j in
    ``test_pair_mean_and_variance_match_enumeration``.
    """
    _pair_moments[bool(diag)](snd, rcv, rel, q, b, W, mean, var)


def _make_pair_moments(diag):
    """The kernel of :func:`pair_mean_and_variance` for ``diag``."""

    @njit
    def _pair_moments(snd, rcv, rel, q, b, W, mean, var):
        """:func:`pair_mean_and_variance` with ``diag`` fixed."""
        D = q.shape[1]
        for p in range(snd.shape[0]):
            i, j, r = snd[p], rcv[p], rel[p]
            m = b[r]
            v = 0.0
            if diag:
                for d in range(D):
                    pd = q[i, d] * q[j, d]
                    m += W[r, d, d] * pd
                    v += W[r, d, d] ** 2 * pd * (1.0 - pd)
            else:
                for d in range(D):
                    wq = 0.0  # (W q_j)_d
                    for e in range(D):
                        wq += W[r, d, e] * q[j, e]
                        v += (
                            q[i, d]
                            * (1.0 - q[i, d])
                            * W[r, d, e] ** 2
                            * q[j, e]
                            * (1.0 - q[j, e])
                        )
                    m += q[i, d] * wq
                    v += q[i, d] * (1.0 - q[i, d]) * wq * wq
                for e in range(D):
                    wq = 0.0  # (W^T q_i)_e
                    for d in range(D):
                        wq += W[r, d, e] * q[i, d]
                    v += q[j, e] * (1.0 - q[j, e]) * wq * wq
            mean[p] = m
            var[p] = v

    return _pair_moments


_pair_moments = _for_weights(_make_pair_moments)


# ---------------------------------------------------------------------------
# "cavi": data-augmented coordinate ascent (diagonal weights)
# ---------------------------------------------------------------------------
#
# With y ~ N(eta, 1) and x = 1{y >= 0}, q(y) is a unit normal with location
# mu truncated to the side of x. With s = 2 x - 1, a = s mu and lam = phi(a) /
# Phi(a) (inverse Mills ratio):
#     E[y] = mu + s lam,   Var[y] = 1 - a lam - lam^2,
#     H[q(y)] = log sqrt(2 pi e) + log Phi(a) - a lam / 2.
# The augmented bound (the supplement's A.2) of a pair, with m = E_q[eta] and
# V = Var_q[eta], is
#     T(mu) = -log sqrt(2 pi) - (E[y^2] - 2 E[y] m + m^2 + V) / 2 + H[q(y)],
# maximal at mu = m, where it equals log Phi(s m) - V / 2.


@njit
def truncated_normal_mean(x, mu):
    """E[y] of a unit normal with location mu truncated to y >= 0 (x = 1) or y < 0.

    Checked against ``scipy.stats.truncnorm`` in
    ``test_truncated_normal_mean_matches_scipy``.
    """
    # one call of inverse_mills_ratio (compiled once into the caller)
    sign = 1.0 if x > 0.5 else -1.0
    return mu + sign * inverse_mills_ratio(sign * mu)


@njit
def truncated_normal_means(x, mu, out):
    """:func:`truncated_normal_mean` of every pair: ``out[p]`` = E[y_p] at mu[p]."""
    for p in range(x.shape[0]):
        out[p] = truncated_normal_mean(x[p], mu[p])


@njit
def cavi_sweep(inc_indptr, inc_pair, inc_other, rel, q, logit_rho, b, W, mean_y, m):
    """One sweep of coordinate ascent over every q_id, in place (diagonal W).

    ``logit q_id = logit rho + sum_{pairs p of i} q_jd w_rd (E[y_p] - b_r -
    w_rd / 2 - sum_{e != d} w_re q_ie q_je)`` (the supplement's A.4 with its
    two typos corrected, one weight vector per relation r of the pair). The
    augmented bound is linear in q_id given the rest, so each update is its
    exact maximizer. ``m`` (P,) holds b_r + sum_e w_re q_ie q_je and is kept
    up to date after every change in O(degree(i)): a sweep costs O(P D).
    Checked against a grid maximization of the augmented bound (the NumPy
    reference ``tests/_reference/relational.py``) in
    ``test_cavi_update_is_the_coordinate_maximizer``.

    Parameters
    ----------
    inc_indptr : int64 array of shape (N + 1,)
        The pairs of entity i are ``inc_pair[inc_indptr[i]:inc_indptr[i + 1]]``,
        with the other entity of each in ``inc_other``.
    inc_pair, inc_other : int arrays of shape (2 P,)
    rel : int64 array of shape (P,)
    q : float64 array of shape (N, D), updated in place.
    logit_rho : float
    b : float64 array of shape (R,)
    W : float64 array of shape (R, D, D), diagonal.
    mean_y : float64 array of shape (P,), E[y_p] under q(y), fixed in the sweep.
    m : float64 array of shape (P,), pair means, updated in place.
    """
    N, D = q.shape
    for i in range(N):
        for d in range(D):
            field = 0.0
            for k in range(inc_indptr[i], inc_indptr[i + 1]):
                p, j = inc_pair[k], inc_other[k]
                r = rel[p]
                wd = W[r, d, d]
                others = m[p] - b[r] - wd * q[i, d] * q[j, d]
                field += wd * q[j, d] * (mean_y[p] - b[r] - 0.5 * wd - others)
            # logits are kept in [-MAX_LOGIT, MAX_LOGIT]: no exact 0 or 1
            t = min(max(logit_rho + field, -MAX_LOGIT), MAX_LOGIT)
            new = sigmoid(t)
            delta = new - q[i, d]
            if delta != 0.0:
                for k in range(inc_indptr[i], inc_indptr[i + 1]):
                    p = inc_pair[k]
                    m[p] += W[rel[p], d, d] * delta * q[inc_other[k], d]
                q[i, d] = new


@njit
def cavi_sweep_full(
    inc_indptr, inc_pair, inc_other, snd, rel, q, logit_rho, b, W, mean_y, m
):
    r"""One sweep of coordinate ascent over every q_id, in place (full W).

    The full-matrix form of :func:`cavi_sweep`. Flipping z_id moves the
    linear predictor of a pair p of i by :math:`a_d`, with :math:`a = W_r
    z_j` when i sends and :math:`a = W_r^\top z_j` when i receives (j the
    other entity), so with :math:`\bar a = E[a]`, :math:`H = \mathrm{Cov}(a)
    = W_r \mathrm{diag}(q_j (1 - q_j)) W_r^\top` (or with :math:`W_r^\top`)
    and :math:`m_p = E_q[\eta_p]`, the augmented bound is linear in q_id
    with slope

    .. math::

        \sum_p \bar a_d \big(E[y_p] - m_p + q_{id} \bar a_d\big)
        - \tfrac12 \bar a_d^2 - \tfrac12 H_{dd}
        - \sum_{d' \ne d} q_{id'} H_{d'd}

    (derived in the User Guide; with a diagonal W it is the slope of
    :func:`cavi_sweep`), and each update, ``logit q_id = logit rho +
    slope``, is its exact maximizer. Per entity, :math:`\bar a` and
    :math:`q_j (1 - q_j) \circ (W_r^\top q_i)` are formed once per pair in
    O(D^2) and kept up to date in O(D) after every change of a q_id, as is
    ``m``: a sweep costs O(P D^2), memory O(max degree D). Checked against a
    grid maximization of the augmented bound (the NumPy reference
    ``tests/_reference/relational.py``) in
    ``test_cavi_update_is_the_coordinate_maximizer``.

    Parameters
    ----------
    inc_indptr, inc_pair, inc_other : arrays from :func:`incidence`
    snd : int64 array of shape (P,)
        Senders of the pairs (whether i sends or receives pair p).
    rel : int64 array of shape (P,)
    q : float64 array of shape (N, D), updated in place.
    logit_rho : float
    b : float64 array of shape (R,)
    W : float64 array of shape (R, D, D)
    mean_y : float64 array of shape (P,), E[y_p] under q(y), fixed in the sweep.
    m : float64 array of shape (P,), pair means, updated in place.
    """
    N, D = q.shape
    R = W.shape[0]
    # the weights seen from a receiver: W_r^T, so every pair reads rows of
    # one matrix (Ws[r] for a sender, Wt[r] for a receiver)
    Wt = np.empty_like(W)
    for r in range(R):
        for d in range(D):
            for e in range(D):
                Wt[r, d, e] = W[r, e, d]
    max_degree = 0
    for i in range(N):
        max_degree = max(max_degree, inc_indptr[i + 1] - inc_indptr[i])
    abar = np.empty((max_degree, D))
    scaled = np.empty((max_degree, D))  # v_je (weights' column of q_i)_e
    for i in range(N):
        lo, hi = inc_indptr[i], inc_indptr[i + 1]
        for k in range(lo, hi):
            p, j = inc_pair[k], inc_other[k]
            Wr = W[rel[p]] if snd[p] == i else Wt[rel[p]]
            for d in range(D):
                a = 0.0
                u = 0.0
                for e in range(D):
                    a += Wr[d, e] * q[j, e]
                    u += Wr[e, d] * q[i, e]
                abar[k - lo, d] = a
                scaled[k - lo, d] = q[j, d] * (1.0 - q[j, d]) * u
        for d in range(D):
            qid = q[i, d]
            field = 0.0
            for k in range(lo, hi):
                p, j = inc_pair[k], inc_other[k]
                Wr = W[rel[p]] if snd[p] == i else Wt[rel[p]]
                ad = abar[k - lo, d]
                hdd = 0.0
                hq = 0.0  # sum_d' q_id' H[d', d], d' = d included
                for e in range(D):
                    w = Wr[d, e]
                    hdd += w * w * q[j, e] * (1.0 - q[j, e])
                    hq += w * scaled[k - lo, e]
                field += (
                    ad * (mean_y[p] - m[p] + qid * ad)
                    - 0.5 * ad * ad
                    - 0.5 * hdd
                    - (hq - qid * hdd)
                )
            t = min(max(logit_rho + field, -MAX_LOGIT), MAX_LOGIT)
            new = sigmoid(t)
            delta = new - qid
            if delta != 0.0:
                for k in range(lo, hi):
                    p, j = inc_pair[k], inc_other[k]
                    Wr = W[rel[p]] if snd[p] == i else Wt[rel[p]]
                    m[p] += delta * abar[k - lo, d]
                    for e in range(D):
                        v = q[j, e] * (1.0 - q[j, e])
                        scaled[k - lo, e] += delta * Wr[d, e] * v
                q[i, d] = new


def incidence(snd, rcv, n_entities):
    """Pairs incident to each entity, as CSR-like arrays for :func:`cavi_sweep`.

    Returns ``inc_indptr`` (N + 1,) int64, ``inc_pair`` and ``inc_other``
    (2 P,): every pair p = (i, j) appears once under i (other j) and once
    under j (other i). int32 lists when the ids and 2 P fit, else int64.
    """
    P = snd.size
    small = 2 * P < 2**31 and n_entities < 2**31
    index = np.int32 if small else np.int64
    ends = np.concatenate([snd, rcv]).astype(index, copy=False)
    order = np.argsort(ends, kind="stable")  # positions in snd ++ rcv
    del ends
    indptr = np.zeros(n_entities + 1, dtype=np.int64)
    np.cumsum(
        np.bincount(snd, minlength=n_entities) + np.bincount(rcv, minlength=n_entities),
        out=indptr[1:],
    )
    from_snd = order < P  # the entity is the sender: other = receiver
    order[~from_snd] -= P  # now the pair index
    inc_pair = order.astype(index)
    inc_other = np.empty(2 * P, dtype=index)
    inc_other[from_snd] = rcv[order[from_snd]]
    inc_other[~from_snd] = snd[order[~from_snd]]
    return indptr, inc_pair, inc_other


@njit
def pair_means(snd, rcv, rel, q, b, W, diag, out):
    """m_p = E_q[eta_p] = b_r + q_i^T W_r q_j of every pair (out)."""
    D = q.shape[1]
    for p in range(snd.shape[0]):
        i, j, r = snd[p], rcv[p], rel[p]
        m = b[r]
        if diag:
            for d in range(D):
                m += W[r, d, d] * q[i, d] * q[j, d]
        else:
            for d in range(D):
                for e in range(D):
                    m += q[i, d] * W[r, d, e] * q[j, e]
        out[p] = m


@njit
def augmented_weight_rhs(snd, rcv, rel, q, mean_y, out0, outW):
    """``sum_p E[y_p] E[f_p]`` per relation: the right-hand side of the cavi w step.

    ``out0[r] = sum_p E[y_p]`` and ``outW[r, d, e] = sum_p E[y_p] q_id q_je``
    over the pairs of relation r (only the diagonal is used for diagonal W).
    Checked against NumPy in ``test_weight_steps_*``.
    """
    D = q.shape[1]
    out0[:] = 0.0
    outW[:] = 0.0
    for p in range(snd.shape[0]):
        i, j, r = snd[p], rcv[p], rel[p]
        out0[r] += mean_y[p]
        for d in range(D):
            a = q[i, d] * mean_y[p]
            for e in range(D):
                outW[r, d, e] += a * q[j, e]


# ---------------------------------------------------------------------------
# the weight step: a ridge-regularized quadratic in (b_r, W_r) per relation
# ---------------------------------------------------------------------------


@njit(inline="always")
def _pair_weight(weight, p):
    """Weight of pair p: ``weight[p]``, or 1 when ``weight`` is empty."""
    return 1.0 if weight.shape[0] == 0 else weight[p]


@njit
def _sender_moments(skey, rcv, q, weight, n_keys, c_out, m_out):
    """Per sender key k: C_k = sum_p w_p M_j (D, D) and m_k = sum_p w_p q_j (D,).

    M_j = E[z_j z_j^T] = q_j q_j^T + diag(q_j (1 - q_j)); w_p = ``weight[p]``
    (1 for an empty ``weight``).
    """
    D = q.shape[1]
    c_out[:] = 0.0
    m_out[:] = 0.0
    for p in range(skey.shape[0]):
        k, j = skey[p], rcv[p]
        w = _pair_weight(weight, p)
        if w == 0.0:
            continue
        for d in range(D):
            qd = w * q[j, d]
            m_out[k, d] += qd
            for e in range(D):
                c_out[k, d, e] += qd * q[j, e]
            c_out[k, d, d] += qd * (1.0 - q[j, d])


@njit
def _diagonal_moments(snd, rcv, rel, q, weight, out):
    """Per relation: A[r] = sum_p w_p E[f f^T] for f = (1, z_i1 z_j1, ...,
    z_iD z_jD)."""
    D = q.shape[1]
    out[:] = 0.0
    for p in range(snd.shape[0]):
        i, j, r = snd[p], rcv[p], rel[p]
        w = _pair_weight(weight, p)
        if w == 0.0:
            continue
        out[r, 0, 0] += w
        for d in range(D):
            pd = w * q[i, d] * q[j, d]
            out[r, 0, d + 1] += pd
            out[r, d + 1, d + 1] += pd
            for e in range(D):
                if e != d:
                    out[r, d + 1, e + 1] += pd * q[i, e] * q[j, e]
    for r in range(out.shape[0]):
        for d in range(D):
            out[r, d + 1, 0] = out[r, 0, d + 1]


def weight_system(snd, rcv, rel, q, n_relations, diag, skeys=None, weight=None):
    """The matrices A[r] = sum_{p in r} w_p E_q[f_p f_p^T] of the weight step.

    The features of a pair are f = (1, vec(z_i z_j^T)) (full W, 1 + D^2 of
    them, W_r[d, e] at position 1 + d D + e) or f = (1, z_i1 z_j1, ...,
    z_iD z_jD) (diagonal, 1 + D). With M_i = E[z_i z_i^T] = q_i q_i^T +
    diag(q_i (1 - q_i)) and z_i, z_j independent, ``E[f_de f_d'e'] = M_i[d,
    d'] M_j[e, e']``; summed over the pairs of a sender key k (entity i,
    relation r) this is ``M_i[d, d'] C_k[e, e']`` with C_k the sum of the
    receivers' M_j, so A costs O(P D^2 + K_s D^4) for full W (a BLAS
    product), O(P D^2) diagonal. ``weight`` (P,) weighs the pairs (the
    unbiased weights of a stochastic step's sampled pairs); None gives every
    pair weight 1. Returns an array (R, F, F). Checked against a NumPy
    reference (explicit feature second moments per pair) in
    ``test_weight_system_matches_explicit_moments``.
    """
    N, D = q.shape
    weight = NO_WEIGHT if weight is None else np.ascontiguousarray(weight)
    if diag:
        A = np.empty((n_relations, D + 1, D + 1))
        _diagonal_moments(snd, rcv, rel, q, weight, A)
        return A
    skey, sk_ent, sk_rel = skeys
    K = sk_ent.size
    C = np.empty((K, D, D))
    msum = np.empty((K, D))
    _sender_moments(skey, rcv, q, weight, K, C, msum)
    qs = q[sk_ent]  # (K, D)
    Ms = qs[:, :, None] * qs[:, None, :]
    idx = np.arange(D)
    Ms[:, idx, idx] = qs
    per_key = np.bincount(
        skey, weights=None if weight.size == 0 else weight, minlength=K
    )
    counts = np.bincount(sk_rel, weights=per_key, minlength=n_relations)
    F = 1 + D * D
    A = np.zeros((n_relations, F, F))
    order = np.argsort(sk_rel, kind="stable")
    bounds = np.searchsorted(sk_rel[order], np.arange(n_relations + 1))
    for r in range(n_relations):
        ks = order[bounds[r] : bounds[r + 1]]
        if ks.size == 0:
            continue
        A[r, 0, 0] = counts[r]
        first = qs[ks].T @ msum[ks]  # (D, D): sum_k q_i,d m_k,e
        A[r, 0, 1:] = A[r, 1:, 0] = first.ravel()
        # sum_k Ms[k, d, d'] C[k, e, e'] -> [(d, e), (d', e')]
        block = Ms[ks].reshape(ks.size, D * D).T @ C[ks].reshape(ks.size, D * D)
        A[r, 1:, 1:] = (
            block.reshape(D, D, D, D).transpose(0, 2, 1, 3).reshape(D * D, D * D)
        )
    return A


def solve_weights(A, rhs0, rhsW, alpha, diag, b, W):
    """Maximize ``Q_r(w) = w . rhs - 1/2 w^T A_r w - alpha_r/2 |W_r|^2`` per relation.

    ``alpha``: a float, or one ridge precision per relation (R,).

    ``w = (b_r, W_r)`` in the feature order of :func:`weight_system`; the
    intercept is not penalized. Writes the maximizers into ``b`` (R,) and
    ``W`` (R, D, D) (only the diagonal for ``diag``); relations without
    pairs keep their weights. Q is concave, so the maximizer never lowers Q
    (checked with enumerated true ELBOs in ``test_em_weight_step_*``).
    """
    R, D = W.shape[0], W.shape[1]
    F = A.shape[1]
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (R,))
    for r in range(R):
        if A[r, 0, 0] <= 0:
            continue
        ridge = np.full(F, alphas[r])
        ridge[0] = 0.0
        if diag:
            rhs = np.concatenate([[rhs0[r]], np.diagonal(rhsW[r])])
        else:
            rhs = np.concatenate([[rhs0[r]], rhsW[r].ravel()])
        M = A[r] + np.diag(ridge)
        # a tiny jitter keeps features that no pair has (all-zero rows) at 0
        M[np.diag_indices(F)] += 1e-9 * (1.0 + np.abs(np.diagonal(M)).max())
        try:
            sol = np.linalg.solve(M, rhs)
        except np.linalg.LinAlgError:  # pragma: no cover - guarded by the jitter
            sol = np.linalg.lstsq(M, rhs, rcond=None)[0]
        b[r] = sol[0]
        if diag:
            W[r][np.diag_indices(D)] = sol[1:]
        else:
            W[r] = sol[1:].reshape(D, D)


# ---------------------------------------------------------------------------
# "mcvi": Monte Carlo natural gradients with each binary variable summed out
# ---------------------------------------------------------------------------


def mcvi_mean_deltas(
    snd,
    rcv,
    rel,
    skey,
    sk_ent,
    sk_rel,
    rkey,
    rk_ent,
    rk_rel,
    x,
    q,
    logit_rho,
    b,
    W,
    diag,
    uniforms,
    w_snd,
    w_rcv,
    out,
    partial=None,
):
    """Monte Carlo estimate of E_{q_-id}[Delta_id] for every (i, d) at once.

    ``Delta_id(z) = log p(x, z_id = 1, z_-id) - log p(x, z_id = 0, z_-id) =
    logit rho + sum_{pairs of i} [g(eta^{id=1}) - g(eta^{id=0})]``: z_id is
    summed out exactly, only its neighbours are sampled. Flipping z_id changes
    eta by c = (W_r z_j)_d when i is the sender and by c = (W_r^T z_i')_d when
    i is the receiver of a pair with sender i'. Both fields are computed once
    per (entity, relation) key and sample, so a pair costs O(D) operations
    and at most 2 D + 1 evaluations of log Phi (none where c = 0, which for
    diagonal W is whenever the other end lacks the feature). Every (i, d)
    uses the same S joint samples ``z_s = 1{uniforms[s] < q}``. With the
    exact expectation, ``logit q_id <- E[Delta_id]`` is coordinate ascent on
    the true ELBO and ``E[Delta] - logit q`` its natural gradient.

    ``w_snd`` and ``w_rcv`` (P,) weigh pair p's term in its sender's and in
    its receiver's sum (a stochastic step lists a pair once per end it
    updates, and weighs sampled non-links by the inverse of their sampling
    probability); empty arrays give every term weight 1.

    Checked against a NumPy loop with the same samples
    (``test_mcvi_deltas_match_a_numpy_reference``) and, with many samples,
    against finite differences of the enumerated true ELBO
    (``test_mcvi_deltas_are_the_natural_gradient_of_the_true_elbo``), for
    diagonal and full W. A pair's terms are computed once per distinct memo
    key of the call (see the memo above). Large passes run on threads
    (:func:`~skbinvi._numba.run_parts`, ranges of samples, each its own
    memo) and the per-sample sums are added in a fixed order (results do
    not depend on the number of threads).

    Parameters
    ----------
    snd, rcv, rel : int64 arrays of shape (P,)
    skey, rkey : int64 arrays of shape (P,); sk_ent, sk_rel, rk_ent, rk_rel
        Keys of the senders and receivers (:func:`pair_keys`).
    x : float64 array of shape (P,)
    q : float64 array of shape (N, D)
    logit_rho : float
    b : float64 array of shape (R,)
    W : float64 array of shape (R, D, D)
    diag : bool
    uniforms : float64 array of shape (S, N, D), values in [0, 1)
    w_snd, w_rcv : float64 arrays of shape (P,) or (0,)
    out : float64 array of shape (N, D) (out)
    partial : float64 array of shape (S, N, D), C-contiguous, optional
        Scratch for the per-sample sums (its values are overwritten); a new
        array when None. Stochastic steps pass one that they reuse.
    """
    S, N, D = uniforms.shape
    P = x.shape[0]
    if partial is None:
        partial = np.zeros((S, N, D))
    else:
        partial[:] = 0.0
    parts = _parts(S, P * (2 * D + 1), _MIN_PARALLEL_WORK)
    Wt = np.ascontiguousarray(W.transpose(0, 2, 1))  # for the receivers' fields
    run_parts(_mcvi_samples[bool(diag)], [
        (lo, hi, snd, rcv, rel, skey, sk_ent, sk_rel, rkey, rk_ent, rk_rel, x, q,
         b, W, Wt, uniforms, w_snd, w_rcv,
         *_memo((hi - lo) * P, 2 * D, N, D, W.shape[0]), partial)
        for lo, hi in parts
    ])
    _sample_mean(partial.reshape(S, N * D), logit_rho, out.reshape(N * D))


@njit
def _sample_mean(partial, offset, out):
    """``out[m] = offset + sum_s partial[s, m] / S``, summed over s in order."""
    S = partial.shape[0]
    for m in range(partial.shape[1]):
        total = 0.0
        for s in range(S):
            total += partial[s, m]
        out[m] = offset + total / S


@njit(inline="always")
def _flip_terms(i, j, r, x, z, b, fr, kr, fs, ks, sender, receiver, terms, row):
    """The terms of one pair in :func:`mcvi_mean_deltas` for sample z.

    ``terms[row, d]`` (if ``sender``): the change of g when z_id flips to 1
    from 0, with the field ``fr[kr] = W_r z_j``; ``terms[row, D + d]`` (if
    ``receiver``): the same for z_jd, with ``fs[ks] = W_r^T z_i``. An entry
    whose flip leaves eta unchanged (a zero field) is 0. The arguments of
    log Phi go into the row first and are evaluated in one loop of their
    own, which pipelines where evaluations interleaved with the branches
    that choose them would not.
    """
    D = z.shape[1]
    eta = _eta(i, r, z, b, fr, kr)
    sign = 1.0 if x > 0.5 else -1.0
    for d in range(D):
        # eta with z_id (then z_jd) flipped: down from 1, or up from 0
        c = fr[kr, d] if sender else 0.0
        terms[row, d] = sign * (eta - c if z[i, d] > 0.0 else eta + c)
        c = fs[ks, d] if receiver else 0.0
        terms[row, D + d] = sign * (eta - c if z[j, d] > 0.0 else eta + c)
    se = sign * eta
    g = log_ndtr(se)
    for m in range(2 * D):
        # a zero field (or an end not asked for) leaves eta as it is: 0
        # exactly, without evaluating log Phi
        t = terms[row, m]
        terms[row, m] = 0.0 if t == se else log_ndtr(t) - g
    for d in range(D):
        # the change from 0 to 1
        terms[row, d] = -terms[row, d] if z[i, d] > 0.0 else terms[row, d]
        terms[row, D + d] = -terms[row, D + d] if z[j, d] > 0.0 else terms[row, D + d]


def _make_mcvi_samples(diag):
    """The kernel of :func:`mcvi_mean_deltas` for ``diag``."""

    @njit(nogil=True)
    def _mcvi_samples(lo, hi, snd, rcv, rel, skey, sk_ent, sk_rel, rkey, rk_ent,
                      rk_rel, x, q, b, W, Wt, uniforms, w_snd, w_rcv, pslots, pkeys,
                      pid, entry, counts, values, partial):
        """``partial[s]``, the sums of :func:`mcvi_mean_deltas` of samples lo..hi-1."""
        N, D = q.shape
        P = x.shape[0]
        M = pkeys.shape[0]
        z = np.empty((N, D))
        fr = np.empty((rk_ent.shape[0], D))  # W_r z_j: sender flips
        fs = np.empty((sk_ent.shape[0], D))  # W_r^T z_i: receiver flips
        # the memo's last row: the terms of a pair that the memo does not keep
        scratch = values.shape[0] - 1
        for s in range(lo, hi):
            _sample(uniforms[s], q, z)
            _pattern_ids(z, pslots, pkeys, pid, counts)
            if diag:
                _diagonal_fields(rk_ent, rk_rel, z, W, fr)
                _diagonal_fields(sk_ent, sk_rel, z, Wt, fs)
            else:
                _full_fields(rk_ent, rk_rel, z, W, fr)
                _full_fields(sk_ent, sk_rel, z, Wt, fs)
            for p in range(P):
                i, j, r = snd[p], rcv[p], rel[p]
                ws, wr = _pair_weight(w_snd, p), _pair_weight(w_rcv, p)
                e, new = _memo_row(i, j, r, x[p], pid, entry, counts, M, scratch)
                row = scratch if e < 0 else e
                if new:
                    # a kept entry serves later pairs of any weight: all its terms
                    _flip_terms(i, j, r, x[p], z, b, fr, rkey[p], fs, skey[p],
                                e >= 0 or ws != 0.0, e >= 0 or wr != 0.0, values, row)
                # a zero field adds 0 (terms are finite); an end of weight 0
                # (a stochastic step lists every pair for one end) is skipped:
                # its row of partial, a random one of a large array, would be
                # read and written for nothing
                if ws != 0.0:
                    for d in range(D):
                        partial[s, i, d] += ws * values[row, d]
                if wr != 0.0:
                    for d in range(D):
                        partial[s, j, d] += wr * values[row, D + d]

    return _mcvi_samples


_mcvi_samples = _for_weights(_make_mcvi_samples)


def mc_weight_rhs(
    snd,
    rcv,
    rel,
    skey,
    sk_ent,
    sk_rel,
    rkey,
    rk_ent,
    rk_rel,
    x,
    q,
    b,
    W,
    diag,
    uniforms,
    weight,
    residual,
    out0,
    outW,
):
    """Monte Carlo ``E_q[sum_p f_p(z) ybar_p(z)]`` per relation, for the EM w step.

    ``ybar_p(z)`` is the mean of the unit normal with location eta_p(z) (at
    the current weights) truncated to the side of x_p. For every z, ``g(f .
    w) >= g(f . w_old) - 1/2 E[(y - f . w)^2 | z] + const`` with equality at
    w_old (the EM minorizer of probit regression, Albert and Chib 1993);
    averaged over q it minorizes the true ELBO, and :func:`solve_weights`
    maximizes the minorizer. ``out0[r] = E sum_p ybar_p``, ``outW[r, d, e] =
    E sum_p ybar_p z_id z_je`` (pairs of relation r), accumulated per sender
    key in O(P D + K_s D^2) per sample. ``weight`` (P,) weighs the pairs
    (empty: weight 1). With ``residual`` the kernel accumulates ``ybar_p(z)
    - eta_p(z)`` instead of ``ybar_p(z)``: since ``E_q[f_p eta_p] = E_q[f_p
    f_p^T] w``, the right-hand side is then ``A w + out`` with the exact A
    of :func:`weight_system`, a control variate that removes the sampling
    noise of the large ``f eta`` part (needed when links are rare and the
    sampled non-links carry large weights). Large passes run on threads
    (ranges of samples; the same numbers). Checked against enumeration in
    ``test_mc_weight_rhs_and_the_em_w_step_on_the_true_elbo``.
    """
    S, N, D = uniforms.shape
    R = b.shape[0]
    part0 = np.zeros((S, R))
    # diagonal weights need only the diagonal of every sample's part
    Dw = 1 if diag else D
    partW = np.zeros((S, R, D, Dw))
    run_parts(_weight_rhs_samples[bool(diag)], [
        (lo, hi, snd, rcv, rel, skey, sk_ent, sk_rel, rkey, rk_ent, rk_rel, x, q,
         b, W, uniforms, weight, residual,
         part0, partW)
        for lo, hi in _parts(S, x.shape[0], _MIN_PARALLEL_WEIGHT_PAIR_SAMPLES)
    ])
    _sample_mean(part0, 0.0, out0)
    mean_W = np.empty((R, D, Dw))
    _sample_mean(partW.reshape(S, R * D * Dw), 0.0, mean_W.reshape(R * D * Dw))
    if diag:
        outW[:] = 0.0
        outW[:, np.arange(D), np.arange(D)] = mean_W[:, :, 0]
    else:
        outW[:] = mean_W


def _make_weight_rhs_samples(diag):
    """The kernel of :func:`mc_weight_rhs` for ``diag``."""

    @njit(nogil=True)
    def _weight_rhs_samples(lo, hi, snd, rcv, rel, skey, sk_ent, sk_rel, rkey, rk_ent,
                            rk_rel, x, q, b, W, uniforms, weight, residual, part0,
                            partW):
        """``part0[s]``, ``partW[s]`` of :func:`mc_weight_rhs` for samples lo..hi-1.

        No memo: a pair's eta and truncated normal mean (one log Phi, one
        exp) cost about as much as looking them up in a memo like that of
        :func:`mcvi_mean_deltas`.
        """
        N, D = q.shape
        P = x.shape[0]
        Ks = sk_ent.shape[0]
        z = np.empty((N, D))
        fr = np.empty((rk_ent.shape[0], D))
        t = np.empty((Ks, D))
        for s in range(lo, hi):
            _sample(uniforms[s], q, z)
            if diag:
                _diagonal_fields(rk_ent, rk_rel, z, W, fr)
            else:
                _full_fields(rk_ent, rk_rel, z, W, fr)
            t[:] = 0.0
            for p in range(P):
                i, j, r = snd[p], rcv[p], rel[p]
                w = _pair_weight(weight, p)
                if w == 0.0:
                    continue
                eta = _eta(i, r, z, b, fr, rkey[p])
                ybar = truncated_normal_mean(x[p], eta)
                if residual:
                    ybar -= eta
                ybar *= w
                part0[s, r] += ybar
                k = skey[p]
                for e in range(D):
                    t[k, e] += ybar * z[j, e]
            for k in range(Ks):
                e_, r = sk_ent[k], sk_rel[k]
                for d in range(D):
                    if z[e_, d] > 0.0:
                        if diag:
                            partW[s, r, d, 0] += t[k, d]
                        else:
                            for e in range(D):
                                partW[s, r, d, e] += t[k, e]

    return _weight_rhs_samples


_weight_rhs_samples = _for_weights(_make_weight_rhs_samples)


# ---------------------------------------------------------------------------
# "score": score-function (REINFORCE) baseline
# ---------------------------------------------------------------------------


@njit
def score_function_gradient(
    snd, rcv, rel, rkey, rk_ent, rk_rel, x, q, logit_rho, b, W, diag, uniforms, out
):
    """Rao-Blackwellized score-function estimate of dELBO / d logit q_id.

    ``E_q[(z_id - q_id) f_id(z)]`` with ``f_id`` the terms of log p(x, z) -
    log q(z) that involve z_id (its prior, the likelihood of the pairs of i,
    its own log q), from the S joint samples ``z_s = 1{uniforms[s] < q}``,
    and a per-coordinate control variate ``b_id = sum_s (z - q)^2 f / sum_s
    (z - q)^2`` (estimated from the same samples: an O(1/S) bias). A baseline
    for :func:`mcvi_mean_deltas`. Checked against finite differences of the
    enumerated true ELBO in
    ``test_score_function_gradient_is_unbiased_for_the_true_elbo_gradient``.
    """
    S, N, D = uniforms.shape
    P = x.shape[0]
    scores = np.empty((S, N, D))
    values = np.empty((S, N, D))
    for s in range(S):
        z = np.empty((N, D))
        _sample(uniforms[s], q, z)
        fr = np.empty((rk_ent.shape[0], D))
        if diag:
            _diagonal_fields(rk_ent, rk_rel, z, W, fr)
        else:
            _full_fields(rk_ent, rk_rel, z, W, fr)
        blanket = np.zeros(N)  # likelihood of the pairs of i: shared by all d
        for p in range(P):
            g = pair_log_likelihood(x[p], _eta(snd[p], rel[p], z, b, fr, rkey[p]))
            blanket[snd[p]] += g
            blanket[rcv[p]] += g
        for i in range(N):
            for d in range(D):
                zid, qid = z[i, d], q[i, d]
                f = blanket[i] + zid * logit_rho
                f -= math.log(qid) if zid > 0.0 else math.log1p(-qid)
                scores[s, i, d] = zid - qid
                values[s, i, d] = f
    for i in range(N):
        for d in range(D):
            sum_sf = 0.0
            sum_ss = 0.0
            sum_ssf = 0.0
            sum_score = 0.0
            for s in range(S):
                score, f = scores[s, i, d], values[s, i, d]
                sum_sf += score * f
                sum_ss += score * score
                sum_ssf += score * score * f
                sum_score += score
            cv = sum_ssf / sum_ss if sum_ss > 0.0 else 0.0
            out[i, d] = (sum_sf - cv * sum_score) / S


# ---------------------------------------------------------------------------
# stochastic steps: the pairs of a minibatch of entities
# ---------------------------------------------------------------------------


def link_keys(snd, rcv, rel, n_entities, n_relations):
    """Sorted int64 codes ``(i N + j) R + r`` of the triples (for membership)."""
    code = (snd.astype(np.int64) * n_entities + rcv) * n_relations + rel
    return np.sort(code)


@njit
def gather_ranges(indptr, order, centers):
    """``order[indptr[c]:indptr[c + 1]]`` for every c in ``centers``, concatenated.

    The rows of a CSR-like index (``order`` sorted by entity, ``indptr`` its
    (N + 1,) offsets) of the given entities; O(their number of rows).
    """
    total = 0
    for c in centers:
        total += indptr[c + 1] - indptr[c]
    out = np.empty(total, dtype=np.int64)
    k = 0
    for c in centers:
        for t in range(indptr[c], indptr[c + 1]):
            out[k] = order[t]
            k += 1
    return out


@njit
def sample_nonlinks(
    centers, n_nonlinks, m, n_entities, n_relations, ptr, order, partner, rel_of,
    seed
):
    """``m`` uniform non-link partners of every center entity, by rejection.

    For center i draws (j, r) uniformly among the (N - 1) R combinations
    with j != i and keeps those that are not among i's links in the role
    sampled (sender or receiver): the links ``order[ptr[i]:ptr[i + 1]]`` of
    a CSR-like index of that role, whose other ends are ``partner`` and
    relations ``rel_of`` (the store's ``out_ptr, out_order, rcv, rel`` for
    senders, ``in_ptr, in_order, snd, rel`` for receivers), until m are
    kept. A draw is checked against the center's own few links, which stay
    in cache, rather than searched among all links. Each kept partner is
    uniform over the center's non-links, so weighing a kept pair by
    (number of non-links of the center) / m gives an unbiased estimate of
    any sum over them (Gopalan et al., NIPS 2012, stratified sampling).
    ``n_nonlinks`` (B,) counts each center's non-links; a center with none
    gets m arbitrary partners (their weight is 0).
    Returns ``other`` and ``rel`` (len(centers) m,) int64. Checked in
    ``test_sample_nonlinks_are_uniform_non_links``.
    """
    # NPY002 is silenced on the np.random calls: numba's nopython mode supports
    # only the legacy np.random functions (no np.random.Generator in @njit code)
    np.random.seed(seed)  # noqa: NPY002
    B = centers.shape[0]
    other = np.empty(B * m, dtype=np.int64)
    rel = np.empty(B * m, dtype=np.int64)
    N, R = n_entities, n_relations
    for b in range(B):
        i = centers[b]
        kept = 0
        while kept < m:
            j = np.random.randint(0, N - 1)  # noqa: NPY002 (numba: legacy API)
            if j >= i:
                j += 1  # uniform over the entities other than i
            r = np.random.randint(0, R)  # noqa: NPY002 (numba: legacy API)
            is_link = False
            if n_nonlinks[b] > 0:
                for t in range(ptr[i], ptr[i + 1]):
                    p = order[t]
                    if partner[p] == j and rel_of[p] == r:
                        is_link = True
                        break
            if not is_link:
                other[b * m + kept] = j
                rel[b * m + kept] = r
                kept += 1
    return other, rel


@njit
def _exclude_partners(i, ptr, order, other, rel, r, q, Qs, Ms):
    """Subtract q_j and E[z_j z_j^T] of the listed partners j of i in relation r."""
    D = q.shape[1]
    for t in range(ptr[i], ptr[i + 1]):
        p = order[t]
        if rel[p] != r:
            continue
        j = other[p]
        for d in range(D):
            Qs[d] -= q[j, d]
            for e in range(D):
                Ms[d, e] -= q[j, d] * q[j, e]
            Ms[d, d] -= q[j, d] * (1.0 - q[j, d])


def sample_codes(uniforms, lq):
    """The joint samples ``1{uniforms[s] < lq}`` as uint8 (n_loc, S, D),
    each entity's S samples together (for lookups of random entities)."""
    S, n_loc, D = uniforms.shape
    zs = np.empty((n_loc, S, D), dtype=np.uint8)
    _sample_codes(uniforms, lq, zs)
    return zs


@njit(nogil=True)
def _sample_codes(uniforms, lq, zs):
    S, n_loc, D = uniforms.shape
    for s in range(S):
        for i in range(n_loc):
            for d in range(D):
                zs[i, s, d] = 1 if uniforms[s, i, d] < lq[i, d] else 0


def nonlink_control_variate(centers, lcen, n_nonlinks, partners, partner_rel,
                            q_all, q_sum, m_sum, ptr, order, other, link_rel,
                            lq, uniforms, b, W, h1, h2, out, zs=None):
    """Control variate of the sampled non-links of :func:`mcvi_mean_deltas`.

    A center's sum over its non-links of ``g(eta^{id=1}) - g(eta^{id=0})``
    is estimated from ``m`` uniform non-links weighted by (its non-links) /
    m. For a quadratic ``h(eta) = h1_r eta + h2_r eta^2`` the same sum of
    ``h(eta^{id=1}) - h(eta^{id=0})`` has an exact expectation over every
    non-link j (z_j ~ q_j, the center's z_i fixed by the sample): it needs
    only sum_j q_j and sum_j E[z_j z_j^T] over all entities (``q_sum``
    (D,), ``m_sum`` (D, D)), minus the center itself and its listed
    partners. This kernel adds ``1/S sum_s [exact sum of h - weighted
    sampled sum of h]`` to ``out[lcen[c], d]``: zero in expectation over
    the sampled non-links, so the estimate stays unbiased, and it cancels
    the part of the sampling noise that h follows.

    One role per call: for centers as senders ``V_r = W_r``, ``ptr``,
    ``order`` index the links by sender and ``other`` is their receiver;
    for receivers pass ``W`` transposed (``W.transpose(0, 2, 1)``), the
    in-link index and the senders. Then eta = b_r + z_i^T V_r z_j, and
    flipping z_id moves it by c_d = (V_r z_j)_d.

    Parameters
    ----------
    centers, lcen : int64 (B,), global and local ids of the centers.
    n_nonlinks : float64 (B,), each center's number of non-links in the role.
    partners, partner_rel : int64 (B m,), local ids and relations of the
        sampled non-links, m per center in the order of ``centers``.
    q_all : (N, D) every entity's q; ``q_sum``, ``m_sum`` its sums.
    ptr, order, other, link_rel : the listed links of the role.
    lq : (n_loc, D) q of the local entities; uniforms (S, n_loc, D) the
        samples of :func:`mcvi_mean_deltas`.
    b, W (or its transpose), h1, h2 (R,) : the coefficients of h.
    out : (n_loc, D), added to.
    zs : uint8 (n_loc, S, D) or None
        The samples ``1{uniforms < lq}`` with each entity's samples
        together (:func:`sample_codes`); None computes them. A step passes
        the same array to both roles.

    The sampled partners are looked up entity-major in ``zs`` (S D bytes
    per partner, where the uniforms and q of a partner lie in S + 1 rows
    of a large array), and large passes run on threads
    (:func:`~skbinvi._numba.run_parts`, ranges of centers, whose rows of
    ``out`` differ: the centers are distinct).

    Checked against an enumeration over every non-link in
    ``test_nonlink_control_variate_matches_enumeration``.
    """
    if zs is None:
        zs = sample_codes(uniforms, lq)
    B = centers.shape[0]
    S, D = zs.shape[1], zs.shape[2]
    m = partners.shape[0] // max(B, 1)
    W = np.ascontiguousarray(W)
    Wt = np.ascontiguousarray(W.transpose(0, 2, 1))
    # work per center, in multiply-adds (each cheaper than a log Phi, the unit
    # of _MIN_PARALLEL_WORK): about 4 D per sampled partner and sample (its
    # field, eta and the correction) and D^3 per relation (V_r M)
    per_center = S * m * D * 4 + W.shape[0] * D**3
    run_parts(_nonlink_cv_range, [
        (lo, hi, centers, lcen, n_nonlinks, partners, partner_rel, q_all, q_sum,
         m_sum, ptr, order, other, link_rel, zs, b, W, Wt, h1, h2, out)
        for lo, hi in _parts(B, per_center, _MIN_PARALLEL_WORK)
    ])


@njit(nogil=True)
def _nonlink_cv_range(lo, hi, centers, lcen, n_nonlinks, partners, partner_rel,
                      q_all, q_sum, m_sum, ptr, order, other, link_rel, zs, b, W,
                      Wt, h1, h2, out):
    """:func:`nonlink_control_variate` of the centers lo..hi-1 (``Wt`` is
    ``W`` transposed, for the fields of the sampled partners)."""
    n_loc, S, D = zs.shape
    B = centers.shape[0]
    R = W.shape[0]
    m = partners.shape[0] // max(B, 1)
    Qs = np.empty(D)
    Ms = np.empty((D, D))
    VQ = np.empty((R, D))
    VM = np.empty((R, D, D))
    VMV = np.empty((R, D))
    A = np.empty(D)
    c = np.empty(D)
    zi = np.empty((S, D))
    corr = np.empty(D)
    for k in range(lo, hi):
        if n_nonlinks[k] <= 0:
            continue
        i, li = centers[k], lcen[k]
        weight = n_nonlinks[k] / m
        for r in range(R):
            for d in range(D):
                Qs[d] = q_sum[d] - q_all[i, d]
                for e in range(D):
                    Ms[d, e] = m_sum[d, e] - q_all[i, d] * q_all[i, e]
                Ms[d, d] -= q_all[i, d] * (1.0 - q_all[i, d])
            _exclude_partners(i, ptr, order, other, link_rel, r, q_all, Qs, Ms)
            for d in range(D):
                acc = 0.0
                for e in range(D):
                    acc += W[r, d, e] * Qs[e]
                VQ[r, d] = acc
                for f in range(D):
                    acc = 0.0
                    for e in range(D):
                        acc += W[r, d, e] * Ms[e, f]
                    VM[r, d, f] = acc
                acc = 0.0
                for f in range(D):
                    acc += VM[r, d, f] * W[r, d, f]
                VMV[r, d] = acc
        for d in range(D):
            corr[d] = 0.0
        for s in range(S):
            for d in range(D):
                zi[s, d] = float(zs[li, s, d])
            # the exact sums over every non-link, relation by relation
            for r in range(R):
                if h1[r] == 0.0 and h2[r] == 0.0:
                    continue
                for e in range(D):
                    acc = 0.0
                    for d in range(D):
                        acc += zi[s, d] * W[r, d, e]
                    A[e] = acc
                for d in range(D):
                    vma = 0.0
                    for f in range(D):
                        vma += VM[r, d, f] * A[f]
                    corr[d] += h1[r] * VQ[r, d] + h2[r] * (
                        2.0 * b[r] * VQ[r, d] + 2.0 * (vma - zi[s, d] * VMV[r, d])
                        + VMV[r, d])
        # minus the weighted sampled sums: with c = V_r z_j and eta (z_id as
        # sampled), h(eta^{id=1}) - h(eta^{id=0}) = c_d (h1 + h2 (2 eta + (1 -
        # 2 z_id) c_d))
        for t in range(k * m, (k + 1) * m):
            lj, r = partners[t], partner_rel[t]
            if h1[r] == 0.0 and h2[r] == 0.0:
                continue
            for s in range(S):
                for d in range(D):
                    c[d] = 0.0
                for e in range(D):
                    if zs[lj, s, e] != 0:
                        for d in range(D):
                            c[d] += Wt[r, e, d]
                eta = b[r]
                for d in range(D):
                    eta += zi[s, d] * c[d]
                for d in range(D):
                    corr[d] -= weight * c[d] * (
                        h1[r] + h2[r] * (2.0 * eta + (1.0 - 2.0 * zi[s, d]) * c[d]))
        for d in range(D):
            out[li, d] += corr[d] / S


# ------------------------------------------- non-link sums over feature patterns
#
# A center's non-links are every other entity in every relation but its listed
# partners. Given one joint sample of every entity's features (a "pattern", the
# bits of z_j as an integer code), the sum of a center's flip terms over all of
# them depends on the other ends only through how many entities hold each
# pattern: sum over the patterns p present, times their counts, minus the center
# itself and its listed partners. With few features the patterns are few (at
# most 2^D), so the sum over a million non-links costs a few hundred terms.


def pattern_codes(z):
    """Integer codes ``sum_d z[..., d] 2^d`` of binary samples ``z`` (..., D),
    D <= 62, as int64 (...)."""
    D = z.shape[-1]
    return (z.astype(np.int64) << np.arange(D, dtype=np.int64)).sum(axis=-1)


def pattern_fields(codes, W):
    """Fields of patterns: ``(W_r p, W_r^T p)`` for every relation r and
    pattern code p of ``codes`` (P,), two float64 arrays of shape (R, P, D)."""
    D = W.shape[1]
    bits = ((codes[:, None] >> np.arange(D, dtype=np.int64)) & 1).astype(np.float64)
    return (np.ascontiguousarray(np.einsum("rde,pe->rpd", W, bits)),
            np.ascontiguousarray(np.einsum("red,pe->rpd", W, bits)))


@njit(inline="always")
def _add_pattern_flips(a, f, b, n, out):
    """``out[d] += n (g(eta^{d=1}) - g(eta^{d=0}))`` for the non-link of a
    center with features ``a`` (code) and a partner whose field is ``f``
    (D,): eta = b + sum_{d in a} f_d, g(eta) = log Phi(-eta). A zero field
    adds nothing."""
    D = f.shape[0]
    eta = b
    for d in range(D):
        if (a >> d) & 1:
            eta += f[d]
    g0 = log_ndtr(-eta)
    for d in range(D):
        c = f[d]
        if c == 0.0:
            continue
        if (a >> d) & 1:
            out[d] += n * (g0 - log_ndtr(-(eta - c)))
        else:
            out[d] += n * (log_ndtr(-(eta + c)) - g0)


def pattern_flip_sums(a_codes, fields_snd, fields_rcv, counts, b, out_snd, out_rcv):
    """Flip sums of centers with features ``a_codes`` (A,) over a population.

    ``out_snd[k, d] = sum_r sum_p counts[p] (g(eta^{d=1}) - g(eta^{d=0}))``
    with eta = b_r + a_k^T W_r p (the center as sender of every entity of
    pattern p in every relation) and ``out_rcv`` the same with eta = b_r +
    p^T W_r a_k (as receiver); g(eta) = log Phi(-eta). ``fields_snd``,
    ``fields_rcv`` (R, P, D): :func:`pattern_fields` of the population's
    patterns; ``counts`` (P,) float64 their numbers of entities. Checked
    against a sum over every entity in
    ``test_pattern_nonlink_deltas_match_enumeration``.
    """
    R, P, D = fields_snd.shape
    run_parts(_pattern_flip_range, [
        (lo, hi, a_codes, fields_snd, fields_rcv, counts, b, out_snd, out_rcv)
        for lo, hi in _parts(a_codes.shape[0], 2 * R * P * (D + 1),
                             _MIN_PARALLEL_WORK)
    ])


@njit(nogil=True)
def _pattern_flip_range(lo, hi, a_codes, fields_snd, fields_rcv, counts, b, out_snd,
                        out_rcv):
    R, P, D = fields_snd.shape
    for k in range(lo, hi):
        a = a_codes[k]
        for d in range(D):
            out_snd[k, d] = 0.0
            out_rcv[k, d] = 0.0
        for r in range(R):
            for p in range(P):
                _add_pattern_flips(a, fields_snd[r, p], b[r], counts[p], out_snd[k])
                _add_pattern_flips(a, fields_rcv[r, p], b[r], counts[p], out_rcv[k])


def pattern_nonlink_deltas(centers, lcen, a_codes, rows, table_snd, table_rcv,
                           population, out_ptr, out_order, rcv, in_ptr, in_order,
                           snd, link_rel, b, W, out):
    """Add the centers' non-link sums, averaged over samples, to ``out``.

    For center k (global id ``centers[k]``, row ``lcen[k]`` of ``out``) and
    sample s with features ``a_codes[k, s]``, the sum of its flip terms over
    its non-links in both roles is ``table_snd[rows[k, s]] +
    table_rcv[rows[k, s]]`` (:func:`pattern_flip_sums` of that code over the
    population sample) minus the terms of the center itself (every relation,
    both roles) and of its listed pairs (``out_ptr``, ``out_order``, ``rcv``
    by sender; ``in_ptr``, ``in_order``, ``snd`` by receiver; ``link_rel``),
    each partner j with its pattern ``population[j]``, as the tables counted
    it. ``out[lcen[k]] += mean over s``. Checked against a sum over every
    non-link in ``test_pattern_nonlink_deltas_match_enumeration``.
    """
    W = np.ascontiguousarray(W)
    Wt = np.ascontiguousarray(W.transpose(0, 2, 1))
    B, S = rows.shape
    D = W.shape[1]
    per_center = S * (D + 1) * (2 * W.shape[0]
                                + (out_ptr[-1] + in_ptr[-1]) // max(1, out_ptr.size))
    run_parts(_pattern_nonlink_range, [
        (lo, hi, centers, lcen, a_codes, rows, table_snd, table_rcv, population,
         out_ptr, out_order, rcv, in_ptr, in_order, snd, link_rel, b, W, Wt, out)
        for lo, hi in _parts(B, per_center, _MIN_PARALLEL_WORK)
    ])


@njit(inline="always")
def _pattern_field(V, p, f):
    """f = V p for the pattern code p (V (D, D))."""
    D = f.shape[0]
    for d in range(D):
        f[d] = 0.0
    for e in range(D):
        if (p >> e) & 1:
            for d in range(D):
                f[d] += V[d, e]


@njit(inline="always")
def _subtract_listed(i, a, ptr, order, other, link_rel, population, b, V, f, acc):
    """Subtract the flip terms of the listed pairs of center i (features
    ``a``) in one role (its CSR index ``ptr``, ``order``, their other ends
    ``other``; ``V`` = W for the sender's role, W transposed for the
    receiver's), each partner with its pattern in ``population``."""
    for t in range(ptr[i], ptr[i + 1]):
        e = order[t]
        p = population[other[e]]
        if p != 0:
            r = link_rel[e]
            _pattern_field(V[r], p, f)
            _add_pattern_flips(a, f, b[r], -1.0, acc)


@njit(nogil=True)
def _pattern_nonlink_range(lo, hi, centers, lcen, a_codes, rows, table_snd,
                           table_rcv, population, out_ptr, out_order, rcv, in_ptr,
                           in_order, snd, link_rel, b, W, Wt, out):
    S = rows.shape[1]
    R, D = W.shape[0], W.shape[1]
    f = np.empty(D)
    acc = np.empty(D)
    for k in range(lo, hi):
        i = centers[k]
        for d in range(D):
            acc[d] = 0.0
        own = population[i]
        for s in range(S):
            a, row = a_codes[k, s], rows[k, s]
            for d in range(D):
                acc[d] += table_snd[row, d] + table_rcv[row, d]
            if own != 0:  # the center itself: no pair with itself
                for r in range(R):
                    _pattern_field(W[r], own, f)
                    _add_pattern_flips(a, f, b[r], -1.0, acc)
                    _pattern_field(Wt[r], own, f)
                    _add_pattern_flips(a, f, b[r], -1.0, acc)
            _subtract_listed(i, a, out_ptr, out_order, rcv, link_rel, population, b,
                             W, f, acc)
            _subtract_listed(i, a, in_ptr, in_order, snd, link_rel, population, b, Wt,
                             f, acc)
        li = lcen[k]
        for d in range(D):
            out[li, d] += acc[d] / S
