"""Fused kernels read and write float16/bfloat16 exactly as torch does, in vector code
(issue 9): conversions through fused jit against eager bit for bit, on the CPU with F16C,
on the CPU in software (``PRIMTRACE_SOFT_HALF=1``, a subprocess) and on the CUDA backend
under the simulator (a subprocess); the CPU kernels' LLVM IR and assembly (vector half
conversions, bfloat16 on 32-bit lanes); the CUDA kernels' PTX; and the rounding a store
makes redundant, dropped by the code generator."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import mathlib
from tests.numba.test_halfbits import encode_inputs, float64_inputs
from tests.numba.test_vmath import MIN_LANES32

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = {"f16": torch.float16, "bf16": torch.bfloat16}


class FuseAll(NumbaFusionExecutor):
    """Fuses every region it can, single torch calls too (no cost model): the kernels are
    tested."""

    def __init__(self):
        super().__init__(cost_model=False)


def _same(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Elementwise: same bits, or both NaN (NaN payloads differ between torch's own loops)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    return (got.view(ints) == want.view(ints)) | (got.isnan() & want.isnan())


def conversion_problems(kind: str, random: int) -> list[str]:
    """Every conversion a kernel makes for `kind`, fused, against eager; what differs.

    Decoding all 65536 patterns; encoding and rounding in registers over the values each
    rounding boundary meets plus `random` random patterns; float64 through float32; the
    other half dtype; a computed value stored."""
    dtype = KINDS[kind]
    other = torch.bfloat16 if dtype is torch.float16 else torch.float16
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    x = torch.from_numpy(encode_inputs(kind, random))
    x64 = torch.from_numpy(float64_inputs(kind))
    ordinary = torch.randn(4099).to(dtype)
    checks = {
        "decode": (lambda a: a.float(), (bits,)),
        "encode": (lambda a: a.to(dtype), (x,)),
        "round in registers": (lambda a: a.to(dtype).float(), (x,)),
        "float64 through float32": (lambda a: a.to(dtype), (x64,)),
        "to the other half dtype": (lambda a: a.to(other), (bits,)),
        "computed, stored": (lambda a, b: (a * b + a, a - b), (ordinary, ordinary.flip(0))),
    }
    ex = FuseAll()
    problems = []
    for name, (fn, args) in checks.items():
        jfn = primtrace.jit(fn, executors=[ex])
        got, want = jfn(*args), fn(*args)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        if not any(n.symbol.kind == "fused" for n in primtrace.last_trace(jfn).nodes):
            problems.append(f"{kind} {name}: not fused")
        for g, w in zip(got, want):
            same = _same(g, w)
            if not bool(same.all()):
                bad = (~same).nonzero()[:5, 0]
                problems.append(f"{kind} {name}: {int((~same).sum())} differ, e.g. "
                                f"{args[0][bad].tolist()} -> {g[bad].tolist()}, eager {w[bad].tolist()}")
    return problems


# --- exactness ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_kernels_convert_as_torch(kind):
    assert not conversion_problems(kind, 1 << 18)


SCRIPT = r'''
import json, sys, warnings
warnings.simplefilter("ignore")
from tests.numba.test_half_vectorized import conversion_problems
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.executors.numba.backends import mathlib
problems = [p for kind in ("f16", "bf16") for p in conversion_problems(kind, int(sys.argv[1]))]
print(json.dumps({"problems": problems, "hardware_f16": mathlib.HARDWARE_F16,
                  "backend": NumbaFusionExecutor().backend}))
'''


def _run(env: dict, random: int) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(random)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_cpu_kernels_in_software_convert_as_torch():
    """PRIMTRACE_SOFT_HALF=1: float16 in halfbits' integer code even where F16C exists."""
    report = _run({"PRIMTRACE_SOFT_HALF": "1"}, 1 << 16)
    assert report["hardware_f16"] is False and report["backend"] != "cuda"
    assert not report["problems"], "\n".join(report["problems"][:10])


def test_cuda_kernels_convert_as_torch_under_the_simulator():
    pytest.importorskip("numba.cuda")
    report = _run({"NUMBA_ENABLE_CUDASIM": "1", "PRIMTRACE_NUMBA_BACKEND": "cuda"}, 1 << 14)
    assert report["backend"] == "cuda"
    assert not report["problems"], "\n".join(report["problems"][:10])


