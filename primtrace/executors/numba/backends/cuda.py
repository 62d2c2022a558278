"""CUDA backend: the same kernel body in a ``numba.cuda`` kernel with a grid-stride loop.

(In ``backends/``, not ``numba/cuda.py``: numba-cuda installs an import hook that redirects
every module whose name contains "numba.cuda", which ``primtrace.executors.numba.cuda``
would; ``primtrace.executors.numba.backends.cuda`` does not.)

Imported only when a CUDA tensor (or the simulator backend) is seen, so primtrace works on
machines without CUDA wheels. Tensors reach the kernel through ``__cuda_array_interface__``
as flat 1-D views of their memory (``as_strided((extent,), (1,))``, no copy) indexed with
64-bit offsets from their strides; bfloat16, which torch does not export, travels as int16
and is converted in registers (float16 uses Numba's float16; both compute in float32). A
0-dim CPU tensor or a Python number is a scalar argument; a 0-dim CUDA tensor is a load
with stride 0. Integer division by zero sets a flag the launcher checks (one sync, only
for regions that divide integers). Kernels run on torch's current stream.

Under ``NUMBA_ENABLE_CUDASIM=1`` (tests without a GPU) the launcher accepts CPU tensors
standing in for CUDA ones and hands the simulator NumPy views of them.
"""
from __future__ import annotations

import torch

from primtrace.executors.numba import kernel_body, kernel_cache, launch
from primtrace.executors.numba import plan as kernel_plan
from primtrace.executors.numba.ops import Backend
from primtrace.executors.numba.plan import Plan, Store, dtype_name
from primtrace.executors.numba.registers import DTYPES

THREADS = 256
MAX_BLOCKS = 8192


def _cuda():
    from numba import cuda
    return cuda


def simulator() -> bool:
    from numba import config
    return bool(config.ENABLE_CUDASIM)


def available() -> bool:
    """Whether CUDA kernels can run here (a GPU with Numba's CUDA target, or the simulator)."""
    try:
        cuda = _cuda()
    except ImportError:
        return False
    return simulator() or (torch.cuda.is_available() and cuda.is_available())


class CudaBackend(Backend):
    """The CUDA spellings: libdevice math as ``cl.<name>_<reg>`` (or the table's expression),
    float16 through Numba's float16 (cvt.f32.f16, cvt.rn.f16.f32), bfloat16 through
    libdevice.py's integer code, the GPU's float -> int conversion (as eager CUDA does), and
    no runtime loops: integer pow, gcd and lcm stay in torch."""
    name = "cuda"
    LOAD = {torch.float16: "float32({})", torch.bfloat16: "cl.bf16_to_f32({})"}
    STRIDED_LOAD = {}
    STORE = {torch.float16: "float16({})", torch.bfloat16: "cl.f32_to_bf16({})"}
    ROUND = {torch.float16: "float32(float16({}))", torch.bfloat16: "cl.round_bf16({})"}

    def call(self, fn, reg, dtype, args):
        if callable(fn.cuda):
            return fn.cuda(self, dtype, args)
        if fn.cuda is None or reg not in fn.regs:
            return None
        return f"{reg}(cl.{fn.name}_{reg}({', '.join(args)}))"   # the cast: the simulator computes in f64

    def float_to_int(self, dst, value):
        return f"{DTYPES[dst].reg}({value})"

    def int_helper(self, name):
        return None


BACKEND = CudaBackend()


# --- source ------------------------------------------------------------------------------------
_HEADER = '''\
"""primtrace fused kernel (generated; CUDA). Tensors arrive as flat 1-D views, scalars as numbers."""
import math

from numpy import bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16
from numba import cuda

from primtrace.executors.numba.backends import libdevice as cl
'''


def _params(plan: Plan) -> list[str]:
    k = len(plan.sizes)
    params = ["n"] + [f"n{d}" for d in range(1, k)]
    for op in kernel_body.memory_operands(plan):
        params.append(op.name)
        params += [name for name, _ in kernel_body.runtime_strides(op)]
    if plan.zero_division:
        params.append("err")
    params += [s.name for s in plan.scalars]
    return params


def render_kernel(plan: Plan) -> str:
    k = len(plan.sizes)
    idx = [f"i{d}" for d in range(k)]
    body = ["zero_div = 0"]
    body += kernel_body.body(plan, BACKEND, lambda op: "0", invariant=True)
    body += kernel_body.zero_division_lines(plan, invariant=True)
    body.append("i = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)")
    body.append("step = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)")
    body.append("while i < n:")
    inner = []
    if k == 1:
        inner.append("i0 = i")
    else:
        inner.append("rest = i")
        for d in range(k - 1, 0, -1):
            inner.append(f"i{d} = rest % n{d}")
            inner.append(f"rest = rest // n{d}")
        inner.append("i0 = rest")

    def offset(op):
        return " + ".join(kernel_body.stride_terms(op, idx)) or "0"
    inner += kernel_body.body(plan, BACKEND, offset, invariant=False)
    inner += kernel_body.zero_division_lines(plan, invariant=False)
    inner += kernel_body.store_lines(plan, BACKEND, offset)
    inner.append("i += step")
    body += ["    " + line for line in inner]
    if plan.zero_division:
        body += ["if zero_div != 0:", "    err[0] = 1"]
    lines = [f"def kernel({', '.join(_params(plan))}):"] + ["    " + line for line in body]
    return _HEADER + "\n\n" + "\n".join(lines) + "\n"


# --- launching ------------------------------------------------------------------------------------
def _flat(t: torch.Tensor, extent: int):
    """A flat view of `t`'s memory from its first element (bf16 as int16)."""
    if t.dtype is torch.bfloat16:
        t = t.view(torch.int16)
    v = t.as_strided((extent,), (1,))
    return v.numpy() if simulator() else v


