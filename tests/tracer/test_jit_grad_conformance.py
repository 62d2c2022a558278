"""Gradient conformance: every op of the refs' conformance suites, differentiated through
``primtrace.jit`` (the fused forward and the backward built from the prims' VJP rules),
against eager autograd.

The specs and samples are tests/tracer/test_jit_conformance.py's (tests/conformance's
suites). For each sample whose floating or complex tensor inputs eager differentiates (eager
runs first with ``requires_grad`` on them; a sample where eager's forward or backward raises,
or no output requires grad, is skipped; integer and bool inputs never require grad), the
jitted function runs on copies of the same inputs (same values, same layout) and must give:

- the outputs, by the conformance rule (:func:`~tests.conformance.harness.compare_outputs`),
  and the same ``requires_grad`` on each;
- the gradients ``torch.autograd.grad(outputs, inputs, cotangents)`` for the same random
  cotangents (seeded by the sample), by the float64 rule: a gradient that differs from
  eager's passes where it is at least as close as eager's to eager autograd run on float64
  copies of the inputs (through a half dtype: within twice eager's distance, as
  TorchInductor's check and tests/programs/random_check.py allow); the same dtype and
  shape, and None (an input nothing reads) where eager's is None;
- primtrace's own backward: the call must not fall back to torch's autograd op by op
  (``Fallback``).

A failure passes only if ``KNOWN`` lists it for its op (a substring of its message): each a
documented limitation, named with why.

CI checks one sample in 8 (the hash rule of ``run_conformance``'s `share`) among those whose
floating inputs are float32, float64 or bfloat16, through the TORCH executor, and one in 256
of those through the default executors (Numba fusion runs the forward and the backward; a
kernel compiles in 0.2-1 s). ``PRIMTRACE_SLOW=1`` checks every sample in every dtype, one in
16 through the default executors.
``python tests/tracer/test_jit_grad_conformance.py [names...]`` prints the counts.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import warnings
import zlib

import pytest
import torch

import primtrace
from primtrace.executors import default_executors
from tests.conformance.harness import _TOL, _errors, _upcast, compare_outputs, samples
from tests.tracer.test_jit_conformance import SPECS

SLOW = os.environ.get("PRIMTRACE_SLOW") == "1"
SHARE = 1 if SLOW else 8
#: the dtypes CI checks (PRIMTRACE_SLOW=1: float16, complex too)
CI_DTYPES = {torch.float32, torch.float64, torch.bfloat16}
#: of the samples checked, one in FUSED_SHARE runs through the default executors in CI (the
#: others through the torch executor: a Numba kernel compiles in 0.2-1 s)
FUSED_SHARE = 16 if SLOW else 256

TORCH_ONLY = [primtrace.TORCH]
HALF = (torch.float16, torch.bfloat16)

#: op -> substrings of "[sample] failure" it may have: where eager's gradient is undefined or
#: wrong, or a convention we do not match (each says why)
_COMPARISONS_ = ("eq_", "ne_", "lt_", "le_", "gt_", "ge_", "not_equal_", "less_", "less_equal_",
                 "greater_", "greater_equal_")
KNOWN: dict[str, tuple[str, ...]] = {
    # x.eq_(y) on floats: eager's EqBackward gives y zeros; ours None (y is read only by a
    # comparison, which stops gradients); the same values, no tensor
    **{op: ("ours None, eager's a tensor",) for op in _COMPARISONS_},
    # x.logical_and_(y) etc.: eager's autograd does not record the in-place logical op (the
    # result keeps the copy's grad_fn), so its gradient is g; the derivative is 0, as ours
    **{op: ("grad of input 0: values differ",) for op in
       ("logical_and_", "logical_or_", "logical_xor_", "logical_not_")},
    # eager's LdexpBackward computes 2^other in other's integer dtype: 0 for negative
    # exponents (ours: 2^other)
    "ldexp": (" with int", "extreme exponents", "[complex]"),
    "ldexp_": (" with int", "extreme exponents", "[complex]"),
    # frexp of float64 denormals: eager's g / exp2(exponent) is inf where g * 2^-exponent,
    # ours, is finite
    "frexp": ("float64 specials", "float64 near 2**k", "float64 2**k", "float64 extremes"),
    # logaddexp of complex infinities (inf + 0j, -inf + 0j): eager's g / (1 + exp(b - a))
    # gives a all of g and b NaN; ours NaN and 0 (the shift by the larger real part)
    "logaddexp": ("complex64 specials", "complex128 specials", "complex special"),
    # addmm and its family with beta=0: eager gives input zeros; ours None (beta = 0 never
    # reads it); the same values, no tensor
    **{op: ("beta 0",) for op in ("addmm", "addmv", "addbmm", "baddbmm", "addr")},
    # atan2 with an integer operand: eager's formula squares and negates it in its integer
    # dtype (uint8 wraps: 200 * 200 = 64); ours computes in the result's float dtype
    "atan2": ("int8 with", "int16 with", "int32 with", "int64 with"),
    "special.zeta": ("int8 with", "int16 with", "int32 with", "int64 with"),
    # lerp with an integer weight: eager's 1 - weight is computed in its integer dtype (uint8
    # 200: 57)
    # lerp with complex infinities: eager's complex products give -inf + inf j where ours
    # (other operand orders) give NaN
    **{op: ("int8 with", "int16 with", "int32 with", "int64 with", "uint8 arg", "int8 arg",
            "int16 arg", "int32 arg", "int64 arg", "complex64 specials", "complex128 specials")
       for op in ("lerp", "lerp_")},
    # addcmul/addcdiv(value=inf) on complex tensors: eager multiplies by inf + 0j (a complex
    # product: inf * 0 is NaN in each part), ours by the real inf
    **{op: ("complex64 value=inf", "complex128 value=inf") for op in
       ("addcmul", "addcdiv", "addcmul_", "addcdiv_")},
    # complex nan_to_num: eager's out-of-place backward raises (no complex autograd); its
    # in-place form zeroes g where either part is not finite, ours per part
    "nan_to_num_": ("complex64 specials", "complex128 specials"),
    # polar(abs, angle) with abs < 0 (undefined, torch's docs): eager's rule multiplies by
    # sgn(result), which flips the sign of abs's gradient; ours is e^(i angle)
    "polar": ("grad of input 0: values differ",),
    # var/std over dim=(): eager's forward reduces every dim, its backward none (N = 1:
    # 2 / (N - 1) = inf); ours differentiates the forward
    **{op: ("'dim': ()",) for op in ("var", "std", "var_mean", "std_mean")},
    # hardshrink/softshrink at NaN: eager's backward gives 0 in its vectorized loop and g in
    # its scalar tail (the NaN's position decides); ours g everywhere, as the tail
    "hardshrink": ("specials",),
    "softshrink": ("specials",),
    # the same for the float64 activations at NaN (eager: 0 or NaN in its vectorized loop,
    # g in its scalar tail), and for hardtanh's NaN bound (0 in the loop, g in the tail)
    **{op: ("float64 specials",) for op in ("hardtanh", "relu6", "elu", "selu", "celu",
                                            "hardswish")},
    "hardtanh": ("float64 specials", "'min_val': nan"),
    # logit at -0.0: eager's vectorized loop gives g / (x (1 - x)) = -inf * g, its scalar
    # tail g * inf (ours, as tests/autodiff/test_ties.py pins)
    **{op: ("float64 specials",) for op in ("logit", "logit_", "special.logit")},
    # celu(alpha=1e-40): eager's backward rounds alpha to float32 (a denormal there): its
    # float64 gradient is 5e-6 off (1.0000054 at 0); ours computes in float64
    "celu": ("float64 specials", "'alpha': 1e-40"),
    # prod over all elements with two or more zeros: eager returns zeros without computing
    # (NaN and inf among the other elements included); ours the products of the others
    "prod": ("specials",),
    # native_layer_norm's mean and rstd: eager marks them not differentiable; ours require
    # grad (no prim detaches); the gradients of the result are eager's
    "native_layer_norm": ("output 1 requires_grad", "output 2 requires_grad"),
    # vector_norm(ord=0) in bfloat16: eager's gradient is None; ours zeros, as eager's in
    # float32 (the count's derivative is 0)
    "linalg.vector_norm": ("ord=0] grad of input 0: ours a tensor, eager's None",),
    # scatter_reduce(reduce='prod') has no VJP rule yet: the call falls back to torch
    "scatter_reduce": ("reduce='prod': not written",),
}

#: op -> sample descriptions eager's autograd crashes on (the process, not an exception)
EAGER_CRASHES = {
    "pdist": ("empty",),   # torch 2.13 CPU: pdist's backward of a (0, n) input segfaults
}


# --- inputs ----------------------------------------------------------------------------------
def _leaves(obj):
    """The tensors of an argument structure, in order (tuples, lists, dict values)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _leaves(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _leaves(o)]
    return []


