"""Benchmark of LatentFeatureRelational: seconds per sweep, cost per pair, memory.

Run from the repository root::

    python benchmarks/bench_relational.py            # full run (~10 min, 2 cores)
    python benchmarks/bench_relational.py --quick    # smoke run (< 1 min)

Synthetic data from ``skbinvi.datasets.make_relational(N, D)``: all N(N-1)/2
pairs i < j observed, D = 20 latent features. For N in {100, 1000, 5000}
(quick: {100, 300}) and ``inference`` in {"cavi", "mcvi", "score"}:

sweep
    Seconds per sweep (one iteration of ``fit``: one w step and one update of
    every q_id), without ELBO evaluations (``evaluate_every=0``, ``tol=0``),
    as (t(max_iter=k) - t(max_iter=1)) / (k - 1), which removes the fixed
    cost of a ``fit`` call (validation, set-up), reported separately as
    t(max_iter=1) - one sweep. The cost per pair, in nanoseconds per pair per
    feature per sweep (and per Monte Carlo sample for "mcvi" and "score"),
    shows the O(N^2 D) scaling: it should not grow with N.
elbo
    One evaluation of the true ELBO, inside ``fit`` (``evaluate_every=1`` vs
    0) and through the public ``model.elbo(X, y)``.
memory
    Every configuration runs in a fresh subprocess; its peak resident memory
    (``ru_maxrss``) minus that of a baseline subprocess that only imports
    skbinvi, loads the kernels and generates the same data, against the size
    of the input arrays and of an N x N x D float64 array.

Everything printed is also written to ``--out`` (JSON, with machine info).
"""

import argparse
import gc
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# machine info, the subprocess runner, the aligned-table printer and small
# formatting helpers are shared with the noisy-OR benchmark (it imports only the standard library at
# module level)
from bench_noisy_or import (  # noqa: E402
    _f,
    _import_skbinvi,
    machine_info,
    run_worker,
    table,
    worker_env,
)

SEED = 0
SETUP_KERNELS = {"incidence"}  # called once per fit, not per sweep
MiB = 2.0**20
METHODS = ["cavi", "mcvi", "score"]


# ----------------------------------------------------------------- helpers
def _r(x, nd=6):
    return None if x is None else round(float(x), nd)


def _mib(x):
    return None if x is None else round(x / MiB, 1)


def _ru_maxrss():
    """Peak resident set size of this process so far, bytes (Linux: KiB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_kib(field):
    """A ``VmXXX`` field of /proc/self/status in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


class _PeakProbe:
    """Peak RSS growth of a block: VmHWM after the block minus VmRSS before.

    The kernel's high-water mark is reset first through
    ``/proc/self/clear_refs`` (Linux >= 4.0), so VmHWM after the block is the
    peak reached during it. ``exact`` is False when the reset failed (the
    growth is then an upper bound only if the earlier peak was lower).
    """

    def __enter__(self):
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.exact = True
        except OSError:
            self.exact = False
        self.before = _status_kib("VmRSS")
        return self

    def __exit__(self, *exc):
        self.peak = _status_kib("VmHWM")
        self.growth = (
            None
            if self.before is None or self.peak is None
            else max(0, self.peak - self.before)
        )
        return False


def n_pairs(N):
    return N * (N - 1) // 2


# max_iter of the long fit, the same at every N: the sweeps after the first
# start from a data-dependent state of q, and the Monte Carlo kernels' work
# depends on it (measured at N = 100-1000: the second "mcvi" sweep alone costs
# 18-45 % more per pair than the mean of sweeps 2..3 or 2..11), so every N
# averages the same sweeps 2..k.
# A "mcvi" sweep at N=5000 takes about a minute, hence k=2 there.
ITERATIONS = {"cavi": 6, "mcvi": 2, "score": 3}


def default_plan(method, N, quick):
    """(k, repeats): max_iter of the long fit and repetitions of both fits.

    k is ``ITERATIONS[method]`` at every N. Small problems get more
    repetitions (their sweeps take milliseconds, so timer and scheduling noise
    weigh more), large ones fewer, so that a full run stays around 10 minutes
    on 2 cores (on the development machine a sweep at N=5000, 12.5 M pairs,
    D=20, took about 7 s for "cavi", 12 s for "score" and 60 s for "mcvi").
    ``method=None``: the repetitions of the ELBO timings.
    """
    P = n_pairs(N)
    if P <= 50_000:  # N <= ~316
        repeats = 3 if quick else 7
    elif P <= 1_500_000:  # N <= ~1700
        repeats = 2 if method == "mcvi" else 3
    else:
        repeats = 2 if method == "cavi" else 1
    return ITERATIONS.get(method), repeats


