"""When one torch call is worth a kernel: the Numba executor's cost model on the CPU.

A region holding exactly the prims of one torch call (``a * 1.5``, ``F.gelu(x)``) saves no
memory pass when fused; the kernel pays only where it is faster than torch's own. Measured
with ``benchmarks/single_ops.py`` (65 single ops fused vs eager) and ``benchmarks/sweep.py
--fuse-all`` (ops and short chains), 1 and 2 threads, 2^16 and 2^20 elements:

- float32/float64: eager's loops are as fast as ours for arithmetic (our kernel 0.9-1.4x
  eager), so only the math ours computes faster fuses (FASTER_MATH), except calls eager has
  a kernel of its own for (SLOWER_CALLS);
- float16/bfloat16: eager converts each element through float32 in scalar code where ours
  converts vectors, so one call fuses (0.5-0.7x eager), except where eager's own half math
  is faster than ours (SLOWER_HALF_MATH, SLOWER_CALLS_HALF);
- a few prims are slower in our kernels than in eager's even inside a chain (SLOW_PRIMS):
  they are not fused at all;
- operands of several dtypes fuse (eager's casting loop does not vectorize), and so does any
  output of at least ``HUGE_OUTPUT_BYTES`` when huge pages are on (``PRIMTRACE_HUGE_PAGES=1``:
  eager takes thousands of page faults on a fresh 8 MiB output, ours a few);
- below ``MIN_HALF_ELEMENTS`` a kernel's fixed cost (launch, output allocation) eats the
  saving: torch runs the call.
"""
from __future__ import annotations


import torch

from primtrace.executors.base import Region
from primtrace.executors.numba.backends import cpu
from primtrace.executors.numba.symbolic_sizes import hint, hint_numel
from primtrace.ir.proxy import TensorProxy
from primtrace.ir.tree import proxies_in

#: prims our CPU kernels compute several times slower than eager, alone or in a chain (their
#: scalar libm calls stop the loop's vectorization; at 2^20, 1 thread: fmod 4.4-6.1x,
#: remainder 3.8-4.9x, hypot 2.8-15x, lgamma 5.5-9x eager): float ones are left to torch
SLOW_PRIMS = {"fmod", "remainder", "hypot", "lgamma"}
#: prims ours computes faster than eager in float32/float64 (at 2^16-2^20: exp 0.4x, tanh
#: 0.2x, sin 0.8x, sqrt 0.25x, log 0.45x, atan/asin 0.05-0.13x, comparisons 0.1-0.3x eager): a
#: call containing one fuses. Not erf: torch.erf is 5x slower than ours, but F.gelu's own
#: float32 kernel beats ours (1.06-1.3x) from ~2^14 elements (GELU_FUSES below)
FASTER_MATH = {"exp", "expm1", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tan",
               "atan", "asin", "acos", "sinh", "cosh", "tanh", "erfc", "trunc", "isnan",
               "eq", "ne", "lt", "le", "gt", "ge", "copysign"}
#: prims eager computes faster than ours on half dtypes (its own vector code: bit operations
#: for neg/abs/copysign, SLEEF for exp/log; 1.05-1.8x at 2^16-2^20): a call containing one
#: runs in torch. Not sin, cos: float16 ones take sin_half (float32 arithmetic), bfloat16
#: ones sin_near, fused 0.34-0.5x (float16) and 0.72-0.81x (bfloat16) eager at 2^16-2^20
_HALF_SLOWER = {"exp", "exp2", "log", "log2", "sigmoid", "reciprocal", "neg", "abs",
                "copysign"}
SLOWER_HALF_MATH = {
    torch.float16: _HALF_SLOWER | {"floor", "ceil", "trunc", "round"},   # 1.07x, f16range
    torch.bfloat16: _HALF_SLOWER,   # (not erf: torch.erf is 0.7x fused; F.gelu see below)
}
#: a call reading an operand strided along the inner dim (``a.t() + b``) fuses only from this
#: many elements: the kernel walks such operands in tiles (cpu.TILE_ROWS x TILE_COLS), and
#: measured 0.51-0.85x eager from 2^20 elements in f32/f16/bf16 (0.56-0.66x at 2^24), but
#: 0.95-1.38x at 2^16-2^19 (bfloat16 worst), where its scalar strided loads cost more than
#: eager's loop; float16 calls in a chain stay eager's below it too (1.18-1.22x at 2^16)
TILED_MIN_ELEMENTS = 1 << 20
#: calls with a kernel of their own in eager that beats ours whatever their prims say
#: (silu 1.1-1.3x, hardswish 1.2-1.4x, square 1.2x in bfloat16)
SLOWER_CALLS = {"silu"}
SLOWER_CALLS_HALF = {"silu", "hardswish", "square"}
#: half-dtype calls smaller than this run in torch (a + b, relu at 2^10-2^16, 1 thread:
#: the kernel breaks even at 2^14-2^15 elements)
MIN_HALF_ELEMENTS = 1 << 15


