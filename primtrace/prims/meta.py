"""Shared meta-function pieces: contract checks and output metadata of elementwise prims.

Every elementwise prim follows one contract: tensor operands share dtype; dimensioned
tensors share shape and device; 0-dim tensors and Python numbers are scalars (a number's
category may not exceed the dtype's). Output strides follow TensorIterator's rule: the
memory order of the inputs is kept (channels_last in, channels_last out).
"""
from __future__ import annotations

import numbers

import torch

from primtrace import dtypes
from primtrace.dtypes import Category
from primtrace.ir.proxy import TensorProxy, TensorSpec
from primtrace.ir.strides import contiguous_strides, dense_strides, matches_dense, with_stand_ins


ANY_CATEGORY = frozenset(Category)


class PrimContractError(RuntimeError):
    """A prim was called with arguments that break its strict contract."""


def is_tensor(x) -> bool:
    return isinstance(x, (torch.Tensor, TensorProxy))


def is_number(x) -> bool:
    return isinstance(x, numbers.Number) or hasattr(x, "python_type")


def number_category(x) -> Category:
    return dtypes.number_category(getattr(x, "python_type", type(x)))


def elementwise_strides(shape, operand_strides) -> tuple:
    """Strides of a new output: dense, in the memory order of the operands."""
    return with_stand_ins(_elementwise_strides, tuple(shape), operand_strides)


def _elementwise_strides(shape, operand_strides) -> tuple:
    ndim = len(shape)
    contiguous = contiguous_strides(shape)
    if ndim <= 1 or not operand_strides or all(
            matches_dense(shape, s, contiguous) for s in operand_strides):
        return contiguous

    def should_swap(d0, d1):
        for strides in operand_strides:
            s0, s1 = strides[d0], strides[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # innermost first
    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    return dense_strides(shape, perm[::-1])


def elementwise_meta(name: str, args, allowed: frozenset, result: str = "same",
                     typed=None) -> TensorSpec:
    """Check the elementwise contract for `args` and compute the output spec.

    `typed` are the operands that must share the dtype (all of `args` by default; `where`
    passes its two data operands, its predicate being bool).
    """
    typed = args if typed is None else typed
    tensors = [a for a in args if is_tensor(a)]
    typed_tensors = [a for a in typed if is_tensor(a)]
    if not typed_tensors:
        raise PrimContractError(f"prims.{name}: expected at least one tensor operand")
    dtype = typed_tensors[0].dtype
    for t in typed_tensors[1:]:
        if t.dtype != dtype:
            raise PrimContractError(
                f"prims.{name}: operands must share a dtype, got {dtype} and {t.dtype}")
    dimensioned = [t for t in tensors if t.ndim > 0]
    shape = tuple(dimensioned[0].shape) if dimensioned else ()
    device = (dimensioned or typed_tensors)[0].device
    for t in dimensioned[1:]:
        if tuple(t.shape) != shape:
            raise PrimContractError(
                f"prims.{name}: operands must share a shape, got {list(shape)} and {list(t.shape)}")
        if t.device != device:
            raise PrimContractError(
                f"prims.{name}: operands must share a device, got {device} and {t.device}")
    for t in tensors:
        if t.ndim == 0 and t.device != device and t.device.type != "cpu":
            raise PrimContractError(f"prims.{name}: 0-dim operand on {t.device}, expected {device}")
    cat = dtypes.category(dtype)
    for a in typed:
        if is_number(a) and not is_tensor(a) and number_category(a) > cat:
            raise PrimContractError(
                f"prims.{name}: a {getattr(a, 'python_type', type(a)).__name__} scalar "
                f"does not fit dtype {dtype}")
    if cat not in allowed:
        raise NotImplementedError(f'"{name}" not implemented for \'{dtypes.scalar_type_name(dtype)}\'')
    out_dtype = {"same": dtype, "bool": torch.bool, "real": dtypes.to_real(dtype)}[result]
    strides = elementwise_strides(shape, [tuple(t.stride()) for t in dimensioned])
    return TensorSpec(shape, out_dtype, device, strides)
