"""float32 sin and cos near zero (vmath ``sin_near``/``cos_near``) and the CPU kernels that
call them per block behind a range check (``backends/cpu.py``: guarded loops)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from numba import njit

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import cpu
from primtrace.executors.numba.vmath import VMATH
from primtrace.executors.numba.vmath.trig import NEAR_LIMIT
from tests.numba.helpers import check_against_eager

FNS = {"sin": (torch.sin, np.sin), "cos": (torch.cos, np.cos)}


def _ulps(got: torch.Tensor, x: torch.Tensor, ref) -> float:
    """Largest error of `got` in float32 ULPs of the float64 result, over finite results."""
    with np.errstate(invalid="ignore"):
        exact = ref(x.double().numpy())
    finite = np.isfinite(exact)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    err = np.abs(got.double().numpy() - exact) / ulp
    return float(err[finite].max()) if finite.any() else 0.0


def _apply(fn, x):
    @njit(error_model="numpy")
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
    out = np.empty_like(x)
    run(x, out)
    return out


@pytest.mark.parametrize("name", FNS)
def test_near_functions_round_almost_correctly_below_the_limit(name):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-NEAR_LIMIT, NEAR_LIMIT, 1 << 18), rng.uniform(-8, 8, 1 << 18),
                        rng.uniform(-1e-3, 1e-3, 1 << 12),
                        np.nextafter(np.float32(NEAR_LIMIT), np.float32(0)) * np.array([1, -1]),
                        np.array([1e-40, -1e-40, 3.1415927, 1.5707964, 355.0, 103993.0])])
    x = x.astype(np.float32)
    got = _apply(VMATH[f"{name}_near", "float32"], x)
    assert _ulps(torch.from_numpy(got), torch.from_numpy(x), FNS[name][1]) < 0.5005


@pytest.mark.parametrize("name", FNS)
def test_near_functions_special_values(name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    got = _apply(VMATH[f"{name}_near", "float32"], x)
    assert np.isnan(got[2:]).all()
    if name == "sin":
        assert got[0] == 0 and not np.signbit(got[0]) and np.signbit(got[1])
    else:
        assert (got[:2] == 1).all()


def _jit(fn):
    return primtrace.jit(fn, executors=[NumbaFusionExecutor()])


def _mixed(n, far=3e7):
    """Values below the limit, far ones scattered and in a run, nan and inf."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 100
    x[::997] = far
    x[5000:9000] = -far * 30
    x[5:7] = float("nan")
    x[7] = float("inf")
    return x


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize("parallel", [False, True])
def test_guarded_kernel_redoes_blocks_with_far_arguments(name, parallel, monkeypatch):
    monkeypatch.setattr(cpu, "runs_parallel", lambda numel, work: parallel)
    tfn, ref = FNS[name]
    f = _jit(tfn)
    x = _mixed(1 << 16)
    got = f(x)
    source = primtrace.kernel_source(f)
    assert f"m.{name}_near_float32" in source and "rt.magnitude_bits" in source
    assert _ulps(got, x, ref) < 0.51
    assert torch.equal(torch.isnan(got), torch.isnan(tfn(x)))


@pytest.mark.parametrize("name", FNS)
def test_guarded_kernel_in_2d_transposed_and_integer_inputs(name):
    tfn, ref = FNS[name]
    f = _jit(lambda a, b: tfn(a) + b)
    a = (torch.randn(300, 500) * 10).t()
    a[::7, ::3] = 5e6
    b = torch.randn(500, 300)
    assert torch.allclose(f(a, b), tfn(a) + b, rtol=0, atol=5e-7)   # 1 ULP of the sum
    assert "rt.magnitude_bits" in primtrace.kernel_source(f)
    i = torch.randint(-2_000_000, 2_000_000, (1 << 15,))
    assert _ulps(_jit(tfn)(i), i.float(), ref) < 0.51


def test_kernel_writing_its_input_runs_the_exact_calls_only():
    """A redone block would read what its first pass wrote: no near calls in place."""
    f = _jit(lambda t: t.sin_())
    x = _mixed(1 << 14)
    want = torch.sin(x)
    f(x)
    source = primtrace.kernel_source(f)
    assert "sin_near" not in source and "m.sin_float32" in source
    assert torch.allclose(x, want, rtol=0, atol=2e-7, equal_nan=True)


@pytest.mark.parametrize("name", FNS)
def test_float16_values_with_a_half_result_equal_eager_on_every_value(name):
    """sin_half/cos_half compute in float32 (~1.6 ULP there): rounded to float16 they give
    eager's result on all 65,536 inputs."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    f = _jit(FNS[name][0])
    got, want = f(every), FNS[name][0](every)
    assert f"m.{name}_half_float32" in primtrace.kernel_source(f)
    same = (got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan())
    assert bool(same.all()), every[~same][:5]


@pytest.mark.parametrize("name", FNS)
def test_float16_values_rounded_after_a_float32_call_are_as_close_as_eager(name):
    """sin(a.float()).half(): eager rounds its float32 sin, which for a = +-300 is a float16
    tie, so it rounds away from the float64 result; sin_half does not. Everywhere else
    equal."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    fn = FNS[name][0]
    f = primtrace.jit(lambda a: fn(a.float()).half(),
                      executors=[NumbaFusionExecutor(cost_model=False)])
    got, want = f(every), fn(every.float()).half()
    assert f"m.{name}_half_float32" in primtrace.kernel_source(f)
    differ = ~((got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan()))
    exact = fn(every.double())
    assert bool(((got.double() - exact).abs() <= (want.double() - exact).abs())[differ].all())
    assert int(differ.sum()) <= 2


def test_half_values_take_the_near_calls_without_a_check():
    f = _jit(lambda a, b: torch.sin(a.float()) * b)
    a = (torch.randn(4096) * 1000).half()
    b = torch.randn(4096)
    check_against_eager(f, lambda a, b: torch.sin(a.float()) * b, a, b)
    source = primtrace.kernel_source(f)
    assert "m.sin_near_float32" in source and "magnitude_bits" not in source


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", FNS)
def test_half_dtypes_match_eager(name, dtype):
    tfn = FNS[name][0]
    x = (_mixed(1 << 14, far=3e4 if dtype is torch.float16 else 3e7)).to(dtype)
    torch.testing.assert_close(_jit(tfn)(x), tfn(x), rtol=0, atol=0, equal_nan=True)
