"""Building blocks for the vectorizable math functions: the jit decorator, bit casts,
exponent-field scaling and error-free arithmetic.

Everything here lowers to straight-line LLVM IR (arithmetic, compares, selects, bit
casts), so a loop that calls it stays vectorizable. Rules the vmath modules follow:

* float32 code uses only float32 constants (a Python float literal would promote the
  expression to float64) and the helpers below;
* no Python int literal is mixed with uint64 (Numba types that as float64);
* the functions are compiled with ``fastmath={"contract"}`` only: LLVM may fuse a*b+c into
  an FMA where the CPU has one (every algorithm here is exact with or without that fusion:
  splits use bit masks, not Veltkamp's multiply), and it may not reassociate, assume
  no NaN/inf or drop signed zeros, which the compensated sums and the special-value
  selects depend on. The setting is explicit so the functions do not inherit a caller's
  ``fastmath=True``;
* ``error_model="numpy"``: float division must not grow a Python ZeroDivisionError branch.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

#: Decorator for every vmath function: LLVM-level inlining into the caller (cheaper to
#: compile than Numba-IR inlining; each function is compiled once per process).
vjit = numba.njit(forceinline=True, fastmath={"contract"}, error_model="numpy",
                  nogil=True, boundscheck=False)

F32, F64 = np.float32, np.float64
U64 = np.uint64


# --------------------------------------------------------------------------- intrinsics
@intrinsic
def f32_bits(typingctx, x):
    """float32 -> its int32 bit pattern (a register bit cast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(x), codegen


@intrinsic
def f64_bits(typingctx, x):
    """float64 -> its int64 bit pattern."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(x), codegen


def _int_to(width, flt):
    def codegen(context, builder, sig, args):
        v = args[0]
        if v.type.width > width:
            v = builder.trunc(v, ir.IntType(width))
        elif v.type.width < width:
            v = builder.sext(v, ir.IntType(width))
        return builder.bitcast(v, flt)
    return codegen


@intrinsic
def bits_f32(typingctx, i):
    """Integer (low 32 bits) -> float32 with that bit pattern."""
    if not isinstance(i, types.Integer):
        return None
    return types.float32(i), _int_to(32, ir.FloatType())


@intrinsic
def bits_f64(typingctx, i):
    """Integer (low 64 bits) -> float64 with that bit pattern."""
    if not isinstance(i, types.Integer):
        return None
    return types.float64(i), _int_to(64, ir.DoubleType())


def _unary_llvm(name):
    def impl(typingctx, x):
        if x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, sig, args):
            lt = args[0].type
            fn = builder.module.declare_intrinsic(name, [lt], ir.FunctionType(lt, [lt]))
            return builder.call(fn, args)
        return x(x), codegen
    return impl


#: Round to nearest integer, ties to even, as a float (llvm.rint: one vround instruction).
rint = intrinsic(_unary_llvm("llvm.rint"))
#: |x| by clearing the sign bit (llvm.fabs).
fabs = intrinsic(_unary_llvm("llvm.fabs"))
#: Correctly rounded square root (llvm.sqrt: vsqrtps/pd; NaN for x < 0). Numba's
#: math.sqrt calls the libm sqrtf/sqrt symbol instead, which LLVM may leave as a call.
sqrt = intrinsic(_unary_llvm("llvm.sqrt"))


def _host_has_fma():
    """Whether the code Numba generates here has a fused multiply-add instruction (the host
    CPU, or NUMBA_CPU_NAME/NUMBA_CPU_FEATURES when set): llvm.fma is one vfmadd there and a
    scalar libm call elsewhere, which would stop vectorization."""
    from numba.core import config
    if config.CPU_NAME:
        return "+fma" in (config.CPU_FEATURES or "").split(",")
    try:
        from llvmlite import binding as llvm
        return bool(llvm.get_host_cpu_features().get("fma"))
    except Exception:
        return False


#: two_prod uses one fused multiply-add instead of Dekker's splits (2 instructions, not 10).
HAS_FMA = _host_has_fma()


@intrinsic
def fma(typingctx, a, b, c):
    """a*b + c with one rounding (llvm.fma; only called where HAS_FMA)."""
    if a not in (types.float32, types.float64) or b != a or c != a:
        return None

    def codegen(context, builder, sig, args):
        lt = args[0].type
        fn = builder.module.declare_intrinsic("llvm.fma", [lt],
                                              ir.FunctionType(lt, [lt, lt, lt]))
        return builder.call(fn, args)
    return a(a, b, c), codegen


@intrinsic
def mul_rn(typingctx, a, b):
    """a*b rounded once, as a plain fmul without fast-math flags: LLVM may not contract it
    into an FMA with a later add (an error-free product needs p itself)."""
    if a not in (types.float32, types.float64) or b != a:
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])
    return a(a, b), codegen


@intrinsic
def copysign(typingctx, x, y):
    """Magnitude of x with the sign of y (llvm.copysign: two bit operations)."""
    if x not in (types.float32, types.float64) or y != x:
        return None

    def codegen(context, builder, sig, args):
        lt = args[0].type
        fn = builder.module.declare_intrinsic("llvm.copysign", [lt],
                                              ir.FunctionType(lt, [lt, lt]))
        return builder.call(fn, args)
    return x(x, y), codegen


# ------------------------------------------------------------------ exponent-field scaling
@vjit
def pow2i_f32(k):
    """2**k as float32 for integer k in [-126, 127], built in the exponent field."""
    return bits_f32((k + 127) << 23)


@vjit
def pow2i_f64(k):
    """2**k as float64 for integer k in [-1022, 1023]."""
    return bits_f64((k + 1023) << 52)


@vjit
def ldexp_f32(x, k):
    """x * 2**k for k in [-252, 254]; two factors so the result may overflow to inf or
    round once into the subnormals, as a true ldexp does."""
    h = k >> 1
    return x * pow2i_f32(h) * pow2i_f32(k - h)


@vjit
def ldexp_f64(x, k):
    """x * 2**k for k in [-2044, 2046] (see ldexp_f32)."""
    h = k >> 1
    return x * pow2i_f64(h) * pow2i_f64(k - h)


# -------------------------------------------------------------------- error-free arithmetic
@vjit
def two_sum(a, b):
    """s + e == a + b exactly, s = fl(a + b) (Knuth; no magnitude ordering needed)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


@vjit
def fast_two_sum(a, b):
    """s + e == a + b exactly when |a| >= |b| (Dekker)."""
    s = a + b
    return s, b - (s - a)


@vjit
def split_f64(a):
    """a == hi + lo with hi holding the top 26 significand bits (a mask, not a multiply,
    so FMA contraction cannot disturb it)."""
    hi = bits_f64(f64_bits(a) & np.int64(-134217728))  # clear the low 27 bits
    return hi, a - hi


@vjit
def split_f32(a):
    """a == hi + lo with hi holding the top 12 significand bits."""
    hi = bits_f32(f32_bits(a) & np.int32(-4096))
    return hi, a - hi


@vjit
def _two_prod_fma(a, b):
    """p + e == a * b exactly (barring underflow): e is the FMA's a*b - p."""
    p = mul_rn(a, b)
    return p, fma(a, b, -p)


@vjit
def _two_prod_dekker_f64(a, b):
    """p + e == a * b up to 2**-106 relative (Dekker's product on masked splits; exact
    except the lo*lo term, which is below the second word's own rounding)."""
    p = a * b
    ah, al = split_f64(a)
    bh, bl = split_f64(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


@vjit
def _two_prod_dekker_f32(a, b):
    """float32 version of _two_prod_dekker_f64."""
    p = a * b
    ah, al = split_f32(a)
    bh, bl = split_f32(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


#: p + e == a*b (p = fl(a*b)): FMA where the CPU has one, else Dekker's splits.
two_prod_f64 = _two_prod_fma if HAS_FMA else _two_prod_dekker_f64
two_prod_f32 = _two_prod_fma if HAS_FMA else _two_prod_dekker_f32


def residual(q, d, n):
    """n - q*d rounded once, for n close to q*d (a quotient's residual: n - q*d is then
    exact): one FMA, or Dekker's product where there is none."""
    raise NotImplementedError("numba only")


@overload(residual, inline="always")
def _residual(q, d, n):
    if HAS_FMA:
        return lambda q, d, n: fma(-q, d, n)
    tp = _two_prod_dekker_f32 if q == types.float32 else _two_prod_dekker_f64

    def impl(q, d, n):
        p, e = tp(q, d)
        return (n - p) - e
    return impl


@vjit
def div_dd_f32(nh, nl, dh, dl):
    """(nh + nl) / (dh + dl) to about 0.6 ULP: a quotient and one residual correction
    (nh - t*dh is exact through two_prod)."""
    d = dh + dl
    t = (nh + nl) / d
    p, pe = two_prod_f32(t, dh)
    return t + (((nh - p) - pe) + (nl - t * dl)) / d


@vjit
def div_dd_f64(nh, nl, dh, dl):
    """float64 version of div_dd_f32."""
    d = dh + dl
    t = (nh + nl) / d
    p, pe = two_prod_f64(t, dh)
    return t + (((nh - p) - pe) + (nl - t * dl)) / d


# ----------------------------------------------------------------------- constant helpers
def hi_lo(value, dtype, keep_bits=None):
    """Split a constant given as a decimal string (40+ digits) into dtype hi + lo.

    ``keep_bits`` truncates hi to that many significand bits so that hi times a small
    integer (or a masked number) is exact: the Cody-Waite and log-scaling constants."""
    import fractions
    v = fractions.Fraction(value)
    hi = dtype(float(v))
    if keep_bits is not None:
        nb = 24 if dtype is np.float32 else 53
        it = np.int32 if dtype is np.float32 else np.int64
        mask = it(-(1 << (nb - keep_bits)))
        hi = (np.array([hi], dtype).view(it) & mask).view(dtype)[0]
    lo = dtype(float(v - fractions.Fraction(float(hi))))
    return dtype(hi), lo


#: Constants to 45 digits.
LN2 = "0.693147180559945309417232121458176568075500134"
LOG2E = "1.44269504088896340735992468100189213742664595"
LOG10_2 = "0.301029995663981195213738894724493026768189881"
INV_LN10 = "0.434294481903251827651128918916605082294397006"
PI = "3.1415926535897932384626433832795028841971694"
PI_2 = "1.5707963267948966192313216916397514420985847"
PI_4 = "0.78539816339744830961566084581987572104929235"
