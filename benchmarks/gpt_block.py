"""W10: a GPT-2-style block's forward (B=4, T=256, C=384, 6 heads, float32, no grad) through
primtrace.jit (default executors), eager and torch.compile, timed interleaved in one
process; prints times, ratios to eager, and what the block's execution trace holds.

    python benchmarks/gpt_block.py [--rounds 5] [--no-compile] [--batch 4 --context 256 --width 384 --heads 6]

The block is examples/gpt.py's (nn.LayerNorm, one nn.Linear for q, k and v, view/transpose
into heads, F.scaled_dot_product_attention with a causal mask, a GELU MLP). Each round times
every contender (the median of the calls that fit in --time seconds) and takes the ratios
within the round; the table shows the median over rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import primtrace  # noqa: E402
from fusion import bench  # noqa: E402
from gpt import Block, Config  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=float, default=0.5, help="seconds per contender per round")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")

    torch.manual_seed(0)
    block = Block(Config(vocab=1, context=args.context, heads=args.heads, width=args.width)).eval()
    x = torch.randn(args.batch, args.context, args.width)
    contenders = {"eager": block, "primtrace.jit": primtrace.jit(block)}
    if not args.no_compile:
        contenders["torch.compile"] = torch.compile(block)
    with torch.no_grad():
        expected = block(x)
        for name, fn in contenders.items():
            torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-5, msg=name)
        trace = primtrace.last_trace(contenders["primtrace.jit"])
        rounds = []
        for _ in range(args.rounds):
            times = {name: bench(lambda fn=fn: fn(x), min_time=args.time)
                     for name, fn in contenders.items()}
            rounds.append(times)
    opaque = [n.symbol.name for n in trace.nodes if n.symbol.module not in ("prims", "numba")]
    fused = [n for n in trace.nodes if "fusion" in n.symbol.name]
    print(f"W10 GPT-2 block forward, B={args.batch} T={args.context} C={args.width} "
          f"heads={args.heads}, float32, no grad; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; median of {args.rounds} interleaved rounds")
    print(f"execution trace: {len(trace.nodes)} calls, {len(fused)} fused regions")
    print("| contender | ms | x eager |")
    print("|---|---|---|")
    for name in contenders:
        ms = statistics.median(r[name] for r in rounds) * 1e3
        ratio = statistics.median(r[name] / r["eager"] for r in rounds)
        print(f"| {name} | {ms:.3f} | {ratio:.2f} |")
    if "torch.compile" in contenders:
        ratio = statistics.median(r["primtrace.jit"] / r["torch.compile"] for r in rounds)
        print(f"primtrace.jit / torch.compile: {ratio:.2f}")
    return opaque


if __name__ == "__main__":
    main()