def _rebuild(obj, replace):
    if isinstance(obj, torch.Tensor):
        return replace(obj)
    if isinstance(obj, (tuple, list)) and not hasattr(obj, "_fields"):
        return type(obj)(_rebuild(o, replace) for o in obj)
    if isinstance(obj, dict):
        return {k: _rebuild(v, replace) for k, v in obj.items()}
    return obj


def _differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A leaf with `t`'s values and layout (strides, offset, expanded dims) in its own storage."""
    if t.is_conj() or t.is_neg() or t.numel() == 0:
        return t.detach().clone()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    return out.set_(t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride())


def _inputs(sample, wanted):
    """(args, kwargs, leaves): copies of the sample's arguments, the differentiable tensors at
    the indices `wanted` (into the sample's tensor leaves) requiring grad."""
    leaves, index = [], iter(range(1 << 30))

    def replace(t):
        c = _copy(t)
        if next(index) in wanted:
            c.requires_grad_(True)
            leaves.append(c)
        return c
    args, kwargs = _rebuild((sample.args, sample.kwargs), replace)
    return args, kwargs, leaves


def _tensor_outputs(out):
    return [t for t in _leaves(out if isinstance(out, (tuple, list)) else [out])]


def _cotangents(outputs, seed):
    g = torch.Generator().manual_seed(seed)
    cots = []
    for o in outputs:
        values = torch.randn(o.shape, generator=g, dtype=torch.float64)
        if o.dtype.is_complex:
            values = torch.complex(values, torch.randn(o.shape, generator=g, dtype=torch.float64))
        cots.append(values.to(o.dtype))
    return cots


