"""What the activations of ``torch.nn.functional`` share, as one decorator.

Eager runs an activation in a fixed order, and ``@activation`` reproduces it:

1. argument parsing: `input` must be a tensor, each number parameter a Python number
   (ints beyond 64 bits raise OverflowError);
2. the op's own up-front checks (``precheck``: ``celu`` refuses alpha=0, ...), and an
   ``out=`` of any dtype but the result's is refused;
3. dtype dispatch: the CPU kernel exists for some dtypes only (``accepts``);
4. each number parameter becomes the number the kernel sees (``scalar_to``: eager's
   ``Scalar.to<T>()``, rounded to the dtype, overflow checked), in the computation dtype
   (opmath: float for float16/bfloat16) or in the input's dtype, per parameter;
5. the body, written in prims, runs in the computation dtype; the result is rounded
   once to the result dtype, then written into ``input`` (``inplace=True``) or ``out=``.
"""
from __future__ import annotations

import inspect
import math
import struct

import torch

from primtrace import dtypes
from primtrace.ir.symbol import Symbol, SymbolKind
from primtrace.refs.core import is_number, is_tensor, to_tensor
from primtrace.refs.out import copy_to_out, copy_to_self, maybe_convert
from primtrace.refs.promotion import DEFAULT, Kind, elementwise_dtypes

__all__ = ["activation", "inplace_of", "scalar_to", "dispatch", "constant", "concrete",
           "type_name", "COMPUTATION", "INPUT", "RAW"]

MODULE = "refs.nn.functional"

#: Where a number parameter is converted (eager's ``Scalar.to<T>()`` target).
COMPUTATION = "computation"  # the opmath dtype the body computes in
INPUT = "input"              # the input's own dtype (then used exactly in the computation)
RAW = "raw"                  # parsed only; the body converts it itself


# --- numbers as eager's kernels see them ----------------------------------------------------


def concrete(value):
    """The Python value of a number (reading a NumberProxy specializes the trace on it)."""
    return value.python_type(value) if hasattr(value, "python_type") else value


def _round_float(v: float, dtype) -> float:
    """`v` rounded to a float dtype, as c10 does: through float32, then to nearest even."""
    if dtype is torch.float64 or math.isnan(v):
        return v
    v = struct.unpack("<f", struct.pack("<f", v))[0]
    if dtype is torch.float16:
        return struct.unpack("<e", struct.pack("<e", v))[0]
    if dtype is torch.bfloat16:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    return v


def scalar_to(value, dtype):
    """The number a kernel of `dtype` sees for a Python number: eager's ``Scalar.to<T>()``.

    Floats round to the dtype, and a finite value beyond its range raises; integers
    truncate toward zero, out-of-range values raise (an unsigned dtype takes negative
    Python ints down to -max and wraps them); a complex number needs a zero imaginary part.
    """
    if dtype is torch.float64 and getattr(value, "python_type", type(value)) in (bool, int, float):
        return value if isinstance(value, float) or hasattr(value, "python_type") else float(value)
    v = concrete(value)
    overflow = RuntimeError(f"value cannot be converted to type {dtypes.c_type_name(dtype)} "
                            "without overflow")
    if isinstance(v, complex):
        if v.imag != 0:
            raise overflow
        v = v.real
    if dtype.is_floating_point:
        v = float(v)
        if math.isfinite(v) and abs(v) > torch.finfo(dtype).max:
            raise overflow
        return _round_float(v, dtype)
    info = torch.iinfo(dtype)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        low = -info.max if info.min == 0 else info.min
        if not low <= v <= info.max:
            raise overflow
        return v % (info.max + 1) if info.min == 0 else v
    if math.isnan(v) or v < info.min or v > float(info.max):
        raise overflow
    return (int(v) - info.min) % (info.max - info.min + 1) + info.min  # 2**63 wraps, as in C


def type_name(value) -> str:
    """The Python type eager names in its errors (a NumberProxy's number type)."""
    return getattr(value, "python_type", type(value)).__name__


def _parse_number(op, pname, position, value):
    """Eager's argument parser for a Scalar parameter."""
    if not is_number(value) or is_tensor(value):
        raise TypeError(f"{op}(): argument '{pname}' (position {position}) must be Number, "
                        f"not {type_name(value)}")
    if getattr(value, "python_type", type(value)) is int and not hasattr(value, "python_type"):
        if not -2**63 <= value < 2**64:
            raise OverflowError("int too big to convert")


def constant(value, like):
    """A 0-dim tensor of `like`'s dtype holding `value` (maximum/minimum take no numbers)."""
    return to_tensor(value, like.dtype, like.device)


# --- dtype dispatch --------------------------------------------------------------------------
def dispatch(kernel, accepted):
    """Eager's dispatch error: `kernel` exists for the `accepted` dtypes only."""
    def check(dtype):
        if dtype not in accepted:
            raise NotImplementedError(f'"{kernel}" not implemented for \'{dtypes.scalar_type_name(dtype)}\'')
    check.kernel, check.accepted = kernel, tuple(accepted)
    return check


