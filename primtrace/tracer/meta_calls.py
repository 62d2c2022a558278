"""Output metadata of an opaque torch call (one primtrace has no ref for) from torch's meta
functions: its arguments as meta tensors, and, where some sizes are known only at run time
(x[mask]'s rows), runs on stand-in sizes matched back to the inputs' symbols."""
from __future__ import annotations

import torch

from primtrace.ir import proxy as _proxy
from primtrace.ir.proxy import NumberProxy, TensorProxy, Unknown
from primtrace.ir.tree import tree_flatten, tree_map
from primtrace.tracer.errors import DataDependentError
from primtrace.tracer.location import describe_location, user_location


def plain(result):
    """A tuple subclass (torch.return_types) as a plain tuple, for tree functions."""
    return tuple(result) if isinstance(result, tuple) else result


def meta_tensor(shape, strides, dtype):
    return torch.empty_strided(tuple(shape), tuple(strides), dtype=dtype, device="meta")


def to_meta(obj, memo: dict, size=None):
    """`obj` with meta tensors for its proxies; `size` gives the value of a size known only
    at run time (a stand-in: see symbolic_metadata)."""
    def convert(x):
        if size is not None and _proxy.is_symbolic(x):
            return size(x)
        if isinstance(x, TensorProxy):
            shape = tuple(size(n) if _proxy.is_symbolic(n) else n for n in x.shape) \
                if size is not None else x.shape
            m = meta_tensor(shape, x.stride(), x.dtype)
            if x.requires_grad:  # a non-leaf that requires grad: autograd decides the outputs'
                with torch.enable_grad():
                    m = m.requires_grad_().clone()
            memo[x.name] = m
            return m
        if isinstance(x, NumberProxy):
            # an int may become a shape: its value then decides the trace
            if isinstance(x.value, Unknown) and x.python_type in (float, complex):
                return x.python_type(1)   # a value computed at run time: any value will do
            return x._read() if x.python_type in (int, bool) else x.value
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            return meta_tensor(x.shape, x.stride(), x.dtype)
        if as_device(x) is not None:  # x.to("cuda") on meta stays on meta
            return torch.device("meta")
        return x
    return tree_map(convert, obj)


def as_device(x):
    """x as a torch.device if it names one (a device object or a string like "cuda:0")."""
    if isinstance(x, torch.device):
        return x
    if isinstance(x, str) and x.split(":")[0] in ("cpu", "cuda", "mps", "xpu", "meta"):
        try:
            return torch.device(x)
        except RuntimeError:
            return None
    return None


class SymbolicMeta:
    """An opaque call's output tensor whose shape holds sizes known only at run time."""
    __slots__ = ("shape", "dtype", "strides", "requires_grad")

    def __init__(self, shape, dtype, strides, requires_grad):
        self.shape, self.dtype, self.strides = shape, dtype, strides
        self.requires_grad = requires_grad

    def stride(self):
        return self.strides


def symbolic_sizes(obj) -> list:
    """The ints known only at run time that the arguments hold (in shapes, or as ints)."""
    found = {}
    for leaf in tree_flatten(obj):
        sizes = leaf.shape if isinstance(leaf, TensorProxy) else (leaf,)
        for n in sizes:
            if _proxy.is_symbolic(n):
                found.setdefault(n.name, n)
    return list(found.values())


#: the runs of an opaque call's meta function on inputs with data-dependent sizes: two of
#: stand-in primes (shapes and strides must follow the sizes), then each base size 0, then 1
#: (shapes only: eager's strides of size-0/1 dims do not matter), where ops such as squeeze
#: take another path
_RUNS = (0, 1, "zero", "one")


def symbolic_metadata(func, args, kwargs, sizes, display):
    """(result, memo) of an opaque call on inputs holding sizes known only at run time: its
    meta function run on stand-in sizes (_RUNS), and each output size that changes with
    them matched to an input's size (or a multiple of one: flatten's 4n). An output that
    matches none, strides that change, or a shape that does not follow at 0 or 1 is a
    DataDependentError: the call cannot be traced with such an input."""
    where = describe_location(user_location())

    def fail(why, error=None):
        raise DataDependentError(
            f"{display} has no ref for an input of a size known only at run time ("
            f"{', '.join(n.name for n in sizes)}: {sizes[0].value.what}), and torch's meta "
            f"function does not tell its output metadata: {why}\n  {where}") from error

    results, memo = [], {}
    names = sorted({base for n in sizes for base in _proxy.bases_of(n)})
    order = {base: i for i, base in enumerate(names)}   # each base's stand-in, in every run
    for run in _RUNS:
        bases = dict(order)
        if isinstance(run, int):
            def value(n, run=run, bases=bases):
                return _proxy.stand_in(n, run, bases)
        else:
            fixed = 0 if run == "zero" else 1

            def value(n, fixed=fixed):
                return _proxy.evaluate(n, lambda base: fixed)
        run_memo = {}
        try:
            meta_args = to_meta(args, run_memo, value)
            meta_kwargs = to_meta(kwargs, run_memo, value)
            with torch.device("meta"):
                results.append(func(*meta_args, **meta_kwargs))
        except Exception as e:
            if isinstance(run, int):
                fail(f"it raised {type(e).__name__}: {e}", e)
            results.append(e)
        if run == 0:
            memo = run_memo
    candidates = {(_proxy.stand_in(n, 0, dict(order)), _proxy.stand_in(n, 1, dict(order))): n
                  for n in sizes}

    def size(a, b):
        if a == b:
            return a
        if (a, b) in candidates:
            return candidates[(a, b)]
        for (p, q), n in candidates.items():   # a multiple of one: 4n
            if p and a % p == 0 and b * p == a * q:
                return n * (a // p)
        fail(f"an output size ({a} or {b} for stand-in sizes) is no input's")

    def zero_one_value(n, fixed):
        return _proxy.evaluate(n, lambda base: fixed)

    first, second = results[0], results[1]
    flat0, flat1 = tree_flatten(plain(first)), tree_flatten(plain(second))
    if len(flat0) != len(flat1):
        fail("its results differ in structure with the size")
    outputs = []
    for a, b in zip(flat0, flat1):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            fail("its results differ in structure with the size")
        if not isinstance(a, torch.Tensor):
            if a != b:
                fail(f"a result ({a} or {b}) follows the size")
            outputs.append(a)
            continue
        if a.ndim != b.ndim or a.dtype != b.dtype or a.stride() != b.stride():
            fail("its results' layout changes with the size")
        shape = tuple(size(p, q) for p, q in zip(a.shape, b.shape))
        outputs.append(SymbolicMeta(shape, a.dtype, tuple(a.stride()), a.requires_grad))
    for run, fixed in (("zero", 0), ("one", 1)):   # the shapes at 0 and 1 follow as well
        got = results[_RUNS.index(run)]
        if isinstance(got, Exception):
            continue   # eager raises on no element too: at run time, as the call runs
        flat = tree_flatten(plain(got))
        expected = [tuple(n if isinstance(n, int) else zero_one_value(n, fixed) for n in o.shape)
                    if isinstance(o, SymbolicMeta) else None for o in outputs]
        if [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in flat] != expected:
            fail(f"its output shape takes another form when the size is {fixed}")
    iterator = iter(outputs)
    result = tree_map(lambda leaf: next(iterator), plain(first))
    if isinstance(first, tuple) and type(first) is not tuple and not hasattr(first, "_fields"):
        result = type(first)(tuple(result))   # torch.return_types
    return result, memo