class Skip(Exception):
    """Eager does not differentiate this sample."""


def _eager(fn, sample, wanted, seed):
    """Eager's (outputs, indices of the outputs that require grad, cotangents, gradients)."""
    args, kwargs, leaves = _inputs(sample, wanted)
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        raise Skip(f"eager's forward raises {type(e).__name__}") from None
    outs = _tensor_outputs(out)
    active = [i for i, o in enumerate(outs) if o.requires_grad]
    if not active:
        raise Skip("no output requires grad")
    cots = _cotangents([outs[i] for i in active], seed)
    try:
        grads = torch.autograd.grad([outs[i] for i in active], leaves, cots, allow_unused=True)
    except Exception as e:
        raise Skip(f"eager's backward raises {type(e).__name__}") from None
    return out, active, cots, grads


def _reference(fn, sample, wanted, active, cots):
    """Eager autograd on float64 (complex128) copies: (outputs, gradients), or None."""
    def upcast(t):
        return _upcast(t.detach())
    try:
        args, kwargs = _rebuild((sample.args, sample.kwargs), upcast)
        kwargs = {k: _wide_dtype(v) for k, v in kwargs.items()}   # softmax(dtype=float16)
        leaves = [t for i, t in enumerate(_leaves((args, kwargs))) if i in wanted]
        for t in leaves:
            t.requires_grad_(True)
        out = fn(*args, **kwargs)
        outs = _tensor_outputs(out)
        grads = torch.autograd.grad([outs[i] for i in active], leaves,
                                    [_upcast(c) for c in cots], allow_unused=True)
        return _rebuild(out, torch.Tensor.detach), grads
    except Exception:
        return None


def _wide_dtype(value):
    if isinstance(value, torch.dtype) and (value.is_floating_point or value.is_complex):
        return torch.complex128 if value.is_complex else torch.float64
    return value