# --- the decorator -----------------------------------------------------------------------------
def activation(accepts, *, kind: Kind = DEFAULT, scalars=None, inplace=True, out=None,
               out_after_dispatch=False, python_check=None, precheck=None, check=None,
               method=None, name=None, aten=None):
    """Make `body(input, *params)` (prims, in the computation dtype) a torch.nn.functional ref.

    accepts:  ``dtype -> None`` raising eager's dispatch error (see ``dispatch``).
    scalars:  {parameter: COMPUTATION | INPUT | RAW | (value, input dtype) -> number},
              the number parameters and how eager's kernel converts each.
    inplace:  F's signature has ``inplace=False`` (input is then written and returned).
    out:      F's signature has ``out=``; the text of eager's error for another out dtype
              (checked before dispatch, or after it with `out_after_dispatch`).
    python_check: ``(**arguments) -> None``, F's own Python checks, made first (the
              ``op_`` variants are C++ functions and skip them).
    precheck: ``(**arguments) -> None``, eager's checks before dispatch.
    check:    ``(dtype, **arguments) -> None``, eager's checks after dispatch.
    method:   F calls ``input.<method>()``, so a non-tensor input raises AttributeError.
    aten:     the name eager's argument errors use, where it is not F's (log_sigmoid).
    """
    scalars = dict(scalars or {})

    def decorate(body):
        op = name or body.__name__
        parser_name = aten or op
        params = list(inspect.signature(body).parameters.values())
        if inplace:
            params.append(inspect.Parameter("inplace", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=False))
        if out is not None:
            params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
        signature = inspect.Signature(params)
        positions = {p.name: i + 1 for i, p in enumerate(params)}

        def check_out(out_tensor, result):
            """These ops refuse an out= of another dtype (rather than casting into it)."""
            if is_tensor(out_tensor) and out_tensor.dtype != result:
                raise RuntimeError(out.format(found=dtypes.scalar_type_name(out_tensor.dtype),
                                              expected=dtypes.scalar_type_name(result)))

        def apply(arguments, *, inplace=False, out_tensor=None, python_checks=True):
            input = arguments["input"]
            if python_checks and python_check is not None:
                python_check(**arguments)
            if not is_tensor(input):
                if method is not None:
                    raise AttributeError(f"'{type_name(input)}' object has no attribute '{method}'")
                raise TypeError(f"{parser_name}(): argument 'input' (position 1) must be Tensor, "
                                f"not {type_name(input)}")
            for pname in scalars:
                _parse_number(parser_name, pname, positions[pname], arguments[pname])
            if precheck is not None:
                precheck(**arguments)
            computation, result = elementwise_dtypes(input, type_promotion_kind=kind)
            if not out_after_dispatch:
                check_out(out_tensor, result)
            accepts(input.dtype)
            if check is not None:
                check(input.dtype, **arguments)
            if out_after_dispatch:
                check_out(out_tensor, result)
            values = dict(arguments)
            for pname, target in scalars.items():
                if target == COMPUTATION:
                    values[pname] = scalar_to(values[pname], computation)
                elif target == INPUT:
                    values[pname] = scalar_to(values[pname], input.dtype)
                elif callable(target):
                    values[pname] = target(values[pname], input.dtype)
            values["input"] = maybe_convert(input, computation)
            y = maybe_convert(body(**values), result)
            if inplace:
                return copy_to_self(input, y, (input,))
            if out_tensor is not None:
                return copy_to_out(out_tensor, y, (input,))
            return y

        def run(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs)
            arguments.apply_defaults()
            arguments = dict(arguments.arguments)
            flag = bool(arguments.pop("inplace", False))
            return apply(arguments, inplace=flag, out_tensor=arguments.pop("out", None))

        run.__name__, run.__doc__, run.__signature__ = op, body.__doc__, signature
        sym = Symbol(op, kind=SymbolKind.REF, fn=run, module=MODULE, doc=body.__doc__,
                     promote=("input",), type_promotion_kind=kind, body=body)
        sym.apply, sym.body_signature = apply, inspect.signature(body)
        return sym
    return decorate


def inplace_of(act: Symbol, name: str | None = None) -> Symbol:
    """``F.<op>_(input, *params)``: the activation written into `input`, returned.

    These are C++ functions: F's Python checks are not made (``hardtanh_`` does not refuse
    min_val > max_val as ``F.hardtanh`` does; it clamps everything to max_val).
    """
    signature = act.body_signature
    op = name or act.name + "_"

    def run(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        return act.apply(dict(arguments.arguments), inplace=True, python_checks=False)

    run.__name__, run.__signature__ = op, signature
    run.__doc__ = f"In-place {act.name}: written into input, which is returned."
    return Symbol(op, kind=SymbolKind.REF, fn=run, module=act.module, doc=run.__doc__,
                  promote=act.promote, type_promotion_kind=act.type_promotion_kind)