# --- vector code (CPU) ---------------------------------------------------------------------------
def _kernel(fn, dtype, n):
    """The fused callable of fn on `n`-element `dtype` operands (square ones for 2)."""
    shape = (n,) if n < 4096 else (64, n // 64)
    args = [torch.randn(shape).to(dtype) for _ in range(fn.__code__.co_argcount)]
    jfn = primtrace.jit(fn, executors=[FuseAll()])
    jfn(*args)
    (node,) = [n for n in primtrace.last_trace(jfn).nodes if n.symbol.kind == "fused"]
    return node.symbol.impl


def _fresh(impl):
    """The kernel compiled again, uncached (Numba cannot show the code of cached kernels)."""
    from numba import njit
    k = impl.kernel
    fresh = njit(error_model="numpy", nogil=True,
                 parallel=impl.variant == "kernel_parallel")(k.py_func)
    fresh.compile(k.signatures[0])
    return fresh


def _kernel_ir(impl) -> str:
    """The LLVM IR of the kernel itself: kernel_serial, or kernel_parallel's parfor body."""
    k = _fresh(impl)
    ir = k.inspect_llvm(k.signatures[0])
    want = "numba_parfor_gufunc" if impl.variant == "kernel_parallel" else "kernel_serial"
    found = {m.group(1): m.group(0) for m in
             re.finditer(r'^define [^@]*@"?([\w.$]+)"?\(.*?^}', ir, re.S | re.M)
             if want in m.group(1) and not m.group(1).startswith(("_ZN7cpython", "cfunc"))}
    assert found, f"{want} not found in the IR"
    # the parfor body, or its __gufunc__ wrapper where LLVM inlined the body into it
    return next((body for name, body in found.items() if not name.startswith("__gufunc")),
                next(iter(found.values())))


def _asm(impl) -> str:
    k = _fresh(impl)
    return k.inspect_asm(k.signatures[0])


def _instructions(asm: str) -> set[str]:
    return set(re.findall(r"^\s+(v\w+)\s", asm, re.M))


def _lanes(body: str, elem: str, op: str) -> list[int]:
    return [int(n) for n in re.findall(rf"= {op}(?: [a-z]+)* <(\d+) x {elem}>", body)]


@pytest.mark.parametrize("n", [1 << 10, 1 << 20], ids=["serial", "parallel"])
def test_float16_loads_and_stores_vectorize(n):
    if not mathlib.HARDWARE_F16:
        pytest.skip("no F16C: software float16")
    impl = _kernel(lambda a, b: a * b + a, torch.float16, n)
    body = _kernel_ir(impl)
    calls = {c for c in re.findall(r'call [^@]*@"?([\w.$]+)', body) if not c.startswith("llvm.")}
    assert not calls, calls
    # LLVM may narrow float ops between conversions to half ops (exact for one + - * /),
    # which x86 without AVX512-FP16 computes through the same conversions
    halves = [int(n) for n in re.findall(r"<(\d+) x half>", body)]
    assert max(halves, default=0) >= MIN_LANES32, "no vector of halves"
    asm = _asm(impl)
    assert {"vcvtph2ps", "vcvtps2ph"} <= _instructions(asm)
    assert re.search(r"vcvtps2ph\s+\$\d+, %[yz]mm", asm), "vcvtps2ph on a full vector register"
    assert "__truncdfhf2" not in asm and "__truncsfhf2" not in asm


@pytest.mark.parametrize("n", [1 << 10, 1 << 20], ids=["serial", "parallel"])
def test_bfloat16_loads_and_stores_vectorize_on_32_bit_lanes(n):
    impl = _kernel(lambda a, b: a * b + a, torch.bfloat16, n)
    body = _kernel_ir(impl)
    calls = {c for c in re.findall(r'call [^@]*@"?([\w.$]+)', body) if not c.startswith("llvm.")}
    assert not calls, calls
    assert max(_lanes(body, "i32", "shl"), default=0) >= MIN_LANES32, "no vector bf16 load"
    assert max(_lanes(body, "i32", "lshr"), default=0) >= MIN_LANES32, "no vector bf16 store"
    assert not re.search(r"<\d+ x i64>", body), "64-bit lanes (Numba's integer widening)"
    ins = _instructions(_asm(impl))
    assert "vpbroadcastq" not in ins and "vpaddq" not in ins, "64-bit lanes in the assembly"


def test_float16_chain_with_float64_step_has_no_libcall():
    """float64 math between float16 load and store (double rounding, as torch): the
    float64 -> float32 -> float16 conversions stay two instructions, no __truncdfhf2."""
    if not mathlib.HARDWARE_F16:
        pytest.skip("no F16C: software float16")
    impl = _kernel(lambda a: a.double().exp().half(), torch.float16, 1 << 10)
    asm = _asm(impl)
    assert "hf2" not in asm
    assert {"vcvtpd2ps", "vcvtps2ph"} <= _instructions(asm)


@pytest.mark.filterwarnings("ignore")
def test_strided_float16_loads_take_the_integer_decode():
    """A transposed operand is loaded element by element: in integer code (F16C's scalar
    load chains iterations through a register); the contiguous one keeps F16C."""
    source = _kernel(lambda a, b: a.t() + b, torch.float16, 1 << 12).source
    kernel = source[source.index("def kernel_serial"):source.index("def kernel_parallel")]
    assert re.search(r"m\.f16_to_f32_strided\(in\d\[[^\]]*\* in\d_s\d\]\)", kernel), kernel
    assert re.search(r"m\.f16_to_f32\(in\d\[in\d_row \+ i1\]\)", kernel), kernel


# --- roundings the store makes redundant ---------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_value_only_stored_is_rounded_once(kind):
    """``a + b`` in half: the sum is converted by the store alone (rounding it to the half
    grid first, then storing, rounds twice, the second time for nothing)."""
    conv = {"f16": "m.f32_to_f16", "bf16": "m.f32_to_bf16"}[kind]
    source = _kernel(lambda a, b: a + b, KINDS[kind], 64).source
    assert re.search(rf"v0 = x0 \+ x1  # add\n\s+out0\[i0\] = {conv}\(v0\)\n", source)
    assert "m.round_" not in source


def test_a_value_used_again_keeps_its_rounding():
    """The rounded sum feeds the product too: it is rounded in a register (the product
    must see the float16 sum), and stored from there; the product is only stored."""
    source = _kernel(lambda a, b: (a + b, (a + b) * a), torch.float16, 64).source
    kernel = source[source.index("def kernel_serial"):source.index("def kernel_parallel")]
    assert kernel.count("m.round_f16(") == 1
    for line in ("v1 = m.round_f16(v0)", "v2 = v1 * x0", "out0[i0] = m.f32_to_f16(v1)",
                 "out1[i0] = m.f32_to_f16(v2)"):
        assert line in kernel, kernel


# --- CUDA PTX ---------------------------------------------------------------------------------
def _ptx(fn, dtype):
    from primtrace.executors.numba.backends import cuda as gpu
    args = [torch.randn(8).to(dtype) for _ in range(fn.__code__.co_argcount)]
    trace = primtrace.trace(fn, stage="optimized")(*args)
    (region,) = NumbaFusionExecutor(backend="cuda").partition(trace)
    return gpu.ptx(region, cc=(9, 0)), gpu.render_kernel(gpu.analyze(region))


def _ops(ptx: str) -> list[str]:
    return re.findall(r"^\s*(?:@%p\d+\s+)?([a-z]+[\w.]*)", ptx, re.M)


def test_cuda_float16_converts_with_cvt():
    pytest.importorskip("numba.cuda")
    ptx, source = _ptx(lambda a, b: a * b + a, torch.float16)
    ops = _ops(ptx)
    assert "cvt.f32.f16" in ops and "cvt.rn.f16.f32" in ops
    assert "float16(" in source and "round" not in source   # stored once, rounded by the store
    ptx, _ = _ptx(lambda a: a.exp().half(), torch.float64)     # float64 -> float32 -> float16
    ops = _ops(ptx)
    assert ops.index("cvt.rn.f32.f64") < ops.index("cvt.rn.f16.f32")


def test_cuda_bfloat16_converts_without_branches():
    """32-bit integer code and one select per conversion: the kernel has exactly the
    branches of its float32 twin (the grid-stride loop's), no 64-bit arithmetic beyond it."""
    pytest.importorskip("numba.cuda")
    ptx, source = _ptx(lambda a, b: a + b, torch.bfloat16)
    ptx32, _ = _ptx(lambda a, b: a + b, torch.float32)
    ops, ops32 = _ops(ptx), _ops(ptx32)
    assert "cl.bf16_to_f32(" in source and "cl.f32_to_bf16(" in source
    assert ops.count("bra") == ops32.count("bra")
    stores = sum(1 for o in ops if o.startswith("st.global"))      # one per unrolled copy
    assert ops.count("selp.b32") == ops.count("setp.nan.f32") == stores   # the NaN select
    wide = [o for o in ops if re.match(r"(add|and|or|shl|shr)\.[bsu]64", o)]
    wide32 = [o for o in ops32 if re.match(r"(add|and|or|shl|shr)\.[bsu]64", o)]
    assert len(wide) == len(wide32), "64-bit integer ops in the conversions"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_exp_takes_the_cheaper_exp_and_equals_eager_on_every_value(dtype):
    """exp on a half tensor is computed by exp_fast (lowering.HALF_RESULT): its extra float32
    error never survives the rounding to the half dtype."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    jexp = primtrace.jit(torch.exp)
    got, want = jexp(every), torch.exp(every)
    assert "exp_fast" in primtrace.kernel_source(jexp)
    same = (got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan())
    assert bool(same.all())


@pytest.mark.parametrize("fn", [lambda a: torch.floor(a), lambda a: torch.ceil(a),
                                lambda a: torch.trunc(a), lambda a: torch.round(a),
                                lambda a: torch.floor(a * 3)],
                         ids=["floor", "ceil", "trunc", "round", "floor(a*3)"])
def test_float16_rounding_to_integers_stays_vectorized_and_exact_on_every_value(fn):
    """float16 floor/ceil/trunc/round take the *_f16range variants (LLVM would narrow the
    float32 intrinsic to a scalar half libcall): equal to eager on all 65,536 inputs."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    jfn = primtrace.jit(fn)
    got, want = jfn(every), fn(every)
    assert "f16range" in primtrace.kernel_source(jfn)
    same = (got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan())
    assert bool(same.all())
    impl = _kernel(fn, torch.float16, 1 << 10)
    calls = set(re.findall(r'call [^@]*@"?([\w.$]+)', _kernel_ir(impl)))
    assert not {c for c in calls if "f16" in c}, calls   # no half intrinsic (scalar libcalls)
