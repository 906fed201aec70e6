"""The noisy-OR factor model with amortized VI ("avi") written in Pyro, as a peer.

The same model, initialization, training recipe and test metric as
``skbinvi.NoisyORFactorizer(inference="avi")`` ([Yan] = Yan, Ailem & Sha,
AISTATS 2020, Algorithm 1), written the way a user of a probabilistic
programming library would write it: a ``model`` and a ``guide`` with an MLP
encoder, trained by ``SVI`` with ``Trace_ELBO`` on dense minibatch tensors.
See ``benchmarks/peers/README.md`` for what is and is not the same.

Usage (from the repository root)::

    python benchmarks/peers/pyro_noisy_or.py --text body --components 100 \
        --epochs 20 --out results.json [--with-skbinvi] [--threads 1]
    python benchmarks/peers/pyro_noisy_or.py --selfcheck

Needs ``torch`` and ``pyro-ppl`` (``pip install -e ".[peers]"``); the
package ``skbinvi`` itself never imports them.
"""

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, logit

HERE = os.path.dirname(os.path.abspath(__file__))

# Numba kernels of skbinvi compile into a private cache that is deleted at exit
# (as benchmarks/bench_noisy_or.py does), so the checkout's __pycache__ is not
# written. Must be set before numba is imported.
_NUMBA_CACHE = None
if "NUMBA_CACHE_DIR" not in os.environ:
    _NUMBA_CACHE = tempfile.mkdtemp(prefix="pyro_noisy_or_numba_")
    os.environ["NUMBA_CACHE_DIR"] = _NUMBA_CACHE

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402
from pyro.distributions import constraints  # noqa: E402
from pyro.infer import SVI, Trace_ELBO  # noqa: E402
from pyro.optim import Adam  # noqa: E402

import skbinvi  # noqa: E402  (as installed: pip install -e ".[peers]")
from skbinvi.datasets import load_reuters  # noqa: E402

# The recipe of NoisyORFactorizer's defaults ([Yan] Algorithm 1).
BATCH_SIZE = 128
N_PARTICLES = 10  # M relaxed samples per row
HIDDEN = 100  # one hidden layer of ReLU units
LEARNING_RATE = 0.01
TEMPERATURE, TEMPERATURE_DECAY, MIN_TEMPERATURE = 0.5, 0.05, 0.2
N_SCORE_SAMPLES = 100  # exact discrete samples of q per row for the test ELBO
SEED_WEIGHT = 0.3  # skbinvi.noisy_or._estimator._SEED_WEIGHT (init="data")
LN2 = math.log(2.0)


def temperature(epoch):
    """Temperature of epoch ``epoch`` (from 0), as NoisyORFactorizer._temperature."""
    return max(MIN_TEMPERATURE, TEMPERATURE * math.exp(-TEMPERATURE_DECAY * epoch))


# ------------------------------------------------------------ initialization
def _softplus_inverse(y):
    return y + np.log(-np.expm1(-y))


def _glorot(fan_in, fan_out, rng):
    """skbinvi.noisy_or._encoder.init_layer: Glorot-uniform weights, zero intercepts."""
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=(fan_in, fan_out)), np.zeros(fan_out)


