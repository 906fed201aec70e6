"""Noisy-OR trained on an importance-weighted bound: an experiment, not a feature.

Used by ``bench_noisy_or.py --sections tighter`` to ask whether the causes that
end below a prior of 0.01 are pruned by the looseness of the mean-field ELBO
(the over-pruning of variational Bayes: MacKay, "Local minima, symmetry-breaking
and model pruning in variational free energy minimization", 2001; Burda,
Grosse and Salakhutdinov, ICLR 2016, find more active units with the tighter
IWAE bound) or by the likelihood itself.

:class:`RWSNoisyOR` is :class:`skbinvi.NoisyORFactorizer` whose minibatch
gradients are those of reweighted wake-sleep (Bornschein and Bengio, ICLR
2015), the standard importance-weighted training of models with discrete
latent variables. For each row, S exact samples z_s ~ q(z | x) give the
normalized importance weights w_s proportional to p(x, z_s) / q(z_s | x), and

- the model (theta, the leak, the prior mu) follows the gradient of the IWAE
  bound ``log 1/S sum_s p(x, z_s) / q(z_s | x)``, that is
  ``sum_s w_s grad log p(x, z_s)``; the bound tends to log p(x) as S grows;
- the encoder follows the wake-phase q update ``sum_s w_s grad log q(z_s | x)``
  (for Bernoulli logits: ``sum_s w_s z_s - q``), which fits q to the posterior
  by the inclusive divergence. The ACP encoder's logits also depend on theta
  and mu; that path is not followed (theta and mu are the model's).

Everything else (initialization, Adam, lazy row updates, re-seeding of unused
causes, ``transform`` and ``score``) is the estimator's own. The kernel's
bound equals ``_kernels.importance_log_likelihood`` for the same samples and
its gradients with respect to theta, the leak and logit mu equal finite
differences of that bound, and its wake-phase gradient equals a NumPy
reference (checked by
:func:`self_check`, which the benchmark runs before fitting).
"""

import math

import numpy as np
import scipy.sparse as sp

from skbinvi._math import dlog1mexp, sigmoid
from skbinvi._numba import njit
from skbinvi.noisy_or import _kernels
from skbinvi.noisy_or._estimator import NoisyORFactorizer


@njit
def rws_gradients(indptr, indices, theta, leak, colsum, leak_sum, logit_q,
                  logit_prior, uniforms, g_theta, g_leak, g_theta_dense,
                  g_logit_q, g_logit_prior, iwae):
    """Reweighted wake-sleep gradients of a binary CSR batch (sums over rows).

    Same layout as ``_kernels.relaxed_elbo_grad``: ``uniforms`` (B, S, K)
    give the exact samples ``z_sk = 1{uniforms[n, s, k] < q_nk}``; the full
    theta gradient is ``g_theta[i, k] + g_theta_dense[k]`` and the leak's
    ``g_leak[i] - B``. ``g_logit_q`` is the wake-phase gradient
    ``sum_s w_s z_s - q`` and ``iwae`` the bound per row (nats). O(nnz K S).
    """
    K = theta.shape[1]
    B = logit_q.shape[0]
    S = uniforms.shape[1]
    g_theta[:] = 0.0
    g_leak[:] = 0.0
    g_theta_dense[:] = 0.0
    g_logit_prior[:] = 0.0
    active_sum = np.empty(K)
    z = np.empty((S, K))
    log_w = np.empty(S)
    w = np.empty(S)
    ez = np.empty(K)
    for n in range(B):
        _kernels.log_importance_weights(
            indptr, indices, theta, leak, colsum, leak_sum, logit_q, logit_prior,
            n, uniforms[n], active_sum, z, log_w)
        top = log_w.max()
        total = 0.0
        for s in range(S):
            w[s] = math.exp(log_w[s] - top)
            total += w[s]
        for s in range(S):
            w[s] /= total
        iwae[n] = top + math.log(total / S)
        for k in range(K):
            ez[k] = 0.0
            for s in range(S):
                ez[k] += w[s] * z[s, k]
            g_logit_q[n, k] = ez[k] - sigmoid(logit_q[n, k])
            g_logit_prior[k] += ez[k] - sigmoid(logit_prior[k])
            g_theta_dense[k] -= ez[k]
        for s in range(S):
            for j in range(indptr[n], indptr[n + 1]):
                i = indices[j]
                u = leak[i]
                for k in range(K):
                    u += theta[i, k] * z[s, k]
                fp = dlog1mexp(u) * w[s]
                g_leak[i] += fp
                for k in range(K):
                    g_theta[i, k] += fp * z[s, k]
        # active features are not absent: give back the dense part
        for j in range(indptr[n], indptr[n + 1]):
            i = indices[j]
            g_leak[i] += 1.0
            for k in range(K):
                g_theta[i, k] += ez[k]


