"""Reduction refs: sum, mean, prod, amax, amin, all, any, count_nonzero, var, std, var_mean
and std_mean.

What the refs spell out is eager's argument handling; the reducing itself is one prim
(``prims.sum``, ``prod``, ``amax``, ``amin``, ``var`` with its correction) over a tuple of non-negative dims:

- ``dim``: None, an int or a tuple/list of ints; negative dims wrap, a 0-dim tensor takes
  dim 0 and -1, a repeated dim is an error. An empty tuple reduces every dim, except for
  all and any, where it reduces none (eager's rule for each op);
- ``keepdim``: the reduced dims come back with size 1 (prims.broadcast_in_dim, a view);
- dtypes: sum and prod of bool and integer inputs are int64 unless ``dtype=`` is given; the
  input is converted to the result dtype first and the prim reduces in it. mean refuses
  bool and integer inputs (and a ``dtype=`` that is not floating or complex); float16 and
  bfloat16 means sum and divide in float32 and round once, as eager's CPU kernel does.
  all and any return bool (uint8 for uint8 inputs); count_nonzero returns int64;
- empty reductions: sum 0, prod 1, mean NaN, all True, any False; amax and amin raise
  eager's errors.

This module's names shadow the builtins sum, all and any: the code uses ``builtins.``.
"""
from __future__ import annotations

import builtins
import operator

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref

_NO_DIM = object()  # prod's dim when it is not given (eager's prod takes no None)


# --- arguments ---------------------------------------------------------------------------------
def _require_tensor(name, x):
    if not is_tensor(x):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(x).__name__}")


def _index(name, d) -> int:
    kind = getattr(d, "python_type", type(d))  # a runtime number while tracing
    if issubclass(kind, (bool, float, complex)) or not hasattr(d, "__index__"):
        raise TypeError(f"{name}(): argument 'dim' must be int or tuple of ints, "
                        f"not {type(d).__name__}")
    return operator.index(d)


def wrap_dim(d: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) as a non-negative one (a 0-dim tensor takes 0 and -1)."""
    n = builtins.max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return d % n


def reduction_dims(name, a, dim, *, empty_means_all=True) -> tuple:
    """The increasing tuple of dims `dim` names for `a` (see the module docstring)."""
    if dim is None:
        return tuple(range(a.ndim))
    if isinstance(dim, (tuple, list, torch.Size)):
        if not dim and empty_means_all:
            return tuple(range(a.ndim))
        dims = [wrap_dim(_index(name, d), a.ndim) for d in dim]
    else:
        dims = [wrap_dim(_index(name, dim), a.ndim)]
    seen = set()
    for d in dims:
        if d in seen:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        seen.add(d)
    if a.ndim == 0:
        return ()
    return tuple(sorted(dims))


def _reduced_shape(a, dims) -> tuple:
    return tuple(s for i, s in enumerate(a.shape) if i not in dims)


def keep_dims(y, a, dims, keepdim):
    """`y`, the reduction of `a` over `dims`, with the reduced dims back as size 1 (keepdim)."""
    if not keepdim or not dims:
        return y
    shape = tuple(1 if i in dims else s for i, s in enumerate(a.shape))
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    return prims.broadcast_in_dim(y, shape, kept)


def _check_dtype(name, dtype):
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")


def _sum_dtype(a, dtype):
    """sum's and prod's result dtype: int64 for bool and integer inputs unless dtype= says."""
    if dtype is not None:
        return dtype
    return torch.int64 if a.dtype is torch.bool or dtypes.is_integer(a.dtype) else a.dtype


def _nonzero(a):
    """a != 0 as a bool tensor (a itself for bool; NaN is nonzero)."""
    return a if a.dtype is torch.bool else prims.ne(a, 0)


# --- sum, prod, mean -----------------------------------------------------------------------------
@ref
def sum(input, dim=None, keepdim=False, *, dtype=None):
    """The sum over `dim` (all dims by default), in `dtype`: int64 for bool and integers."""
    _require_tensor("sum", input)
    _check_dtype("sum", dtype)
    dims = reduction_dims("sum", input, dim)
    x = maybe_convert(input, _sum_dtype(input, dtype))
    return keep_dims(prims.sum(x, dims), input, dims, keepdim)


@ref
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """sum with NaN counted as zero (eager's meta kernel keeps every dim for dim=(), its CPU
    kernel reduces them all, as sum does: the ref is sum's)."""
    _require_tensor("nansum", input)
    _check_dtype("nansum", dtype)
    if input.dtype.is_complex:
        raise RuntimeError("nansum on CPU does not support complex inputs")
    dims = reduction_dims("nansum", input, dim)
    x = maybe_convert(input, _sum_dtype(input, dtype))
    if x.dtype.is_floating_point:
        x = prims.where(prims.isnan(x), 0.0, x)
    return keep_dims(prims.sum(x, dims), input, dims, keepdim)


@ref
def prod(input, dim=_NO_DIM, keepdim=False, *, dtype=None):
    """The product over one dim (all dims without one), in `dtype`: int64 for bool and
    integers. Eager's prod takes a single int dim, not None nor a tuple."""
    _require_tensor("prod", input)
    _check_dtype("prod", dtype)
    if dim is _NO_DIM:
        dims = tuple(range(input.ndim))
        keepdim = False
    else:
        if isinstance(dim, (tuple, list)) or dim is None:
            raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
        dims = reduction_dims("prod", input, dim)
    x = maybe_convert(input, _sum_dtype(input, dtype))
    return keep_dims(prims.prod(x, dims), input, dims, keepdim)


@ref
def mean(input, dim=None, keepdim=False, *, dtype=None):
    """The mean over `dim`: the sum divided by the number of elements reduced (NaN for none).
    Floating and complex only; float16/bfloat16 compute in float32 and round once."""
    _require_tensor("mean", input)
    _check_dtype("mean", dtype)
    for d in (dim if isinstance(dim, (tuple, list, torch.Size)) else () if dim is None else (dim,)):
        _index("mean", d)  # eager parses dim before its dtype checks, and wraps it after
    if dtype is None:
        if not (input.dtype.is_floating_point or input.dtype.is_complex):
            raise RuntimeError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {dtypes.scalar_type_name(input.dtype)}")
        dtype = input.dtype
    elif not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. Optional dtype must be either a floating "
            f"point or complex dtype. Got: {dtypes.scalar_type_name(dtype)}")
    dims = reduction_dims("mean", input, dim)
    return keep_dims(_mean(input, dims, dtype), input, dims, keepdim)


