"""Conformance against eager PyTorch: sample generation and the pass rule.

An ``OpSpec`` describes one op (its ref, its eager function, which arguments may be Python
numbers, a value domain, keyword variants). ``samples(spec)`` generates inputs over every
dtype, layout (contiguous, transposed, sliced, expanded), 0-dim, empty, broadcasting,
Python scalars on either side, special values (NaN, +-inf, -0.0, denormals) and integer
extremes. ``check_sample`` runs eager and the callable under test and applies the rule:

- if eager raises, the callable must raise the same exception type;
- otherwise dtype and shape are identical, integer and bool values exact, and floating
  values close to eager or at least as close as eager to a float64 computation;
- no input is ever mutated.
"""
from __future__ import annotations

import math
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch

ALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64,
              torch.complex64, torch.complex128)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SCALARS = (True, 3, -2, 2.5, -0.0, 1.5 - 2j)

_TOL = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7),
        torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
        torch.complex128: (1e-7, 1e-7)}


@dataclass
class OpSpec:
    """One op under test. `args` says what each positional argument is:
    "t" a tensor (may be replaced by a Python number if listed in `scalar_args`),
    or a fixed value (e.g. an int n for polygamma)."""
    name: str
    ref: Callable
    torch_fn: Callable
    arity: int = 1
    dtypes: tuple = ALL_DTYPES
    scalar_args: tuple = ()          # positions that may be Python numbers
    kwargs_variants: tuple = ({},)   # keyword sets to try (each with the basic samples)
    domain: tuple = (-5.0, 5.0)
    nonzero: tuple = ()              # positions whose integer values avoid 0 (divisors)
    supports_out: bool = True
    extra_samples: Callable | None = None   # spec -> iterable of SampleInput
    rtol_scale: float = 1.0          # widen tolerance for ill-conditioned functions
    fixed_args: dict = field(default_factory=dict)  # position -> constant value
    mixed_dtypes: bool = True        # binary: also pair each dtype with others
    arg_dtypes: dict = field(default_factory=dict)  # position -> the dtype it always has
                                                     # (where's condition, masked_fill's mask)

    def __repr__(self):
        return self.name


@dataclass
class SampleInput:
    args: tuple
    kwargs: dict
    desc: str

    def __repr__(self):
        return self.desc


# --- tensors ---------------------------------------------------------------------------------
def make_tensor(shape, dtype, *, seed=0, domain=(-5.0, 5.0), nonzero=False, layout="contiguous"):
    """A tensor of `shape` in the given memory layout, with reproducible values."""
    g = torch.Generator().manual_seed(seed)
    if layout == "transposed" and len(shape) >= 2:
        base = _values(tuple(reversed(shape)), dtype, g, domain, nonzero)
        return base.permute(*reversed(range(len(shape))))
    if layout == "sliced" and len(shape) >= 1:
        wide = (*shape[:-1], shape[-1] * 2)
        return _values(wide, dtype, g, domain, nonzero)[..., ::2]
    if layout == "expanded" and len(shape) >= 1:
        small = (1, *shape[1:])
        return _values(small, dtype, g, domain, nonzero).expand(*shape)
    return _values(shape, dtype, g, domain, nonzero)


def _values(shape, dtype, g, domain, nonzero):
    low, high = domain
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        lo, hi = max(int(math.floor(low)) * 2, info.min), min(int(math.ceil(high)) * 2, info.max)
        t = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64)
        if nonzero:
            t = torch.where(t == 0, torch.ones_like(t), t)
        return t.to(dtype)
    real_dtype = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)
    t = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    if dtype.is_complex:
        im = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
        return torch.complex(t, im).to(dtype)
    return t.to(real_dtype)


def with_specials(t):
    """Copy of a float tensor whose first elements are NaN, +-inf, -0.0, 0.0, a denormal."""
    t = t.clone()
    flat = t.view(-1)
    if t.dtype.is_complex:
        specials = [complex(math.nan, 0), complex(math.inf, 1), complex(-0.0, -math.inf), 0j]
    else:
        tiny = torch.finfo(t.dtype).tiny / 4 if t.dtype.is_floating_point else 0
        specials = [math.nan, math.inf, -math.inf, -0.0, 0.0, tiny, 1.0, -1.0]
    for i, v in enumerate(specials[:flat.numel()]):
        flat[i] = v
    return t


