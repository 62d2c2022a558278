"""The scalar helpers the executor adds on top of vmath/halfbits (mathlib.py)."""
import numpy as np
import torch
from numba import njit

from primtrace.executors.numba.backends import mathlib as m


def _apply(fn, x):
    @njit(error_model="numpy")
    def run(a, o):
        for i in range(a.size):
            o[i] = fn(a[i])
    out = np.empty(x.size, np.float32)
    run(x, out)
    return out


def test_round_f16_is_torchs_half_round_trip():
    """Checked on all 2**32 float32 inputs once (46 s); here a dense sample: random bit
    patterns, every float16 value and its float32 neighbours (ties and near-ties), and the
    overflow, subnormal and signed-zero edges."""
    g = np.random.default_rng(0)
    rand = g.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32).view(np.float32)
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16).float().numpy()
    bits = halves.view(np.int32)
    ties = np.concatenate([(bits + d).view(np.float32) for d in (-4097, -4096, -4095, -1, 1, 4095, 4096, 4097)])
    edges = np.array([65504, 65519.996, 65520, 65536, 6e-8, 2.98e-8, 2.9802322e-08, -0.0, 0.0,
                      1e-45, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([rand, halves, ties, edges])
    got = _apply(m.round_f16, x)
    want = torch.from_numpy(x).half().float().numpy()
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


def test_sin_cos_of_float16_values_are_correctly_rounded_float32():
    halves = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    x = halves.float().numpy()
    finite = np.isfinite(x)
    for fn, ref in ((m.sin_near_float32, np.sin), (m.cos_near_float32, np.cos)):
        got = _apply(fn, x)
        exact = ref(x[finite].astype(np.float64))
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        err = np.abs(got[finite].astype(np.float64) - exact) / ulp
        assert err.max() < 0.51
        assert np.isnan(got[~finite]).all()
