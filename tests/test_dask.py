"""Training with dask-ml's Incremental on a local dask.distributed cluster."""

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skbinvi import NoisyORFactorizer
from skbinvi.datasets import make_noisy_or

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
wrappers = pytest.importorskip("dask_ml.wrappers")

pytestmark = pytest.mark.filterwarnings(
    "ignore::sklearn.exceptions.ConvergenceWarning",
    "ignore:Sending large graph:UserWarning",
)


@pytest.mark.parametrize("inference", ["acp", "svi"])
def test_incremental_on_local_cluster_equals_sequential_partial_fit(inference):
    X, _ = make_noisy_or(300, 30, 3, density=0.2, random_state=0)
    dX = da.from_array(X, chunks=(100, 30))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        incremental = wrappers.Incremental(
            NoisyORFactorizer(3, inference=inference, random_state=0),
            shuffle_blocks=False,
        )
        for _ in range(2):
            incremental.partial_fit(dX)
        model = incremental.estimator_
        Q = dX.map_blocks(model.transform, chunks=(dX.chunks[0], (3,)), dtype=float)
        assert Q.shape == (300, 3)
        Q = Q.compute()
    # one partial_fit call per block, in order: the same as a local loop
    local = NoisyORFactorizer(3, inference=inference, random_state=0)
    for _ in range(2):
        for start in range(0, 300, 100):
            local.partial_fit(X[start:start + 100])
    assert model.n_iter_ == local.n_iter_ == 6
    assert_array_equal(model.components_, local.components_)
    assert_allclose(Q, local.transform(X), rtol=1e-12)


def test_relational_incremental_on_chunks_of_links_equals_sequential_partial_fit():
    """Links streamed as dask blocks train LatentFeatureRelational through
    Incremental exactly as a local loop of partial_fit calls."""
    import numpy as np

    from skbinvi import LatentFeatureRelational
    from skbinvi.datasets import make_sparse_relational

    X, _ = make_sparse_relational(400, 3, density=0.3, intercept=-2.0,
                                  random_state=0)
    X = X[np.random.RandomState(0).permutation(len(X))]
    y = np.ones(len(X), dtype=np.int64)
    size = -(-len(X) // 3)
    dX = da.from_array(X, chunks=(size, 2))
    dy = da.from_array(y, chunks=size)
    kw = dict(unlisted_pairs="nonlinks", n_entities=400, random_state=0)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        incremental = wrappers.Incremental(LatentFeatureRelational(3, **kw),
                                           shuffle_blocks=False)
        for _ in range(2):
            incremental.partial_fit(dX, dy)
        model = incremental.estimator_
    local = LatentFeatureRelational(3, **kw)
    for _ in range(2):
        for start in range(0, len(X), size):
            local.partial_fit(X[start:start + size], y[start:start + size])
    assert model.n_iter_ == local.n_iter_ == 6
    assert_array_equal(model.latent_features_, local.latent_features_)
    assert_array_equal(model.weights_, local.weights_)
