"""W18: greedy decoding with a KV cache. examples/generate.py's nanoGPT step (a plain cache
object whose keys and values grow by a token a call) for 128 new tokens, batch 1 and 8,
through eager, primtrace.jit, torch.compile(backend="primtrace") and torch.compile
(dynamic=None). The first loop of each contender includes its compiles; later loops run
interleaved, contender after contender, each with a fresh cache. Prints the traces
(compiles) each took, the first loop's time, and the time per token after the first two
steps (median over the steps of the later loops) as ratios to eager's; tokens must equal
eager's.

    python benchmarks/decoding.py [--tokens 128] [--batches 1 8] [--rounds 3] [--no-compile]
    python benchmarks/decoding.py --tokens 8 --batches 1 --rounds 1 --no-compile   # smoke
"""
from __future__ import annotations

import argparse
import os
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
import primtrace.dynamo  # noqa: E402
from generate import KVCache, gpt_step, greedy  # noqa: E402
from gpt import GPT, TEXT, Config  # noqa: E402


def _dynamo_compiles() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def _backend_traces() -> int:
    return sum(primtrace.cache_info(g.jit).misses for g in primtrace.dynamo.graphs())


def contenders(model, no_compile: bool) -> dict:
    """name -> (step(idx, cache), count of traces so far)."""
    torch._dynamo.reset()
    jitted = primtrace.jit(gpt_step)
    backend = torch.compile(gpt_step, backend="primtrace")
    found = {"eager": (lambda i, c: gpt_step(model, i, c), lambda: 0),
             "primtrace.jit": (lambda i, c: jitted(model, i, c),
                               lambda: primtrace.cache_info(jitted).misses),
             'torch.compile(backend="primtrace")': (lambda i, c: backend(model, i, c),
                                                    _backend_traces)}
    if not no_compile:
        inductor = torch.compile(gpt_step, dynamic=None)
        found["torch.compile"] = (lambda i, c: inductor(model, i, c), _dynamo_compiles)
    return found


def run_batch(model, layers, prompt, args) -> list[tuple]:
    """Rows (name, traces, first loop s, per token s, x eager) for one batch size."""
    steps = contenders(model, args.no_compile)
    expected, first, traces = None, {}, {}
    with torch.no_grad():
        for name, (step, count) in steps.items():   # the first loop: compiles included
            before = count()
            start = time.perf_counter()
            tokens, _ = greedy(step, prompt, args.tokens, lambda: KVCache(layers))
            first[name] = time.perf_counter() - start
            traces[name] = count() - before
            expected = tokens if expected is None else expected
            if not torch.equal(tokens, expected):
                raise SystemExit(f"{name}: the tokens differ from eager's")
        per_token = {name: [] for name in steps}
        for _ in range(args.rounds):   # interleaved loops: a steady time per token
            for name, (step, _) in steps.items():
                _, times = greedy(step, prompt, args.tokens, lambda: KVCache(layers))
                per_token[name].append(statistics.median(times[2:] or times))
    eager = per_token["eager"]
    return [(name, traces[name] if name != "eager" else "-", first[name],
             statistics.median(per_token[name]),
             statistics.median(a / b for a, b in zip(per_token[name], eager)))
            for name in steps]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip inductor")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    chars = sorted(set(TEXT))
    torch.manual_seed(0)
    config = Config(vocab=len(chars), context=args.tokens + 16, layers=2, heads=4, width=128)
    model = GPT(config).eval()
    print(f"W18 decoding: nanoGPT (examples/gpt.py, 2 layers, width 128) with a KV cache "
          f"object, {args.tokens} new tokens after a 13-token prompt; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; per token: median of the "
          f"steps after the first two, median of {args.rounds} interleaved loops")
    results = {}
    for batch in args.batches:
        prompt = torch.tensor([[chars.index(c) for c in "It is a truth"]] * batch)
        rows = run_batch(model, config.layers, prompt, args)
        results[batch] = rows
        eager_first = rows[0][2]
        print(f"\nbatch {batch}: tokens equal eager's for every contender")
        print("| contender | traces | first loop s (compiles included) | x eager | "
              "per token ms | x eager |")
        print("|---|---|---|---|---|---|")
        for name, traces, first, token, ratio in rows:
            print(f"| {name} | {traces} | {first:.2f} | {first / eager_first:.1f} | "
                  f"{token * 1e3:.3f} | {ratio:.2f} |")
    return results


if __name__ == "__main__":
    main()
