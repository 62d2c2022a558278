"""Random prims: a new tensor of `shape` (with the given dense strides, contiguous by
default) filled with draws from one distribution, from torch's default generator.

Each runs eager's own fill (``torch.empty_strided(...).uniform_(low, high)``...), so under
the same seed a trace draws the same numbers as the eager code that makes the same tensor
and fills it the same way (torch.rand is empty + uniform_; F.dropout's noise is
empty_like(input) + bernoulli_(1 - p)). Tagged "random": passes never merge or drop them.
The parameters are Python numbers; the refs check eager's ranges first.
"""
from __future__ import annotations

import torch

from primtrace.ir.proxy import TensorSpec
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.prims.differentiation import RANDOM
from primtrace.prims.meta import PrimContractError, is_number

#: name -> (parameter names, the in-place Tensor method that fills, what it draws)
DISTRIBUTIONS = {
    "uniform": (("low", "high"), "uniform_", "uniform on [low, high)"),
    "normal": (("mean", "std"), "normal_", "normal with mean and std"),
    "bernoulli": (("p",), "bernoulli_", "1 with probability p, else 0"),
    "exponential": (("lambd",), "exponential_", "exponential with rate lambd"),
    "cauchy": (("median", "sigma"), "cauchy_", "Cauchy with median and scale sigma"),
    "geometric": (("p",), "geometric_", "the number of Bernoulli(p) trials to the first success"),
    "log_normal": (("mean", "std"), "log_normal_", "exp of a normal with mean and std"),
}


def _make(name, params, method, what):
    def meta(shape, *values, dtype, device, strides=None):
        shape = tuple(shape)
        if len(values) != len(params) or not all(is_number(v) for v in values):
            raise PrimContractError(f"prims.{name}: expected the numbers {params}")
        if not isinstance(dtype, torch.dtype):
            raise PrimContractError(f"prims.{name}: expected a dtype, got {dtype!r}")
        strides = contiguous_strides(shape) if strides is None else tuple(strides)
        return TensorSpec(shape, dtype, torch.device(device), strides)

    def impl(shape, *values, dtype, device, strides=None):
        shape = tuple(shape)
        strides = contiguous_strides(shape) if strides is None else tuple(strides)
        t = torch.empty_strided(shape, strides, dtype=dtype, device=device)
        return getattr(t, method)(*values)

    return Symbol(name, kind=SymbolKind.PRIM, meta=meta, impl=impl, tags=frozenset({"random"}),
                  module="prims",
                  doc=f"A new tensor of `shape` ({', '.join(params)}): draws {what} "
                      f"(Tensor.{method} on the default generator).")


PRIMS = {name: _make(name, *row) for name, row in DISTRIBUTIONS.items()}
DERIVATIVES = dict.fromkeys(PRIMS, RANDOM)
globals().update(PRIMS)
__all__ = list(PRIMS)
