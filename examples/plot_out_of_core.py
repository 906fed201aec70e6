"""
=====================================================================
Training on more data than memory: a stream of chunks, and Dask
=====================================================================

:meth:`~skbinvi.NoisyORFactorizer.partial_fit` runs one pass of minibatch
training over the rows it is given and keeps the optimizer state, the
temperature schedule and the random state between calls. A corpus that does
not fit in memory can therefore be trained on chunk by chunk, each chunk read
from disk when it is needed and dropped afterwards. This example

1. writes the Reuters-21578 training documents (headline and body text, 5,142
   words) to disk as sparse CSR chunks of 500 documents,
2. trains a :class:`~skbinvi.NoisyORFactorizer` on the stream of chunks, one
   file in memory at a time, and compares it with the same model trained on
   the whole matrix in memory,
3. trains the same model with Dask: :class:`dask_ml.wrappers.Incremental`
   calls ``partial_fit`` on the blocks of a ``dask.array`` on a local
   ``dask.distributed`` cluster, and ``transform`` maps over the blocks.

Which inference methods learn online: ``"acp"``, ``"avi"`` and ``"svi"``
(every ``partial_fit`` call trains on its rows; with ``"svi"`` the rows of a
chunk get their own logits from the prior, as new rows do in ``transform``).

Note on the schedule: the temperature of the relaxed samples decays once per
``partial_fit`` call (see the User Guide, "Training"), so with many small
chunks it reaches its floor sooner, in passes over the data, than ``fit``
does.

Run ``python plot_out_of_core.py --quick`` for fewer passes (the documentation
is built in that mode).
"""

# %%
# Settings and data on disk
# -------------------------
import argparse
import os
import tempfile
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp

from skbinvi import NoisyORFactorizer
from skbinvi.datasets import load_reuters

parser = argparse.ArgumentParser(description="Out-of-core noisy-OR training.")
parser.add_argument("--quick", action="store_true", help="fewer passes")
parser.add_argument("--output", default=".",
                    help="folder where the figure is saved (default: .)")
args, _ = parser.parse_known_args()
N_PASSES = 4 if args.quick else 20
CHUNK_SIZE = 500
K = 50

train = load_reuters(subset="train", text="body")
test = load_reuters(subset="test", text="body")
X_train, X_test = train.data, test.data
print(f"train: {X_train.shape}, {X_train.nnz} non-zeros; test: {X_test.shape}")

workdir = tempfile.mkdtemp(prefix="skbinvi_chunks_")
paths = []
for i, start in enumerate(range(0, X_train.shape[0], CHUNK_SIZE)):
    path = os.path.join(workdir, f"chunk_{i:03d}.npz")
    sp.save_npz(path, X_train[start:start + CHUNK_SIZE])
    paths.append(path)
print(f"{len(paths)} chunk files of up to {CHUNK_SIZE} documents in {workdir}")


def stream(paths, rng):
    """Yield the chunks one at a time, from disk, in a new random order."""
    for i in rng.permutation(len(paths)):
        yield sp.load_npz(paths[i])


# %%
# Streaming ``partial_fit`` against ``fit`` in memory
# ---------------------------------------------------
#
# Both models see every document once per pass, in minibatches of 256; the
# streaming model sees them chunk by chunk (one file in memory at a time).
# The held-out ELBO is measured after every pass. ``batch_size`` is set:
# "auto" follows the rows of each call, so chunks of 500 rows would be cut
# into minibatches of 32, 16 Adam steps per chunk and 176 per pass against 20
# in memory, and the two models would not be comparable.
def make_model():
    return NoisyORFactorizer(K, inference="avi", batch_size=256, random_state=0)


streaming = make_model()
order_rng = np.random.RandomState(0)
stream_elbo, tic = [], time.perf_counter()
largest = 0
for _ in range(N_PASSES):
    for chunk in stream(paths, order_rng):
        largest = max(largest, chunk.data.nbytes + chunk.indices.nbytes)
        streaming.partial_fit(chunk)
    stream_elbo.append(streaming.score(X_test))