def with_extremes(t, nonzero=False):
    """Copy of an integer tensor holding the dtype's min and max, 0, +-1."""
    t = t.clone()
    info = torch.iinfo(t.dtype)
    values = [info.min, info.max, 1, -1 if info.min < 0 else 2, 0 if not nonzero else 1]
    flat = t.view(-1)
    for i, v in enumerate(values[:flat.numel()]):
        flat[i] = v
    return t


def _specials(t):
    """with_specials for float/complex tensors (a position with a fixed bool dtype stays)."""
    return with_specials(t) if t.dtype.is_floating_point or t.dtype.is_complex else t


# --- samples ---------------------------------------------------------------------------------
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


def _tensor(spec, pos, shape, dtype, seed, layout="contiguous"):
    dtype = spec.arg_dtypes.get(pos, dtype)
    return make_tensor(shape, dtype, seed=seed, domain=spec.domain,
                       nonzero=pos in spec.nonzero, layout=layout)


def _assemble(spec, tensors):
    """Insert fixed (non-tensor) arguments at their positions."""
    args, it = [], iter(tensors)
    for pos in range(spec.arity + len(spec.fixed_args)):
        args.append(spec.fixed_args[pos] if pos in spec.fixed_args else next(it))
    return tuple(args)


def samples(spec: OpSpec):
    n = spec.arity
    for kwargs in spec.kwargs_variants:
        kw = f" {kwargs}" if kwargs else ""
        for d_index, dtype in enumerate(spec.dtypes):
            name = str(dtype).replace("torch.", "")
            for layout in LAYOUTS:
                ts = [_tensor(spec, p, (3, 4), dtype, seed=7 * p + d_index, layout=layout if p == 0 else
                              LAYOUTS[(LAYOUTS.index(layout) + p) % len(LAYOUTS)]) for p in range(n)]
                yield SampleInput(_assemble(spec, ts), dict(kwargs), f"{name} {layout}{kw}")
            yield SampleInput(_assemble(spec, [_tensor(spec, p, (), dtype, seed=p) for p in range(n)]),
                              dict(kwargs), f"{name} 0-dim{kw}")
            yield SampleInput(_assemble(spec, [_tensor(spec, p, (0, 3), dtype, seed=p) for p in range(n)]),
                              dict(kwargs), f"{name} empty{kw}")
            special = [_tensor(spec, p, (2, 5), dtype, seed=p + 11) for p in range(n)]
            if dtype.is_floating_point or dtype.is_complex:
                special = [_specials(special[0])] + special[1:]
                if n > 1:
                    special = special[:1] + [_specials(special[1]).flip(-1)] + special[2:]
            elif dtype is not torch.bool:
                special = [with_extremes(t, p in spec.nonzero) if t.dtype is not torch.bool else t
                           for p, t in enumerate(special)]
            yield SampleInput(_assemble(spec, special), dict(kwargs), f"{name} specials{kw}")
            if n >= 2:
                shapes = [(3, 1), (1, 4), (4,), (1,)][:n]
                ts = [_tensor(spec, p, shapes[p], dtype, seed=p + 3) for p in range(n)]
                yield SampleInput(_assemble(spec, ts), dict(kwargs), f"{name} broadcast{kw}")
                for p in range(n):  # a 0-dim tensor on each side
                    ts = [_tensor(spec, q, () if q == p else (2, 3), dtype, seed=q + 5) for q in range(n)]
                    yield SampleInput(_assemble(spec, ts), dict(kwargs), f"{name} 0-dim arg{p}{kw}")
            for p in spec.scalar_args:
                for value in SCALARS:
                    ts = [value if q == p else _tensor(spec, q, (2, 3), dtype, seed=q + 9)
                          for q in range(n)]
                    yield SampleInput(_assemble(spec, ts), dict(kwargs),
                                      f"{name} scalar arg{p}={value!r}{kw}")
            if n >= 2 and spec.mixed_dtypes:
                for step in (1, 5, 8):
                    other = spec.dtypes[(d_index + step) % len(spec.dtypes)]
                    for p in range(1, n):
                        ts = [_tensor(spec, q, (2, 3) if q != p else (3,), other if q == p else dtype,
                                      seed=q + step) for q in range(n)]
                        if step == 5:  # the other dtype as a 0-dim tensor
                            ts[p] = _tensor(spec, p, (), other, seed=p)
                        yield SampleInput(_assemble(spec, ts), dict(kwargs),
                                          f"{name} with {str(other).replace('torch.', '')} arg{p}"
                                          f"{' 0-dim' if step == 5 else ''}{kw}")
    if spec.extra_samples is not None:
        yield from spec.extra_samples(spec)


