"""Fusion benchmarks: primtrace + Numba against eager, torch.compile, unfused refs and the
copy-bandwidth floor, as ratios to eager measured in one run (absolute times drift up to 2x
on a shared VM, ratios much less). Prints a Markdown table.

    python benchmarks/fusion.py                 # all workloads
    python benchmarks/fusion.py --only W1,W5    # a subset
    python benchmarks/fusion.py --no-compile    # skip torch.compile (slow to compile)
    python benchmarks/fusion.py --threshold     # serial vs parallel crossover of the CPU backend

Floors: a copy moving the same bytes (read + written), into a preallocated buffer
("in-place floor"), and the same plus allocating the workload's new outputs ("fresh
floor": a fresh 64 MiB tensor costs page faults that every out-of-place contender pays).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

#: torch.compile's compile workers (a process pool) keep running after it compiles and take
#: a core from whoever is timed next on a small machine: compile in this process
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import primtrace  # noqa: E402
from primtrace.executors.numba import NumbaFusionExecutor  # noqa: E402

N = 1 << 24


# --- workloads ----------------------------------------------------------------------------
def w1(a, b):
    return torch.add(a, b)


def w2(a, b, c):
    y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
    return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c


def w3(a):
    return torch.sin(a)


def adamw(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step):
    """One AdamW step (torch.optim.AdamW's math, foreach=False), in place, plain torch."""
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = math.sqrt(bias_correction2)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-step_size)


def _inputs(n):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=g).half()
    b = torch.randn(n, generator=g)
    c = torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32)
    return a, b, c


# --- timing ---------------------------------------------------------------------------------
def bench(fn, *, min_time=0.4, max_reps=2000, warmup=2):
    """Median seconds per call (the median resists the neighbours' noise)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while (time.perf_counter() - start < min_time or len(times) < 5) and len(times) < max_reps:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def copy_floor(read_bytes, write_bytes, fresh_bytes=0):
    """Seconds to move read+write bytes with torch's copy; plus allocating `fresh_bytes`."""
    half = (read_bytes + write_bytes) // 2
    src = torch.ones(half, dtype=torch.uint8)
    dst = torch.empty_like(src)
    inplace = bench(lambda: dst.copy_(src))
    if not fresh_bytes:
        return inplace, inplace
    fault = bench(lambda: torch.empty(fresh_bytes, dtype=torch.uint8).fill_(0)) - bench(
        lambda: dst[:fresh_bytes].fill_(0))
    return inplace, inplace + max(fault, 0.0)


def ours(fn):
    return primtrace.jit(fn, executors=[NumbaFusionExecutor()])


def unfused(fn):
    return primtrace.jit(fn, executors=[])


def compiled(fn):
    return torch.compile(fn, dynamic=False)


def row(name, contenders, floor=None, note=""):
    eager = contenders["eager"]
    cells = {k: v / eager for k, v in contenders.items()}
    return name, eager, cells, floor / eager if floor else None, note


def run_elementwise(name, fn, args, read, write, use_compile):
    contenders = {"eager": bench(lambda: fn(*args))}
    if use_compile:
        c = compiled(fn)
        contenders["torch.compile"] = bench(lambda: c(*args))
    u = unfused(fn)
    contenders["unfused refs"] = bench(lambda: u(*args))
    f = ours(fn)
    contenders["primtrace"] = bench(lambda: f(*args))
    _, fresh = copy_floor(read, write, fresh_bytes=write)
    return row(name, contenders, fresh)


def run_adamw(use_compile, n_total=N):
    per = n_total // 8
    g = torch.Generator().manual_seed(0)

    def state():
        ps = [torch.randn(per, generator=g) for _ in range(2)]
        gs = [torch.randn(per, generator=g) for _ in range(2)]
        ms = [torch.zeros(per) for _ in range(2)]
        vs = [torch.zeros(per) for _ in range(2)]
        return ps, gs, ms, vs

    hyper = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, step=3)
    s = state()
    contenders = {"eager": bench(lambda: adamw(*s, **hyper))}
    if use_compile:
        c = compiled(adamw)
        contenders["torch.compile"] = bench(lambda: c(*s, **hyper))
    u = unfused(adamw)
    contenders["unfused refs"] = bench(lambda: u(*s, **hyper))
    f = ours(adamw)
    contenders["primtrace"] = bench(lambda: f(*s, **hyper))
    params = [torch.nn.Parameter(p.clone()) for p in s[0]]
    for p, gr in zip(params, s[1]):
        p.grad = gr.clone()
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    contenders["optim.AdamW(fused)"] = bench(opt.step)
    read, write = 4 * 4 * per * 2, 3 * 4 * per * 2
    inplace, _ = copy_floor(read, write)
    return row("W4 AdamW, 8 x f32, 16M el.", contenders, inplace, "in-place floor")


