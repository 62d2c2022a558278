"""On a machine with a CUDA GPU: the fused kernels (elementwise and row reductions) and
fused training steps through primtrace.jit against eager (and torch.compile with
``--compile``), values and times. Prints one line per case; times are medians of CUDA-event
timed calls after warm-up, as ratios to eager from the same run.

    python benchmarks/cuda_check.py [--compile] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import traceback
import warnings

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

def timed(fn, *args, reps=30):
    """(latency, throughput) in milliseconds: the median of CUDA-event timed single calls,
    each waited for (the CPU's launch cost counts); and one call's share of `reps` calls
    queued back to back (launch costs hide behind the GPU's work, as in a program that does
    not wait). Both after two warm-up calls."""
    for _ in range(2):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn(*args)
    end.record()
    end.synchronize()
    return statistics.median(times), start.elapsed_time(end) / reps


def _ratios(ms) -> str:
    """jit/eager 1.01|0.98: latency | throughput ratios to eager."""
    return " ".join(f"{who}/eager {t[0] / ms['eager'][0]:.2f}|{t[1] / ms['eager'][1]:.2f}"
                    for who, t in ms.items() if who != "eager")


def contenders(fn, use_compile):
    from primtrace.executors.numba import NumbaFusionExecutor
    runs = {"eager": fn, "jit": primtrace.jit(fn),   # "fused": every region, no cost model
            "fused": primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)])}
    if use_compile:   # each compile takes seconds: --quick compiles float32 cases only
        runs["compile"] = torch.compile(fn)
    return runs


def check_kernels(sizes, use_compile):
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for rows, cols in sizes:
            for name, (fn, n) in CASES.items():
                args = [torch.randn(rows, cols, device="cuda", generator=g, dtype=dtype)
                        for _ in range(n)]
                try:
                    runs = contenders(fn, use_compile and (dtype == torch.float32
                                                           or len(sizes) > 2))
                    got, expected = runs["jit"](*args), fn(*args)
                    exact = fn(*(a.double() for a in args))
                    err_ours = (got.double() - exact).abs().max().item()
                    err_eager = (expected.double() - exact).abs().max().item()
                    fused_got = runs["fused"](*args)
                    err_fused = (fused_got.double() - exact).abs().max().item()
                    err_ours = max(err_ours, err_fused)
                    nodes = [n.symbol.name for n in primtrace.last_trace(runs["fused"]).nodes]
                    ms = {who: timed(run, *args) for who, run in runs.items()}
                    ratios = _ratios(ms)
                    flag = "" if err_ours <= 2 * err_eager + 1e-6 else "  LESS ACCURATE"
                    print(f"{name:24s} {str(dtype)[6:]:8s} {rows}x{cols}: eager "
                          f"{ms['eager'][0]:.3f}|{ms['eager'][1]:.3f} ms; {ratios}; err {err_ours:.1e} "
                          f"(eager {err_eager:.1e}){flag}; {nodes}", flush=True)
                except Exception:   # noqa: BLE001  (report and go on)
                    print(f"{name:24s} {str(dtype)[6:]:8s} {rows}x{cols}: FAILED", flush=True)
                    traceback.print_exc(limit=4)


def check_steps(use_compile):
    """benchmarks/training.py's W11-W17 on the GPU: a step's grads against eager's, and its
    time (W17's dropout draws differ: timed only)."""
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from training import workloads
    for name, (desc, fn, inputs, loss_of) in workloads(1.0).items():
        try:
            if isinstance(fn, torch.nn.Module):
                fn = fn.cuda()
            leaves = [t.cuda().requires_grad_(t.is_floating_point()) for t in inputs]
            params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
            wrt = [t for t in leaves if t.requires_grad] + params

            def step_of(run):
                def step():
                    for t in wrt:
                        t.grad = None
                    loss_of(run(*leaves)).backward()
                return step

            runs = contenders(fn, use_compile)
            grads = {}
            for who, run in runs.items():
                step_of(run)()
                grads[who] = [t.grad.clone() for t in wrt]
            worst = max(((g - e).abs().max() / e.abs().max().clamp_min(1e-12)).item()
                        for g, e in zip(grads["jit"], grads["eager"]))
            ms = {who: timed(step_of(run)) for who, run in runs.items()}
            ratios = _ratios(ms)
            verdict = ("timed only" if name == "W17" else "grads match" if worst < 1e-2
                       else f"GRADS DIFFER ({worst:.1e})")
            print(f"step {name} {desc:40s}: eager {ms['eager'][0]:.3f}|{ms['eager'][1]:.3f} ms; {ratios}; {verdict}",
                  flush=True)
        except Exception:   # noqa: BLE001
            print(f"step {name}: FAILED", flush=True)
            traceback.print_exc(limit=4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--quick", action="store_true", help="two sizes, torch.compile on float32 only")
    ap.add_argument("--no-steps", action="store_true", help="skip the training steps")
    ap.add_argument("--sizes", help="rows x cols of the kernel cases, e.g. 65536x1024,64x1024")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(torch.__version__, torch.cuda.get_device_name(0), flush=True)
    sizes = ((8192, 1024), (65536, 1024)) if args.quick else (
        (64, 1024), (8192, 1024), (65536, 1024))
    if args.sizes:
        sizes = tuple(tuple(int(n) for n in s.split("x")) for s in args.sizes.split(","))
    if not args.no_steps:
        check_steps(args.compile)
    check_kernels(sizes, args.compile)


if __name__ == "__main__":
    main()
