"""Building blocks for the vectorizable math functions: the jit decorator, bit casts,
exponent-field scaling, error-free arithmetic, polynomials, and ``Floats``, the per-dtype
object every function is written once over.

Everything here lowers to straight-line LLVM IR (arithmetic, compares, selects, bit
casts), so a loop that calls it stays vectorizable. Rules the vmath modules follow:

* each function is written once, in a factory taking a ``Floats`` (float32 or float64)
  and returning the jitted function for that dtype; what the factory reads from it (the
  float type, bit masks, coefficients, thresholds) is a compile-time constant of the
  closure. Hand-written float32/float64 twins only where the algorithms differ (float32
  steps computed in float64, say), each saying so;
* float32 code uses only float32 constants (a Python float literal would promote the
  expression to float64): ``F(1.0)`` with ``F`` the dtype's type, or the helpers below;
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

import copy

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
def float_bits(typingctx, x):
    """float32 -> its int32 bit pattern, float64 -> its int64 one (a register bit cast)."""
    if x not in (types.float32, types.float64):
        return None
    it = types.int32 if x == types.float32 else types.int64

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(it.bitwidth))
    return it(x), codegen


def _bits_to(ft, lt):
    """An intrinsic: integer (its low ft.bitwidth bits) -> the ft float with that bit
    pattern (wider integers truncated, narrower ones sign-extended)."""
    width = ft.bitwidth

    def bits_to(typingctx, i):
        if not isinstance(i, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = args[0]
            if v.type.width > width:
                v = builder.trunc(v, ir.IntType(width))
            elif v.type.width < width:
                v = builder.sext(v, ir.IntType(width))
            return builder.bitcast(v, lt)
        return ft(i), codegen
    return intrinsic(bits_to)


bits_f32 = _bits_to(types.float32, ir.FloatType())
bits_f64 = _bits_to(types.float64, ir.DoubleType())


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
def _two_prod_fma(a, b):
    """p + e == a * b exactly (barring underflow): e is the FMA's a*b - p."""
    p = mul_rn(a, b)
    return p, fma(a, b, -p)


def residual(q, d, n):
    """n - q*d rounded once, for n close to q*d (a quotient's residual: n - q*d is then
    exact): one FMA, or Dekker's product where there is none."""
    raise NotImplementedError("numba only")


@overload(residual, inline="always")
def _residual(q, d, n):
    if HAS_FMA:
        return lambda q, d, n: fma(-q, d, n)
    tp = (FLOAT32 if q == types.float32 else FLOAT64).two_prod_dekker

    def impl(q, d, n):
        p, e = tp(q, d)
        return (n - p) - e
    return impl


# ---------------------------------------------------------------------------- polynomials
def horner(coeffs):
    """The polynomial c[0] + x*(c[1] + x*(... + x*c[n-1])) as a jitted function of x,
    written out (straight-line code, no loop) with the coefficients as constants of their
    own dtype."""
    c = tuple(coeffs)
    expr = f"c[{len(c) - 1}]"
    for i in range(len(c) - 2, -1, -1):
        expr = f"c[{i}] + x * ({expr})"
    namespace = {"c": c}
    exec(f"def horner(x):\n    return {expr}\n", namespace)
    return vjit(namespace["horner"])


# --------------------------------------------------------------------------- per dtype
class Floats:
    """One float dtype as the vmath factories see it: its NumPy float and int types, its
    bit layout and the core helpers made for it. Factories read it in Python, so what the
    functions they make use of it is a compile-time constant; modules add their own
    constants with ``with_``."""

    def __init__(self, F, I, mant, split_bits, bits_to):
        self.F, self.I = F, I
        self.tag = "f32" if F is F32 else "f64"          # the suffix of public names
        self.name = np.dtype(F).name
        self.mant = mant                                  # significand bits stored
        self.bias = (1 << (8 * np.dtype(F).itemsize - mant - 2)) - 1
        self.emin = 1 - self.bias                         # smallest normal exponent
        self.bits_to = bits_to                            # integer -> float bit cast
        self.split_mask = I(-(1 << split_bits))           # split's hi: clear these bits
        self.pow2i = self._pow2i()
        self.ldexp = self._ldexp()
        self.split = self._split()
        self.two_prod_dekker = self._two_prod_dekker()
        #: p + e == a*b (p = fl(a*b)): FMA where the CPU has one, else Dekker's splits.
        self.two_prod = _two_prod_fma if HAS_FMA else self.two_prod_dekker
        self.div_dd = self._div_dd()

    def pick(self, for_f32, for_f64):
        """The value for this dtype of a (float32, float64) pair."""
        return for_f32 if self.F is F32 else for_f64

    def coeffs(self, name):
        """Coefficient array ``name`` of vmath.coeffs for this dtype (``EXP`` -> EXP_F32)."""
        from primtrace.executors.numba.vmath import coeffs
        return getattr(coeffs, f"{name}_{self.tag.upper()}")

    def with_(self, **fields):
        """A copy with more fields (a module's constants for this dtype)."""
        k = copy.copy(self)
        k.__dict__.update(fields)
        return k

    def _pow2i(self):
        bits_to, bias, mant = self.bits_to, self.bias, self.mant

        @vjit
        def pow2i(k):
            """2**k for integer k in [emin, emax], built in the exponent field."""
            return bits_to((k + bias) << mant)
        return pow2i

    def _ldexp(self):
        pow2i = self.pow2i

        @vjit
        def ldexp(x, k):
            """x * 2**k for k in [2*emin, 2*emax]; two factors so the result may overflow
            to inf or round once into the subnormals, as a true ldexp does."""
            h = k >> 1
            return x * pow2i(h) * pow2i(k - h)
        return ldexp

    def _split(self):
        bits_to, mask = self.bits_to, self.split_mask

        @vjit
        def split(a):
            """a == hi + lo with hi holding the top 12 (float32) / 26 (float64) significand
            bits (a mask, not a multiply, so FMA contraction cannot disturb it)."""
            hi = bits_to(float_bits(a) & mask)
            return hi, a - hi
        return split

    def _two_prod_dekker(self):
        split = self.split

        @vjit
        def two_prod_dekker(a, b):
            """p + e == a * b up to 2**-2p relative (Dekker's product on masked splits;
            exact except the lo*lo term, which is below the second word's own rounding)."""
            p = a * b
            ah, al = split(a)
            bh, bl = split(b)
            e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
            return p, e
        return two_prod_dekker

    def _div_dd(self):
        two_prod = self.two_prod

        @vjit
        def div_dd(nh, nl, dh, dl):
            """(nh + nl) / (dh + dl) to about 0.6 ULP: a quotient and one residual
            correction (nh - t*dh is exact through two_prod)."""
            d = dh + dl
            t = (nh + nl) / d
            p, pe = two_prod(t, dh)
            return t + (((nh - p) - pe) + (nl - t * dl)) / d
        return div_dd


FLOAT32 = Floats(F32, np.int32, 23, 12, bits_f32)
FLOAT64 = Floats(F64, np.int64, 52, 27, bits_f64)
#: What each vmath module builds its functions for.
DTYPES = (FLOAT32, FLOAT64)


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