#: F.gelu (its erf form) alone, by dtype: (fewest, most) elements where our kernel beats
#: eager's. Eager's float32 call has a fixed cost of ~7 us (64 elements: 8.1 us, ours 2.5;
#: 1024: 8.7 vs 4.1; 4096: 8.1 vs 6.9; 16384: 11.4 vs 12.8, 2 threads); its float64 one is
#: scalar (256: 5.6 vs 3.2 us; 4096: 75 vs 18; 2^20: 9.6 vs 1.7 ms) but cheaper at 64
#: elements (3.2 vs 4.6). float16 has no such fixed cost (1024: 1.8 vs 4.1 us)
GELU_FUSES = {torch.float32: (1, 1 << 11), torch.float64: (1 << 8, None)}
#: ... where its input dies there in memory of its own (a Linear's output: our kernel writes
#: into it, eager's gelu_ too): a linear then gelu, 2 threads, 16K f32 elements 41.8 us
#: against 45.3, 32K 60.4 against 68.0, 128K 221 against 217 (even)
GELU_INTO_DEAD = {torch.float32: (1, 1 << 16)}


#: calls eager computes so much faster on a dtype that fusing them into a chain still loses
#: (F.gelu's own bfloat16 kernel vs ours with a float32 erf: 1.7x; gelu(a + b) fused 1.17x
#: eager at 2^20): (call, prim) per dtype; such a call runs whole in torch
CALLS_LEFT_TO_TORCH = {torch.bfloat16: {("gelu", "erf")}}


#: row kernels (reductions, reduction_plan.py), measured with benchmarks/reductions.py and
#: a scan of softmax, layer_norm, rms_norm and sum over (8..8192) x (64..8192) rows, one
#: thread each: rms_norm wins from the smallest sizes (0.3-0.9x eager; a lone layer_norm
#: does not, see fuse_row_call), softmax from ~2^15
#: elements (16x1024: 1.02x, 256x256: 0.79x, 4096x1024: 0.68x), a plain float32 sum is a
#: wash (0.95-1.3x: eager's is as fast) and a half one wins from ~2^16 (0.63-0.86x)
PLAIN_REDUCTION_CALLS = {"sum", "mean", "prod", "amax", "amin", "max", "min", "nansum"}
MIN_ROW_ELEMENTS = 1 << 15
MIN_PLAIN_HALF_ELEMENTS = 1 << 16
#: a row kernel runs its rows in parallel: fewer rows than this (x.sum() is one) leave
#: threads idle where eager splits the row; above a few thousand elements torch runs it
MIN_ROWS = 8
SMALL_ELEMENTS = 1 << 12


def slow_on_cpu(name: str, dtype) -> bool:
    """Whether prim `name` on `dtype` runs slower in our CPU kernels than in eager's."""
    return name in SLOW_PRIMS and dtype.is_floating_point


def _numel(p) -> int:
    """Elements of `p` (at the trace's hints where sizes are symbolic: speed decisions)."""
    return hint_numel(p.shape)


def _bytes(tensors) -> int:
    return sum(_numel(p) * p.dtype.itemsize for p in tensors)