def initial_parameters(X, n_components, seed, hidden=HIDDEN):
    """The initial parameters of NoisyORFactorizer(inference="avi", init="data").

    Replays ``NoisyORFactorizer._initialize`` with the same random draws in the
    same order, so that ``random_state=seed`` gives both implementations the
    same starting point (checked in ``--selfcheck``). X: binary CSR (n, D).
    Returns a dict of float64 arrays; "W1" is (D, H) and "W2" (H, K) as in
    skbinvi (fan_in, fan_out), and "uniforms" are the common random numbers
    (N_SCORE_SAMPLES, K) that ``NoisyORFactorizer.score`` uses.
    """
    rng = np.random.RandomState(seed)
    n_samples, n_features = X.shape
    K = n_components
    freq = np.asarray(X.sum(axis=0)).ravel() / n_samples
    freq = np.clip(freq, 1.0 / (n_samples + 1), 0.5)
    # skbinvi stores softplus_inverse of this and applies softplus: same value
    leak = -np.log1p(-freq)
    theta = rng.uniform(0.5, 1.5, size=(n_features, K)) / n_features
    seeds = rng.choice(n_samples, size=K, replace=n_samples < K)
    theta += SEED_WEIGHT * X[seeds].toarray().T
    logit_mu = np.full(K, logit(min(0.5, 5.0 / K) if K > 1 else 0.5))
    W1, b1 = _glorot(n_features, hidden, rng)
    W2, b2 = _glorot(hidden, K, rng)
    b2[:] = logit_mu  # q starts at the prior
    uniforms = rng.random_sample((N_SCORE_SAMPLES, K))
    return dict(theta=theta, leak=leak, logit_mu=logit_mu, W1=W1, b1=b1, W2=W2,
                b2=b2, uniforms=uniforms)


# -------------------------------------------------------- the Pyro program
class Encoder(torch.nn.Module):
    """x (B, D) -> logit q(z = 1 | x) (B, K): one hidden ReLU layer."""

    def __init__(self, n_features, n_components, hidden=HIDDEN):
        super().__init__()
        self.hidden = torch.nn.Linear(n_features, hidden)
        self.out = torch.nn.Linear(hidden, n_components)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def log1mexp(r):
    """log(1 - exp(-r)) for r > 0.

    Accurate for small r, where 1 - exp(-r) cancels; for large r its absolute
    error is below the dtype's epsilon (Maechler's second branch, log1p(-exp(-r)),
    would only add relative accuracy to a term that is ~0, at the price of
    another pass over the (particles, B, D) tensor).
    """
    return torch.log(-torch.expm1(-r))


RELAXATIONS = ("logistic", "relaxed-bernoulli", "straight-through")