def run_small(use_compile):
    rows = []
    a, b, c = _inputs(16)
    for name, fn, args in (("W5 W1 at 16 el.", w1, (a, b)), ("W5 W2 at 16 el.", w2, (a, b, c))):
        contenders = {"eager": bench(lambda: fn(*args), min_time=0.3)}
        if use_compile:
            cf = compiled(fn)
            contenders["torch.compile"] = bench(lambda: cf(*args), min_time=0.3)
        u = unfused(fn)
        contenders["unfused refs"] = bench(lambda: u(*args), min_time=0.3)
        f = ours(fn)
        contenders["primtrace"] = bench(lambda: f(*args), min_time=0.3, max_reps=20000)
        rows.append(row(name, contenders))
    return rows


_FIRST_CALL = r'''
import os, sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, {root!r})
import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
t1 = time.perf_counter()
{workload}
n = 1 << 24
a = torch.randn(n).half(); b = torch.randn(n); c = torch.randint(-3, 4, (n,), dtype=torch.int32)
f = primtrace.jit(w2, executors=[NumbaFusionExecutor()])
t2 = time.perf_counter()
f(a, b, c)
t3 = time.perf_counter()
print(f"{{t1 - t0:.3f}} {{t3 - t2:.3f}}")
'''


def first_calls():
    """W2's first call in fresh processes: with an empty cache directory (nothing compiled
    yet), with the shared helpers (vmath, f16) cached but not the kernel, and with both."""
    import inspect
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = _FIRST_CALL.format(root=root, workload=inspect.getsource(w2))
    out = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PRIMTRACE_CACHE_DIR=cache)
        for step in range(3):
            if step == 1:
                shutil.rmtree(os.path.join(cache, "kernels"), ignore_errors=True)
            res = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True)
            if res.returncode:
                raise RuntimeError(res.stderr)
            out.append([float(x) for x in res.stdout.split()])
    return out


def threshold_scan():
    """Serial vs parallel time of W1 and W2 kernels over sizes (to set cpu.PARALLEL_WORK)."""
    from primtrace.executors.numba.backends import cpu
    print("| n | W1 serial us | W1 parallel us | W2 serial us | W2 parallel us |")
    print("|---|---|---|---|---|")
    for n in [1 << k for k in range(10, 21)]:
        a, b, c = _inputs(n)
        cells = []
        for fn, args in ((w1, (a, b)), (w2, (a, b, c))):
            for work in (1 << 62, 0):   # force serial, force parallel
                cpu.PARALLEL_WORK = work
                f = ours(fn)
                cells.append(bench(lambda: f(*args), min_time=0.2) * 1e6)
        print(f"| {n} | " + " | ".join(f"{x:.1f}" for x in cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="W1,W2,W3,W4,W5,first")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--threshold", action="store_true")
    args = ap.parse_args()
    if args.threshold:
        threshold_scan()
        return
    only = set(args.only.split(","))
    use_compile = not args.no_compile
    rows = []
    a, b, c = _inputs(N)
    if "W1" in only:
        rows.append(run_elementwise("W1 add(f16, f32), 2^24", w1, (a, b), N * 6, N * 4, use_compile))
    if "W2" in only:
        rows.append(run_elementwise("W2 11-op chain, 2^24", w2, (a, b, c), N * 10, N * 4, use_compile))
    if "W3" in only:
        ai = torch.randint(-1000, 1000, (N,), dtype=torch.int64)
        rows.append(run_elementwise("W3 sin(i64) -> f32, 2^24", w3, (ai,), N * 8, N * 4, use_compile))
    if "W4" in only:
        rows.append(run_adamw(use_compile))
    if "W5" in only:
        rows += run_small(use_compile)
    names = ["eager", "torch.compile", "unfused refs", "optim.AdamW(fused)", "primtrace"]
    names = [n for n in names if any(n in r[2] for r in rows)]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; ratios to eager, one run\n")
    print("| workload | eager | " + " | ".join(names[1:]) + " | floor |")
    print("|---|---|" + "---|" * (len(names) - 1) + "---|")
    for name, eager, cells, floor, note in rows:
        unit = f"{eager * 1e3:.2f} ms" if eager > 1e-3 else f"{eager * 1e6:.1f} us"
        vals = [f"{cells[n]:.2f}" if n in cells else "-" for n in names[1:]]
        fl = f"{floor:.2f}" + (f" ({note})" if note else "") if floor else "-"
        print(f"| {name} | {unit} | " + " | ".join(vals) + f" | {fl} |")
    if "first" in only:
        (imp, cold), (_, kernel), (_, warm) = first_calls()
        print(f"\nW2 first call at 2^24 in a fresh process (imports {imp:.2f} s not included): "
              f"{cold:.3f} s with an empty cache directory, {kernel:.3f} s with the helpers "
              f"cached but not the kernel, {warm:.3f} s in a second process (kernel cached)")


if __name__ == "__main__":
    main()
