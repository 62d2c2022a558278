"""float16 / bfloat16 bit-pattern conversions (primtrace.executors.numba.halfbits) against
torch: decoding exhaustively over all 65536 patterns, encoding over random float32 bit
patterns plus the cases rounding gets wrong (ties, subnormal boundaries, overflow)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from numba import njit

from primtrace.executors.numba.halfbits import (bf16_bits_to_f32, f16_bits_to_f32,
                                                f32_to_bf16_bits, f32_to_f16_bits)

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
TORCH16 = {"f16": torch.float16, "bf16": torch.bfloat16}


@njit
def _decode(fn, bits, out):
    for i in range(bits.size):
        out[i] = fn(bits[i])


@njit
def _encode(fn, x, out):
    for i in range(x.size):
        out[i] = fn(x[i])


def decode(kind, bits):
    out = np.empty(bits.size, np.float32)
    _decode(f16_bits_to_f32 if kind == "f16" else bf16_bits_to_f32, bits, out)
    return out


def encode(kind, x):
    out = np.empty(x.size, np.uint16)
    _encode(f32_to_f16_bits if kind == "f16" else f32_to_bf16_bits, x, out)
    return out


def torch_decode(kind, bits):
    return torch.from_numpy(bits.view(np.int16)).view(TORCH16[kind]).float().numpy()


def torch_encode(kind, x):
    return torch.from_numpy(x).to(TORCH16[kind]).view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_decode_exhaustive(kind):
    got, want = decode(kind, ALL16), torch_decode(kind, ALL16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    # non-NaN: bit for bit (so -0.0 and subnormals are checked exactly)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    # NaN keeps its sign
    np.testing.assert_array_equal(np.signbit(got[nan]), np.signbit(want[nan]))


def _encode_inputs(kind):
    rng = np.random.default_rng(11)
    parts = [rng.integers(0, 1 << 32, 1 << 21, dtype=np.uint64).astype(np.uint32)]
    # every float16 / bfloat16 value, decoded, then nudged: exact values, halfway points
    # between neighbours (ties), and one float32 ULP either side of each halfway point
    exact = torch_decode(kind, ALL16)
    exact = exact[np.isfinite(exact)]
    exact = np.unique(exact.astype(np.float64))
    mid = ((exact[1:] + exact[:-1]) / 2).astype(np.float32)   # exact in float32
    parts += [v.view(np.uint32) for v in (exact.astype(np.float32), mid)]
    parts += [(mid.view(np.uint32).astype(np.int64) + d).astype(np.uint32) for d in (1, -1)]
    fmax = 65504.0 if kind == "f16" else float(torch.finfo(torch.bfloat16).max)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, fmax, -fmax, 2.0 ** -24, 2.0 ** -25,
                      3 * 2.0 ** -26, 2.0 ** -14, 65519.996, 65520.0, 1e-45, 3.4028235e38],
                     np.float32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFF800123,
                     0x7FFFFFFF], np.uint32)
    parts += [edges.view(np.uint32), nans]
    return np.concatenate(parts).view(np.float32)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_encode_matches_torch(kind):
    x = _encode_inputs(kind)
    got, want = encode(kind, x), torch_encode(kind, x)
    nan = np.isnan(x)
    assert np.isnan(decode(kind, got[nan])).all(), "NaN must stay NaN"
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:10]]


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_round_trip(kind):
    """Every non-NaN pattern survives decode -> encode unchanged."""
    back = encode(kind, decode(kind, ALL16))
    keep = ~np.isnan(torch_decode(kind, ALL16))
    np.testing.assert_array_equal(back[keep], ALL16[keep])


@pytest.mark.parametrize("fn,arg,res", [
    (f16_bits_to_f32, np.uint16, "float"), (bf16_bits_to_f32, np.uint16, "float"),
    (f32_to_f16_bits, np.float32, "i16"), (f32_to_bf16_bits, np.float32, "i16")])
def test_vectorizes(fn, arg, res):
    """A conversion loop over uint16/float32 arrays compiles to vector code."""
    @njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])
    x = np.zeros(64, arg)
    out = np.zeros(64, np.float32 if res == "float" else np.uint16)
    loop(x, out)
    ir = loop.inspect_llvm(loop.signatures[0])
    body = next(m.group(0) for m in re.finditer(r'^define [^@]*@"?([\w.$]+)"?\(.*?^}', ir,
                                                re.S | re.M)
                if not m.group(1).startswith(("_ZN7cpython", "cfunc")))
    calls = {c for c in re.findall(r'call [^@]*@"?([\w.$]+)', body) if not c.startswith("llvm.")}
    assert not calls
    lanes = [int(n) for n in re.findall(r"<(\d+) x (?:float|i16|i32)>", body)]
    assert lanes and max(lanes) >= 8