_streams: dict = {}


def _stream():
    """Numba's handle on torch's current stream (cached per stream)."""
    s = torch.cuda.current_stream()
    handle = _streams.get(s.cuda_stream)
    if handle is None:
        handle = _streams[s.cuda_stream] = _cuda().external_stream(s.cuda_stream)
    return handle


def launch_config(numel: int) -> tuple[int, int]:
    if simulator():
        return 1, 8          # a few simulated threads still walk the grid-stride loop
    return max(1, min(-(-numel // THREADS), MAX_BLOCKS)), THREADS


def launcher_source(plan: Plan, region, fn_name: str) -> tuple[str, dict]:
    nin = len(region.inputs)
    env = {"torch": torch, "empty_strided": torch.empty_strided, "flat": _flat}
    lines = [f"def {fn_name}({', '.join(f'i{j}' for j in range(nin))}):"]
    lines += launch.lazy_bit_lines(region, env)
    lines += launch.alias_check_lines(plan, region, env)   # in-place writes vs aliases
    for s in plan.stores:
        if s.into_input is None:
            p = region.outputs[s.output]
            lines.append(f"    o{s.output} = empty_strided({tuple(p.shape)!r}, {tuple(p.stride())!r}, "
                         f"dtype=torch.{dtype_name(p.dtype)}, device={str(p.device)!r})")
    if plan.numel > 0:
        call = [str(plan.numel)] + [str(n) for n in plan.sizes[1:]]
        for op in kernel_body.memory_operands(plan):
            if isinstance(op, Store):
                j = op.into_input
                tensor, proxy = (f"o{op.output}", region.outputs[op.output]) if j is None else \
                    (f"i{j}", region.inputs[j])
            else:
                tensor, proxy = f"i{op.index}", op.proxy
            call.append(f"flat({tensor}, {launch.extent_bytes(proxy) // proxy.dtype.itemsize})")
            call += [str(v) for _, v in kernel_body.runtime_strides(op)]
        if plan.zero_division:
            lines.append("    err = flag()")
            env["flag"] = _flag
            call.append("err")
        call += launch.scalar_args(plan.scalars, region, env)
        blocks, threads = launch_config(plan.numel)
        config = f"{blocks}, {threads}" + ("" if simulator() else ", stream()")
        env["stream"] = _stream
        lines.append(f"    kernel[{config}]({', '.join(call)})")
        if plan.zero_division:
            lines.append("    if err[0] != 0:")
            lines.append('        raise RuntimeError("ZeroDivisionError")')
    lines.append(f"    return {launch.returns_text(plan)}")
    return "\n".join(lines), env


def _flag():
    if simulator():
        import numpy as np
        return np.zeros(1, dtype=np.int32)
    return _cuda().to_device(__import__("numpy").zeros(1, dtype="int32"))


def analyze(region) -> Plan:
    """`region`'s plan for the CUDA backend."""
    return kernel_plan.analyze(region, BACKEND)


def compile_region(region, fn_name: str = "numba_fusion", plan: Plan | None = None):
    """The callable running `region` on CUDA tensors (`plan`: its plan for this backend,
    made here if not given); carries ``.source``."""
    plan = plan or analyze(region)
    source = render_kernel(plan)
    launcher, env = launcher_source(plan, region, fn_name)
    if plan.numel > 0:
        key, module = kernel_cache.load_module(source, "cuda-sim" if simulator() else "cuda")
        env["kernel"] = kernel_cache.compiled(key, module, "kernel", lambda f: _cuda().jit(
            cache=not simulator())(f))
    exec(compile(launcher, f"<primtrace {fn_name}>", "exec"), env)
    fn = env[fn_name]
    fn.source = describe(plan, region) + "\n" + launcher + "\n\n" + source
    fn.plan = plan
    fn.kernel_source = source
    return fn


def describe(plan: Plan, region) -> str:
    """The comment heading a CUDA kernel's source: the region and its operand map."""
    head = [f"# {len(region.nodes)} prims fused; iteration shape {list(plan.shape)}, "
            f"coalesced to {list(plan.sizes)}; CUDA grid-stride kernel"]
    head += [f"#   {line}" for line in plan.signature_text().splitlines()]
    return "\n".join(head)


def ptx(region, cc=(9, 0), plan: Plan | None = None) -> str:
    """The PTX of `region`'s kernel (no GPU needed): for tests that inspect the code."""
    from numba import types
    plan = plan or analyze(region)
    source = render_kernel(plan)
    key, module = kernel_cache.load_module(source, "cuda")
    argtypes = []
    for name in _params(plan):
        op = next((o for o in kernel_body.memory_operands(plan) if o.name == name), None)
        scalar = next((s for s in plan.scalars if s.name == name), None)
        if op is not None:
            argtypes.append(types.Array(_numba_storage(op.dtype), 1, "C"))
        elif name == "err":
            argtypes.append(types.Array(types.int32, 1, "C"))
        elif scalar is not None:
            argtypes.append({bool: types.boolean, int: types.int64, float: types.float64}[scalar.python_type])
        else:
            argtypes.append(types.int64)
    code, _ = _cuda().compile_ptx(module.kernel, tuple(argtypes), cc=cc)
    return code


def _numba_storage(dtype):
    from numba import types
    return {torch.bool: types.boolean, torch.uint8: types.uint8, torch.int8: types.int8,
            torch.int16: types.int16, torch.int32: types.int32, torch.int64: types.int64,
            torch.float16: types.float16, torch.bfloat16: types.int16,
            torch.float32: types.float32, torch.float64: types.float64}[dtype]