# --- the check -------------------------------------------------------------------------------
def jitted(spec, executors):
    """(callable, the JitFunction whose last compile is the call's) for the spec's torch
    function; an in-place wrapper (tests/conformance/binary_helpers.inplace) is jitted with
    its copy of self, so the write is into an intermediate that requires grad."""
    fn = spec.torch_fn
    jfn = primtrace.jit(fn, executors=executors)
    return jfn, jfn


def _narrowest(sample, outputs):
    """The float dtype of least precision a sample computes through: its inputs', its
    outputs', a dtype= argument's (None: no float)."""
    found = [t.dtype for t in _leaves((sample.args, sample.kwargs)) + outputs if _real_dtype(t.dtype)]
    found += [d for d in sample.kwargs.values() if isinstance(d, torch.dtype) and _real_dtype(d)]
    found = [_real_dtype(d) for d in found]
    return max(found, key=lambda d: _TOL[d][0]) if found else None


def _real_dtype(dtype):
    return {torch.complex32: torch.float16, torch.complex64: torch.float32,
            torch.complex128: torch.float64}.get(dtype, dtype if dtype.is_floating_point else None)


def _rmse(errors) -> float:
    return float(errors.pow(2).mean().sqrt())


def _compare_grad(got, expected, reference, scale, low):
    """None if our gradient passes (see the module's docstring), else what differs. `low`:
    the narrowest float dtype the sample computes through, whose tolerance applies."""
    if expected is None or got is None:
        if expected is None and got is None:
            return None
        return f"ours {'None' if got is None else 'a tensor'}, eager's {'None' if expected is None else 'a tensor'}"
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return f"ours {got.dtype}{list(got.shape)}, eager's {expected.dtype}{list(expected.shape)}"
    own = _real_dtype(expected.dtype)
    if low is not None and own is not None and _TOL[low][0] > _TOL[own][0]:
        scale *= _TOL[low][0] / _TOL[own][0]
    return _values_match(got.detach(), expected, reference, scale, low)


