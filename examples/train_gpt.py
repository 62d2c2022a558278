"""Train the nanoGPT-style character model of examples/gpt.py, eagerly and through primtrace.jit.

Both trainings start from the same weights and see the same batches in the same order
(AdamW, the model's built-in text, one character a token); every ``--log-every`` steps the
script prints both losses. Under ``primtrace.jit`` a training step is one fused forward and
one fused backward trace joined to autograd (docs/autodiff.md); the script says whether the
jitted model fell back to torch's autograd op by op (it should not) and how many fused
kernels each trace runs. Then it times a whole training step (forward, backward, AdamW's
update, which stays eager in all three) for eager, ``primtrace.jit`` and ``torch.compile``
(inductor), interleaved in this process, after their compiles.

The two loss curves are not bitwise equal: fused kernels round differently from eager's
(a sum in another order, an ulp here and there), and training carries such differences
forward and grows them. The script shows how much by training eager a third time from
weights one float32 ulp apart in a single element: the jitted curve drifts from eager's as
that control does (relative differences around 1e-7 at first, about 1e-3 to 1e-2 by step 300
at the default size).

Run: python examples/train_gpt.py [--steps 300] [--log-every 50] [--layers 2] [--width 64]
         [--heads 4] [--context 32] [--batch 8] [--lr 3e-3] [--no-compile] [--threads N]
"""
import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile workers left running
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import primtrace  # noqa: E402
from gpt import GPT, TEXT, Config, batch  # noqa: E402


class Trainer:
    """A model (eager, jitted or compiled), its AdamW, and one training step."""

    def __init__(self, name, model, wrap, lr):
        self.name, self.model = name, model
        self.run = wrap(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)

    def step(self, x, y) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        _, loss = self.run(x, y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps (eager and jit)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--timing-rounds", type=int, default=5,
                    help="interleaved rounds of the step timing (0: no timing)")
    ap.add_argument("--timing-steps", type=int, default=5, help="steps per contender per round")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave torch.compile out of the timing")
    ap.add_argument("--threads", type=int, default=None, help="torch's intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(ch) for ch in TEXT], dtype=torch.long)
    config = Config(vocab=len(chars), context=args.context, layers=args.layers,
                    heads=args.heads, width=args.width)
    torch.manual_seed(0)
    model = GPT(config)
    print(f"GPT: {args.layers} layers, width {args.width}, {args.heads} heads, context "
          f"{args.context}, batch {args.batch}, vocab {len(chars)} characters, "
          f"{sum(p.numel() for p in model.parameters())} parameters; AdamW lr {args.lr}; "
          f"{torch.get_num_threads()} threads")

    # 1. the same training, eager and jitted: same weights, same batches in the same order;
    # and a control: eager again, from weights one float32 ulp apart in a single element
    eager = Trainer("eager", model, lambda m: m, args.lr)
    jitted = Trainer("primtrace.jit", copy.deepcopy(model), primtrace.jit, args.lr)
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        w = nudged.blocks[0].mlp.fc.weight.view(-1)
        w[0] = torch.nextafter(w[0], torch.tensor(float("inf")))
    control = Trainer("eager, 1 ulp apart", nudged, lambda m: m, args.lr)
    batches = torch.Generator().manual_seed(1)
    print(f"\n{'step':>5} {'eager':>10} {'primtrace.jit':>14} {'rel. diff':>10}   "
          f"{'eager, 1 ulp apart':>18} {'rel. diff':>10}")
    start = time.perf_counter()
    worst = [0.0, 0.0]
    for step in range(args.steps):
        x, y = batch(data, args.context, args.batch, batches)
        losses = [t.step(x, y).item() for t in (eager, jitted, control)]
        diffs = [abs(loss - losses[0]) / abs(losses[0]) for loss in losses[1:]]
        worst = [max(w, d) for w, d in zip(worst, diffs)]
        if step == 0:
            first = time.perf_counter() - start
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"{step:5d} {losses[0]:10.6f} {losses[1]:14.6f} {diffs[0]:10.1e}   "
                  f"{losses[2]:18.6f} {diffs[1]:10.1e}")
    print(f"{args.steps} steps of the three in {time.perf_counter() - start:.1f} s (the first, "
          f"with jit's trace and kernel compiles: {first:.1f} s); largest relative loss "
          f"difference to eager: primtrace.jit {worst[0]:.1e}, eager 1 ulp apart {worst[1]:.1e}")

    traces = primtrace.last_traces(jitted.run)
    fallback = traces[1].tags.get("fallback")
    forward, backward = traces[-1], traces[-1].tags.get("backward", [None])[-1]

    def kernels(trace):
        return sum("fusion" in n.symbol.name for n in trace.nodes)
    if fallback is None and backward is not None:
        print(f"primtrace.jit fallback: none (fused forward: {len(forward.nodes)} calls, "
              f"{kernels(forward)} fused kernels; fused backward: {len(backward.nodes)} calls, "
              f"{kernels(backward)} fused kernels)")
    else:
        print(f"primtrace.jit fallback: {fallback}")

    # 2. step time, interleaved: each contender runs --timing-steps steps per round
    if args.timing_rounds <= 0:
        return
    contenders = [eager, jitted]   # trained on: their values do not change the time
    if not args.no_compile:
        compiled = Trainer("torch.compile", copy.deepcopy(model), torch.compile, args.lr)
        start = time.perf_counter()
        compiled.step(*batch(data, args.context, args.batch, batches))
        print(f"torch.compile: first step, with its compiles: {time.perf_counter() - start:.1f} s")
        contenders.append(compiled)
    x, y = batch(data, args.context, args.batch, batches)
    for t in contenders:   # warm-up
        t.step(x, y)
    times = {t.name: [] for t in contenders}
    for _ in range(args.timing_rounds):
        for t in contenders:
            start = time.perf_counter()
            for _ in range(args.timing_steps):
                t.step(x, y)
            times[t.name].append((time.perf_counter() - start) / args.timing_steps)
    base = statistics.median(times["eager"])
    print(f"\ntraining step (forward, backward, AdamW), median of {args.timing_rounds} "
          f"interleaved rounds of {args.timing_steps} steps:")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"  {name:>14}: {t * 1e3:8.2f} ms  ({t / base:.2f}x eager)")


if __name__ == "__main__":
    main()
