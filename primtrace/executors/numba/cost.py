"""When one torch call is worth a kernel: the Numba executor's cost model on the CPU.

A region holding exactly the prims of one torch call (``a * 1.5``, ``F.gelu(x)``) saves no
memory pass when fused; the kernel pays only where it is faster than torch's own. Measured
with ``benchmarks/sweep.py --fuse-all`` (every call fused vs eager, 1 and 2 threads, 2^16 and
2^20 elements; the numbers are in docs/fusion.md):

- float32/float64: eager's loops are as fast as ours for arithmetic and erf (our kernel
  0.9-1.4x eager), so only the math ours computes faster fuses (exp 0.4x, tanh 0.2x, sin
  0.8x eager);
- float16/bfloat16: eager converts each element through float32 in scalar code where ours
  converts vectors, so one call fuses (0.5-0.7x eager), except where eager's own half math
  is faster than ours (f16 exp 1.4x, sin 1.35x; bf16 sin 1.8x, erf 1.6x; sigmoid and
  silu 1.05-1.2x);
- operands of several dtypes fuse (eager's casting loop does not vectorize), and so does any
  output of at least ``cpu.HUGE_OUTPUT_BYTES`` (eager takes thousands of page faults on a
  fresh 8 MiB output, ours asks for huge pages);
- below ``MIN_HALF_ELEMENTS`` a kernel's fixed cost (launch, output allocation) eats the
  saving: torch runs the call.
"""
from __future__ import annotations

import torch

from primtrace.executors.base import Region
from primtrace.ir.proxy import TensorProxy

#: prims ours computes faster than eager, per dtype of the call's result, for full-precision
#: floats: a call containing one fuses
FASTER_MATH = {"exp", "tanh", "sin", "cos"}
#: prims eager computes faster than ours on half dtypes: a call containing one runs in torch
SLOWER_HALF_MATH = {
    torch.float16: {"exp", "sin", "cos", "sigmoid"},
    torch.bfloat16: {"exp", "sin", "cos", "sigmoid", "erf"},
}
#: calls whose prims include faster math but whose eager kernel still wins (silu's exp feeds
#: 1 + e, where eager uses a cheaper 1-ULP exp)
SLOWER_CALLS = {"silu"}
#: half-dtype calls smaller than this run in torch (a + b, relu at 2^10-2^16, 1 thread:
#: the kernel breaks even at 2^14-2^15 elements)
MIN_HALF_ELEMENTS = 1 << 15


def fuse_single_call(region: Region, huge_output_bytes: int) -> bool:
    """Whether the Numba kernel for one torch call's region beats torch's own on the CPU."""
    tensors = [p for p in (*region.inputs, *region.outputs)
               if isinstance(p, TensorProxy) and p.ndim > 0]
    if len({p.dtype for p in tensors}) > 1:
        return True
    outputs = [p for p in region.outputs if isinstance(p, TensorProxy)]
    if sum(p.numel() * p.dtype.itemsize for p in outputs) >= huge_output_bytes:
        return True
    call = region.nodes[0].origin
    if call is not None and call.symbol.name in SLOWER_CALLS:
        return False
    prims = {n.symbol.name for n in region.nodes}
    dtype = outputs[0].dtype if outputs else None
    if dtype in SLOWER_HALF_MATH:
        return (not prims & SLOWER_HALF_MATH[dtype]
                and max(p.numel() for p in outputs) >= MIN_HALF_ELEMENTS)
    return bool(prims & FASTER_MATH)