class PyroNoisyOR:
    """Noisy-OR model + amortized guide; ``relaxation`` picks the z distribution.

    The relaxed z of [Yan] Algorithm 1 is the binary Concrete
    z~ = sigmoid((logit + L) / tau), L standard logistic, in the model
    (logit = logit mu) and in the guide (logit = encoder(x)):

    - "logistic" (default): the sample site is the logit-space variable
      y = (logit + L) / tau ~ Logistic(logit / tau, 1 / tau) and z~ = sigmoid(y)
      (Maddison et al. 2017, appendix C: score the densities in logit space).
      Same objective as "relaxed-bernoulli", computed stably.
    - "relaxed-bernoulli": z~ ~ RelaxedBernoulli(tau, logits). torch scores
      z~ through sigmoid and back with clamped probabilities, which biases the
      log-density ratio (the KL term) once |logit + L| / tau is large: in
      float32 at tau = 0.2 already for |logit + L| > 3.2 (see README).
    - "straight-through": RelaxedBernoulliStraightThrough (hard 0/1 samples in
      the likelihood, relaxed gradient; its densities are those of
      "relaxed-bernoulli", with the same clamping).
    """

    def __init__(self, init, dtype, relaxation="logistic"):
        self.init = {k: torch.as_tensor(v, dtype=dtype) for k, v in init.items()}
        D, K = init["theta"].shape
        self.encoder = Encoder(D, K, init["W1"].shape[1]).to(dtype)
        with torch.no_grad():  # NoisyORFactorizer's encoder initialization
            self.encoder.hidden.weight.copy_(self.init["W1"].T)
            self.encoder.hidden.bias.copy_(self.init["b1"])
            self.encoder.out.weight.copy_(self.init["W2"].T)
            self.encoder.out.bias.copy_(self.init["b2"])
        self.relaxation = relaxation
        self.dtype = dtype

    def relaxed_z(self, tau, logits):
        """pyro.sample of the relaxed z (particles, B, K) under the current plates."""
        if self.relaxation == "logistic":
            y = pyro.sample("z", dist.Logistic(logits / tau, 1.0 / tau).to_event(1))
            return torch.sigmoid(y)
        Z = (dist.RelaxedBernoulli if self.relaxation == "relaxed-bernoulli"
             else dist.RelaxedBernoulliStraightThrough)
        return pyro.sample("z", Z(tau, logits=logits).to_event(1))

    def model(self, x, tau, n_total, idx):
        # theta = softplus(a) >= 0, leak = softplus(b), mu = sigmoid(c)
        theta = pyro.param("theta", lambda: self.init["theta"],
                           constraint=constraints.softplus_positive)  # (D, K)
        leak = pyro.param("leak", lambda: self.init["leak"],
                          constraint=constraints.softplus_positive)  # (D,)
        logit_mu = pyro.param("logit_mu", lambda: self.init["logit_mu"])  # (K,)
        with pyro.plate("docs", n_total, subsample=idx):
            z = self.relaxed_z(tau, logit_mu)  # z ~ Bernoulli(mu), relaxed
            rate = leak + z @ theta.T  # (particles, B, D)
            # Bernoulli(probs = 1 - exp(-rate)), written with its logits
            # log(e^rate - 1) = rate + log(1 - e^-rate): exact log p(x_i = 0) = -rate
            pyro.sample("x", dist.Bernoulli(logits=rate + log1mexp(rate)).to_event(1),
                        obs=x)

    def guide(self, x, tau, n_total, idx):
        pyro.module("encoder", self.encoder)
        with pyro.plate("docs", n_total, subsample=idx):
            self.relaxed_z(tau, self.encoder(x))  # q(z | x), relaxed

    def numpy_parameters(self):
        """theta (D, K), leak, logit_mu and the encoder weights, float64 numpy."""
        enc = self.encoder
        out = {name: pyro.param(name).detach().double().numpy()
               for name in ("theta", "leak", "logit_mu")}
        out.update(W1=enc.hidden.weight.detach().double().numpy().T,
                   b1=enc.hidden.bias.detach().double().numpy(),
                   W2=enc.out.weight.detach().double().numpy().T,
                   b2=enc.out.bias.detach().double().numpy())
        return out


# ----------------------------------------------------------- the test ELBO
def encoder_logits(X, W1, b1, W2, b2):
    """logit q of the rows of X (CSR), float64: the AVI encoder (ReLU MLP)."""
    h = np.maximum(np.asarray(X @ W1) + b1, 0.0)
    return h @ W2 + b2


def np_log1mexp(u):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(u < LN2, np.log(-np.expm1(-np.minimum(u, LN2))),
                        np.log1p(-np.exp(-np.maximum(u, LN2))))


def discrete_elbo(X, theta, leak, logit_q, logit_mu, uniforms):
    """True ELBO per row (nats), as ``skbinvi.noisy_or._kernels.discrete_elbo``.

    ``1/S sum_s sum_{i: x_i=1} log(1 - exp(-u_si)) - sum_{i: x_i=0}(theta_i0 +
    sum_k theta_ik q_k) - sum_k KL(Bern(q_k) || Bern(mu_k))`` with
    ``u_si = theta_i0 + sum_k theta_ik z_sk`` and the exact discrete samples
    ``z_sk = 1{uniforms[s, k] < q_k}`` (common random numbers, every row).
    X: binary CSR (B, D); theta (D, K); uniforms (S, K).
    """
    X = sp.csr_matrix(X)
    q = expit(logit_q)
    sp_q, sp_mu = np.logaddexp(0.0, logit_q), np.logaddexp(0.0, logit_mu)
    kl = q * (logit_q - logit_mu) - sp_q + sp_mu
    active_theta = np.asarray(X @ theta)  # sum_{i: x_i=1} theta_ik
    active_leak = np.asarray(X @ leak).ravel()
    exact = (-(leak.sum() - active_leak)
             - ((theta.sum(axis=0) - active_theta) * q).sum(axis=1)
             - kl.sum(axis=1))
    S = uniforms.shape[0]
    positive = np.zeros(X.shape[0])
    for n in range(X.shape[0]):
        idx = X.indices[X.indptr[n]:X.indptr[n + 1]]
        if idx.size == 0:
            continue
        z = (uniforms < q[n]).astype(np.float64)  # (S, K)
        u = z @ theta[idx].T + leak[idx]  # (S, active)
        positive[n] = np_log1mexp(u).sum() / S
    return exact + positive