class RWSNoisyOR(NoisyORFactorizer):
    """:class:`~skbinvi.NoisyORFactorizer` ("acp" or "avi") trained by
    reweighted wake-sleep with ``n_importance`` samples per row (see the
    module docstring). Experiment only: ``n_mc_samples``, ``temperature`` and
    its schedule are not used in training."""

    def __init__(self, n_components=50, *, n_importance=5, **kwargs):
        super().__init__(n_components, **kwargs)
        self.n_importance = n_importance

    def get_params(self, deep=True):
        params = super().get_params(deep)
        params["n_importance"] = self.n_importance
        return params

    def _initialize(self, X, y, rng):
        super()._initialize(X, y, rng)
        self._importance_rng = np.random.RandomState(rng.randint(2**31))

    def _batch_gradients(self, X, uniforms, temperature, logit_q=None,
                         refine_uniforms=None):
        # (no relaxed samples, so no semi-amortized steps either: the
        # refine_uniforms that fit draws for "avi" are not used)
        if self.inference not in ("acp", "avi"):
            raise ValueError("RWSNoisyOR supports inference='acp' and 'avi' only.")
        B, K = X.shape[0], self.n_components
        indptr, features, local, theta, leak, head = self._batch_columns(X)
        logit_q, cache = self._encode(X, indptr, local, theta, head)
        draws = self._importance_rng.random_sample((B, self.n_importance, K))
        g_theta, g_leak = np.empty_like(theta), np.empty_like(leak)
        g_theta_dense, g_logit_prior = np.empty(K), np.empty(K)
        g_logit_q, iwae = np.empty((B, K)), np.empty(B)
        rws_gradients(indptr, local, theta, leak, self._colsum, self._leak_sum[0],
                      logit_q, self._logit_prior, draws, g_theta, g_leak,
                      g_theta_dense, g_logit_q, g_logit_prior, iwae)
        # the wake-phase update moves the encoder's parameters only: the share
        # of theta and mu in the ACP logits goes to scratch arrays
        encoder_grads = self._encoder_backward(
            X, indptr, local, features.shape[0], g_logit_q, cache, head, theta,
            np.zeros_like(theta), np.zeros(K), np.zeros(K))
        grads = [g_theta, g_leak, g_logit_prior, *encoder_grads]
        # the epoch's "training ELBO" of this experiment is the IWAE bound
        return features, grads, g_theta_dense, iwae, iwae


def self_check(seed=0):
    """Check :func:`rws_gradients` on a small random problem; raise if wrong.

    The bound must equal ``_kernels.importance_log_likelihood`` with the same
    samples, and the full theta gradient must equal central finite
    differences of the summed bound (the samples do not depend on theta).
    """
    rng = np.random.RandomState(seed)
    B, D, K, S = 4, 12, 3, 6
    X = sp.csr_matrix((rng.random_sample((B, D)) < 0.4).astype(float))
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    theta = rng.uniform(0.05, 1.0, (D, K))
    leak = rng.uniform(0.01, 0.3, D)
    logit_q = rng.normal(0, 1.5, (B, K))
    logit_prior = rng.normal(-1, 0.5, K)
    common = rng.random_sample((S, K))
    draws = np.broadcast_to(common, (B, S, K)).copy()

    def bound(th, lk, lp):
        out = np.empty(B)
        g = [np.empty_like(th), np.empty(D), np.empty(K), np.empty((B, K)),
             np.empty(K)]
        rws_gradients(indptr, indices, th, lk, th.sum(0), lk.sum(), logit_q,
                      lp, draws, g[0], g[1], g[2], g[3], g[4], out)
        return out, g

    iwae, (g_theta, g_leak, g_dense, g_q, g_prior) = bound(theta, leak, logit_prior)
    # wake-phase q gradient: sum_s w_s z_s - q, with weights from a NumPy reference
    q = 1.0 / (1.0 + np.exp(-logit_q))
    mu = 1.0 / (1.0 + np.exp(-logit_prior))
    dense_x = X.toarray()
    for n in range(B):
        z = (common < q[n]).astype(float)  # (S, K)
        u = leak + z @ theta.T  # (S, D)
        log_px = np.where(dense_x[n] > 0, np.log(-np.expm1(-u)), -u).sum(1)
        log_w = (log_px + (z * np.log(mu) + (1 - z) * np.log1p(-mu)).sum(1)
                 - (z * np.log(q[n]) + (1 - z) * np.log1p(-q[n])).sum(1))
        w = np.exp(log_w - log_w.max())
        w /= w.sum()
        np.testing.assert_allclose(g_q[n], w @ z - q[n], rtol=1e-9, atol=1e-12)
    ref = np.empty(B)
    _kernels.importance_log_likelihood(indptr, indices, theta, leak, theta.sum(0),
                                       leak.sum(), logit_q, logit_prior, common, ref)
    np.testing.assert_allclose(iwae, ref, rtol=1e-12, atol=1e-12)
    # full gradients of the summed bound against central finite differences
    eps = 1e-6
    for which, value, grad in ((0, theta, g_theta + g_dense), (1, leak, g_leak - B),
                               (2, logit_prior, g_prior)):
        for idx in np.ndindex(value.shape):
            args = [theta, leak, logit_prior]
            up, down = value.copy(), value.copy()
            up[idx] += eps
            down[idx] -= eps
            args[which] = up
            f_up = bound(*args)[0].sum()
            args[which] = down
            f_down = bound(*args)[0].sum()
            np.testing.assert_allclose(grad[idx], (f_up - f_down) / (2 * eps),
                                       rtol=1e-5, atol=1e-7)
