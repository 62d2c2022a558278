"""W19: variable batch. W10's GPT-2 block forward (T=256, C=384, 6 heads, float32, no grad)
over batch sizes 1..16 in random order, 64 calls, through eager, primtrace.jit (automatic
dynamic dims: static first, symbolic on the second distinct batch size) and
torch.compile(dynamic=None); prints the traces (compiles) each took, the first pass's total
time (compiles included) and the steady total of the 64 calls, interleaved over rounds.

    python benchmarks/variable_batch.py [--calls 64] [--rounds 3] [--no-compile]
    python benchmarks/variable_batch.py --context 32 --width 64 --heads 2 --calls 16  # smoke
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import warnings

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import primtrace  # noqa: E402
from gpt import Block, Config  # noqa: E402


def _compile_count() -> int:
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return -1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")

    torch.manual_seed(0)
    block = Block(Config(vocab=1, context=args.context, heads=args.heads,
                         width=args.width)).eval()
    order = random.Random(args.seed).choices(range(1, args.max_batch + 1), k=args.calls)
    inputs = {b: torch.randn(b, args.context, args.width) for b in set(order)}
    contenders = {"eager": block, "primtrace.jit": primtrace.jit(block)}
    if not args.no_compile:
        torch._dynamo.reset()
        contenders["torch.compile"] = torch.compile(block, dynamic=None)

    def run_all(fn):
        start = time.perf_counter()
        for b in order:
            fn(inputs[b])
        return time.perf_counter() - start

    first, traces = {}, {}
    with torch.no_grad():
        for name, fn in contenders.items():   # the first pass: compiles included, values checked
            before = _compile_count()
            start = time.perf_counter()
            for b in order:
                torch.testing.assert_close(fn(inputs[b]), block(inputs[b]), rtol=1e-4,
                                           atol=1e-5, msg=name)
            first[name] = time.perf_counter() - start
            if name == "primtrace.jit":
                traces[name] = primtrace.cache_info(fn).misses
            elif name == "torch.compile":
                traces[name] = _compile_count() - before
        rounds = [{name: run_all(fn) for name, fn in contenders.items()}
                  for _ in range(args.rounds)]
    jit = contenders["primtrace.jit"]
    print(f"W19 variable batch: GPT-2 block forward, T={args.context} C={args.width} "
          f"heads={args.heads}, f32, no grad, {args.calls} calls of batch 1..{args.max_batch} "
          f"in random order (seed {args.seed}, {len(set(order))} distinct sizes); torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; steady: median of "
          f"{args.rounds} interleaved rounds")
    print(f"primtrace recompiles: {[str(r) for r in primtrace.cache_info(jit).recompiles]}")
    print("| contender | traces | first pass s (compiles included) | steady s | x eager |")
    print("|---|---|---|---|---|")
    for name in contenders:
        steady = statistics.median(r[name] for r in rounds)
        ratio = statistics.median(r[name] / r["eager"] for r in rounds)
        print(f"| {name} | {traces.get(name, '-')} | {first[name]:.2f} | {steady:.3f} | "
              f"{ratio:.2f} |")
    return traces


if __name__ == "__main__":
    main()
