"""Cached-call overhead of primtrace.jit on tiny tensors, with the default executors
(Numba fusion, then torch) and with the torch executor alone (--torch-only).

At 16 elements the kernels cost almost nothing, so the time per call is the framework's
overhead: for primtrace, computing the cache key and calling the generated function. The
script reports ratios against eager PyTorch and torch.compile measured in the same run (the
absolute times on shared machines drift; the ratios are what to compare).

    .venv/bin/python benchmarks/overhead.py [--no-compile] [--number N]

Workloads: W1 ``add(a_f16, b_f32)`` (and an all-f32 add), and W2, the 11-op chain
``y = exp(sin(a_f16) * b_f32 + 0.5).clamp(max=4);
z = where(y > 1, y, rsqrt(y.abs() + 1e-6)) + c_i32``.
"""
from __future__ import annotations

import argparse
import timeit
import warnings

import torch

import primtrace
from primtrace.tracer.inputs import cache_key


def add(a, b):
    return torch.add(a, b)


def w2(a, b, c):
    y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
    return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c


def inputs(n=16):
    g = torch.Generator().manual_seed(0)
    a16 = torch.randn(n, generator=g).half()
    b32, a32 = torch.randn(n, generator=g), torch.randn(n, generator=g)
    c32 = torch.randint(0, 4, (n,), dtype=torch.int32, generator=g)
    return {"W1 add f16+f32": (add, (a16, b32)), "add f32+f32": (add, (a32, b32)),
            "W2 11-op chain": (w2, (a16, b32, c32))}


def per_call_us(candidates: dict, args, number: int, repeat: int = 7) -> dict:
    """Best of `repeat` runs of `number` calls per candidate, in microseconds per call.

    The candidates take turns within each round, so a load change on a shared machine hits
    them alike and the ratios stay meaningful."""
    best = {name: float("inf") for name in candidates}
    for fn in candidates.values():
        fn(*args)
    for _ in range(repeat):
        for name, fn in candidates.items():
            t = timeit.timeit(lambda: fn(*args), number=number)
            best[name] = min(best[name], t / number * 1e6)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--torch-only", action="store_true", help="jit with the torch executor only")
    parser.add_argument("--number", type=int, default=20000, help="calls per timing run")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for name, (fn, args) in inputs().items():
        jfn = primtrace.jit(fn, executors=[primtrace.TORCH] if opts.torch_only else None)
        for got, want in zip([jfn(*args)], [fn(*args)]):
            torch.testing.assert_close(got, want)
        candidates = {"eager": fn, "jit": jfn, "key": lambda *a: cache_key(a, {})}
        if not opts.no_compile:
            candidates["compile"] = torch.compile(fn, dynamic=False)
        t = per_call_us(candidates, args, opts.number)
        rows.append((name, t["eager"], t["jit"], t["key"], t.get("compile"),
                     len(primtrace.last_trace(jfn).nodes)))
        assert primtrace.cache_info(jfn).misses == 1  # every timed call was a cache hit

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 16-element inputs; "
          f"microseconds per call (best of 7 interleaved runs of {opts.number})\n")
    head = (f"{'workload':16} {'prims':>5} {'eager':>8} {'jit':>8} {'key':>7} {'compile':>8}"
            f" {'jit/eager':>10} {'jit/compile':>12}")
    print(head)
    print("-" * len(head))
    for name, eager, ours, key, compiled, nodes in rows:
        comp = f"{compiled:8.2f}" if compiled is not None else f"{'-':>8}"
        ratio = f"{ours / compiled:12.2f}" if compiled is not None else f"{'-':>12}"
        print(f"{name:16} {nodes:5d} {eager:8.2f} {ours:8.2f} {key:7.2f} {comp} "
              f"{ours / eager:10.2f} {ratio}")
    print(f"\njit: a cached primtrace.jit call ({'torch executor' if opts.torch_only else 'default executors'}); key: computing the "
          "cache key alone;\nprims: nodes in the execution trace (one torch call each).")


if __name__ == "__main__":
    main()
