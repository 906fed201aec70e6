"""Smoke tests of the benchmark scripts' workers (benchmarks/ of the checkout).

The benchmarks are not part of the package, but the README and the user guide
quote their commands: a worker that fails on the estimator's current defaults
makes those commands crash (``batch_size="auto"`` broke the scaling section).
"""

import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
pytestmark = pytest.mark.skipif(not BENCHMARKS.is_dir(),
                                reason="benchmarks/ is not in this checkout")


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_noisy_or
        yield bench_noisy_or
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_scaling_worker_runs_with_the_default_batch_size(bench):
    """work_scaling on a tiny corpus: the minibatch count follows the
    estimator's batch_size="auto" (min(256, max(32, n // 16)) rows), not a
    fixed size, and every measurement is present and positive."""
    from skbinvi import NoisyORFactorizer

    n = 200
    res = bench.work_scaling({"n_samples": n, "n_features": 300, "nnz_per_row": 5,
                              "K": 3, "inference": "acp", "timed_epochs": 1})
    batch = NoisyORFactorizer()._batch_size(n)
    assert batch == 32
    assert res["n_batches"] == math.ceil(n / batch) == 7
    assert res["update_window"] >= 1
    assert res["nnz"] > 0
    assert res["seconds_per_epoch"] > 0 and res["empty_seconds_per_epoch"] > 0


def test_table_pads_the_rows_of_failed_configurations(bench):
    """A failed configuration's row ("ERROR" and fewer cells than headers)
    is padded instead of crashing the whole run (IndexError before)."""
    from _harness import table

    text = table(["a", "b", "c", "d"], [["x", 1, 2.5, 3], ["y", "ERROR"]])
    lines = text.splitlines()
    assert any("ERROR" in line for line in lines)
    assert len({len(line.rstrip()) for line in lines if "x" in line}) == 1
