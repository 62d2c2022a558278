"""Regressions of the last opinfo (python_ref_db) classes: spectral norms of empty matrices,
conj as a lazily conjugated view, and the refs of stft/istft; each through the ref on real
tensors and through ``primtrace.jit``, against eager."""
from __future__ import annotations

import warnings

import pytest
import torch

import primtrace
from primtrace import refs


def _outcome(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared by kind
            return type(e)


def _check(got, expected):
    if isinstance(expected, type):
        assert got is expected or (isinstance(got, type) and issubclass(got, expected)), got
        return
    assert not isinstance(got, type), got
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got, expected)
    torch.testing.assert_close(got, expected, equal_nan=True)


# --- linalg.norm / matrix_norm: spectral norms of empty matrices ------------------------------
@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 5), (2, 0, 3)])
@pytest.mark.parametrize("ord", [2, -2, "nuc"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128])
def test_spectral_norm_of_empty_matrices(shape, ord, keepdim, dtype):
    x = torch.empty(shape, dtype=dtype)
    fn = (lambda a: torch.linalg.matrix_norm(a, ord, keepdim=keepdim)) if len(shape) > 2 else \
        (lambda a: torch.linalg.norm(a, ord, keepdim=keepdim))
    ref = refs.linalg.matrix_norm if len(shape) > 2 else refs.linalg.norm
    expected = _outcome(fn, x)
    _check(_outcome(ref, x, ord, keepdim=keepdim), expected)
    _check(_outcome(primtrace.jit(fn), x), expected)


# --- conj: eager's lazily conjugated view ----------------------------------------------------
def test_conj_ref_is_a_lazy_view():
    z = torch.randn(5, dtype=torch.complex64)
    c = refs.conj(z)
    assert c.is_conj() and c._base is z and c.untyped_storage().data_ptr() == \
        z.untyped_storage().data_ptr()
    torch.testing.assert_close(c.resolve_conj(), torch.conj_physical(z))
    x = torch.randn(5)
    assert refs.conj(x) is x
    # real and imag of it are eager's views (the imaginary part with the negative bit)
    torch.testing.assert_close(refs.imag(c), torch.imag(torch.conj(z)))
    torch.testing.assert_close(refs.real(c), torch.real(z))
    assert refs.imag(c)._base is z


def _write_through(x):
    y = torch.conj(x)
    y.mul_(2)
    y.add_(1j)
    return x


def _write_base_read_view(x):
    y = torch.conj(x)
    x.add_(1j)
    return y * 1, y


def _out_of_conj(x, o):
    torch.mul(torch.conj(x), 2, out=o)
    return o


_CONJ_PROGRAMS = {
    "returned": (lambda x: torch.conj(x), 1),
    "arith": (lambda x: torch.conj(x) * x + 1, 1),
    "with_input": (lambda x: (torch.conj(x), x + 1), 1),
    "twice": (lambda x: torch.conj(torch.conj(x)), 1),
    "reshaped": (lambda x: torch.conj(x).reshape(2, 3).t(), 1),
    "of_temp": (lambda x: torch.conj(x * 2) + x, 1),
    "real_part": (lambda x: torch.real(torch.conj(x)) * 2, 1),
    "imag_part": (lambda x: torch.imag(torch.conj(x)) + 0, 1),
    "sum": (lambda x: torch.conj(x).sum(), 1),
    "resolved": (lambda x: torch.conj(x).resolve_conj(), 1),
    "view_as_real": (lambda x: torch.view_as_real(torch.conj(x)), 1),
    "write_through": (_write_through, 1),
    "write_base_read_view": (_write_base_read_view, 1),
    "out": (_out_of_conj, 2),
}


@pytest.mark.parametrize("name", sorted(_CONJ_PROGRAMS))
def test_conj_view_under_jit(name):
    fn, n = _CONJ_PROGRAMS[name]
    make = lambda: [torch.arange(6.0).to(torch.complex64) * (1 + 2j)  # noqa: E731
                    for _ in range(n)]
    eager_args, jit_args = make(), make()
    expected, got = _outcome(fn, *eager_args), _outcome(primtrace.jit(fn), *jit_args)
    if isinstance(expected, type):
        return _check(got, expected)
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        _check(g, e)
        assert g.is_conj() == e.is_conj()
    for g, e in zip(jit_args, eager_args):  # inputs end as eager leaves them
        _check(g, e)


