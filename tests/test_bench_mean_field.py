"""The mean-field benchmark on tiny sizes: well-formed rows, and the PyTorch network it times against ours
computes the same objective and gradient (timings are not asserted)."""

import numpy as np
import pytest

from benchmarks import bench_mean_field as bench
from benchmarks._harness import _ROW_KEYS
from flows import mean_field as mf

# n_test = n_train and the prompt shapes of tests/mean_field (N = 4, 8 prompts): one compiled data sampler
TINY = mf.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=3, n_train=8, n_test=8, lam=1e-2, init_scale=2.0, threshold=0.7, seed=1)


def _well_formed(rows):
    for r in rows:
        assert all(k in r for k in _ROW_KEYS), r["bench"]
        if r.get("ratio"):
            assert np.isfinite(r["ratio"]["value"]) and r["ratio"]["value"] > 0


def test_torch_network_matches_flows():
    torch = pytest.importorskip("torch")
    import jax

    from flows.mean_field import model

    p = mf.init_particles(TINY)
    p = {k: v * (3.0 if k in ("W1", "W2") else 1.0) for k, v in p.items()}  # visit every HuberizedReLU piece
    data = mf.training_set(TINY)
    objective, tp = bench._torch_network(TINY, p, data)
    q = objective(tp)
    q.backward()
    assert abs(float(q.detach()) / float(mf.objective(TINY, p, data)) - 1) < 1e-12
    g = jax.jit(jax.grad(lambda p: model.objective_value(p, data.Z0, data.y, TINY.lam, TINY.threshold, TINY.d, True)))(
        p
    )
    for k in g:
        np.testing.assert_allclose(tp[k].grad.numpy(), np.asarray(g[k]), rtol=1e-10, atol=1e-13)
    assert isinstance(q, torch.Tensor) and q.dtype == torch.float64


def test_gd_rows_tiny():
    rows = bench.gd_throughput(TINY, quick=True, matmul_n=128)
    _well_formed(rows)
    names = [r["bench"] for r in rows]
    assert names == ["mean_field/gd", "mean_field/gd_torch_eager", "mean_field/gd_flop_rate"]
    assert rows[0]["s_per_step"] > 0 and rows[2]["flops_per_step"] > 0
    torch_row = rows[1]
    if torch_row.get("note"):  # torch missing: skipped with a note
        assert "torch" in torch_row["note"]
    else:
        assert torch_row["error"] < 1e-10
        assert torch_row["ratio"]["of"].startswith("flows GD / torch eager") and torch_row["ratio"]["target"] == 2


def test_fit_row_shape():
    rows = [
        bench.row(f"x(P={P})", params={"particles": P}, compile_s=0.0, run_s_min=1.0, s_per_step=1e-6 * P)
        for P in (100, 1000, 10000)
    ]
    fit = bench._fit_row("x_fit", rows, "s_per_step", 0)
    _well_formed([fit])
    assert abs(fit["exponent"] - 1.0) < 1e-9 and fit["exponent_ci"][0] <= 1.0 <= fit["exponent_ci"][1] + 1e-9
