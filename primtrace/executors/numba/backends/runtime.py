"""Scalar building blocks that generated CPU kernels call (all inlined by Numba).

Why these exist:
- Kernels receive tensors as integer addresses (``t.data_ptr()``): an int argument is the
  cheapest thing Numba's dispatcher unboxes (an ndarray costs ~1 us more per tensor), and
  pointer indexing has no negative-index wraparound code in the loop. ``ptr_<type>`` turns
  the address into a typed pointer; ``keep`` tells Numba's parfor pass that the stores
  through a pointer are observable (without it a ``prange`` loop that only writes through
  pointers is removed as dead code).
- Integer pow and gcd are loops; float -> int casts must give what eager gives on x86
  for NaN and out-of-range values (a bare Numba cast is undefined there). Everything that
  is an expression (integer division, shifts, NaN-aware min/max) is written inline by
  the op table (``ops.py``) instead, so the CUDA backend shares it.
"""
from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from primtrace.executors.numba.vmath.core import float_bits

_INLINE = dict(forceinline=True, error_model="numpy", nogil=True)  # LLVM-level inlining: cheap to compile


# --- tensors as pointers ----------------------------------------------------------------------
def _pointer_intrinsic(ty):
    @intrinsic
    def as_pointer(typingctx, addr):
        sig = types.CPointer(ty)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return sig, codegen
    return as_pointer


ptr_bool = _pointer_intrinsic(types.uint8)      # torch stores bool as one byte
ptr_uint8 = _pointer_intrinsic(types.uint8)
ptr_int8 = _pointer_intrinsic(types.int8)
ptr_int16 = _pointer_intrinsic(types.int16)
ptr_int32 = _pointer_intrinsic(types.int32)
ptr_int64 = _pointer_intrinsic(types.int64)
ptr_uint16 = _pointer_intrinsic(types.uint16)   # float16 / bfloat16 bits
ptr_float32 = _pointer_intrinsic(types.float32)
ptr_float64 = _pointer_intrinsic(types.float64)


def _hardware_f16() -> bool:
    """Whether LLVM converts float16 with one instruction each way here (x86 F16C:
    vcvtph2ps, vcvtps2ph; vectorized): exact like the software path and several times
    faster. PRIMTRACE_SOFT_HALF=1 forces software both ways."""
    if os.environ.get("PRIMTRACE_SOFT_HALF", "0") != "0":
        return False
    try:
        import llvmlite.binding as llvm
        return "+f16c" in llvm.get_host_cpu_features().flatten().split(",")
    except Exception:
        return False


#: float16 conversions in hardware here (mathlib picks them; part of the kernel cache key)
HARDWARE_F16 = _hardware_f16()


# --- float16 <-> float32 in hardware (x86 F16C: vcvtph2ps / vcvtps2ph, vectorized by LLVM) ---
# Used only where the host has F16C (mathlib.HARDWARE_F16); elsewhere LLVM would call
# compiler-rt (__extendhfsf2, __truncsfhf2), which Numba's JIT does not provide.
#
# The one half conversion x86 has no instruction for is float64 -> float16 (__truncdfhf2),
# and asking for it was the old failure mode: a call to address 0. It is never asked for:
# the encoders take float32 and round a float64 to float32 first, as torch does (it
# converts float64 -> float16 through float32, rounding twice; one fptrunc double -> half
# would round once and differ near half-way points). LLVM keeps fptrunc(fptrunc(x)) as two
# roundings (it may fold them only where the first one is exact, when one rounding gives
# the same result); should it ever emit the libcall, provide_truncdfhf2 has given it a body.
def _to_float32(builder, value):
    return builder.fptrunc(value, ir.FloatType()) if value.type != ir.FloatType() else value


def _float_arg(x) -> bool:
    return x in (types.float32, types.float64)


@intrinsic
def f16_to_f32_hw(typingctx, bits):
    """float16 bits -> float32, exact (LLVM fpext)."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(bits), codegen


@intrinsic
def f32_to_f16_hw(typingctx, x):
    """float32 -> float16 bits, round to nearest even, inf and NaN kept (LLVM fptrunc); a
    float64 is rounded to float32 first."""
    if not _float_arg(x):
        return None

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(_to_float32(builder, args[0]), ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))
    return types.uint16(x), codegen


@intrinsic
def round_f16_hw(typingctx, x):
    """float32 rounded to the nearest float16 value, kept in float32 (fptrunc, fpext)."""
    if not _float_arg(x):
        return None

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(_to_float32(builder, args[0]), ir.HalfType())
        return builder.fpext(half, ir.FloatType())
    return types.float32(x), codegen


# float64 -> float16 correctly rounded, for LLVM's libcall: round to odd in float32 (toward
# zero, then the last bit set if inexact: 24 >= 11 + 2 bits, so the float32 -> float16
# rounding that follows cannot meet a false tie), then F16C's float32 -> float16.
_TRUNCDFHF2 = r"""
declare double @llvm.fabs.f64(double)