def _computation(dtype):
    """float32 for float16 and bfloat16 (eager's CPU means and stds round once, at the end)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _mean(input, dims, dtype):
    count = 1
    for d in dims:
        count *= input.shape[d]
    total = prims.sum(maybe_convert(input, _computation(dtype)), dims)
    if isinstance(count, int):
        count = float(count)   # else an int known when the trace runs (x[mask]'s rows)
    return maybe_convert(prims.div(total, count), dtype)


def exact_mean(x, dims):
    """A norm's mean of float32 `x` over `dims`, summed and divided in float64 and rounded
    once: a row of equal values has exactly that value as its mean (as eager's Welford mean),
    so (x - mean) is 0 there, not an ulp that the rstd of a zero variance (1/sqrt(eps))
    magnifies (a layer_norm of a constant row gave 6e-4 where eager gives 0)."""
    if x.dtype is not torch.float32:
        return _mean(x, dims, x.dtype)
    wide = _mean(prims.convert_element_type(x, torch.float64), dims, torch.float64)
    return prims.convert_element_type(wide, x.dtype)


# --- var, std, var_mean, std_mean ------------------------------------------------------------
def _var_arguments(name, input, dim, unbiased, correction):
    """(dims, correction) from eager's overloads: var(x, unbiased), var(x, dim, unbiased,
    keepdim) and var(x, dim, *, correction, keepdim); correction defaults to 1."""
    _require_tensor(name, input)
    if isinstance(dim, bool):  # var(x, False): the unbiased overload
        if unbiased is not None:
            raise TypeError(f"{name}(): argument 'dim' must be tuple of ints, not bool")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}(): received an invalid combination of arguments: "
                        "unbiased and correction")
    if correction is None:
        correction = 0 if unbiased is False else 1
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(("std and var" if name in ("std", "var") else name)
                           + " only support floating point and complex dtypes")
    return reduction_dims(name, input, dim), correction


def _var(input, dims, correction, *, root):
    """var (or its square root) in the input's real dtype; float16 and bfloat16 compute in
    float32 and round once."""
    result = dtypes.to_real(input.dtype)
    y = prims.var(maybe_convert(input, _computation(input.dtype)), dims, correction=correction)
    if root:   # sqrt computed at 1 where the variance is 0: eager's std gradient is 0 there
        zero = prims.eq(y, 0)
        y = prims.where(zero, 0, prims.sqrt(prims.where(zero, 1, y)))
    return maybe_convert(y, result)


@ref
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The variance over `dim`: sum |x - mean|^2 / (N - correction); real for complex."""
    dims, correction = _var_arguments("var", input, dim, unbiased, correction)
    return keep_dims(_var(input, dims, correction, root=False), input, dims, keepdim)


@ref
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The standard deviation over `dim`: the square root of var."""
    dims, correction = _var_arguments("std", input, dim, unbiased, correction)
    return keep_dims(_var(input, dims, correction, root=True), input, dims, keepdim)


@ref
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over `dim`."""
    dims, correction = _var_arguments("var_mean", input, dim, unbiased, correction)
    return _with_mean(input, dims, correction, keepdim, root=False)


