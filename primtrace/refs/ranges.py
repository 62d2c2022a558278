"""Range factories: linspace, logspace, eye, tril_indices, triu_indices, and the factories of
unspecified values with explicit strides (empty_strided, Tensor.new_empty_strided).

linspace is eager's CPU kernel op for op: ``step = (end - start) / (steps - 1)`` in the
result type (float64 for integer results), then ``start + step * i`` for i < steps / 2 and
``end - step * (steps - 1 - i)`` from there. Its AVX2/AVX-512 builds contract both into
fused multiply-adds, so float32, float64, complex parts and the float64 values of integer
results are rounded once (``refs.fma``); float16/bfloat16 arithmetic rounds after every op,
as c10::Half's operators do. Where torch runs its DEFAULT (non-SIMD) x86 build
(``ATEN_CPU_CAPABILITY=default``), nothing is fused and each op rounds. Measured against
eager on x86 under AVX-512, AVX2 and DEFAULT; other devices' kernels differ, so their calls
are left to torch. logspace is RangeFactories.cpp's loop (no FMA there):
``std::pow(base, start + step * i)`` in float64 (base a double for every result dtype), by
``prims.libm_pow``, then the loop's conversion to the result dtype.

A 0-dim tensor start/end is read, as eager reads it (``.item()``); while tracing that is a
read of data, so such calls are left to torch.
"""
from __future__ import annotations

import operator
import platform

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exact_add, exact_sub, exports, is_number, is_tensor, ref
from primtrace.refs.creation import (_check_out_dtype, _declines, _positions, _python_type,
                                     as_nodes, check_fits, check_options, device_of, filled,
                                     shape_of)
from primtrace.refs.fma import fma
from primtrace.refs.scalars import concrete, type_name

HALVES = (torch.float16, torch.bfloat16)


