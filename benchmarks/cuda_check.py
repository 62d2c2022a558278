"""On a machine with a CUDA GPU: the fused kernels (elementwise and row reductions) through
primtrace.jit against eager, values and times. Prints one line per case.

    python benchmarks/cuda_check.py
"""
from __future__ import annotations

import time
import traceback

import torch
import torch.nn.functional as F

import primtrace

CASES = {
    "gelu(a + b)": (lambda a, b: F.gelu(a + b), 2),
    "silu(a) * b": (lambda a, b: F.silu(a) * b, 2),
    "2a + 3b": (lambda a, b: 2 * a + 3 * b, 2),
    "softmax(-1)": (lambda a: torch.softmax(a, -1), 1),
    "log_softmax(-1)": (lambda a: torch.log_softmax(a, -1), 1),
    "layer_norm": (lambda a: F.layer_norm(a, (a.shape[-1],)), 1),
    "rms_norm": (lambda a: F.rms_norm(a, (a.shape[-1],)), 1),
    "sum(-1)": (lambda a: a.sum(-1), 1),
    "gelu(layer_norm(a + b))": (lambda a, b: F.gelu(F.layer_norm(a + b, (a.shape[-1],))), 2),
}


def timed(fn, *args, reps=50):
    fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def main():
    print(torch.__version__, torch.cuda.get_device_name(0))
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for rows, cols in ((64, 1024), (8192, 1024)):
            for name, (fn, n) in CASES.items():
                args = [torch.randn(rows, cols, device="cuda", generator=g, dtype=dtype)
                        for _ in range(n)]
                try:
                    jfn = primtrace.jit(fn)
                    got, expected = jfn(*args), fn(*args)
                    exact = fn(*(a.double() for a in args))
                    err_ours = (got.double() - exact).abs().max().item()
                    err_eager = (expected.double() - exact).abs().max().item()
                    kernels = [n.symbol.name for n in primtrace.last_trace(jfn).nodes]
                    ratio = timed(jfn, *args) / timed(fn, *args)
                    print(f"{name:26s} {str(dtype)[6:]:9s} {rows}x{cols}: err ours {err_ours:.2e} "
                          f"eager {err_eager:.2e}; jit/eager {ratio:.2f}; {kernels}")
                except Exception:   # noqa: BLE001  (report and go on)
                    print(f"{name:26s} {str(dtype)[6:]:9s} {rows}x{cols}: FAILED")
                    traceback.print_exc(limit=3)


if __name__ == "__main__":
    main()