@ref
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(std, mean) over `dim`."""
    dims, correction = _var_arguments("std_mean", input, dim, unbiased, correction)
    return _with_mean(input, dims, correction, keepdim, root=True)


def _with_mean(input, dims, correction, keepdim, *, root):
    """(var or std, mean), the mean with the infinities of eager's Welford pass."""
    spread = _var(input, dims, correction, root=root)
    if input.dtype.is_complex:  # eager runs Welford on the real and imaginary parts
        parts = (prims.real(input), prims.imag(input))
        mean = prims.complex(*(_welford_mean(part, dims) for part in parts))
    else:
        mean = _welford_mean(input, dims)
    return (keep_dims(spread, input, dims, keepdim), keep_dims(mean, input, dims, keepdim))


def _welford_mean(input, dims):
    """Eager's var_mean/std_mean mean is a Welford running mean, m += (x - m) / n (and the
    merge of partial ones, m_a + (m_b - m_a) * n_b / n): an infinite x makes m infinite,
    and any later x makes it NaN (inf - inf or inf + (finite - inf) / n). So the mean is
    infinite only where the one infinite element is the last one visited (every reduced
    index at its end, whatever the loop order), NaN where there is any other infinity."""
    mean = _mean(input, dims, input.dtype)
    if builtins.any(input.shape[d] == 0 for d in dims):
        return mean  # nothing to visit: no infinity
    count = prims.sum(prims.convert_element_type(prims.isinf(input), torch.int64), dims)
    last = prims.slice(input, [n - 1 if d in dims else 0 for d, n in enumerate(input.shape)],
                       list(input.shape), [1] * input.ndim)
    last = prims.squeeze(last, dims)
    finite_or_last = prims.bitwise_or(prims.eq(count, 0), prims.bitwise_and(
        prims.eq(count, 1), prims.isinf(last)))
    return prims.where(finite_or_last, mean, float("nan"))


# --- amax, amin ----------------------------------------------------------------------------------
def extreme(name, prim, input, dim, keepdim):
    _require_tensor(name, input)
    if input.numel() == 0 and (dim is None or (isinstance(dim, (tuple, list)) and not dim)):
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument.")
    if input.ndim > 0:  # eager checks each dim's size before it looks for repeated dims
        for d in (dim if isinstance(dim, (tuple, list, torch.Size)) else () if dim is None else (dim,)):
            d = wrap_dim(_index(name, d), input.ndim)
            if input.shape[d] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    dims = reduction_dims(name, input, dim)
    return keep_dims(prim(input, dims), input, dims, keepdim)


def _extreme_out(name, result, out):
    """out=: eager's amax/amin want out's dtype to be the input's (no cast)."""
    if out is None:
        return result
    if hasattr(out, "dtype") and out.dtype != result.dtype:
        raise RuntimeError(f"Expected the dtype for input and out to match, but got "
                           f"{dtypes.scalar_type_name(result.dtype)} for input's dtype and "
                           f"{dtypes.scalar_type_name(out.dtype)} for out's dtype.")
    from primtrace.refs.out import copy_to_out
    return copy_to_out(out, result)


@ref
def amax(input, dim=(), keepdim=False, *, out=None):
    """The largest value over `dim` (all dims for ()); NaN propagates; an empty reduction
    raises."""
    return _extreme_out("amax", extreme("amax", prims.amax, input, dim, keepdim), out)


@ref
def amin(input, dim=(), keepdim=False, *, out=None):
    """The smallest value over `dim` (all dims for ()); NaN propagates; an empty reduction
    raises."""
    return _extreme_out("amin", extreme("amin", prims.amin, input, dim, keepdim), out)


# --- all, any, count_nonzero ---------------------------------------------------------------------
def _logical(name, prim, empty_value, input, dim, keepdim):
    _require_tensor(name, input)
    dims = reduction_dims(name, input, dim, empty_means_all=False)
    if builtins.any(input.shape[d] == 0 for d in dims):
        y = prims.full(_reduced_shape(input, dims), empty_value, dtype=torch.bool,
                       device=input.device)
    else:
        y = prim(_nonzero(input), dims)
    y = maybe_convert(y, torch.uint8 if input.dtype is torch.uint8 else torch.bool)
    return keep_dims(y, input, dims, keepdim)


@ref
def all(input, dim=None, keepdim=False):
    """Whether every value over `dim` is nonzero (True for none); uint8 for uint8 inputs."""
    return _logical("all", prims.amin, True, input, dim, keepdim)


@ref
def any(input, dim=None, keepdim=False):
    """Whether some value over `dim` is nonzero (False for none); uint8 for uint8 inputs."""
    return _logical("any", prims.amax, False, input, dim, keepdim)


@ref
def count_nonzero(input, dim=None):
    """The number of nonzero values over `dim` (all dims for None or ()), as int64."""
    _require_tensor("count_nonzero", input)
    dims = reduction_dims("count_nonzero", input, dim)
    return prims.sum(prims.convert_element_type(_nonzero(input), torch.int64), dims)


__all__ = exports(globals())