stream_time = time.perf_counter() - tic

in_memory = make_model()
memory_elbo, tic = [], time.perf_counter()
for _ in range(N_PASSES):
    in_memory.partial_fit(X_train)
    memory_elbo.append(in_memory.score(X_test))
memory_time = time.perf_counter() - tic

full_bytes = X_train.data.nbytes + X_train.indices.nbytes
print(f"largest chunk in memory: {largest / 2**20:.2f} MiB "
      f"(whole matrix {full_bytes / 2**20:.2f} MiB)")
print(f"streaming: {stream_time:.1f} s, test ELBO {stream_elbo[-1]:.2f} nats/doc")
print(f"in memory: {memory_time:.1f} s, test ELBO {memory_elbo[-1]:.2f} nats/doc")

fig, ax = plt.subplots(figsize=(6, 4))
passes = np.arange(1, N_PASSES + 1)
ax.plot(passes, memory_elbo, "o-", label="in memory (partial_fit on all rows)")
ax.plot(passes, stream_elbo, "s--", label=f"stream of {len(paths)} chunks")
ax.set_xlabel("passes over the training documents")
ax.set_ylabel("test ELBO (nats per document)")
ax.set_title(f"Reuters bodies, AVI, K = {K}")
ax.legend()
fig.tight_layout()

# %%
# With Dask
# ---------
#
# :class:`dask_ml.wrappers.Incremental` feeds the blocks of a ``dask.array``
# to ``partial_fit`` one after the other (here on a local cluster of one
# worker). The array is built from the same chunk files with
# :func:`dask.delayed`, so the blocks are read from disk when a worker needs
# them and the whole matrix is never in memory; each block is densified there
# (20 MiB for 500 documents), as dask arrays expect dense blocks. For
# ``transform``, :meth:`dask.array.Array.map_blocks` with the output chunks
# given explicitly keeps the result lazy and correctly shaped (the estimator
# changes the number of columns from n_words to K).
try:
    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster
    from dask_ml.wrappers import Incremental
except ImportError:  # pragma: no cover - dask is an optional extra
    da = None
    print("dask, distributed or dask-ml is not installed: skipping the Dask part")


def load_dense(path):
    return sp.load_npz(path).toarray()


if da is not None:
    # Incremental ships the estimator (parameters and Adam moments, ~20 MiB
    # here) with every block's task; distributed warns about graphs that large.
    warnings.filterwarnings("ignore", message="Sending large graph")
    n_words = X_train.shape[1]
    rows = [min(CHUNK_SIZE, X_train.shape[0] - start)
            for start in range(0, X_train.shape[0], CHUNK_SIZE)]
    dX = da.concatenate([
        da.from_delayed(dask.delayed(load_dense)(path), shape=(n, n_words), dtype=float)
        for path, n in zip(paths, rows, strict=True)
    ])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        incremental = Incremental(make_model(), random_state=0)
        tic = time.perf_counter()
        for _ in range(N_PASSES):
            incremental.partial_fit(dX)
        dask_time = time.perf_counter() - tic
        model = incremental.estimator_
        Q = dX.map_blocks(model.transform, chunks=(dX.chunks[0], (K,)), dtype=float)
        Q = Q.compute()
    assert np.allclose(Q, model.transform(X_train))
    print(f"Dask: {model.n_iter_} partial_fit calls ({dX.numblocks[0]} blocks per "
          f"pass) in {dask_time:.1f} s, transform -> {Q.shape}, test ELBO "
          f"{model.score(X_test):.2f} nats/doc")

os.makedirs(args.output, exist_ok=True)
fig.savefig(os.path.join(args.output, "out_of_core_elbo.png"), dpi=100)
print(f"figure saved to {os.path.join(args.output, 'out_of_core_elbo.png')}")