@pytest.mark.parametrize("fuse_all", [False, True])
def test_imag_of_a_conj_view_into_a_fused_kernel(fuse_all):
    """A tensor with torch's lazy negation bit (the imag of a conjugate view, made in the
    trace or passed in) holds the un-negated values in memory: a fused kernel's launcher
    hands such operands to torch (it read raw memory: the values lost their sign)."""
    from primtrace.executors.numba import NumbaFusionExecutor
    executors = [NumbaFusionExecutor(cost_model=False)] if fuse_all else None
    z = torch.arange(4096.0).to(torch.complex64) * (1 + 2j) / 4096
    fn = lambda x: (torch.imag(torch.conj(x)) * 2 + 1).exp()  # noqa: E731
    torch.testing.assert_close(primtrace.jit(fn, executors=executors)(z), fn(z))
    g = lambda x, y: (x * 2 + y).exp().sum(-1)  # noqa: E731
    neg = z.conj().imag.reshape(64, 64)   # an input with the bit
    assert neg.is_neg()
    jg = primtrace.jit(g, executors=executors)
    plain = neg.resolve_neg()
    torch.testing.assert_close(jg(plain, plain), g(plain, plain))
    torch.testing.assert_close(jg(neg, neg), g(neg, neg))     # the same trace, a neg input


# --- masked_fill: eager converts a tensor value's item(), checked ------------------------------
_VALUES = [torch.tensor(1j), torch.tensor(2 + 0j), torch.tensor(1e30), torch.tensor(float("nan")),
           torch.tensor(300.0), torch.tensor(-1), torch.tensor(2 ** 40), torch.tensor(True),
           torch.tensor(7, dtype=torch.int8)]


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int8, torch.float16,
                                   torch.float32, torch.bool, torch.complex64])
def test_masked_fill_tensor_value_is_checked_as_eager(dtype):
    x, mask = torch.tensor([1, 1]).to(dtype), torch.tensor([True, False])
    fn = lambda a, m, v: torch.masked_fill(a, m, v)  # noqa: E731
    jitted = primtrace.jit(fn)
    for value in _VALUES:  # one trace per value dtype: the guard reads each call's value
        expected = _outcome(fn, x, mask, value)
        _check(_outcome(refs.masked_fill, x, mask, value), expected)
        _check(_outcome(jitted, x, mask, value), expected)
        _check(_outcome(jitted, x, mask, torch.tensor(0, dtype=value.dtype)),
               fn(x, mask, torch.tensor(0, dtype=value.dtype)))