# --- the pass rule ---------------------------------------------------------------------------
def _snapshot(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_snapshot(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _snapshot(v) for k, v in obj.items()}
    return obj


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype):
            return False
        if a.dtype is torch.complex32:  # torch.equal has no ComplexHalf kernel
            a, b = a.to(torch.complex64), b.to(torch.complex64)
        return (bool(torch.equal(a, b) or (a.is_floating_point() or a.is_complex())
                         and torch.equal(torch.nan_to_num(a, nan=7.0), torch.nan_to_num(b, nan=7.0))
                         and torch.equal(a.isnan(), b.isnan())))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return True


def _upcast(obj):
    if isinstance(obj, torch.Tensor):
        if obj.is_complex():
            return obj.to(torch.complex128)
        if obj.is_floating_point():
            return obj.to(torch.float64)
        return obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_upcast(x) for x in obj)
    return obj


def _errors(x, ref):
    diff = (x.to(ref.dtype) - ref).abs()
    both_inf = torch.isinf(x.to(ref.dtype)) & torch.isinf(ref) & (x.to(ref.dtype) == ref)
    return torch.where(both_inf, torch.zeros_like(diff), diff)


def values_match(ours, eager, reference, scale=1.0) -> str | None:
    """None if `ours` passes against `eager`; otherwise a description of the mismatch."""
    if ours.dtype in (torch.bool,) or not (ours.is_floating_point() or ours.is_complex()):
        if torch.equal(ours, eager):
            return None
        bad = (ours != eager).nonzero()[:3].tolist()
        return f"integer/bool values differ at {bad}: ours {ours.flatten()[:6].tolist()} eager {eager.flatten()[:6].tolist()}"
    rtol, atol = _TOL[ours.dtype]
    o, e = ours.to(torch.complex128 if ours.is_complex() else torch.float64), \
        eager.to(torch.complex128 if eager.is_complex() else torch.float64)
    close = torch.isclose(o, e, rtol=rtol * scale, atol=atol * scale, equal_nan=True)
    if bool(close.all()):
        return None
    if reference is not None and isinstance(reference, torch.Tensor) and reference.shape == ours.shape:
        ref = reference.to(torch.complex128 if reference.is_complex() or ours.is_complex() else torch.float64)
        err_ours, err_eager = _errors(o, ref), _errors(e, ref)
        nan_ok = torch.isnan(o) == torch.isnan(e)
        better = (err_ours <= err_eager * (1 + 1e-6) + 1e-300) & ~torch.isnan(err_ours) & ~torch.isnan(ref)
        better |= nan_ok & torch.isnan(o)
        # eager NaN where the float64 reference is not (f32 gelu(inf)): ours must match the reference
        better |= torch.isnan(e) & ~torch.isnan(ref) & torch.isclose(o, ref, rtol=rtol * scale, atol=atol * scale)
        if bool((close | better).all()):
            return None
    idx = (~close).nonzero()[:3].tolist()
    where = tuple(idx[0]) if idx else ()
    return (f"values differ at {idx}: ours {o[where].item() if idx else None} "
            f"eager {e[where].item() if idx else None}")