def test_elbo(params, X, uniforms):
    logit_q = encoder_logits(X, params["W1"], params["b1"], params["W2"], params["b2"])
    return float(discrete_elbo(X, params["theta"], params["leak"], logit_q,
                               params["logit_mu"], uniforms).mean())


# --------------------------------------------------------------- training
def train_pyro(X_train, X_test, n_components, n_epochs, seed, dtype, relaxation,
               log=print):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)  # torch, numpy and random
    init = initial_parameters(X_train, n_components, seed)
    net = PyroNoisyOR(init, dtype, relaxation)
    # dense minibatch tensors, indexed from one dense copy of the training set
    x_all = torch.as_tensor(X_train.toarray(), dtype=dtype)
    N = x_all.shape[0]
    svi = SVI(net.model, net.guide, Adam({"lr": LEARNING_RATE}),
              Trace_ELBO(num_particles=N_PARTICLES, vectorize_particles=True,
                         max_plate_nesting=1))
    wall, cpu, objective = [], [], []
    for epoch in range(n_epochs):
        tau = torch.tensor(temperature(epoch), dtype=dtype)
        t0, c0 = time.perf_counter(), time.process_time()
        perm = torch.randperm(N)
        total = 0.0
        for start in range(0, N, BATCH_SIZE):
            idx = perm[start:start + BATCH_SIZE]
            # the plate scales the minibatch by N / B: loss = -N * mean relaxed ELBO
            total += svi.step(x_all[idx], tau, N, idx) * len(idx) / N
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        objective.append(-total / N)
        log(f"  pyro  epoch {epoch + 1}: relaxed ELBO {objective[-1]:.4f} nats/doc, "
            f"tau {float(tau):.3f}, {wall[-1]:.2f} s wall, {cpu[-1]:.2f} s CPU")
    params = net.numpy_parameters()
    return dict(
        seconds_per_epoch_wall=wall,
        seconds_per_epoch_cpu=cpu,
        train_relaxed_elbo=objective,
        test_elbo=test_elbo(params, X_test, init["uniforms"]),
        train_elbo=test_elbo(params, X_train, init["uniforms"]),
    )