# --- stft / istft ---------------------------------------------------------------------------
def _signal(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


_HANN = torch.hann_window(8)
_STFT = {
    "no_return_complex": ((_signal(20), 8), {}),
    "int_input": ((torch.arange(20), 8), {"return_complex": True}),
    "3d": ((_signal(2, 3, 20), 8), {"return_complex": True}),
    "0d": ((torch.tensor(1.0), 8), {"return_complex": True}),
    "n_fft_0": ((_signal(20), 0), {"return_complex": True, "center": False}),
    "n_fft_long": ((_signal(20), 30), {"return_complex": True, "center": False}),
    "reflect_too_long": ((_signal(5), 12), {"return_complex": True}),
    "constant_pad": ((_signal(5), 12), {"return_complex": True, "pad_mode": "constant"}),
    "replicate_pad": ((_signal(2, 30), 12), {"return_complex": True, "pad_mode": "replicate"}),
    "circular_pad": ((_signal(30), 12), {"return_complex": True, "pad_mode": "circular"}),
    "bad_pad_mode": ((_signal(20), 8), {"return_complex": True, "pad_mode": "foo"}),
    "hop_0": ((_signal(20), 8), {"hop_length": 0, "return_complex": True}),
    "small_n_fft_hop_0": ((_signal(20), 3), {"return_complex": True}),
    "win_long": ((_signal(20), 8), {"win_length": 9, "return_complex": True}),
    "window_size": ((_signal(20), 8), {"window": torch.ones(7), "return_complex": True}),
    "window_2d": ((_signal(20), 8), {"window": torch.ones(1, 8), "return_complex": True}),
    "onesided_complex": ((_signal(20, dtype=torch.complex64), 8),
                         {"onesided": True, "return_complex": True}),
    "complex_as_real": ((_signal(20, dtype=torch.complex64), 8), {"return_complex": False}),
    "complex_default": ((_signal(20, dtype=torch.complex64), 8), {}),
    "complex_window": ((_signal(20), 8), {"window": _HANN.to(torch.complex128)}),
    "twosided": ((_signal(3, 40), 8), {"onesided": False, "return_complex": True}),
    "real_pairs": ((_signal(3, 40), 8), {"window": _HANN, "return_complex": False}),
    "normalized": ((_signal(40, dtype=torch.float64), 16),
                   {"window": _HANN.double().repeat(2), "normalized": True,
                    "return_complex": True}),
    "float64_window": ((_signal(20), 8), {"window": _HANN.double(), "return_complex": True}),
    "int_window": ((_signal(20), 8), {"window": torch.ones(8, dtype=torch.int64),
                                      "return_complex": True}),
    "short_window": ((_signal(20), 8), {"window": torch.hann_window(5, dtype=torch.float64),
                                        "win_length": 5, "return_complex": True}),
    "short_no_window": ((_signal(2, 20), 8), {"win_length": 4, "hop_length": 3,
                                              "return_complex": True}),
    "align_to_window": ((_signal(20), 8), {"win_length": 4, "center": False,
                                           "align_to_window": True, "return_complex": True}),
    "align_with_center": ((_signal(20), 8), {"align_to_window": True, "return_complex": True}),
    "strided_signal": ((_signal(2, 60)[:, ::3], 8), {"center": False, "return_complex": True}),
    "empty_batch": ((_signal(0, 20), 8), {"return_complex": True}),
}


def _same_layout(got, expected):
    _check(got, expected)
    assert got.stride() == expected.stride(), (got.stride(), expected.stride())


def _ref_and_jit_match_eager(name, args, kwargs):
    """getattr(torch, name) against refs.<name> and primtrace.jit of it (by default the
    fusion executor puts the whole torch call back, as it fuses only a part; with the torch
    executor alone the prims run): the error kind, or dtype, shape, strides and values."""
    fn = lambda *a: getattr(torch, name)(*a, **kwargs)  # noqa: E731
    expected = _outcome(fn, *args)
    for got in (_outcome(lambda *a: getattr(refs, name)(*a, **kwargs), *args),
                _outcome(primtrace.jit(fn), *args),
                _outcome(primtrace.jit(fn, executors=[]), *args)):
        if isinstance(expected, type):
            _check(got, expected)
        else:
            _same_layout(got, expected)


@pytest.mark.parametrize("name", sorted(_STFT))
def test_stft_matches_eager(name):
    _ref_and_jit_match_eager("stft", *_STFT[name])


def _spectrum(*shape, n_fft=8, window=_HANN, dtype=torch.float32):
    return torch.stft(_signal(*shape, dtype=dtype), n_fft, window=window, return_complex=True)


_S, _SB = _spectrum(40), _spectrum(3, 40)
_ISTFT = {
    "plain": ((_S, 8), {"window": _HANN}),
    "batch": ((_SB, 8), {"window": _HANN}),
    "no_window": ((_S, 8), {}),
    "no_overlap_hann": ((_S, 8), {"hop_length": 8, "window": _HANN}),   # NOLA fails
    "not_centred_hann": ((_S, 8), {"window": _HANN, "center": False}),  # NOLA fails
    "zero_window": ((_S, 8), {"window": torch.zeros(8)}),
    "real_input": ((torch.view_as_real(_S), 8), {}),
    "empty": ((_S[:, :0], 8), {}),
    "1d": ((_S[0], 8), {}),
    "4d": ((_S[None, None], 8), {}),
    "onesided_size": ((_S, 10), {}),
    "twosided_size": ((_S, 8), {"onesided": False}),
    "hop_past_window": ((_S, 8), {"hop_length": 9}),
    "hop_0": ((_S, 8), {"hop_length": 0}),
    "win_long": ((_S, 8), {"win_length": 9}),
    "window_size": ((_S, 8), {"window": torch.ones(7)}),
    "complex_onesided": ((_S, 8), {"return_complex": True}),
    "complex_window": ((_S, 8), {"window": _HANN.to(torch.complex64)}),
    "length_longer": ((_SB, 8), {"window": _HANN, "length": 50}),
    "length_shorter": ((_S, 8), {"window": _HANN, "length": 30}),
    "length_0": ((_S, 8), {"window": _HANN, "length": 0}),
    "float64_window": ((_S, 8), {"window": _HANN.double()}),
    "complex128_float32_window": ((_S.to(torch.complex128), 8), {"window": _HANN}),
    "int_window": ((_S, 8), {"window": torch.ones(8, dtype=torch.int64)}),
    "normalized": ((_S, 8), {"window": _HANN, "normalized": True}),
    "twosided": ((_spectrum(3, 40, window=None, dtype=torch.complex64), 8),
                 {"onesided": False, "return_complex": True}),
    "twosided_real": ((torch.stft(_signal(40), 8, onesided=False, return_complex=True), 8),
                      {"onesided": False}),
    "short_window": ((_spectrum(2, 40, n_fft=10, window=None), 10),
                     {"window": torch.hann_window(8, dtype=torch.float64) + 0.1,
                      "win_length": 8, "hop_length": 3}),
    "strided_input": ((_SB[:, :, ::2], 8), {"hop_length": 4, "window": _HANN}),
}


@pytest.mark.parametrize("name", sorted(_ISTFT))
def test_istft_matches_eager(name):
    _ref_and_jit_match_eager("istft", *_ISTFT[name])


def test_istft_overlap_add_check_reads_the_window_each_call():
    """NOLA is checked on the window's values when the trace runs: a window that becomes
    zero on a later call raises as eager does, with no retrace."""
    fn = primtrace.jit(lambda s, w: torch.istft(s, 8, window=w), executors=[])  # the prims
    torch.testing.assert_close(fn(_S, _HANN), torch.istft(_S, 8, window=_HANN))
    with pytest.raises(RuntimeError, match="window overlap add min"):
        fn(_S, torch.zeros(8))
    assert primtrace.cache_info(fn).misses == 1
    assert "check_overlap_add" in str(primtrace.last_trace(fn))


def test_stft_istft_round_trip_under_jit():
    x = _signal(2, 100, dtype=torch.float64)
    w = torch.hann_window(16, dtype=torch.float64)
    round_trip = lambda a: torch.istft(  # noqa: E731
        torch.stft(a, 16, 4, window=w, return_complex=True), 16, 4, window=w, length=100)
    for executors in (None, []):
        torch.testing.assert_close(primtrace.jit(round_trip, executors=executors)(x), x)


# --- tensors read as sizes under jit: an input's values are guarded ------------------------------
def test_narrow_with_a_tensor_start_is_guarded_on_its_value():
    x = torch.arange(30.0).reshape(5, 6)
    fn = primtrace.jit(lambda a, s: torch.narrow(a, 1, s, 2) * 2)
    for start in (2, 2, 0, -2, 2, 4):   # each call through the hit path checks the value
        s = torch.tensor(start)
        torch.testing.assert_close(fn(x, s), torch.narrow(x, 1, s, 2) * 2)
    assert primtrace.cache_info(fn).misses == 4   # one trace per distinct start
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        fn(x, torch.tensor(5))


def test_tensor_split_with_a_tensor_of_indices_is_guarded_on_its_values():
    x = torch.arange(10.0)
    fn = primtrace.jit(lambda a, i: [p + 1 for p in torch.tensor_split(a, i)])
    for indices in ([2, 5], [2, 5], [1, 7], [3], 3):
        i = torch.tensor(indices)
        got, expected = fn(x, i), [p + 1 for p in torch.tensor_split(x, i)]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
    assert primtrace.cache_info(fn).misses == 4


def test_a_computed_tensor_start_is_still_data_dependent():
    x = torch.arange(30.0).reshape(5, 6)
    with pytest.raises(primtrace.DataDependentError, match="narrow's tensor start"):
        primtrace.jit(lambda a, s: torch.narrow(a, 1, s + 1, 2))(x, torch.tensor(1))

    def written_first(a, s):
        s.add_(1)
        return torch.narrow(a, 1, s, 2)
    with pytest.raises(primtrace.DataDependentError):
        primtrace.jit(written_first)(x, torch.tensor(1))


def test_a_module_buffer_start_is_guarded_too():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("start", torch.tensor(1))

        def forward(self, a):
            return torch.narrow(a, 0, self.start, 2)

    m, x = M(), torch.arange(6.0)
    fn = primtrace.jit(m)
    torch.testing.assert_close(fn(x), x[1:3])
    m.start.fill_(3)
    torch.testing.assert_close(fn(x), x[3:5])


# --- torch's Python that wants real ints: traced again with the numbers as constants ------------
def test_broadcast_shapes_of_int_arguments_under_jit():
    fn = primtrace.jit(torch.broadcast_shapes)
    assert fn((5, 1), 5) == torch.Size([5, 5])
    assert fn((5, 1), 3) == torch.Size([5, 3])   # specialized: another value traces again
    assert fn((2, 1), (1, 4)) == torch.Size([2, 4])
    with pytest.raises(RuntimeError):   # eager's error when the shapes do not broadcast
        fn((5, 2), 3)
