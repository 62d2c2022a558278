"""Selections whose result size depends on the data (issue 20 item 2): nonzero, argwhere,
masked_select, boolean-mask indexing, unique. Eagerly as refs here, and through jit by
tests/tracer/test_jit_conformance.py, which runs every SPECS list of this folder."""
import pytest
import torch

from primtrace import refs
from primtrace.refs import slicing
from tests.conformance.harness import ALL_DTYPES, OpSpec, SampleInput, make_tensor, run_conformance

REAL = tuple(d for d in ALL_DTYPES if not d.is_complex)


def _by_mask(x, mask):
    return x[mask]


def _ref_by_mask(x, mask):
    """The ref, or eager's where the ref declines (a 0-dim mask: the tracer leaves it to
    torch); tests/tracer/test_jit_conformance runs every sample through jit regardless."""
    if slicing.__getitem__.declines(x, mask):
        return x[mask]
    return slicing.__getitem__(x, mask)


def _by_row_mask(x, mask):
    return x[mask[..., 0]]


def _ref_by_row_mask(x, mask):
    return _ref_by_mask(x, mask[..., 0])


def _mask_samples(spec):
    """Masks that keep every element, none, and one; a mask of the leading dims only."""
    for dtype in (torch.float32, torch.int64, torch.bool):
        x = make_tensor((3, 4), dtype, seed=3)
        for mask in (torch.ones(3, 4, dtype=torch.bool), torch.zeros(3, 4, dtype=torch.bool),
                     torch.eye(3, 4, dtype=torch.bool)[:, :1].expand(3, 4)):
            yield SampleInput((x, mask), {}, f"{dtype} mask of {int(mask.sum())}")
        yield SampleInput((make_tensor((2, 3, 4), dtype, seed=4), torch.tensor(
            [[True, False, True], [False, False, True]])), {}, f"{dtype} leading-dims mask")


def _unique_samples(spec):
    for dtype in (torch.float32, torch.int32, torch.bool, torch.float16):
        x = make_tensor((6, 4), dtype, seed=5, domain=(-2, 2))
        yield SampleInput((x,), {}, f"{dtype} repeated values")
        yield SampleInput((x.t(),), {}, f"{dtype} repeated values, transposed")
        yield SampleInput((torch.cat([x[:2], x[:2], x[2:3]]),), {"dim": 0},
                          f"{dtype} repeated rows, dim=0")


SPECS = [
    OpSpec("nonzero", refs.nonzero, torch.nonzero, supports_out=False),
    OpSpec("nonzero_as_tuple", lambda x: refs.nonzero(x, as_tuple=True),
           lambda x: torch.nonzero(x, as_tuple=True), supports_out=False),
    OpSpec("argwhere", refs.argwhere, torch.argwhere, supports_out=False),
    OpSpec("masked_select", refs.masked_select, torch.masked_select, arity=2,
           arg_dtypes={1: torch.bool}, mixed_dtypes=False, supports_out=False,
           extra_samples=_mask_samples),
    OpSpec("getitem_bool_mask", _ref_by_mask, _by_mask, arity=2, arg_dtypes={1: torch.bool},
           mixed_dtypes=False, supports_out=False, extra_samples=_mask_samples),
    OpSpec("getitem_row_mask", _ref_by_row_mask, _by_row_mask, arity=2,
           arg_dtypes={1: torch.bool}, mixed_dtypes=False, supports_out=False),
    OpSpec("unique", refs.unique, torch.unique, dtypes=REAL, supports_out=False,
           kwargs_variants=({}, {"return_inverse": True, "return_counts": True},
                            {"sorted": True, "return_counts": True, "dim": 1}),
           extra_samples=_unique_samples),
    OpSpec("unique_consecutive", refs.unique_consecutive, torch.unique_consecutive,
           dtypes=REAL, supports_out=False,
           kwargs_variants=({}, {"return_inverse": True, "return_counts": True}, {"dim": 0})),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)