def fuse_single_call(region: Region) -> bool:
    """Whether the Numba kernel for one torch call's region beats torch's own on the CPU."""
    from primtrace.executors.numba.reduction_plan import is_column
    if _reduction_inputs(region.nodes):
        return fuse_row_call(region)
    if any(map(is_column, region.nodes)):
        return False   # x.sum(0) alone: eager's sum across rows is as fast
    tensors = [p for p in (*region.inputs, *region.outputs)
               if isinstance(p, TensorProxy) and p.ndim > 0]
    if len({p.dtype for p in tensors}) > 1:
        return True
    outputs = [p for p in region.outputs if isinstance(p, TensorProxy)]
    call = region.nodes[0].origin
    name = call.symbol.name if call is not None else None
    dtype = outputs[0].dtype if outputs else None
    if dtype in SLOWER_HALF_MATH and name in SLOWER_CALLS_HALF:
        return False     # slower even with huge pages (silu in float16 at 2^24: 1.14x eager)
    if cpu.advised(_bytes(outputs)):
        return True
    prims = {n.symbol.name for n in region.nodes}
    if outputs and any(_strided_inner(p, outputs[0]) for p in region.inputs):   # tiled
        return (max(_numel(p) for p in outputs) >= TILED_MIN_ELEMENTS and name not in SLOWER_CALLS
                and not prims & SLOWER_HALF_MATH.get(dtype, set()))
    if name == "gelu" and "erf" in prims and dtype in GELU_FUSES:
        fewest, most = GELU_FUSES[dtype]
        if region.dying and dtype in GELU_INTO_DEAD:   # written in place: no new buffer
            fewest, most = GELU_INTO_DEAD[dtype]
        n = max(_numel(p) for p in outputs)
        return n >= fewest and (most is None or n <= most)
    if dtype in SLOWER_HALF_MATH:
        return (not prims & SLOWER_HALF_MATH[dtype]
                and max(_numel(p) for p in outputs) >= MIN_HALF_ELEMENTS)
    return name not in SLOWER_CALLS and bool(prims & FASTER_MATH)


#: a call's prims that run in torch are "small" beside the ones that fuse when their outputs
#: hold at most this fraction of the elements of the largest fused output
SMALL_FRACTION = 1 / 16


def small_beside(left, fused) -> bool:
    """Whether the prims `left` to torch do little work beside the `fused` ones of one call:
    then the call runs as its prims (its fused part as a kernel) instead of whole in torch
    (cross_entropy over (4096, 8192) f32: a 4096-element gather and a row kernel writing one
    loss per row, 0.15-0.19x eager, where the whole call is 1.0x)."""
    def largest(nodes):
        return max((_numel(p) for n in nodes for p in n.output_proxies
                    if isinstance(p, TensorProxy)), default=0)
    from primtrace.executors.numba.reduction_plan import is_reduction
    if any(is_reduction(n) for n in left):   # small output, but it reads its whole input
        return False
    return bool(fused) and largest(left) <= SMALL_FRACTION * largest(fused)


def call_left_to_torch(nodes, fused=None) -> bool:
    """Whether the prims `nodes` of one torch call run faster as that call, even in a chain
    (`fused`: those of them a kernel would run; all where not given)."""
    if not reductions_fuse(nodes, fused):
        return True
    call = nodes[0].origin
    outputs = [p for p in proxies_in(call.outputs) if isinstance(p, TensorProxy)]
    dtype = outputs[0].dtype if outputs else None
    kept = CALLS_LEFT_TO_TORCH.get(dtype, ())
    if any((call.symbol.name, n.symbol.name) in kept for n in nodes):
        return True
    return (dtype is torch.float16
            and any(_strided_inner(p, outputs[0]) for p in proxies_in(call.args))
            and max((_numel(p) for p in outputs), default=0) < TILED_MIN_ELEMENTS
            and not cpu.advised(_bytes(outputs)))


def unfused_in_eager(nodes) -> bool:
    """Whether eager runs the call of `nodes` as the same library calls and loose
    elementwise passes its prims are: then its prims run, the library ones in torch and the
    rest fused, though the library calls are most of the work (attention where eager takes
    its math path: the mask and softmax as one row kernel between the two matmuls)."""
    call = nodes[0].origin
    if call is None or call.call is None:
        return False
    fn, args, kwargs = call.call
    if fn is torch.nn.functional.scaled_dot_product_attention:
        from primtrace.prims.attention import runs_math
        return runs_math(args, kwargs)
    return False


def _strided_inner(p, out) -> bool:
    """Whether operand `p` is read with a stride along the dim the kernel's inner loop walks
    (the output's unit-stride dim; ``a.t() + b``): each element is a scalar load (a 16-bit
    load and decode in half dtypes). A channels-last operand of a channels-last output is
    not: the loop walks its channels."""
    if not (isinstance(p, TensorProxy) and isinstance(out, TensorProxy)) or p.ndim > out.ndim:
        return False
    dims = [d for d in range(out.ndim) if hint(out.shape[d]) > 1]
    if not dims:
        return False
    inner = min(dims, key=lambda d: (out.stride()[d], -d))
    d = inner - (out.ndim - p.ndim)   # broadcasting aligns trailing dims
    return d >= 0 and hint(p.shape[d]) > 1 and p.stride()[d] not in (0, 1)


def _reduction_inputs(nodes):
    """(input, dims, correction) of the row reductions among `nodes` (column sums aside:
    they are judged with their region)."""
    from primtrace.executors.numba.reduction_plan import is_column, is_reduction, reduction_args
    return [reduction_args(n) for n in nodes if is_reduction(n) and not is_column(n)]