def train_skbinvi(X_train, X_test, n_components, n_epochs, seed, log=print):
    from skbinvi import NoisyORFactorizer

    est = NoisyORFactorizer(inference="avi", n_components=n_components,
                            learning_rate=LEARNING_RATE, random_state=seed)
    wall, cpu = [], []
    for epoch in range(n_epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        est.partial_fit(X_train)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        log(f"  skbinvi epoch {epoch + 1}: ELBO estimate {est.elbo_history_[-1]:.4f} "
            f"nats/doc, {wall[-1]:.2f} s wall, {cpu[-1]:.2f} s CPU"
            + (" (includes JIT compilation)" if epoch == 0 else ""))
    return dict(
        seconds_per_epoch_wall=wall,
        seconds_per_epoch_cpu=cpu,
        train_elbo_history=est.elbo_history_.tolist(),
        test_elbo=float(est.score(X_test)),
        train_elbo=float(est.score(X_train)),
    )


def _median_after_first(times):
    """Median of epochs 2..N (epoch 1 includes warm-up / JIT); epoch 1 if N = 1."""
    return statistics.median(times[1:] if len(times) > 1 else times)


# -------------------------------------------------------------- selfcheck
def selfcheck():
    """Check the pieces this comparison rests on against skbinvi; exit 1 on failure."""
    from sklearn.utils import check_random_state

    from skbinvi import NoisyORFactorizer
    from skbinvi.datasets import make_noisy_or
    from skbinvi.noisy_or import _kernels

    results, ok = {}, True

    def report(name, err, tol):
        nonlocal ok
        passed = bool(err <= tol)
        ok &= passed
        results[name] = dict(max_abs_diff=float(err), tol=tol, passed=passed)
        print(f"  {name:<50s} max |diff| = {err:.3e}  (tol {tol:g})  "
              f"{'OK' if passed else 'FAIL'}")

    # 1. discrete_elbo against skbinvi's kernel, same theta, leak, logits, uniforms
    rng = np.random.RandomState(1)
    B, D, K, S = 40, 60, 7, 100
    dense = (rng.random_sample((B, D)) < 0.15).astype(np.float64)
    dense[3] = 0.0  # a document with no words
    X = sp.csr_matrix(dense)
    theta = rng.gamma(0.5, 1.0, size=(D, K))
    theta[rng.random_sample((D, K)) < 0.3] = 0.0
    leak = rng.uniform(1e-4, 0.3, size=D)
    logit_q = rng.normal(0.0, 3.0, size=(B, K))
    logit_q[0, :] = [40.0, -40.0, 0.0, 15.0, -15.0, 2.0, -2.0]  # saturated q
    logit_mu = rng.normal(-1.0, 1.0, size=K)
    uniforms = rng.random_sample((S, K))
    ref = np.empty(B)
    _kernels.discrete_elbo(X.indptr.astype(np.int64), X.indices.astype(np.int64),
                           theta, leak, theta.sum(axis=0), leak.sum(), logit_q,
                           logit_mu, uniforms, ref)
    ours = discrete_elbo(X, theta, leak, logit_q, logit_mu, uniforms)
    report("discrete ELBO vs _kernels.discrete_elbo", np.max(np.abs(ours - ref)), 1e-9)

    # 2. the initialization replays NoisyORFactorizer._initialize exactly
    Xs, _ = make_noisy_or(300, 40, 5, random_state=0)
    Xs = sp.csr_matrix(Xs, dtype=np.float64)
    mine = initial_parameters(Xs, 6, seed=0, hidden=HIDDEN)
    est = NoisyORFactorizer(inference="avi", n_components=6, random_state=0)
    est._check_X(Xs, reset=True)
    est._initialize(Xs, check_random_state(0))
    pairs = [(mine["theta"], est._theta), (mine["leak"], est._leak),
             (mine["logit_mu"], est._logit_prior),
             (mine["W1"], est.encoder_coefs_[0]),
             (mine["b1"], est.encoder_intercepts_[0]),
             (mine["W2"], est.encoder_coefs_[1]),
             (mine["b2"], est.encoder_intercepts_[1]),
             (mine["uniforms"], est._score_uniforms)]
    report("initial parameters vs NoisyORFactorizer",
           max(np.max(np.abs(a - b)) for a, b in pairs), 1e-12)

    # 3. end to end: our test ELBO of a trained skbinvi model equals its score
    est = NoisyORFactorizer(inference="avi", n_components=6, learning_rate=0.01,
                            random_state=0)
    est.partial_fit(Xs[:200])
    est.partial_fit(Xs[:200])
    params = dict(theta=est.components_.T, leak=est.leak_, logit_mu=logit(est.prior_),
                  W1=est.encoder_coefs_[0], b1=est.encoder_intercepts_[0],
                  W2=est.encoder_coefs_[1], b2=est.encoder_intercepts_[1])
    err = abs(test_elbo(params, Xs[200:], est._score_uniforms) - est.score(Xs[200:]))
    report("test ELBO vs NoisyORFactorizer.score", err, 1e-9)

    # 4. the Pyro model's likelihood at hard z is the noisy-OR likelihood
    torch_theta = torch.as_tensor(theta)
    torch_leak = torch.as_tensor(leak)
    z = torch.as_tensor((uniforms[:B] < expit(logit_q)).astype(np.float64))
    x = torch.as_tensor(X.toarray())
    rate = torch_leak + z @ torch_theta.T
    pyro_ll = dist.Bernoulli(logits=rate + log1mexp(rate)).to_event(1).log_prob(x)
    u = z.numpy() @ theta.T + leak
    ref_ll = np.where(X.toarray() > 0, np_log1mexp(u), -u).sum(axis=1)
    report("Pyro likelihood vs noisy-OR formula (float64)",
           np.max(np.abs(pyro_ll.numpy() - ref_ll)), 1e-9)

    # 5. the logit-space density is torch's LogitRelaxedBernoulli density
    from torch.distributions.relaxed_bernoulli import LogitRelaxedBernoulli

    tau = torch.tensor(0.3, dtype=torch.float64)
    lg = torch.as_tensor(rng.normal(0.0, 4.0, size=50))
    y = torch.as_tensor(rng.normal(0.0, 30.0, size=50))
    err = (dist.Logistic(lg / tau, 1.0 / tau).log_prob(y)
           - LogitRelaxedBernoulli(tau, logits=lg).log_prob(y)).abs().max().item()
    report("Logistic(l/tau, 1/tau) vs LogitRelaxedBernoulli", err, 1e-9)

    # 6. SVI steps run and their losses are finite, in every relaxation
    for relaxation in RELAXATIONS:
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        net = PyroNoisyOR(initial_parameters(Xs, 6, 0), torch.float32, relaxation)
        svi = SVI(net.model, net.guide, Adam({"lr": LEARNING_RATE}),
                  Trace_ELBO(num_particles=N_PARTICLES, vectorize_particles=True,
                             max_plate_nesting=1))
        idx = torch.arange(BATCH_SIZE)
        xb = torch.as_tensor(Xs[:BATCH_SIZE].toarray(), dtype=torch.float32)
        losses = [svi.step(xb, torch.tensor(0.5), Xs.shape[0], idx) for _ in range(3)]
        finite = all(math.isfinite(v) for v in losses)
        ok &= finite
        results[f"svi_step_{relaxation}"] = dict(losses=losses, passed=finite)
        print(f"  SVI steps ({relaxation}): loss per doc "
              + ", ".join(f"{v / Xs.shape[0]:.3f}" for v in losses)
              + f"  {'OK' if finite else 'FAIL'}")
    return ok, results


# -------------------------------------------------------------------- main
def _versions():
    import numba
    import sklearn

    return dict(python=platform.python_version(), numpy=np.__version__,
                torch=torch.__version__, pyro=pyro.__version__,
                numba=numba.__version__, sklearn=sklearn.__version__,
                skbinvi=skbinvi.__version__)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", choices=["headline", "body"], default="headline")
    parser.add_argument("--components", "-K", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1, as skbinvi's "
                             "single-threaded Numba kernels)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="torch dtype of the Pyro run (default float32, torch's "
                             "default; skbinvi computes in float64)")
    parser.add_argument("--relaxation", choices=RELAXATIONS, default="logistic",
                        help="relaxed distribution of z in model and guide "
                             "(see PyroNoisyOR; default logistic)")
    parser.add_argument("--validate", action="store_true",
                        help="keep Pyro's argument/support validation on (Pyro's "
                             "default; off here, as for a debugged model run for "
                             "speed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--with-skbinvi", action="store_true",
                        help="also train NoisyORFactorizer(inference='avi') with "
                             "partial_fit per epoch and print a side-by-side table")
    parser.add_argument("--out", help="JSON file for the results")
    parser.add_argument("--selfcheck", action="store_true",
                        help="check the ELBO, the initialization and the model "
                             "against skbinvi on tiny problems, then exit")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    pyro.enable_validation(args.validate)

    if args.selfcheck:
        print("selfcheck:")
        ok, results = selfcheck()
        if args.out:
            with open(args.out, "w") as f:
                json.dump(dict(selfcheck=results, passed=ok, versions=_versions()), f,
                          indent=2)
        print("selfcheck", "passed" if ok else "FAILED")
        return 0 if ok else 1

    X_train = load_reuters(subset="train", text=args.text).data
    X_test = load_reuters(subset="test", text=args.text).data
    dtype = getattr(torch, args.dtype)
    print(f"Reuters {args.text}: train {X_train.shape}, test {X_test.shape}, "
          f"K={args.components}, {args.epochs} epochs, torch threads "
          f"{torch.get_num_threads()}, {args.dtype}, relaxation {args.relaxation}, "
          f"Pyro validation {'on' if args.validate else 'off'}")

    runs = {}
    runs["pyro"] = train_pyro(X_train, X_test, args.components, args.epochs,
                              args.seed, dtype, args.relaxation)
    if args.with_skbinvi:
        runs["skbinvi"] = train_skbinvi(X_train, X_test, args.components,
                                        args.epochs, args.seed)
    for run in runs.values():
        run["median_seconds_per_epoch_wall"] = _median_after_first(
            run["seconds_per_epoch_wall"])
        run["median_seconds_per_epoch_cpu"] = _median_after_first(
            run["seconds_per_epoch_cpu"])

    print(f"\nseconds per epoch: median of epochs 2..{args.epochs}; test ELBO: "
          f"{N_SCORE_SAMPLES} exact samples of q per document, nats/doc, after "
          f"{args.epochs} epochs")
    print(f"{'':<10s}{'wall s/ep':>11s}{'CPU s/ep':>11s}{'test ELBO':>12s}"
          f"{'train ELBO':>12s}")
    for name, run in runs.items():
        print(f"{name:<10s}{run['median_seconds_per_epoch_wall']:>11.3f}"
              f"{run['median_seconds_per_epoch_cpu']:>11.3f}"
              f"{run['test_elbo']:>12.3f}{run['train_elbo']:>12.3f}")
    ratios = None
    if "skbinvi" in runs:
        p, s = runs["pyro"], runs["skbinvi"]
        wall, cpu = "median_seconds_per_epoch_wall", "median_seconds_per_epoch_cpu"
        ratios = dict(
            wall=p[wall] / s[wall],
            cpu=p[cpu] / s[cpu],
            test_elbo_difference=p["test_elbo"] - s["test_elbo"],
        )
        print(f"{'pyro/skb':<10s}{ratios['wall']:>10.1f}x{ratios['cpu']:>10.1f}x"
              f"{ratios['test_elbo_difference']:>+12.3f}  (ELBO: pyro - skbinvi)")

    if args.out:
        out = dict(
            settings=dict(text=args.text, n_components=args.components,
                          epochs=args.epochs, seed=args.seed, dtype=args.dtype,
                          relaxation=args.relaxation, pyro_validation=args.validate,
                          batch_size=BATCH_SIZE,
                          n_particles=N_PARTICLES, hidden=HIDDEN,
                          learning_rate=LEARNING_RATE,
                          temperature=[TEMPERATURE, TEMPERATURE_DECAY, MIN_TEMPERATURE],
                          n_score_samples=N_SCORE_SAMPLES,
                          torch_threads=torch.get_num_threads(),
                          torch_interop_threads=torch.get_num_interop_threads()),
            data=dict(train_shape=list(X_train.shape), train_nnz=int(X_train.nnz),
                      test_shape=list(X_test.shape), test_nnz=int(X_test.nnz)),
            runs=runs,
            pyro_over_skbinvi=ratios,
            machine=dict(cpu_count=os.cpu_count(), load_average=os.getloadavg(),
                         platform=platform.platform()),
            versions=_versions(),
            date=time.strftime("%Y-%m-%d %H:%M:%S %z"),
        )
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        if _NUMBA_CACHE is not None:
            shutil.rmtree(_NUMBA_CACHE, ignore_errors=True)
