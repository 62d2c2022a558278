"""The check of a random program (tests/programs/random_programs.py) against eager: outputs
by the conformance rule (within the tolerance of the narrowest float dtype a value was
computed through; through a half dtype, within twice eager's distance of the float64 run;
an integer computed from floats may be the float64 run's value), output strides where
eager's are defined, aliasing with inputs and state, and the final state of every input
and of a module's parameters and buffers."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import nn

import primtrace
from tests.conformance.harness import _TOL, compare_outputs

if TYPE_CHECKING:
    from tests.programs.random_programs import Program

def _narrowest(dtypes):
    """The float dtype of least precision among `dtypes` (None: no float)."""
    found = [d for d in dtypes if d is not None]
    return max(found, key=lambda d: _TOL[d][0]) if found else None


def _scale(low, dtype):
    """How much wider than `dtype`'s tolerance a value computed through `low` is compared:
    a float64 result of float32 values is as exact as float32 (two orders of summation
    differ in float32's last bits, whatever the result's dtype)."""
    if low is None or dtype not in _TOL or _TOL[low][0] <= _TOL[dtype][0]:
        return 1.0
    return _TOL[low][0] / _TOL[dtype][0]


def _compare(got, expected, reference_fn, low):
    """compare_outputs within the tolerance of `low` (see _scale); an integer or bool value
    computed from floats (``y.any()``, ``x.argmax()``) may differ from eager's where it is the
    float64 run's value (eager's float rounding moved it: ours is as close as eager's)."""
    try:
        problem = compare_outputs(got, expected, reference_fn,
                                  _scale(low, getattr(expected, "dtype", None)))
    except RuntimeError as e:   # a view autograd forbids reading after an in-place write
        error = _reading_error(expected)
        if type(error) is type(e) and str(error) == str(e):
            return None          # eager's is as unreadable, with the same error
        return f"reading ours raised {type(e).__name__}: {e}; eager's: {error!r}"
    if problem and low in (torch.float16, torch.bfloat16) and isinstance(expected, torch.Tensor) \
            and isinstance(got, torch.Tensor) and expected.is_floating_point() \
            and got.dtype == expected.dtype and got.shape == expected.shape:
        return None if _within_twice(got, expected, reference_fn, _TOL[low][1]) else problem
    if (problem and low is not None and isinstance(expected, torch.Tensor)
            and isinstance(got, torch.Tensor) and not expected.is_floating_point()
            and not expected.is_complex() and got.dtype == expected.dtype
            and got.shape == expected.shape):
        try:
            reference = reference_fn()
        except Exception:
            return problem
        if isinstance(reference, torch.Tensor) and reference.shape == expected.shape and bool(
                ((got == expected) | (got == reference.to(got.dtype))).all()):
            return None
    return problem


def _reading_error(t):
    """The error reading `t` raises (None if none): a view of a multi-output op (chunk) whose
    base an in-place op wrote, with autograd recording, is unreadable, eager's as ours."""
    try:
        t.to(torch.float64) if isinstance(t, torch.Tensor) else None
    except RuntimeError as e:
        return e
    return None


def _within_twice(got, expected, reference_fn, atol) -> bool:
    """Whether `got` is within twice eager's distance of the float64 run (plus atol),
    element by element, NaN where eager's is: a value computed through a half dtype rounds
    its intermediates to 8 or 11 bits, and the ops after one can magnify a 1-ulp difference
    (sigmoid of a bfloat16 log_softmax: 1 ulp at 5.05 is 3% of the result), so that of two
    chains rounding as exactly, either may end farther. TorchInductor's check against a
    float64 run allows the same (torch._dynamo.utils.same: multiplier=2.0)."""
    try:
        reference = reference_fn()
    except Exception:
        return False
    if not isinstance(reference, torch.Tensor) or reference.shape != expected.shape:
        return False
    o, e, r = (t.detach().to(torch.float64) for t in (got, expected, reference))
    if not torch.equal(o.isnan(), e.isnan()) or bool((r.isnan() & ~e.isnan()).any()):
        return False
    keep = ~o.isnan()
    o, e, r = o[keep], e[keep], r[keep]
    same_inf = torch.isinf(o) & (o == e)
    return bool(((o - r).abs() <= 2 * (e - r).abs() + atol)[~same_inf].all()) and bool(
        (torch.isinf(o) == torch.isinf(e)).all())


def _leaves(obj):
    if isinstance(obj, (tuple, list)):
        return [x for o in obj for x in _leaves(o)]
    return [obj]


def _storage(t):
    try:
        return t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else None
    except Exception:
        return None


