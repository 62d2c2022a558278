"""Regressions found by PyTorch's reference list (scripts/opinfo_conformance.py): each case
compared with eager, through the ref and through primtrace.jit."""
import math
import types

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs
from tests.conformance.harness import SampleInput, check_sample
from tests.conformance.test_opinfo_refs import oc  # its check keeps the inputs' aliasing


def _both(torch_fn, ref, *args, **kwargs):
    sample = SampleInput(args, kwargs, "")
    for fn in (ref, primtrace.jit(lambda *a, **k: torch_fn(*a, **k))):
        problem = check_sample(fn, torch_fn, sample)
        assert problem is None, problem


@pytest.mark.parametrize("shape", [(5, 0), (0, 5), (0, 0), (2, 5, 0), (3, 4)])
@pytest.mark.parametrize("ord", [math.inf, -math.inf, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_matrix_norm_of_empty_matrices(shape, ord, keepdim):
    """eager's 1/inf norm of no rows or columns is 0; -1/-inf raise amin's IndexError."""
    x = torch.rand(shape)
    _both(torch.linalg.matrix_norm, refs.linalg.matrix_norm, x, ord, keepdim=keepdim)
    if len(shape) == 2:
        _both(torch.linalg.norm, refs.linalg.norm, x, ord, keepdim=keepdim)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_integer_scan_in_its_own_dtype(op, dtype):
    """cumsum(x, dim, dtype=int16) scans in int16 (torch's kernel would default to int64)."""
    x = torch.randint(0, 9, (3, 5, 4)).to(dtype)
    _both(getattr(torch, op), getattr(refs, op), x, 1, dtype=dtype)


def test_take_along_dim_wraps_indices():
    """take_along_dim with a dim takes indices modulo the size, as eager (-1 is the last)."""
    x = torch.arange(10.).reshape(2, 5)
    index = torch.tensor([[12, -12, -7, 7, 100, -100, -1, 0]])
    _both(torch.take_along_dim, refs.take_along_dim, x, index, 1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_loss_of_complex(reduction):
    """|input - target| of complex tensors is real, reduced as eager."""
    a, b = torch.randn(3, 4, dtype=torch.complex64), torch.randn(3, 4, dtype=torch.complex64)
    _both(F.l1_loss, refs.nn.functional.l1_loss, a, b, reduction=reduction)


@pytest.mark.parametrize("dtype", [torch.complex32, torch.complex64, torch.complex128])
@pytest.mark.parametrize("part", ["real", "imag"])
def test_complex_parts_are_views(part, dtype):
    """x.real and x.imag of a complex tensor share its memory (writes reach x), as eager's."""
    x = torch.randn(3, 4, dtype=torch.complex64).to(dtype)[:, 1:]
    for fn in (getattr(refs, part), primtrace.jit(lambda t: getattr(torch, part)(t))):
        y, e = fn(x), getattr(torch, part)(x)
        assert y.dtype == e.dtype and y.shape == e.shape and y.stride() == e.stride()
        assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert y.storage_offset() == e.storage_offset()
        assert torch.equal(y.to(torch.float64), e.to(torch.float64))


def _out_cases():
    x, y = torch.randn(4, 6), torch.randn(2, 6)
    e = torch.empty(0)
    return [
        ((x, x), {"out": torch.empty(8, 6)}),                   # a right-sized out
        ((x, x), {"out": torch.empty(3)}),                      # resized, with a warning
        ((x, x), {"out": torch.empty(0, dtype=torch.float64)}),  # another dtype
        ((x, x), {"out": torch.empty(0, dtype=torch.int32)}),  # a lossy cast: refused
        ((x, x), {"out": torch.empty(8, 1).expand(8, 6)}),      # overlaps itself
        ((e, x), {"out": e}),                                   # out is an input
        ((e, x), {"out": x}),                                   # even fully
        ((y[:1], y[1:]), {"out": y}),                           # out holds the inputs
    ]


@pytest.mark.parametrize("name", ["cat", "concatenate", "stack", "hstack", "vstack"])
@pytest.mark.parametrize("case", range(8))
def test_joins_write_out(name, case):
    """cat(out=) writes out (it returned a new tensor and left out alone) or raises as eager."""
    args, kwargs = _out_cases()[case]
    if name == "stack" and args[0].shape != args[1].shape:
        pytest.skip("stack needs one shape")
    if case == 4 and name in ("stack", "hstack"):
        pytest.skip("known: eager resizes a wrongly sized expanded out before its overlap check")
    sample = types.SimpleNamespace(input=list(args), args=(), kwargs=kwargs)
    problem = oc.check(getattr(refs, name), getattr(torch, name), sample, random=False)
    assert problem is None, problem
    out = kwargs["out"].clone() if kwargs["out"].numel() else torch.empty(0)
    if case in (0, 1, 2):
        assert getattr(refs, name)(list(args), out=out) is out
        assert torch.equal(out, getattr(torch, name)(list(args)).to(out.dtype))


@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize("out", [torch.empty(20), torch.empty(3), torch.empty(0),
                                 torch.empty(20, dtype=torch.int32),
                                 torch.empty(20, dtype=torch.float64)])
def test_amax_amin_out(op, out):
    """out= is written (right or resized), and an out of another dtype raises eager's error."""
    x = torch.randn(20, 20)

    def eager(t, o):
        return getattr(torch, op)(t, 0, out=o)

    def ref(t, o):
        return getattr(refs, op)(t, 0, out=o)
    for fn in (ref, primtrace.jit(eager)):
        sample = types.SimpleNamespace(input=x, args=(out,), kwargs={})
        problem = oc.check(fn, eager, sample, random=False)
        assert problem is None, problem


def test_triplet_margin_loss_refuses_a_margin_not_above_zero():
    a = torch.randn(3, 4)
    for margin in (0.0, -1.0):
        _both(F.triplet_margin_loss, refs.nn.functional.triplet_margin_loss, a, a, a,
              margin=margin)


@pytest.mark.parametrize("dim", [3, 5, -4, -1])
def test_narrow_copy_dim_past_the_last(dim):
    """eager's narrow_copy raises a RuntimeError for a dim past the last (narrow: IndexError)."""
    _both(torch.narrow_copy, refs.narrow_copy, torch.randn(10, 5, 20), dim, 0, 0)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape, dim", [((3, 4), 1), ((3, 4), (0, 1)), ((), 0), ((0, 3), 1),
                                        ((2, 0), 1)])
def test_logsumexp_of_complex(dtype, shape, dim):
    """Shifted by the largest real part as eager's; the imaginary part wraps (0-dim too)."""
    x = (torch.randn(shape, dtype=dtype) * 400)
    if x.numel() >= 4:
        x.view(-1)[:4] = torch.tensor([complex(math.inf, 1), complex(-math.inf, 0),
                                       complex(math.nan, 0), 1e30 + 1j])
    _both(torch.logsumexp, refs.logsumexp, x, dim)
    _both(torch.logsumexp, refs.logsumexp, x, dim, keepdim=True)


@pytest.mark.parametrize("shape, p, dim, maxnorm", [((), 2, 0, 1.0), ((3,), 2, 0, 1.0),
                                                    ((3,), 2, 5, 1.0), ((3,), -1, 0, 1.0),
                                                    ((3,), 2, 0, -1.0), ((2, 3), 2, 0, 1.0)])
def test_renorm_needs_two_dims(shape, p, dim, maxnorm):
    """renorm of a 0-d or 1-d input raises eager's RuntimeError (after its p and maxnorm checks)."""
    x = torch.randn(shape)
    _both(torch.renorm, refs.renorm, x, p, dim, maxnorm)
    if len(shape) < 2 and p > 0 and maxnorm >= 0:
        with pytest.raises(RuntimeError, match="at least 2 dimensions"):
            refs.renorm(x, p, dim, maxnorm)