# ----------------------------------------------------------------- workers
def _prepare(cfg):
    """Import, load every kernel on a tiny problem, generate the data.

    The same in every subprocess (the baseline included), so that differences
    of peak memory are those of the measured calls. Kernels are loaded before
    the data exist, on 12 entities and 2 features (Numba specializes on types,
    not shapes), and with every code path a configuration uses.
    """
    tic = time.perf_counter()
    _import_skbinvi()
    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import make_relational

    info = {
        "import_seconds": _r(time.perf_counter() - tic, 3),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    tic = time.perf_counter()
    Xs, ys, _ = make_relational(12, 2, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in METHODS:
            m = LatentFeatureRelational(
                2, inference=method, max_iter=2, evaluate_every=1, random_state=SEED
            ).fit(Xs, ys)
            m.elbo(Xs, ys)
            m.predict_proba(Xs)
    del m, Xs, ys
    gc.collect()
    info["jit_seconds"] = _r(time.perf_counter() - tic, 3)
    info["rss_peak_after_kernels_bytes"] = _ru_maxrss()

    tic = time.perf_counter()
    X, y, truth = make_relational(cfg["N"], cfg["D"], random_state=SEED)
    del truth  # link probabilities and Z: not an input of fit
    gc.collect()
    info["generate_seconds"] = _r(time.perf_counter() - tic, 3)
    info["rss_peak_after_data_bytes"] = _ru_maxrss()
    info["rss_after_data_bytes"] = _status_kib("VmRSS")
    info["X_bytes"] = int(X.nbytes)
    info["y_bytes"] = int(y.nbytes)
    info["link_rate"] = _r(y.mean(), 4)
    return LatentFeatureRelational, X, y, info


def _timed(call):
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - t0, time.process_time() - c0


def work_baseline(cfg):
    _, X, y, info = _prepare(cfg)
    info["rss_peak_bytes"] = _ru_maxrss()
    return info


class _KernelClock:
    """Process CPU seconds spent in each function of ``skbinvi.relational._kernels``.

    The estimator calls its kernels as attributes of that module, so wrapping
    the module's attributes (in this subprocess only) times every call; the
    wrapper costs about a microsecond per call, a few calls per sweep. If the
    estimator stops calling them that way, the breakdown is simply empty.
    """

    def __init__(self):
        from skbinvi.relational import _kernels

        self.totals = {}
        for name in dir(_kernels):
            func = getattr(_kernels, name)
            # the module's own functions (jitted or not), not its imports
            if (
                name.startswith("_")
                or not callable(func)
                or getattr(func, "__module__", None) != _kernels.__name__
            ):
                continue
            setattr(_kernels, name, self._wrap(name, func))

    def _wrap(self, name, func):
        def timed(*args, **kwargs):
            c0 = time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                self.totals[name] = self.totals.get(name, 0.0) + (
                    time.process_time() - c0
                )

        return timed

    def take(self):
        out, self.totals = self.totals, {}
        return {k: _r(v) for k, v in sorted(out.items())}


def work_fit(cfg):
    """Times of fit(max_iter=1) and fit(max_iter=k), ``repeats`` times each."""
    Model, X, y, info = _prepare(cfg)
    k, repeats = cfg["k"], cfg["repeats"]
    clock = _KernelClock()

    def fit(max_iter):
        return Model(
            cfg["D"],
            inference=cfg["method"],
            max_iter=max_iter,
            tol=0.0,
            evaluate_every=0,
            random_state=SEED,
        ).fit(X, y)

    times = {"1": [], str(k): []}
    cpu = {"1": [], str(k): []}
    kernels = {"1": [], str(k): []}
    with _PeakProbe() as probe:
        for _ in range(repeats):
            for it in (1, k):
                clock.take()
                model, wall, c = _timed(lambda it=it: fit(it))
                assert model.n_iter_ == it
                times[str(it)].append(wall)
                cpu[str(it)].append(c)
                kernels[str(it)].append(clock.take())
                q = model.latent_features_
                # the Monte Carlo kernels' work depends on how many sampled
                # z are 1 (mcvi: one log Phi per pair and feature unless both
                # ends are 0), i.e. on the state of q
                q_mean = float(q.mean())
                del model, q
    info.update(
        {
            "fit_seconds": {key: [_r(t) for t in v] for key, v in times.items()},
            "fit_cpu_seconds": {key: [_r(t) for t in v] for key, v in cpu.items()},
            "kernel_cpu_seconds": kernels,
            "fit_rss_growth_bytes": probe.growth,
            "fit_rss_probe_exact": probe.exact,
            "q_mean_after_k": _r(q_mean, 4),
            "rss_peak_bytes": _ru_maxrss(),
        }
    )
    return info


def work_elbo(cfg):
    """One true-ELBO evaluation: inside fit, and the public model.elbo(X, y)."""
    Model, X, y, info = _prepare(cfg)
    repeats = cfg["repeats"]

    def fit(evaluate_every):
        return Model(
            cfg["D"],
            inference="cavi",
            max_iter=1,
            tol=0.0,
            evaluate_every=evaluate_every,
            random_state=SEED,
        ).fit(X, y)

    no_eval, with_eval, no_eval_cpu, with_eval_cpu = [], [], [], []
    with _PeakProbe() as probe:
        for _ in range(repeats):
            _, t, c = _timed(lambda: fit(0))
            no_eval.append(t)
            no_eval_cpu.append(c)
            model, t, c = _timed(lambda: fit(1))
            with_eval.append(t)
            with_eval_cpu.append(c)
    info["fit_no_eval_seconds"] = [_r(t) for t in no_eval]
    info["fit_with_eval_seconds"] = [_r(t) for t in with_eval]
    info["fit_no_eval_cpu_seconds"] = [_r(t) for t in no_eval_cpu]
    info["fit_with_eval_cpu_seconds"] = [_r(t) for t in with_eval_cpu]
    info["fit_rss_growth_bytes"] = probe.growth
    info["elbo_fit"] = float(model.elbo_history_[-1])

    need = 4 * n_pairs(cfg["N"]) * cfg["D"] * 8  # qi, qj (P, D) + their vstack
    available = _meminfo_available()
    if cfg["skip_public"] or (available is not None and need > 0.6 * available):
        info["public_elbo_skipped"] = (
            f"needs ~{need / 2**30:.1f} GiB ((P, D) copies), "
            f"{(available or 0) / 2**30:.1f} GiB available"
        )
    else:
        public, public_cpu = [], []
        with _PeakProbe() as probe:
            for _ in range(repeats):
                value, t, c = _timed(lambda: model.elbo(X, y))
                public.append(t)
                public_cpu.append(c)
        info["public_elbo_seconds"] = [_r(t) for t in public]
        info["public_elbo_cpu_seconds"] = [_r(t) for t in public_cpu]
        info["public_elbo_rss_growth_bytes"] = probe.growth
        info["elbo_public"] = value
    info["rss_peak_bytes"] = _ru_maxrss()
    return info


def _meminfo_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


WORKERS = {"baseline": work_baseline, "fit": work_fit, "elbo": work_elbo}


def _source_hashes():
    import hashlib

    out = {}
    for rel in (
        "skbinvi/relational/_estimator.py",
        "skbinvi/relational/_kernels.py",
        "skbinvi/_math.py",
    ):
        try:
            with open(os.path.join(ROOT, rel), "rb") as f:
                out[rel] = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            out[rel] = None
    return out


# ------------------------------------------------------------ orchestration
class Runner:
    """Runs every configuration in a fresh subprocess of this script."""

    def __init__(self, cache_dir, timeout):
        self.cache_dir = cache_dir
        self.timeout = timeout

    def __call__(self, kind, cfg, label=""):
        env = worker_env(self.cache_dir)
        res, wall = run_worker(__file__, kind, cfg, env, self.timeout)
        status = "ERROR " + str(res["error"]) if "error" in res else "ok"
        print(f"  [{wall:6.1f} s] {kind:8s} {label:32s} {status}", flush=True)
        return res


# ----------------------------------------------------------------- analysis
def summarize_fit(r, base):
    """Seconds per sweep, fixed cost, cost per pair and memory of one fit config."""
    c = r["config"]
    N, D, k = c["N"], c["D"], c["k"]
    P = n_pairs(N)
    t1, tk = min(r["fit_seconds"]["1"]), min(r["fit_seconds"][str(k)])
    c1, ck = min(r["fit_cpu_seconds"]["1"]), min(r["fit_cpu_seconds"][str(k)])
    sweep = (tk - t1) / (k - 1)
    cpu_sweep = (ck - c1) / (k - 1)
    ns = sweep / (P * D) * 1e9
    cpu_ns = cpu_sweep / (P * D) * 1e9
    S = c["n_mc_samples"] if c["method"] != "cavi" else None
    # per kernel: CPU seconds per sweep, by the same difference (fastest runs)
    per_kernel = {}
    runs1, runsk = (
        r.get("kernel_cpu_seconds", {}).get("1", []),
        r.get("kernel_cpu_seconds", {}).get(str(k), []),
    )
    for name in sorted({n for d in runs1 + runsk for n in d} - SETUP_KERNELS):
        a = min(d.get(name, 0.0) for d in runs1) if runs1 else 0.0
        b = min(d.get(name, 0.0) for d in runsk) if runsk else 0.0
        if b - a > 0:
            per_kernel[name] = {
                "cpu_seconds_per_sweep": _r((b - a) / (k - 1)),
                "cpu_ns_per_pair_feature": _r((b - a) / (k - 1) / (P * D) * 1e9, 3),
            }
    # the first sweep starts from the same distribution of q at every N
    # (uniform in [0.05, 0.95]), unlike the later ones, whose state (and so
    # the Monte Carlo kernels' work) depends on the data: its kernel time is
    # the state-controlled measure of the cost per pair
    first = (
        min(sum(v for n, v in d.items() if n not in SETUP_KERNELS) for d in runs1)
        if runs1 and any(runs1)
        else None
    )
    out = {
        "n_pairs": P,
        "first_sweep_kernel_cpu_seconds": _r(first),
        "first_sweep_kernel_cpu_ns_per_pair_feature": None
        if first is None
        else _r(first / (P * D) * 1e9, 3),
        "seconds_per_sweep": _r(sweep),
        "cpu_seconds_per_sweep": _r(cpu_sweep),
        "fit_overhead_seconds": _r(t1 - sweep),
        "cpu_fit_overhead_seconds": _r(c1 - cpu_sweep),
        "ns_per_pair_feature": _r(ns, 3),
        "ns_per_pair_feature_sample": _r(ns / S, 3) if S else None,
        "cpu_ns_per_pair_feature": _r(cpu_ns, 3),
        "cpu_ns_per_pair_feature_sample": _r(cpu_ns / S, 3) if S else None,
        "kernels_per_sweep": per_kernel,
    }
    out.update(_memory(r, base, N, D))
    return out


def _memory(r, base, N, D):
    peak = r.get("rss_peak_bytes")
    base_peak = None if base is None or "error" in base else base["rss_peak_bytes"]
    return {
        "rss_peak_mib": _mib(peak),
        "baseline_rss_peak_mib": _mib(base_peak),
        "rss_peak_minus_baseline_mib": _mib(
            None if peak is None or base_peak is None else peak - base_peak
        ),
        "fit_rss_growth_mib": _mib(r.get("fit_rss_growth_bytes")),
        "inputs_mib": _mib(r["X_bytes"] + r["y_bytes"]),
        "dense_nnd_float64_mib": _mib(N * N * D * 8),
    }


def summarize_elbo(r, base):
    c = r["config"]
    N, D, S = c["N"], c["D"], c["n_elbo_samples"]
    P = n_pairs(N)
    in_fit = min(r["fit_with_eval_seconds"]) - min(r["fit_no_eval_seconds"])
    in_fit_cpu = min(r["fit_with_eval_cpu_seconds"]) - min(r["fit_no_eval_cpu_seconds"])
    out = {
        "n_pairs": P,
        "elbo_in_fit_seconds": _r(in_fit),
        "elbo_in_fit_cpu_seconds": _r(in_fit_cpu),
        "elbo_in_fit_ns_per_pair_feature_sample": _r(in_fit / (P * D * S) * 1e9, 3),
        "elbo_in_fit_cpu_ns_per_pair_feature_sample": _r(
            in_fit_cpu / (P * D * S) * 1e9, 3
        ),
        "public_elbo_seconds": _r(min(r["public_elbo_seconds"]))
        if "public_elbo_seconds" in r
        else None,
        "public_elbo_cpu_seconds": _r(min(r["public_elbo_cpu_seconds"]))
        if "public_elbo_cpu_seconds" in r
        else None,
        "public_elbo_rss_growth_mib": _mib(r.get("public_elbo_rss_growth_bytes")),
        "public_elbo_matches_fit": (
            abs(r["elbo_public"] - r["elbo_fit"]) <= 1e-9 * max(1.0, abs(r["elbo_fit"]))
            if "elbo_public" in r
            else None
        ),
    }
    out.update(_memory(r, base, N, D))
    return out


# ------------------------------------------------------------------ output
def _ok(results, kind):
    return [r for r in results[kind] if "error" not in r]


def _errors(results, kind):
    return [
        [
            r["config"]["N"],
            r["config"].get("method", "elbo"),
            "ERROR: " + str(r["error"]),
        ]
        for r in results[kind]
        if "error" in r
    ]


def speed_table(results):
    rows = []
    for r in _ok(results, "fit"):
        c, s = r["config"], r["summary"]
        rows.append(
            [
                c["N"],
                s["n_pairs"],
                c["method"],
                f"1+{c['k']} x{c['repeats']}",
                f"{s['seconds_per_sweep']:.4g}",
                f"{s['cpu_seconds_per_sweep']:.4g}",
                _f(s["ns_per_pair_feature"], ".2f"),
                _f(s["cpu_ns_per_pair_feature"], ".2f"),
                _f(s["cpu_ns_per_pair_feature_sample"], ".2f")
                if s["cpu_ns_per_pair_feature_sample"] is not None
                else "-",
                _f(s.get("first_sweep_kernel_cpu_ns_per_pair_feature"), ".2f"),
                f"{s['fit_overhead_seconds']:.3g}",
                _f(r.get("q_mean_after_k"), ".3f"),
            ]
        )
    st = results["settings"]
    D = st["n_components"]
    notes = [
        "s/sweep: (t(fit, max_iter=k) - t(fit, max_iter=1)) / (k - 1), each t the "
        "fastest of R repetitions (iters '1+k xR'), evaluate_every=0, tol=0: one "
        "sweep = one w step and one update of every q_id, here the mean of "
        "iterations 2..k. CPU s/sweep: the same with the process CPU time (the "
        "kernels are single-threaded, so it equals the wall time on an idle "
        "machine and is not inflated when other processes take the CPU).",
        "ns/(pair*feat): s/sweep / (pairs * D) in nanoseconds (wall, then CPU); "
        f"ns/(pair*feat*sample): the CPU figure / n_mc_samples={st['n_mc_samples']} "
        "(mcvi, score). Flat in N means O(N^2 D) per sweep. k is the same at "
        "every N (column iters), so every N averages the same sweeps; mcvi has "
        "k=2 (a sweep at N=5000 takes about a minute), i.e. the second sweep alone.",
        "1st sweep kernels: CPU time of the kernels (below) in fit(max_iter=1), "
        "i.e. in the first sweep, which starts from the same distribution of q at "
        "every N (uniform in [0.05, 0.95], w_d=1); the later sweeps start from a "
        "data-dependent state.",
        "fit overhead: t(max_iter=1) - s/sweep: validation, the pair incidence "
        "lists (cavi), initialization, plus any difference between the first "
        "sweep and the later ones (negative: the first sweep was cheaper).",
        "mean q: mean of latent_features_ after the k iterations. The Monte Carlo "
        "kernels' work depends on how many sampled z are 1 (mcvi evaluates log Phi "
        "for a pair and feature unless both ends are 0), so their cost per pair "
        "depends on the state of q, not only on N.",
    ]
    return table(
        [
            "N",
            "pairs",
            "method",
            "iters",
            "s/sweep",
            "CPU s/sweep",
            "ns/(pair*feat)",
            "CPU ns/(pair*feat)",
            "CPU ns/(pair*feat*sample)",
            "1st sweep kernels CPU ns/(pair*feat)",
            "fit overhead s",
            "mean q",
        ],
        rows + _errors(results, "fit"),
        title=f"Seconds per sweep and cost per pair (D={D}, all pairs observed)",
        notes=notes + flatness(results),
    )


def memory_table(results):
    rows = []
    for kind in ("fit", "elbo"):
        for r in _ok(results, kind):
            c, s = r["config"], r["summary"]
            rows.append(
                [
                    c["N"],
                    s["n_pairs"],
                    c.get("method", "ELBO (cavi fit + model.elbo)"),
                    _f(s["rss_peak_mib"], ".1f"),
                    _f(s["baseline_rss_peak_mib"], ".1f"),
                    _f(s["rss_peak_minus_baseline_mib"], ".1f"),
                    _f(s["fit_rss_growth_mib"], ".1f"),
                    _f(s.get("public_elbo_rss_growth_mib"), ".1f")
                    if kind == "elbo"
                    else "-",
                    _f(s["inputs_mib"], ".1f"),
                    _f(s["dense_nnd_float64_mib"], ".1f"),
                ]
            )
    rows.sort(key=lambda row: row[0])
    notes = [
        "peak RSS: ru_maxrss of the configuration's subprocess (all its fits). "
        "baseline: ru_maxrss of a subprocess of the same N that only imports "
        "skbinvi, loads the kernels on a tiny problem and generates the data "
        "(make_relational's own peak is in both). peak-baseline: their difference; "
        "0 or less when the fits stay below make_relational's peak.",
        "fit growth: peak RSS during the timed fits (VmHWM after resetting it "
        "through /proc/self/clear_refs) minus the RSS before them, X and y "
        "already in memory. model.elbo growth: the same around the calls of the "
        "public model.elbo(X, y).",
        "X+y: the input arrays (int64). NxNxD f64: what one (N, N, D) float64 array "
        "would take.",
    ]
    return table(
        [
            "N",
            "pairs",
            "method",
            "peak RSS MiB",
            "baseline MiB",
            "peak-baseline MiB",
            "fit growth MiB",
            "model.elbo growth MiB",
            "X+y MiB",
            "NxNxD f64 MiB",
        ],
        rows + _errors(results, "baseline"),
        title="Peak memory (one subprocess per configuration)",
        notes=notes,
    )


def _share(part, whole):
    return f"{100 * part / whole:.0f}%"


def kernel_table(results):
    rows = []
    for r in _ok(results, "fit"):
        c, s = r["config"], r["summary"]
        for name, v in sorted(
            s["kernels_per_sweep"].items(),
            key=lambda kv: -kv[1]["cpu_seconds_per_sweep"],
        ):
            rows.append(
                [
                    c["N"],
                    c["method"],
                    name,
                    f"{v['cpu_seconds_per_sweep']:.4g}",
                    _f(v["cpu_ns_per_pair_feature"], ".2f"),
                    _share(v["cpu_seconds_per_sweep"], s["cpu_seconds_per_sweep"])
                    if s["cpu_seconds_per_sweep"] > 0
                    else "n/a",
                ]
            )
    if not rows:
        return None
    return table(
        ["N", "method", "kernel", "CPU s/sweep", "CPU ns/(pair*feat)", "share"],
        rows,
        title="Where a sweep goes: CPU time per kernel (skbinvi.relational._kernels)",
        notes=[
            "Each kernel's CPU time in fit(max_iter=k) minus that in fit(max_iter=1), "
            "divided by k - 1 (fastest of the repetitions); share: of CPU s/sweep. "
            "The rest of a sweep is NumPy work in the estimator (logit/expit of the "
            "(N, D) logits, the (S, N, D) uniforms of the Monte Carlo methods).",
        ],
    )


def elbo_table(results):
    rows = []
    for r in _ok(results, "elbo"):
        c, s = r["config"], r["summary"]
        match = s["public_elbo_matches_fit"]
        rows.append(
            [
                c["N"],
                s["n_pairs"],
                f"x{c['repeats']}",
                f"{s['elbo_in_fit_seconds']:.4g}",
                f"{s['elbo_in_fit_cpu_seconds']:.4g}",
                _f(s["elbo_in_fit_cpu_ns_per_pair_feature_sample"], ".2f"),
                _f(s["public_elbo_seconds"], ".4g"),
                _f(s["public_elbo_cpu_seconds"], ".4g"),
                _f(s["public_elbo_rss_growth_mib"], ".1f"),
                "n/a" if match is None else ("yes" if match else "NO"),
            ]
        )
    st = results["settings"]
    notes = [
        "in fit: t(fit, max_iter=1, evaluate_every=1) - t(fit, max_iter=1, "
        "evaluate_every=0) with inference='cavi' (the evaluation is the same for "
        f"every method), wall and CPU; n_elbo_samples={st['n_elbo_samples']} common "
        "random numbers per pair; ns/(pair*feat*sample) from the CPU time.",
        "model.elbo: the public method on the fitted model and the same pairs, "
        "wall and CPU (fastest of the repetitions), and the peak RSS growth during "
        "the call. '= fit value': it returned the last elbo_history_ value, as "
        "documented.",
    ]
    for r in _ok(results, "elbo"):
        if "public_elbo_skipped" in r:
            notes.append(
                f"N={r['config']['N']}: model.elbo skipped, {r['public_elbo_skipped']}."
            )
    return table(
        [
            "N",
            "pairs",
            "reps",
            "in-fit ELBO s",
            "CPU s",
            "CPU ns/(pair*feat*sample)",
            "model.elbo s",
            "CPU s",
            "model.elbo RSS growth MiB",
            "= fit value",
        ],
        rows + _errors(results, "elbo"),
        title=(
            f"One true-ELBO evaluation (D={st['n_components']}, "
            f"n_elbo_samples={st['n_elbo_samples']})"
        ),
        notes=notes,
    )


def flatness(results):
    """Per method: ns per pair-feature at the largest N over that at the smallest."""
    lines = []
    for method in METHODS:
        rs = sorted(
            (r for r in _ok(results, "fit") if r["config"]["method"] == method),
            key=lambda r: r["config"]["N"],
        )
        if len(rs) < 2:
            continue
        wall = [r["summary"]["ns_per_pair_feature"] for r in rs]
        cpu = [r["summary"]["cpu_ns_per_pair_feature"] for r in rs]
        first = [r["summary"]["first_sweep_kernel_cpu_ns_per_pair_feature"] for r in rs]
        line = (
            f"{method}: CPU ns/(pair*feat) "
            + " -> ".join(f"{v:.2f}" for v in cpu)
            + f" (wall {' -> '.join(f'{v:.2f}' for v in wall)}) for N = "
            + " -> ".join(str(r["config"]["N"]) for r in rs)
            + f": x{cpu[-1] / cpu[0]:.2f} (CPU) while the pairs grow x"
            f"{rs[-1]['summary']['n_pairs'] / rs[0]['summary']['n_pairs']:.0f}"
        )
        if None not in first:
            line += (
                "; first-sweep kernels "
                + " -> ".join(f"{v:.2f}" for v in first)
                + f" (x{first[-1] / first[0]:.2f})"
            )
        lines.append(line + ".")
    return lines


def markdown_table(results):
    st = results["settings"]
    info = results["machine"]
    lines = [
        "| N | pairs | method | s/sweep (wall; CPU) | ns / (pair x feature) (CPU) "
        "| ns / (pair x feature x sample) (CPU) "
        "| ns / (pair x feature), 1st-sweep kernels (CPU) | fit overhead (s) "
        "| peak RSS - baseline (MiB) | fit RSS growth (MiB) | X + y (MiB) "
        "| N x N x D float64 (MiB) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in _ok(results, "fit"):
        c, s = r["config"], r["summary"]
        per_sample = s["cpu_ns_per_pair_feature_sample"]
        lines.append(
            f"| {c['N']} | {s['n_pairs']:,} | {c['method']} | "
            f"{s['seconds_per_sweep']:.3g}; {s['cpu_seconds_per_sweep']:.3g} | "
            f"{s['cpu_ns_per_pair_feature']:.2f} | "
            f"{'-' if per_sample is None else format(per_sample, '.2f')} | "
            f"{_f(s.get('first_sweep_kernel_cpu_ns_per_pair_feature'), '.2f')} | "
            f"{s['fit_overhead_seconds']:.3g} | "
            f"{_f(s['rss_peak_minus_baseline_mib'], '.0f')} | "
            f"{_f(s['fit_rss_growth_mib'], '.0f')} | {s['inputs_mib']:.0f} | "
            f"{s['dense_nnd_float64_mib']:.0f} |"
        )
    if _ok(results, "elbo"):
        lines += [
            "",
            "| N | pairs | true ELBO in fit (s, wall; CPU) "
            "| ns / (pair x feature x ELBO sample) (CPU) "
            "| model.elbo(X, y) (s, wall) | model.elbo RSS growth (MiB) "
            "| N x N x D float64 (MiB) |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
    for r in _ok(results, "elbo"):
        c, s = r["config"], r["summary"]
        lines.append(
            f"| {c['N']} | {s['n_pairs']:,} | {s['elbo_in_fit_seconds']:.3g}; "
            f"{s['elbo_in_fit_cpu_seconds']:.3g} | "
            f"{s['elbo_in_fit_cpu_ns_per_pair_feature_sample']:.2f} | "
            f"{_f(s['public_elbo_seconds'], '.3g')} | "
            f"{_f(s['public_elbo_rss_growth_mib'], '.0f')} | "
            f"{s['dense_nnd_float64_mib']:.0f} |"
        )
    lines.append("")
    lines.append(
        f"D={st['n_components']}, all pairs observed, "
        f"n_mc_samples={st['n_mc_samples']}, n_elbo_samples={st['n_elbo_samples']}, "
        f"random_state={st['random_state']}; {info['cpu_count']} CPUs "
        f"({info.get('cpu_model')}), one configuration at a time."
    )
    return "\n".join(lines)


# -------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: N in {100, 300} (< 1 min)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON output (default benchmarks/results/bench_relational.json, "
        "or bench_relational_quick.json with --quick)",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="numbers of entities N (default 100 1000 5000; quick 100 300)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=METHODS,
        choices=METHODS,
        help="inference methods",
    )
    parser.add_argument(
        "--components", type=int, default=20, help="n_components D (default 20)"
    )
    parser.add_argument(
        "--max-iter",
        type=int,
        default=None,
        help="k of the long fit for every configuration (default, at every N: "
        "cavi 6, mcvi 2, score 3)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repetitions of each timed fit (default: by size and method)",
    )
    parser.add_argument(
        "--no-elbo", action="store_true", help="skip the ELBO-evaluation timings"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds before a configuration is abandoned (default 1800)",
    )
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_config", help=argparse.SUPPRESS)
    parser.add_argument("--_result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._worker:
        warnings.simplefilter("ignore")
        res = WORKERS[args._worker](json.loads(args._config))
        with open(args._result, "w") as f:
            json.dump(res, f)
        return 0

    quick = args.quick
    sizes = sorted(args.sizes or ([100, 300] if quick else [100, 1000, 5000]))
    D = args.components
    if args.max_iter is not None and args.max_iter < 2:
        parser.error("--max-iter must be at least 2 (the sweep is a difference)")
    out = args.out or os.path.join(
        HERE,
        "results",
        "bench_relational_quick.json" if quick else "bench_relational.json",
    )

    t_start = time.perf_counter()
    _import_skbinvi()
    from skbinvi import LatentFeatureRelational

    defaults = LatentFeatureRelational().get_params()
    S, S_elbo = defaults["n_mc_samples"], defaults["n_elbo_samples"]
    info = machine_info()
    info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    print(f"bench_relational: {'quick' if quick else 'full'} run, {info['date']}")
    print(
        f"  python {info['python']}, numpy {info['numpy']}, scikit-learn "
        f"{info['sklearn']}, numba {info['numba']}, skbinvi {info.get('skbinvi')} "
        f"({(info.get('git_commit') or '?')[:10]}"
        f"{', skbinvi/ modified' if info.get('skbinvi_dirty') else ''})"
    )
    print(
        f"  {info['cpu_count']} CPUs ({info.get('cpu_model')}), "
        f"{info.get('mem_total_gib')} GiB; load average {info['loadavg_start'][0]:.2f}"
        " (other processes share these CPUs)"
    )
    print(
        f"  make_relational(N, {D}), all pairs; N in {sizes}; methods {args.methods}; "
        f"n_mc_samples={S}, n_elbo_samples={S_elbo}, random_state={SEED}"
    )

    results = {
        "machine": info,
        "settings": {
            "quick": quick,
            "sizes": sizes,
            "methods": args.methods,
            "n_components": D,
            "n_mc_samples": S,
            "n_elbo_samples": S_elbo,
            "random_state": SEED,
            "estimator_defaults": defaults,
            "make_relational": {"density": 0.3, "random_state": SEED},
            # the working tree may differ from git_commit: fingerprint the code
            "source_sha256": _source_hashes(),
        },
        "baseline": [],
        "fit": [],
        "elbo": [],
    }
    cache_dir = tempfile.mkdtemp(prefix="bench_relational_numba_")
    run = Runner(cache_dir, args.timeout)
    try:
        print("\n[compile] fill the kernel cache (not measured further)", flush=True)
        results["compile"] = run(
            "baseline", {"N": 10, "D": D}, label="cold kernel cache"
        )
        for N in sizes:
            print(
                f"\n[N={N}] {n_pairs(N):,} pairs, one subprocess per configuration",
                flush=True,
            )
            base = run("baseline", {"N": N, "D": D}, label=f"N={N} import+kernels+data")
            results["baseline"].append(base)
            for method in args.methods:
                k, repeats = default_plan(method, N, quick)
                k = args.max_iter or k
                repeats = args.repeats or repeats
                cfg = {
                    "N": N,
                    "D": D,
                    "method": method,
                    "k": k,
                    "repeats": repeats,
                    "n_mc_samples": S,
                }
                r = run("fit", cfg, label=f"N={N} {method} 1+{k} iters x{repeats}")
                if "error" not in r:
                    r["summary"] = summarize_fit(r, base)
                results["fit"].append(r)
            if not args.no_elbo:
                repeats = args.repeats or default_plan(None, N, quick)[1]
                cfg = {
                    "N": N,
                    "D": D,
                    "repeats": repeats,
                    "n_elbo_samples": S_elbo,
                    "skip_public": False,
                }
                r = run("elbo", cfg, label=f"N={N} ELBO x{repeats}")
                if "error" not in r:
                    r["summary"] = summarize_elbo(r, base)
                results["elbo"].append(r)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    tables = [speed_table(results), kernel_table(results), memory_table(results)]
    if results["elbo"]:
        tables.append(elbo_table(results))
    tables = [t for t in tables if t]
    md = markdown_table(results)
    print("\nMarkdown summary (paste into README)\n" + "=" * 35)
    print(md)
    total = time.perf_counter() - t_start
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    results["tables"] = tables
    results["markdown"] = md
    results["total_seconds"] = round(total, 1)
    print(
        f"\nTotal wall time: {total / 60:.1f} min; load average at the end "
        f"{info['loadavg_end'][0]:.2f} (1 min), {info['loadavg_end'][2]:.2f} (15 min)"
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(f"Results written to {os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