def contracts_to_fma() -> bool:
    """Whether eager's linspace kernel rounds start + step * i once: its x86 SIMD builds are
    compiled with FMA and GCC contracts, its x86 DEFAULT build has no FMA (both measured).
    Other machines (aarch64: FMA is baseline) are assumed to contract, not measured."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return not (x86 and torch.backends.cpu.get_cpu_capability() == "DEFAULT")


# --- arguments ---------------------------------------------------------------------------------
def _invalid(name, *args):
    return TypeError(f"{name}() received an invalid combination of arguments - got "
                     f"({', '.join(type_name(a) for a in args)})")


def _bounds(name, start, end, steps):
    """(start, end, steps) as eager's parser and its Tensor overloads leave them: numbers
    (a 0-dim tensor read), an int steps."""
    for x in (start, end):
        if not (is_tensor(x) or is_number(x)):
            raise _invalid(name, start, end, steps)
    kind = _python_type(steps)
    if issubclass(kind, bool) or not issubclass(kind, int):
        raise _invalid(name, start, end, steps)
    dims = [(what, x.ndim) for what, x in (("start", start), ("end", end)) if is_tensor(x)]
    if any(ndim for _, ndim in dims):
        raise RuntimeError(f"{name} only supports 0-dimensional start and end tensors, but got "
                           + " and ".join(f"{w} with {n} dimension(s)" for w, n in dims) + ".")
    values = [_read_tensor(name, x) if is_tensor(x) else x for x in (start, end)]
    steps = operator.index(steps)  # a runtime int is read: it is the length
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    return values[0], values[1], steps


def _read_tensor(name, x):
    """The number in a 0-dim tensor argument, read as eager reads it; a proxy's value is
    unknown while tracing (the calls that pass one are left to torch)."""
    if not isinstance(x, torch.Tensor) or type(x).__name__ == "TensorProxy":
        raise NotImplementedError(f"primtrace: {name} with tensor arguments reads their values; "
                                  "torch makes it")
    return x.item()


def _tensor_bound_declines(start=None, end=None, *args, device=None, out=None, **kwargs) -> bool:
    return (_declines(**kwargs) or any(is_tensor(x) for x in (start, end))
            or _other_device(device, out))


def _other_device(device, out) -> bool:
    """A device other than the CPU: its kernels round differently (CUDA's integer steps are
    float), so torch makes the values."""
    where = out.device if out is not None else device_of(device)
    return where.type != "cpu"


def _result_dtype(name, start, end, dtype, out):
    """Complex bounds make the default complex dtype (a real dtype= is refused), else the
    default float dtype; out= brings its own."""
    inferred = dtypes.default_float()
    if any(issubclass(_python_type(x), complex) for x in (start, end)):
        inferred = dtypes.default_complex()
        if dtype is not None and not dtype.is_complex:
            raise RuntimeError(f"torch.{name}(): inferred dtype {dtypes.c_type_name(inferred)} "
                               f"can't be safely cast to passed dtype "
                               f"{dtypes.scalar_type_name(dtype)}")
    if out is not None:
        _check_out_dtype(dtype, out)
        return out.dtype
    return dtype or inferred


def _cpu(name, device, out):
    if _other_device(device, out):
        raise NotImplementedError(f"primtrace: {name} on a device other than the CPU has no ref; "
                                  "torch makes it")
    return out.device if out is not None else device_of(device)


def _shape(steps, out):
    """linspace_out resizes out only when its element count differs."""
    if out is None or out.numel() != steps:
        return (steps,)
    return tuple(out.shape)


def _finish(values, out):
    if out is None:
        return values
    if tuple(out.shape) != tuple(values.shape):
        out = prims.resize(out, tuple(values.shape))
    return prims.copy_to(out, values)


def _fill(shape, value, dtype, device):
    """fill_(value): a checked conversion, except that the half types take the value through
    float unchecked (2.0 ** 300 fills inf)."""
    if dtype not in HALVES:
        return filled(shape, value, dtype, device)
    wide = prims.convert_element_type(filled(shape, value, torch.float64, device), torch.float32)
    return prims.convert_element_type(wide, dtype)


def _not_implemented(kernel, dtype):
    return NotImplementedError(f'"{kernel}" not implemented for '
                               f"'{dtypes.scalar_type_name(dtype)}'")


def _scalar(value, dtype, device):
    """Scalar::to<scalar_t>() of a bound, as a 0-dim tensor (eager's checked conversion)."""
    check_fits(value, dtype)
    return prims.full((), value, dtype=dtype, device=device)


def _offsets(shape, steps, device):
    """(k, first): each element's distance from its end of the range, and whether it counts
    from start (i < steps // 2) or back from end."""
    i = _positions(shape, device)
    first = prims.lt(i, steps // 2)
    k = prims.where(first, i, prims.sub(prims.full((), steps - 1, dtype=torch.int64,
                                                   device=device), i))
    return k, first


# --- linspace ------------------------------------------------------------------------------------
def _lerp(s, e, k, first, steps):
    """start + step * k, or end - step * k, in s's dtype, rounded as eager's kernel rounds."""
    dtype = s.dtype
    divisor = prims.full((), steps - 1, dtype=dtype, device=s.device)  # static_cast<step_t>
    step = prims.div(prims.sub(e, s), divisor)
    signed = prims.where(first, step, prims.neg(step))
    base = prims.where(first, s, e)
    if dtype in HALVES:  # Half(step * Half(k)), then Half(base + that)
        scaled = prims.convert_element_type(prims.convert_element_type(k, torch.float32), dtype)
        return prims.add(base, prims.mul(signed, scaled))
    if not contracts_to_fma():
        return prims.add(base, prims.mul(signed, prims.convert_element_type(k, dtype)))
    return fma(signed, prims.convert_element_type(k, dtype), base)


def _linspace_values(start, end, steps, shape, dtype, device):
    """steps >= 2 values of eager's linspace kernel, in `shape` (row-major)."""
    if dtype is torch.bool:
        raise _not_implemented("linspace_cpu", dtype)
    s, e = _scalar(start, dtype, device), _scalar(end, dtype, device)
    k, first = _offsets(shape, steps, device)
    if dtype.is_complex:  # c10::complex: each part as its real type
        parts = [_lerp(prims.real(s), prims.real(e), k, first, steps),
                 _lerp(prims.imag(s), prims.imag(e), k, first, steps)]
        return prims.complex(*parts)
    if not dtype.is_floating_point:  # step and values in double, truncated back
        wide = torch.float64
        values = _lerp(prims.convert_element_type(s, wide), prims.convert_element_type(e, wide),
                       k, first, steps)
        return prims.convert_element_type(values, dtype)
    return _lerp(s, e, k, first, steps)


@ref(declines=_tensor_bound_declines)
def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    """`steps` values from start to end, evenly spaced; both ends exact (the second half
    counts back from end). Without dtype=, the default (complex) dtype."""
    dtype = check_options("linspace", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    start, end, steps = _bounds("linspace", start, end, steps)
    dtype = _result_dtype("linspace", start, end, dtype, out)
    device = _cpu("linspace", device, out)
    shape = _shape(steps, out)
    with as_nodes():
        if steps < 2:  # fill_(start): nothing, or start converted (half types via float)
            values = _fill(shape, 0 if steps == 0 else start, dtype, device)
        else:
            values = _linspace_values(start, end, steps, shape, dtype, device)
    return _finish(values, out)


# --- logspace ------------------------------------------------------------------------------------
def _difference(s, e):
    """scalar_end - scalar_start in C: integers narrower than int promote to int first."""
    if not (s.dtype.is_floating_point or s.dtype.is_complex) and s.dtype.itemsize < 4:
        s, e = (prims.convert_element_type(x, torch.int32) for x in (s, e))
    return exact_sub(e, s) if s.dtype.is_complex else prims.sub(e, s)


def _exponents(s, e, k, first, steps):
    """scalar_start + step * i, scalar_end - step * (steps - 1 - i): float64 (complex: the
    dtype itself, by c10::complex's formulas), one rounding per operation."""
    if s.dtype.is_complex:
        step = _complex_step(_difference(s, e), steps)
        kk = prims.convert_element_type(k, dtypes.to_real(s.dtype))
        sr, si = prims.real(step), prims.imag(step)
        product = prims.complex(prims.sub(prims.mul(sr, kk), prims.mul(si, 0.0)),  # step * (k + 0i)
                                prims.add(prims.mul(sr, 0.0), prims.mul(si, kk)))
        return prims.where(first, exact_add(s, product), exact_sub(e, product))
    wide = torch.float64
    step = prims.div(prims.convert_element_type(_difference(s, e), wide), float(steps - 1))
    signed = prims.where(first, step, prims.neg(step))
    s, e = prims.convert_element_type(s, wide), prims.convert_element_type(e, wide)
    base = prims.where(first, s, e)
    return prims.add(base, prims.mul(signed, prims.convert_element_type(k, wide)))


def _complex_step(difference, steps):
    """difference / complex(steps - 1) as c10::complex divides (d = 0 <= c): rat = d / c,
    scl = 1 / (c + d * rat); ((a + b * rat) * scl, (b - a * rat) * scl)."""
    a, b = prims.real(difference), prims.imag(difference)
    scl = 1.0 / float(torch.tensor(float(steps - 1), dtype=a.dtype))
    return prims.complex(prims.mul(prims.add(a, prims.mul(b, 0.0)), scl),
                         prims.mul(prims.sub(b, prims.mul(a, 0.0)), scl))


def _base(base, power, device):
    """`base` as the kernel holds it (a double, or the complex dtype), a 0-dim tensor of
    `power`; a traced 0-dim tensor stays a tensor (its value is not read)."""
    if not is_tensor(base):
        return prims.full((), float(base), dtype=power, device=device)
    return prims.convert_element_type(prims.convert_element_type(base, torch.float64), power)


def _logspace_values(start, end, steps, base, shape, dtype, device):
    if dtype is torch.bool:
        raise _not_implemented("logspace_cpu", dtype)
    s, e = _scalar(start, dtype, device), _scalar(end, dtype, device)
    k, first = _offsets(shape, steps, device)
    x = _exponents(s, e, k, first, steps)
    power = x.dtype if dtype.is_complex else torch.float64
    values = prims.libm_pow(_base(base, power, device), x)
    if dtype is torch.uint8:  # the loop's double -> uint8_t is x86's truncation to int32, then
        values = prims.convert_element_type(values, torch.int32)  # its low byte
    return prims.convert_element_type(values, dtype)


def _first_power(start, base, dtype):
    """steps == 1: fill_(std::pow(base, start as a double)) (a complex double for a complex
    result), computed now by the same std::pow; a runtime start is read (the trace is
    specialized on it), since the fill's overflow check reads the power."""
    wide = torch.complex128 if dtype.is_complex else torch.float64
    x = torch.tensor(concrete(start), dtype=wide)
    return prims.libm_pow.impl(torch.tensor(float(base), dtype=wide), x).item()


@ref(declines=_tensor_bound_declines)
def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             pin_memory=False, requires_grad=False):
    """base ** linspace(start, end, steps), as eager computes it: exponents in float64 (the
    dtype itself for complex), std::pow, one conversion to the result dtype."""
    dtype = check_options("logspace", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    start, end, steps = _bounds("logspace", start, end, steps)
    if is_tensor(base):  # a 0-dim tensor read as a double
        if base.ndim != 0:
            raise _invalid("logspace", start, end, steps)
        if base.dtype.is_complex:
            raise RuntimeError("value cannot be converted to type double without overflow")
        if isinstance(base, torch.Tensor) and type(base).__name__ != "TensorProxy":
            base = base.item()
    elif not is_number(base) or issubclass(_python_type(base), complex):
        raise _invalid("logspace", start, end, steps)
    dtype = _result_dtype("logspace", start, end, dtype, out)
    device = _cpu("logspace", device, out)
    shape = _shape(steps, out)
    with as_nodes():
        if steps == 0:
            values = filled(shape, 0, dtype, device)
        elif steps == 1 and not is_tensor(base):
            values = _fill(shape, _first_power(start, base, dtype), dtype, device)
        elif steps == 1:  # a traced tensor base: the power is not read (no overflow check)
            wide = torch.complex128 if dtype.is_complex else torch.float64
            power = prims.libm_pow(_base(base, wide, device),
                                   prims.full((), start, dtype=wide, device=device))
            values = prims.clone(prims.broadcast_in_dim(
                prims.convert_element_type(power, dtype), shape, ()))
        else:
            values = _logspace_values(start, end, steps, base, shape, dtype, device)
    return _finish(values, out)


# --- eye -----------------------------------------------------------------------------------------
def _int_arg(name, pname, position, value):
    kind = _python_type(value)
    if issubclass(kind, bool) or not issubclass(kind, int):
        raise TypeError(f"{name}(): argument '{pname}' (position {position}) must be int, not "
                        f"{type_name(value)}")
    return operator.index(value)


@ref(declines=_declines)
def eye(n, *args, m=None, out=None, dtype=None, layout=None, device=None, pin_memory=False,
        requires_grad=False):
    """An n x m matrix (m = n by default, given second or as m=): ones on the diagonal,
    zeros elsewhere."""
    dtype = check_options("eye", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    n = _int_arg("eye", "n", 1, n)
    if len(args) > 1 or (args and (m is not None or args[0] is None)):
        raise TypeError(f"eye() received an invalid combination of arguments - got "
                        f"({', '.join(type_name(a) for a in (n, *args))})")
    m = args[0] if args else m
    m = n if m is None else _int_arg("eye", "m", 2, m)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    if out is not None:
        _check_out_dtype(dtype, out)
        dtype, device = out.dtype, out.device
    else:
        dtype, device = dtype or dtypes.default_float(), device_of(device)
    with as_nodes():
        rows = prims.iota(n, start=0, step=1, dtype=torch.int64, device=device)
        cols = prims.iota(m, start=0, step=1, dtype=torch.int64, device=device)
        diagonal = prims.eq(prims.broadcast_in_dim(rows, (n, m), (0,)),
                            prims.broadcast_in_dim(cols, (n, m), (1,)))
        values = diagonal if dtype is torch.bool else prims.convert_element_type(diagonal, dtype)
    return _finish(values, out)


# --- tril_indices, triu_indices ------------------------------------------------------------------
def _trapezoid(row, col, offset):
    """(r0, a, t, rows): the lower triangle's first row r0 = max(0, -offset) holds a elements,
    each next one more for t rows (the trapezoid), then `col` each, to row - 1 (rows rows)."""
    r0 = max(0, -offset)
    a = r0 + offset + 1
    rows = max(0, row - r0) if col else 0
    return r0, a, max(0, min(rows, col - a)), rows


def _tril_size(row, col, offset) -> int:
    """How many (r, c) with c - r <= offset (eager's get_tril_size)."""
    _, a, t, rows = _trapezoid(row, col, offset)
    return t * a + t * (t - 1) // 2 + (rows - t) * col


def _tril_coordinates(p, row, col, offset):
    """(row, column) of the p-th element, in row-major order, of the lower triangle: the rows
    from max(0, -offset) hold a, a + 1, ... elements (a trapezoid) until they are full."""
    r0, a, t, _ = _trapezoid(row, col, offset)
    size = t * a + t * (t - 1) // 2  # elements in the trapezoid
    wide, device = torch.float64, p.device
    # the trapezoid: j(j - 1)/2 + j*a <= p, solved in float64, then corrected by one either way
    b = 2 * a - 1
    root = prims.sqrt(prims.add(prims.mul(prims.convert_element_type(p, wide), 8.0), float(b * b)))
    j = prims.convert_element_type(prims.floor(prims.div(prims.sub(root, float(b)), 2.0)),
                                   torch.int64)

    def before(j):  # elements in the trapezoid's rows above row j
        return prims.add(prims.mul(j, a), prims.div(prims.mul(j, prims.sub(j, 1)), 2))
    j = prims.where(prims.le(before(prims.add(j, 1)), p), prims.add(j, 1), j)
    j = prims.where(prims.gt(before(j), p), prims.sub(j, 1), j)
    trapezoid_col = prims.sub(p, before(j))
    # the full rows below it
    q = prims.sub(p, prims.full((), size, dtype=torch.int64, device=device))
    q = prims.where(prims.lt(q, 0), prims.full((), 0, dtype=torch.int64, device=device), q)
    full_row = prims.div(q, col)
    full_col = prims.sub(q, prims.mul(full_row, col))
    inside = prims.lt(p, size)
    r = prims.where(inside, j, prims.add(full_row, t))
    return prims.add(r, r0), prims.where(inside, trapezoid_col, full_col)


def _indices(name, row, col, offset, dtype, device, upper):
    row = _int_arg(name, "row", 1, row)
    col = _int_arg(name, "col", 2, col)
    offset = _int_arg(name, "offset", 3, offset)
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    if dtype not in (torch.int32, torch.int64):
        raise _not_implemented(name, dtype)
    # triu in row-major order is tril of the matrix turned by 180 degrees, read backwards
    size = row * col - _tril_size(row, col, offset - 1) if upper else _tril_size(row, col, offset)
    if size == 0:
        return prims.full((2, 0), 0, dtype=dtype, device=device)
    p = prims.iota(size, start=0, step=1, dtype=torch.int64, device=device)
    if upper:
        p = prims.sub(prims.full((), size - 1, dtype=torch.int64, device=device), p)
        r, c = _tril_coordinates(p, row, col, col - row - offset)
        r = prims.sub(prims.full((), row - 1, dtype=torch.int64, device=device), r)
        c = prims.sub(prims.full((), col - 1, dtype=torch.int64, device=device), c)
    else:
        r, c = _tril_coordinates(p, row, col, offset)
    first = prims.eq(prims.broadcast_in_dim(prims.iota(2, start=0, step=1, dtype=torch.int64,
                                                       device=device), (2, size), (0,)), 0)
    pairs = prims.where(first, prims.broadcast_in_dim(r, (2, size), (1,)),
                        prims.broadcast_in_dim(c, (2, size), (1,)))
    return prims.convert_element_type(pairs, dtype) if dtype is not torch.int64 else pairs


def _make_indices(name, upper):
    def indices(row, col, offset=0, *, dtype=torch.long, device=None, layout=torch.strided,
                pin_memory=False):
        dtype = check_options(name, dtype, layout=layout, pin_memory=pin_memory)
        with as_nodes():
            return _indices(name, row, col, offset, dtype, device_of(device), upper)
    indices.__name__ = indices.__qualname__ = name
    part = "upper (c - r >= offset)" if upper else "lower (c - r <= offset)"
    indices.__doc__ = (f"torch.{name}: the (row, column) pairs of a row x col matrix's {part} "
                       f"triangle in row-major order, as a 2 x N tensor.")
    return ref(indices, declines=_declines)


tril_indices = _make_indices("tril_indices", False)
triu_indices = _make_indices("triu_indices", True)


# --- empty_strided, new_empty_strided ------------------------------------------------------------
def _strided(name, size, stride, dtype, device):
    shape = shape_of(name, (size,), varargs=False)
    if not isinstance(stride, (tuple, list)):
        raise TypeError(f"{name}(): argument 'stride' (position 2) must be tuple of ints, not "
                        f"{type_name(stride)}")
    strides = tuple(_int_arg(name, "stride", 2, s) for s in stride)
    if len(strides) != len(shape):
        raise RuntimeError(f"dimensionality of sizes ({len(shape)}) must match dimensionality "
                           f"of strides ({len(strides)})")
    if any(s < 0 for s in strides):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)} and "
                           f"strides={list(strides)}")
    if any(n == 0 for n in shape) or not shape:
        return filled(shape, 0, dtype, device)
    with as_nodes():
        return prims.full_strided(shape, strides, 0, dtype=dtype, device=device)


@ref(declines=_declines)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=False,
                  requires_grad=False):
    """A new tensor of `size` with the given strides (they may overlap); its values are
    unspecified (zeros here)."""
    dtype = check_options("empty_strided", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    return _strided("empty_strided", size, stride, dtype or dtypes.default_float(),
                    device_of(device))


@ref(declines=_declines)
def new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None,
                      pin_memory=False, requires_grad=False):
    """Tensor.new_empty_strided: empty_strided with self's dtype and device by default."""
    dtype = check_options("new_empty_strided", dtype, layout=layout, pin_memory=pin_memory,
                          requires_grad=requires_grad)
    return _strided("new_empty_strided", size, stride, dtype or self.dtype,
                    device_of(device or self.device))


__all__ = exports(globals())