#: calls whose CPU kernel reads a contiguous copy of an input strided along the reduced
#: dim, as our row kernel does (at::layer_norm's X.contiguous(), host_softmax's): no reason
#: to leave them whole to torch (Whisper's residual stream is transposed by its conv stem)
COPYING_ROW_CALLS = {"layer_norm", "softmax", "log_softmax"}


def reductions_fuse(nodes, fused=None) -> bool:
    """Whether the reductions among one call's prims `nodes` may run in a row kernel: each
    has enough rows to share among threads (or is small), and no tensor the call reads is
    strided along the reduced innermost dim. Such a tensor a row kernel reads from a
    contiguous copy (read in place, one element a cache line: 15-50x eager), and the copy
    (a transpose) costs more than eager's sum or layer_norm, which reduce across rows
    (xt.sum(-1) 4096x1024: 12x eager with the copy); softmax copies too. In a longer
    region (masked scores, then softmax) the copy is still made: the region's other
    prims fused are worth it. Only what the kernel would read counts (`fused`: attention's
    transposed key is the matmul's, not the softmax's)."""
    reductions = _reduction_inputs(nodes)
    if not reductions:
        return True
    for a, dims, _ in reductions:
        rows = hint_numel(a.shape[:a.ndim - len(dims)])
        if rows < MIN_ROWS and _numel(a) > SMALL_ELEMENTS:
            return False
    call = nodes[0].origin
    if call is not None and call.symbol.name in COPYING_ROW_CALLS:
        return True   # eager reads a contiguous copy too
    produced = {p.name for n in nodes for p in n.output_proxies}
    for n in nodes if fused is None else fused:
        for p in n.inputs:
            if (isinstance(p, TensorProxy) and p.name not in produced and p.ndim > 0
                    and hint(p.shape[-1]) > 1 and p.stride()[-1] != 1):
                return False
    return True


def fuse_row_call(region: Region) -> bool:
    """Whether the row kernel of one torch call with reductions beats eager's call."""
    call = region.nodes[0].origin
    name = call.symbol.name if call is not None else None
    sizes = [_numel(a) for a, _, _ in _reduction_inputs(region.nodes)]
    numel = max(sizes, default=0)
    if name == "rms_norm":
        return True
    if name == "layer_norm":
        # ours reads the row three times (mean, variance, output) where eager's Welford
        # kernel reads it twice: a lone call measured 1.1-1.6x eager in float32, 1.3-2.0x in
        # bfloat16 (2026-11-29, AVX512 EPYC), so it runs whole in torch; a layer_norm in a
        # longer region (a residual add before it, GELU after) still fuses
        return False
    if name in PLAIN_REDUCTION_CALLS:
        dtype = _reduction_inputs(region.nodes)[0][0].dtype
        return dtype in (torch.float16, torch.bfloat16) and numel >= MIN_PLAIN_HALF_ELEMENTS
    return numel >= MIN_ROW_ELEMENTS


#: on a GPU, prims with outputs smaller than this run in torch: a numba.cuda launch from
#: Python costs ~0.1-0.2 ms of CPU time, more than fusion saves below ~2^26 elements.
#: Measured on an H200 (2026-11-28, torch 2.11, numba-cuda 0.30.4; README "On a GPU"),
#: fused / eager as latency | throughput: f32 at 2^26 2a + 3b 0.75 | 0.51, gelu(a + b)
#: 1.38 | 0.77, silu(a) * b 1.61 | 0.96; bf16/f16 at 2^26 1.24-2.34 | 0.77-1.65, so half
#: dtypes do not fuse; at 2^23 every case 2.2-8.6 | 2.1-11.7
CUDA_MIN_ELEMENTS = 1 << 26


def fuse_on_gpu(node) -> bool:
    """Whether a prim on a CUDA tensor may join a fused kernel. Never a reduction: the row
    kernels (one block per row) measured 2.1-5.9x eager's softmax, layer_norm and sums on an
    H200 at 65536 x 1024, f32, bf16 and f16; elementwise prims from CUDA_MIN_ELEMENTS on."""
    from primtrace.executors.numba.reduction_plan import is_reduction
    if is_reduction(node):
        return False
    tensors = [p for p in node.output_proxies if isinstance(p, TensorProxy)]
    if any(p.dtype in (torch.float16, torch.bfloat16) for p in tensors):
        return False
    return max((_numel(p) for p in tensors), default=0) >= CUDA_MIN_ELEMENTS