def _values_match(ours, eager, reference, scale, low):
    """harness.values_match's rule, element by element: close to eager (the dtype's
    tolerance), or at least as close as eager to the float64 reference, or, computed
    through a half dtype, within twice eager's distance of it (plus that dtype's atol), or
    the finite elements' RMS error within twice eager's plus 1e-4 (TorchInductor's check
    against a float64 run: torch._dynamo.utils.same, multiplier 2, tol / 10)."""
    rtol, atol = (t * scale for t in _TOL[ours.dtype])
    wide = torch.complex128 if ours.is_complex() else torch.float64
    o, e = ours.to(wide), eager.to(wide)
    ok = torch.isclose(o, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(ok.all()):
        return None
    if reference is not None and reference.shape == ours.shape:
        r = reference.to(torch.complex128 if reference.is_complex() or ours.is_complex() else wide)
        err_o, err_e = _errors(o, r), _errors(e, r)
        better = (err_o <= err_e * (1 + 1e-6) + 1e-300) & ~err_o.isnan() & ~r.isnan()
        better |= o.isnan() & (e.isnan() | r.isnan())   # NaN as eager's, or as float64's
        better |= e.isnan() & ~r.isnan() & torch.isclose(o, r, rtol=rtol, atol=atol)
        better |= o == r.to(ours.dtype).to(o.dtype)   # float64's, rounded (inf past the range)
        if low in HALF:
            better |= (err_o <= 2 * err_e + _TOL[low][1]) & ~err_o.isnan() & ~r.isnan()
            finite = o.isfinite() & e.isfinite() & r.isfinite()
            if bool(finite.any()) and _rmse(err_o[finite]) <= 2 * _rmse(err_e[finite]) + 1e-4:
                better |= finite   # TorchInductor's rule: twice eager's RMS error (+ tol / 10)
        ok |= better
        if bool(ok.all()):
            return None
    idx = (~ok).nonzero()[:3].tolist()
    at = tuple(idx[0])
    ref = "" if reference is None else f" float64 {reference[at].item()}"
    return f"values differ at {idx}: ours {o[at].item()} eager {e[at].item()}{ref}"


def check_grad_sample(spec, sample, executors):
    """(verdict, detail, fallback reason or None): verdict "pass", "skip" or "fail"."""
    if sample.desc in EAGER_CRASHES.get(spec.name, ()):
        return "skip", "eager's backward crashes", None
    seed = zlib.crc32(f"{spec.name} {sample.desc}".encode())
    fn = spec.torch_fn
    candidates = [i for i, t in enumerate(_leaves((sample.args, sample.kwargs))) if _differentiable(t)]
    if not candidates:
        return "skip", "no floating input", None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wanted = set(candidates)
        try:
            expected, active, cots, e_grads = _eager(fn, sample, wanted, seed)
        except Skip as first:
            if len(candidates) == 1:
                return "skip", str(first), None
            wanted = {candidates[0]}   # what eager cannot differentiate is another argument
            try:
                expected, active, cots, e_grads = _eager(fn, sample, wanted, seed)
            except Skip as e:
                return "skip", str(e), None
        reference = _reference(fn, sample, wanted, active, cots)
        jfn, compiled = jitted(spec, executors)
        args, kwargs, leaves = _inputs(sample, wanted)
        try:
            got = jfn(*args, **kwargs)
        except Exception as e:
            return "fail", f"jit's forward raised {type(e).__name__}: {e}", None
        fallback = _fallback(compiled)
        problem = compare_outputs(got, expected, lambda: reference[0], spec.rtol_scale)
        if problem:
            return "fail", f"outputs: {problem}", fallback
        outs, e_outs = _tensor_outputs(got), _tensor_outputs(expected)
        for i, (o, e) in enumerate(zip(outs, e_outs)):
            if o.requires_grad != e.requires_grad:
                return "fail", f"output {i} requires_grad: ours {o.requires_grad}, eager {e.requires_grad}", fallback
        try:
            grads = torch.autograd.grad([outs[i] for i in active], leaves, cots, allow_unused=True)
        except Exception as e:
            return "fail", f"jit's backward raised {type(e).__name__}: {e}", fallback
    low = _narrowest(sample, e_outs)
    for k, (o, e) in enumerate(zip(grads, e_grads)):
        r = reference[1][k] if reference is not None else None
        problem = _compare_grad(o, e, r, spec.rtol_scale, low)
        if problem:
            return "fail", f"grad of input {sorted(wanted)[k]}: {problem}", fallback
    if fallback is not None:
        return "fail", f"fallback: {fallback}", fallback
    return "pass", None, None


def _fallback(compiled):
    try:
        traces = primtrace.last_traces(compiled)
    except RuntimeError:
        return None
    return traces[1].tags.get("fallback") if len(traces) > 1 else None


# --- selection -------------------------------------------------------------------------------
def selected(spec, share=SHARE, dtypes=None if SLOW else CI_DTYPES, fused_share=FUSED_SHARE):
    """(sample, executors) for the samples checked: one in `share` by run_conformance's hash
    rule, whose floating inputs are all in `dtypes` (None: any); one in `fused_share` of them
    through the default executors (0: none), the others through the torch executor."""
    for sample in samples(spec):
        h = zlib.crc32(sample.desc.encode())
        if share > 1 and h % share:
            continue
        if dtypes is not None and any(_differentiable(t) and t.dtype not in dtypes
                                      for t in _leaves((sample.args, sample.kwargs))):
            continue
        fused = fused_share == 1 or fused_share and (h // share) % fused_share == 0
        yield sample, (default_executors() if fused else TORCH_ONLY)


def run_spec(spec, **selection):
    """Counter of verdicts, [(desc, problem)] of the failures KNOWN does not list, fallbacks."""
    counts, failures, fallbacks = collections.Counter(), [], collections.Counter()
    known = KNOWN.get(spec.name, ())
    for sample, executors in selected(spec, **selection):
        verdict, detail, fallback = check_grad_sample(spec, sample, executors)
        if fallback is not None:
            fallbacks[fallback] += 1
        if verdict == "fail" and any(s in f"[{sample.desc}] {detail}" for s in known):
            verdict = "known"
        counts[verdict] += 1
        if verdict == "skip":
            counts[f"skip: {detail}"] += 1
        if verdict == "fail":
            failures.append((sample.desc, detail))
    return counts, failures, fallbacks


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", SPECS)
def test_jit_gradients_conform(spec):
    _, failures, _ = run_spec(spec)
    if failures:
        shown = "\n  ".join(f"[{d}] {p}" for d, p in failures[:5])
        raise AssertionError(f"{spec.name}: {len(failures)} samples fail:\n  {shown}")


INF, NAN = float("inf"), float("nan")
EDGES = [   # (name, function, inputs): gradients the refs once got wrong, against eager's
    ("xlogy at x = 0", torch.xlogy, ([0.0, 0.0, -0.0, 1.0, 0.0, NAN], [2.0, 0.0, INF, 0.0, -1.0, 3.0])),
    ("entr at 0 and inf", torch.special.entr, ([0.0, -0.0, INF, 2.0, -1.0, NAN],)),
    ("softplus(beta=0)", lambda x: torch.nn.functional.softplus(x, beta=0),
     ([1.0, -3.0, INF, NAN, 0.0],)),
    ("mvlgamma at -0.0", lambda x: torch.mvlgamma(x, 1), ([-0.0, 0.0, 2.5],)),
]


@pytest.mark.parametrize("name, fn, values", EDGES, ids=[e[0] for e in EDGES])
def test_gradient_edges_as_eager(name, fn, values):
    for dtype in (torch.float32, torch.bfloat16):
        inputs = [torch.tensor(v, dtype=dtype, requires_grad=True) for v in values]
        g = torch.linspace(-1, 2, len(values[0]), dtype=dtype)
        want = torch.autograd.grad(fn(*inputs), inputs, g)
        got = torch.autograd.grad(primtrace.jit(fn, executors=TORCH_ONLY)(*inputs), inputs, g)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, equal_nan=True)


@pytest.mark.parametrize("padding_idx", [2, -2])
def test_embedding_padding_row_gets_no_gradient(padding_idx):
    weight = torch.randn(4, 3, requires_grad=True)
    indices = torch.tensor([[0, 2, 2], [1, 3, 0]])
    g = torch.randn(2, 3, 3)

    def f(i, w):
        return torch.nn.functional.embedding(i, w, padding_idx=padding_idx)
    want = torch.autograd.grad(f(indices, weight), weight, g)[0]
    got = torch.autograd.grad(primtrace.jit(f)(indices, weight), weight, g)[0]
    assert torch.equal(got, want)


def main(names, **selection):
    totals, by_op, reasons = collections.Counter(), {}, collections.Counter()
    start = selection.pop("start", None)
    dump = selection.pop("dump", None)
    for param in SPECS:
        spec = param.values[0]
        if start is not None:
            if param.id != start:
                continue
            start = None
        if names and spec.name not in names and param.id not in names:
            continue
        print(param.id, file=sys.stderr, flush=True)
        counts, failures, fallbacks = run_spec(spec, **selection)
        totals.update(counts)
        totals["specs"] += 1
        reasons.update(fallbacks)
        if failures:
            by_op[param.id] = failures
            if dump is not None:
                dump.write(json.dumps([param.id, failures]) + "\n")
                dump.flush()
            print(f"{param.id}: {len(failures)} fail  e.g. [{failures[0][0]}] {failures[0][1][:300]}",
                  flush=True)
    print(dict(totals))
    for reason, n in reasons.most_common():
        print(f"fallback x{n}: {reason}")
    return by_op


if __name__ == "__main__":
    # python tests/tracer/test_jit_grad_conformance.py [share=1] [dtypes=all] [fused=0] [names...]
    options = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    selection = {}
    if "share" in options:
        selection["share"] = int(options["share"])
    if options.get("dtypes") == "all":
        selection["dtypes"] = None
    if "dump" in options:
        selection["dump"] = open(options["dump"], "w")
    if "start" in options:
        selection["start"] = options["start"]
    if "fused" in options:
        selection["fused_share"] = int(options["fused"])
    main({a for a in sys.argv[1:] if "=" not in a}, **selection)
