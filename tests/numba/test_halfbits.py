"""float16 / bfloat16 <-> float32 conversions against torch, bit for bit, in every
implementation kernels may use: float16 in software (halfbits' integer IR, the magic-number
rounding) and in hardware (F16C through LLVM fptrunc/fpext, where the CPU has it), bfloat16
in halfbits' integer IR. Decoding over all 65536 patterns; encoding and rounding over random
float32 bit patterns plus every value each rounding boundary meets (each 16-bit value, each
midpoint between neighbours, one float32 ULP either side), specials, and float64 inputs
(rounded through float32, as torch does). NaN stays NaN with its sign (its payload bits
differ between torch's own scalar and vector loops)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from llvmlite import binding as llvm
from numba import njit

from primtrace.executors.numba.backends import halfbits
from primtrace.executors.numba.backends import runtime

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
TORCH16 = {"f16": torch.float16, "bf16": torch.bfloat16}
F16C = "+f16c" in llvm.get_host_cpu_features().flatten().split(",")

#: (kind, implementation) -> (decode, encode, round): the functions kernels may call
IMPLS = {
    ("f16", "soft"): (halfbits.f16_bits_to_f32, halfbits.f32_to_f16_bits, halfbits.round_f16),
    ("f16", "hw"): (runtime.f16_to_f32_hw, runtime.f32_to_f16_hw, runtime.round_f16_hw),
    ("bf16", "ir"): (halfbits.bf16_bits_to_f32, halfbits.f32_to_bf16_bits, halfbits.round_bf16),
}


def _params():
    for kind, impl in IMPLS:
        marks = [pytest.mark.skipif(not F16C, reason="no F16C")] if impl == "hw" else []
        yield pytest.param(kind, impl, id=f"{kind}-{impl}", marks=marks)


PARAMS = list(_params())
_LOOPS: dict = {}


def apply(fn, x, out_dtype):
    """fn over an array, in an njit loop (the conversions are intrinsics: no first-class use)."""
    if fn not in _LOOPS:
        @njit
        def loop(a, out):
            for i in range(a.size):
                out[i] = fn(a[i])
        _LOOPS[fn] = loop
    out = np.empty(x.size, out_dtype)
    _LOOPS[fn](x, out)
    return out


def torch_decode(kind, bits):
    return torch.from_numpy(bits.view(np.int16)).view(TORCH16[kind]).float().numpy()


def torch_encode(kind, x):
    return torch.from_numpy(x).to(TORCH16[kind]).view(torch.int16).numpy().view(np.uint16)


def np_decode(kind, bits):
    """NumPy's decoding (torch's scalar loop drops a NaN's sign)."""
    if kind == "f16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def assert_same_floats(got, want, x):
    """Bit for bit, except that a NaN need only be a NaN with the sign of its input `x`
    (torch's bfloat16 loop gives 0xFFFF for every NaN)."""
    nan = np.isnan(want)
    sign = (x.view(np.uint16) >> 15).astype(bool) if x.dtype == np.uint16 else np.signbit(x)
    bad = np.flatnonzero(np.where(nan, ~np.isnan(got) | (np.signbit(got) != sign),
                                  got.view(np.uint32) != want.view(np.uint32)))
    assert bad.size == 0, [(x[i], got[i], want[i]) for i in bad[:10]]


def assert_same_bits(kind, got, want, x):
    """16-bit patterns equal, except NaN: a NaN pattern with the sign of its input."""
    nan = np.isnan(x)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:10]]
    decoded = np_decode(kind, got[nan])
    assert np.isnan(decoded).all(), "NaN must stay NaN"
    np.testing.assert_array_equal(np.signbit(decoded), np.signbit(x[nan]))


def encode_inputs(kind, random=1 << 20):
    """float32 values meeting every rounding boundary of `kind` (each value, each midpoint,
    one float32 ULP either side, the overflow threshold), random bit patterns, specials."""
    rng = np.random.default_rng(11)
    parts = [rng.integers(0, 1 << 32, random, dtype=np.uint64).astype(np.uint32)]
    exact = torch_decode(kind, ALL16)
    exact = np.unique(exact[np.isfinite(exact)].astype(np.float64))
    mid = ((exact[1:] + exact[:-1]) / 2).astype(np.float32)   # exact in float32
    fmax = float(torch.finfo(TORCH16[kind]).max)
    ulp_max = fmax - float(np.nextafter(np.float32(fmax), 0)) if kind == "bf16" else 32.0
    beyond = np.array([fmax + ulp_max / 2, -(fmax + ulp_max / 2)], np.float32)   # overflow ties
    for v in (exact.astype(np.float32), mid, beyond):
        bits = v.view(np.uint32).astype(np.int64)
        parts += [(bits + d).astype(np.uint32) for d in (-1, 0, 1)]
    edges = np.array([0.0, -0.0, np.inf, -np.inf, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                      2.0 ** -14, 65519.996, 65520.0, 1e-45, -1e-45, 1.2e-38, 3.4028235e38],
                     np.float32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFF800123,
                     0x7FFFFFFF, 0xFFFFFFFF, 0x7FC02000], np.uint32)
    parts += [edges.view(np.uint32), nans]
    return np.concatenate(parts).view(np.float32)