def check_sample(fn: Callable, torch_fn: Callable, sample: SampleInput, scale=1.0) -> str | None:
    """Run eager and `fn` on one sample; None if `fn` conforms, else what went wrong."""
    args, kwargs = sample.args, sample.kwargs
    before = _snapshot((args, kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = torch_fn(*_snapshot(args), **_snapshot(kwargs))
            eager_error = None
        except Exception as e:  # eager's verdict is the spec
            expected, eager_error = None, e
        try:
            got = fn(*args, **kwargs)
            our_error = None
        except Exception as e:
            got, our_error = None, e
    if not _same(before, (args, kwargs)):
        return "an input was mutated"
    if eager_error is not None:
        if our_error is None:
            return f"eager raised {type(eager_error).__name__}: {eager_error}; ours returned"
        if not isinstance(our_error, type(eager_error)):
            return (f"eager raised {type(eager_error).__name__}: {eager_error}; "
                    f"ours raised {type(our_error).__name__}: {our_error}")
        return None
    if our_error is not None:
        return f"ours raised {type(our_error).__name__}: {our_error}"
    return compare_outputs(got, expected, lambda: torch_fn(*_upcast(args), **kwargs), scale)


def compare_outputs(got, expected, reference_fn, scale=1.0) -> str | None:
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected a sequence of {len(expected)}, got {type(got).__name__}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare_outputs(g, e, lambda i=i: _index(reference_fn, i), scale)
            if problem:
                return f"output {i}: {problem}"
        return None
    if not isinstance(expected, torch.Tensor):
        return None if got == expected else f"expected {expected!r}, got {got!r}"
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, got {type(got).__name__}"
    if got.dtype != expected.dtype:
        return f"dtype: ours {got.dtype}, eager {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape: ours {list(got.shape)}, eager {list(expected.shape)}"
    if got.device != expected.device:
        return f"device: ours {got.device}, eager {expected.device}"
    reference = None
    if (got.is_floating_point() or got.is_complex()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference = reference_fn()
        except Exception:
            reference = None
    return values_match(got, expected, reference, scale)


def _index(fn, i):
    return fn()[i]


def run_conformance(spec: OpSpec, fn: Callable | None = None, max_failures: int = 5,
                    share: int = 1):
    """Check `fn` (default: the ref) against eager on every sample of `spec` (or on one in
    `share`, chosen by a hash of the sample's description: the same ones every run, spread
    over dtypes and layouts; the first where the hash picks none); raise AssertionError
    listing the failing samples."""
    fn = spec.ref if fn is None else fn
    failures, count = [], 0
    every = list(samples(spec))
    chosen = [s for s in every if zlib.crc32(s.desc.encode()) % share == 0] or every[:1]
    for sample in chosen:
        count += 1
        problem = check_sample(fn, spec.torch_fn, sample, spec.rtol_scale)
        if problem:
            failures.append(f"[{sample.desc}] {problem}")
    assert count > 0, f"{spec.name}: no samples"
    if failures:
        shown = "\n  ".join(failures[:max_failures])
        raise AssertionError(f"{spec.name}: {len(failures)}/{count} samples fail:\n  {shown}")
    return count


def out_samples(spec: OpSpec):
    """out= cases: a right-sized out, a wrongly sized (resized) out, an out of another dtype."""
    n = spec.arity
    for dtype in (torch.float32, torch.int64, torch.float16):
        if dtype not in spec.dtypes:
            continue
        ts = [_tensor(spec, p, (3, 4), dtype, seed=p) for p in range(n)]
        args = _assemble(spec, ts)
        for out_dtype in (dtype, torch.float64, torch.int32, torch.bool, torch.complex64):
            for out_shape in ((3, 4), (0,), (5,)):
                yield args, torch.empty(out_shape, dtype=out_dtype), f"{dtype} out={out_dtype}{list(out_shape)}"


def run_out_conformance(spec: OpSpec, fn: Callable | None = None):
    """out= must behave as eager: same dtype/shape/values in out, same errors, returns out."""
    fn = spec.ref if fn is None else fn
    failures, count = [], 0
    for args, out, desc in out_samples(spec):
        count += 1
        ours_out, eager_out = out.clone(), out.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                spec.torch_fn(*args, out=eager_out)
                eager_error = None
            except Exception as e:
                eager_error = e
            try:
                got = fn(*args, out=ours_out)
                our_error = None
            except Exception as e:
                our_error = e
        if eager_error is not None:
            if not isinstance(our_error, type(eager_error)):
                failures.append(f"[{desc}] eager raised {type(eager_error).__name__}, ours {our_error!r}")
            continue
        if our_error is not None:
            failures.append(f"[{desc}] ours raised {our_error!r}")
            continue
        if got is not ours_out and not (isinstance(got, torch.Tensor) and got.data_ptr() == ours_out.data_ptr()):
            failures.append(f"[{desc}] did not return out")
            continue
        problem = compare_outputs(ours_out, eager_out, lambda: spec.torch_fn(*_upcast(args)), spec.rtol_scale)
        if problem:
            failures.append(f"[{desc}] {problem}")
    if failures:
        raise AssertionError(f"{spec.name} out=: {len(failures)}/{count} fail:\n  " + "\n  ".join(failures[:5]))
    return count