define half @__truncdfhf2(double %x) {
  %f = fptrunc double %x to float
  %back = fpext float %f to double
  %bits = bitcast float %f to i32
  %ax = call double @llvm.fabs.f64(double %x)
  %aback = call double @llvm.fabs.f64(double %back)
  %away = fcmp ogt double %aback, %ax
  %less = sub i32 %bits, 1
  %towards_zero = select i1 %away, i32 %less, i32 %bits
  %inexact = fcmp one double %back, %x
  %odd = or i32 %towards_zero, 1
  %rounded = select i1 %inexact, i32 %odd, i32 %towards_zero
  %g = bitcast i32 %rounded to float
  %h = fptrunc float %g to half
  ret half %h
}
"""
_ENGINES: list = []


def provide_truncdfhf2() -> None:
    """Give the JIT a ``__truncdfhf2`` (float64 -> float16) where the process has none.

    Why: LLVM lowers a float64 -> float16 fptrunc to that compiler-rt call, which Numba's
    JIT resolves to address 0 (a crash). Our kernels never ask for it (see above); this
    makes a fold LLVM is entitled to make safe too. Needs F16C (the body's last step)."""
    import llvmlite.binding as llvm
    if llvm.address_of_symbol("__truncdfhf2"):
        return
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(), opt=2)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_TRUNCDFHF2), machine)
    engine.finalize_object()
    _ENGINES.append(engine)           # the code lives as long as its engine
    llvm.add_symbol("__truncdfhf2", engine.get_function_address("__truncdfhf2"))


@intrinsic
def keep(typingctx, pointer):
    """No code: marks `pointer` as escaping so parfors keep the stores made through it."""
    sig = types.none(pointer)

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()
    return sig, codegen


# --- faulting a new output in ahead of its stores (cpu.py: POPULATE_BYTES) -------------------
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_POPULATE_WRITE = 23


@intrinsic
def _madvise(typingctx, addr, length, advice):
    """libc's madvise(addr, length, advice), called by symbol (resolved when the kernel is
    loaded, from Numba's disk cache too)."""
    sig = types.int32(types.int64, types.int64, types.int32)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [i8p, ir.IntType(64), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
        return builder.call(fn, [builder.inttoptr(args[0], i8p), args[1], args[2]])
    return sig, codegen


@njit(**_INLINE)
def populate(start, end):
    """Fault in the whole pages of [start, end) for writing with one system call (Linux 5.14's
    MADV_POPULATE_WRITE) instead of a page fault each; an older kernel refuses it and the
    stores fault the pages in as before. Linux only: kernels call it there only."""
    lo = (start + (_PAGE - 1)) & -_PAGE
    hi = end & -_PAGE
    if hi > lo:
        _madvise(lo, hi - lo, np.int32(_MADV_POPULATE_WRITE))


# --- integer loops (callers cast the int64 result back to the dtype, wrapping as C does) ----
@njit(**_INLINE)
def pow_int(a, b):
    """Integer power by squaring, wrapping in 64 bits; negative exponents as torch does."""
    a = np.int64(a)
    b = np.int64(b)
    if b < 0:
        if a == 1:
            return np.int64(1)
        if a == -1:
            return np.int64(-1) if (b & 1) else np.int64(1)
        return np.int64(0)
    result = np.int64(1)
    while b > 0:
        if b & 1:
            result *= a
        a *= a
        b >>= 1
    return result


@njit(**_INLINE)
def gcd_int(a, b):
    """eager's calc_gcd on operands already passed through abs() in their own dtype (so
    INT_MIN stays negative): Euclid with C's truncating remainder, in int64 (every value
    fits the dtype). The result can be negative, as eager's is."""
    a = np.int64(a)
    b = np.int64(b)
    while a != 0:
        r = b % a if a != -1 else np.int64(0)    # INT_MIN % -1 would trap
        if r != 0 and (r < 0) != (b < 0):
            r -= a                               # floor remainder -> C's truncated one
        b = a
        a = r
    return b


# --- the range check of blocks with small-argument calls (cpu.py's guarded loops) ---------------
@njit(**_INLINE)
def magnitude_bits(x):
    """The bits of float32 |x| as an int32, ordered as |x| is (nan above inf): a block's
    largest argument is then an integer max reduction, which vectorizes (a float one
    does not without fast-math)."""
    return np.int32(float_bits(x) & np.int32(0x7FFFFFFF))


# --- float -> int casts as x86 does them (what eager gives for out-of-range values) -------
@njit(**_INLINE)
def f2i64(x):
    if x >= 9.2233720368547758e18 or x < -9.2233720368547758e18 or x != x:
        return np.int64(-9223372036854775808)
    return np.int64(x)


@njit(**_INLINE)
def f2i32(x):
    """float -> int32 (narrower integer dtypes then wrap from this, as eager does)."""
    if x >= 2147483648.0 or x < -2147483648.0 or x != x:
        return np.int32(-2147483648)
    return np.int32(x)