def _call(fn, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*inputs), None
        except Exception as e:   # eager's verdict is the spec
            return None, e


def _aliases(outs, owners):
    """For each output: which owners (inputs, parameters, buffers, other outputs) share its storage."""
    ptrs = [_storage(o) if isinstance(o, torch.Tensor) else None for o in owners]
    return [sorted(i for i, q in enumerate(ptrs) if q is not None and q == _storage(o))
            if isinstance(o, torch.Tensor) else None for o in outs]


def _strides(t):
    """Strides of the dimensions whose size is above 1 (the others carry no information; nor
    do an empty tensor's, which are not compared)."""
    return tuple(st for st, sz in zip(t.stride(), t.shape) if sz > 1)


def check(program: Program, calls: int = 2, executors=None) -> str | None:
    """None if ``primtrace.jit`` of the program behaves as eager, else what differs."""
    eager_fn, jit_target = program.make_callable(), program.make_callable()
    jfn = primtrace.jit(jit_target, executors=executors)
    reference = {}
    for call in range(calls):
        where = f"call {call + 1}: "
        e_in, j_in = program.make_inputs(), program.make_inputs()
        expected, e_err = _call(eager_fn, e_in)
        got, j_err = _call(jfn, j_in)
        if e_err is not None:
            if j_err is None:
                return f"{where}eager raised {type(e_err).__name__}: {e_err}; jit returned"
            if not isinstance(j_err, type(e_err)):
                return (f"{where}eager raised {type(e_err).__name__}: {e_err}; "
                        f"jit raised {type(j_err).__name__}: {j_err}")
            return None
        if j_err is not None:
            return f"{where}jit raised {type(j_err).__name__}: {j_err}"
        if call == 0:
            ref_fn = program.make_callable(upcast=True)
        ref_in = program.make_inputs(upcast=True)
        reference["out"], reference["err"] = _call(ref_fn, ref_in)
        reference["in"] = ref_in
        e_leaves, j_leaves = _leaves(expected), _leaves(got)
        if type(expected) is not type(got) or len(e_leaves) != len(j_leaves):
            return f"{where}output structure: jit {type(got).__name__}[{len(j_leaves)}], eager {type(expected).__name__}[{len(e_leaves)}]"
        r_leaves = _leaves(reference["out"]) if reference["err"] is None else None
        for i, (j, e) in enumerate(zip(j_leaves, e_leaves)):
            ref = (lambda i=i: r_leaves[i]) if r_leaves is not None and len(r_leaves) == len(e_leaves) else _no_ref
            problem = _compare(j, e, ref, program.output_low(i, len(e_leaves)))
            if problem:
                return f"{where}output {i}: {problem}"
            if isinstance(e, torch.Tensor):
                if e.requires_grad != j.requires_grad:
                    return f"{where}output {i}: requires_grad jit {j.requires_grad}, eager {e.requires_grad}"
                if (len(e_leaves) == len(program.out_strided) and program.out_strided[i] and e.numel()
                        and _strides(j) != _strides(e)):
                    return f"{where}output {i}: strides jit {j.stride()}, eager {e.stride()} (shape {tuple(e.shape)})"
        owners_e = e_in + _state(eager_fn) + e_leaves
        owners_j = j_in + _state(jit_target) + j_leaves
        a_e, a_j = _aliases(e_leaves, owners_e), _aliases(j_leaves, owners_j)
        if a_e != a_j:
            return f"{where}aliasing (indices into inputs+state+outputs): jit {a_j}, eager {a_e}"
        for k, (j, e) in enumerate(zip(j_in, e_in)):
            ref = (lambda k=k: reference["in"][k]) if reference["err"] is None else _no_ref
            problem = _compare(j, e, ref, program.low.get(program.specs[k].name))
            if problem:
                return f"{where}input {program.specs[k].name} after the call: {problem}"
    if program.is_module:
        e_state, j_state = eager_fn.state_dict(), jit_target.state_dict()
        for name, e in e_state.items():
            problem = compare_outputs(j_state[name], e, _no_ref)
            if problem:
                return f"module state {name} after {calls} calls: {problem}"
    return None


def _no_ref():
    raise LookupError


def _state(fn):
    if isinstance(fn, nn.Module):
        return [t for _, t in fn.state_dict(keep_vars=True).items()]
    return []


def describe(program: Program, problem: str) -> str:
    """The failure, the seed that reproduces it and the program with its inputs."""
    return (f"seed {program.seed} (ci={program.ci}): {problem}\n{program.source}"
            f"inputs: {program.specs}")