def float64_inputs(kind):
    """float64 values just off each midpoint of `kind` (float32 rounds them onto it)."""
    exact = torch_decode(kind, ALL16)
    exact = np.unique(exact[np.isfinite(exact)].astype(np.float64))
    mid = (exact[1:] + exact[:-1]) / 2
    return np.concatenate([mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40), mid, exact])


@pytest.mark.parametrize("kind,impl", PARAMS)
def test_decode_exhaustive(kind, impl):
    decode = IMPLS[kind, impl][0]
    assert_same_floats(apply(decode, ALL16, np.float32), torch_decode(kind, ALL16), ALL16)


@pytest.mark.parametrize("kind,impl", PARAMS)
def test_encode_matches_torch(kind, impl):
    x = encode_inputs(kind)
    assert_same_bits(kind, apply(IMPLS[kind, impl][1], x, np.uint16), torch_encode(kind, x), x)


@pytest.mark.parametrize("kind,impl", PARAMS)
def test_round_matches_torch(kind, impl):
    """Rounding in registers is encode + decode: ``x.to(half dtype).float()``."""
    x = encode_inputs(kind)
    want = torch.from_numpy(x).to(TORCH16[kind]).float().numpy()
    assert_same_floats(apply(IMPLS[kind, impl][2], x, np.float32), want, x)


@pytest.mark.parametrize("kind,impl", PARAMS)
def test_float64_rounds_through_float32(kind, impl):
    """A float64 is rounded to float32 first, then to the half dtype (torch rounds twice:
    1 + 2**-11 + 2**-40 becomes 1.0 in float16, not the nearer 1 + 2**-10)."""
    x = float64_inputs(kind)
    _, encode, round_ = IMPLS[kind, impl]
    want = torch.from_numpy(x).to(TORCH16[kind])
    assert_same_bits(kind, apply(encode, x, np.uint16),
                     want.view(torch.int16).numpy().view(np.uint16), x)
    assert_same_floats(apply(round_, x, np.float32), want.float().numpy(), x)


@pytest.mark.parametrize("kind,impl", PARAMS)
def test_round_trip(kind, impl):
    """Every non-NaN pattern survives decode -> encode unchanged."""
    decode, encode, _ = IMPLS[kind, impl]
    back = apply(encode, apply(decode, ALL16, np.float32), np.uint16)
    keep = ~np.isnan(torch_decode(kind, ALL16))
    np.testing.assert_array_equal(back[keep], ALL16[keep])


@pytest.mark.skipif(not F16C, reason="no F16C")
def test_truncdfhf2_is_provided_and_rounds_once():
    """The libcall LLVM emits for an fptrunc double -> half (what crashed Numba's JIT before,
    a call to address 0) exists once mathlib chose hardware float16, and rounds correctly
    (once: it stands for a single fptrunc), checked on an explicit fptrunc double -> half."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic
    runtime.provide_truncdfhf2()
    assert llvm.address_of_symbol("__truncdfhf2")

    @intrinsic
    def double_to_half(typingctx, x):
        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
        return types.uint16(types.float64), codegen

    exact = np.unique(torch_decode("f16", ALL16)[np.isfinite(torch_decode("f16", ALL16))]
                      .astype(np.float64))
    mid = (exact[1:] + exact[:-1]) / 2
    rng = np.random.default_rng(3)
    x = np.concatenate([exact, mid, mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40),
                        np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
                        rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-9, 6, 1 << 16),
                        [np.inf, -np.inf, 1e300, -1e-300, 0.0, -0.0, 65520.0, 65519.99999]])
    got = apply(double_to_half, x, np.uint16)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)   # NumPy: one correct rounding
    np.testing.assert_array_equal(got, want)
    assert np.isnan(np_decode("f16", apply(double_to_half, np.array([np.nan]), np.uint16))).all()
