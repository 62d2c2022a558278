"""A nanoGPT-style character model, run through primtrace.jit and torch.compile(backend="primtrace").

The model is written the way GPT code usually is (nn.Embedding, nn.LayerNorm, one nn.Linear
for q, k and v, ``view``/``transpose`` into heads, ``F.scaled_dot_product_attention`` with a
causal mask, a GELU MLP, weight tying), with random weights and a small built-in text. The
script

1. checks that the jitted forward and torch.compile(backend="primtrace") match eager,
   logits and loss, and that one training step gives eager's gradients;
2. prints what ``primtrace.explain`` finds for one block (the ops that have no ref yet run
   as opaque torch calls) and the block's execution trace with its fused regions;
3. times a forward (no grad) against eager and torch.compile.

Run: python examples/gpt.py [--layers 2] [--width 128] [--heads 4] [--context 64] [--batch 8]
"""
import argparse
import math
import os
import time
from dataclasses import dataclass

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile workers left running

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import primtrace  # noqa: E402

TEXT = """\
It is a truth universally acknowledged, that a single man in possession of a good fortune,
must be in want of a wife. However little known the feelings or views of such a man may be
on his first entering a neighbourhood, this truth is so well fixed in the minds of the
surrounding families, that he is considered the rightful property of some one or other of
their daughters.
"""


@dataclass
class Config:
    vocab: int
    context: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.qkv = nn.Linear(c.width, 3 * c.width)
        self.proj = nn.Linear(c.width, c.width)
        self.heads = c.heads
        self.dropout = c.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.fc = nn.Linear(c.width, 4 * c.width)
        self.proj = nn.Linear(4 * c.width, c.width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.width)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.width)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab, c.width)
        self.wpe = nn.Embedding(c.context, c.width)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.ln_f = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.vocab, bias=False)
        self.head.weight = self.wte.weight   # weight tying
        for name, p in self.named_parameters():   # GPT-2's initialization
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.layers))
            elif name.endswith("weight") and p.ndim == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def batch(data, context, size, generator):
    starts = torch.randint(len(data) - context - 1, (size,), generator=generator)
    x = torch.stack([data[s:s + context] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + context] for s in starts])
    return x, y


def bench(fn, *args, rounds=5, min_time=0.2):
    """Median over rounds of the mean time per call (each round at least `min_time`)."""
    fn(*args)
    times = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_time:
            fn(*args)
            n += 1
        times.append((time.perf_counter() - start) / n)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile's timing")
    args = ap.parse_args()

    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(ch) for ch in TEXT], dtype=torch.long)
    torch.manual_seed(0)
    config = Config(vocab=len(chars), context=args.context, layers=args.layers,
                    heads=args.heads, width=args.width)
    model = GPT(config)
    x, y = batch(data, args.context, args.batch, torch.Generator().manual_seed(1))

    # 1. the same numbers as eager: forward, loss, gradients of one step
    jitted = primtrace.jit(model)
    backend = torch.compile(model, backend="primtrace")
    logits, loss = model(x, y)
    for name, run in (("primtrace.jit", jitted), ('torch.compile(backend="primtrace")', backend)):
        got_logits, got_loss = run(x, y)
        model.zero_grad()
        got_loss.backward()
        got_grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x, y)[1].backward()
        grad_diff = max((g - p.grad).abs().max().item()
                        for g, p in zip(got_grads, model.parameters()))
        print(f"{name}: max |logits - eager| {(got_logits - logits).abs().max().item():.2e}, "
              f"loss {got_loss.item():.6f} (eager {loss.item():.6f}), "
              f"max |grad - eager| {grad_diff:.2e}")

    # 2. one block: the ops without a ref, and the execution trace
    block = model.blocks[0]
    h = model.wte(x) + model.wpe(torch.arange(args.context))
    with torch.no_grad():
        print()
        print(primtrace.explain(block, h))
        jitted_block = primtrace.jit(block)
        jitted_block(h)
        trace = primtrace.last_trace(jitted_block)
        regions = [n for n in trace.nodes if "fusion" in n.symbol.name]
        print(f"\none block's execution trace ({len(trace.nodes)} calls, {len(regions)} fused "
              f"regions):\n{trace}")

    # 3. forward timing, no grad
    model.eval()
    with torch.no_grad():
        contenders = {"eager": model, "primtrace.jit": primtrace.jit(model)}
        if not args.no_compile:
            contenders["torch.compile"] = torch.compile(model)
        times = {name: bench(fn, x) for name, fn in contenders.items()}
    print(f"\nforward, batch {args.batch} x {args.context} tokens, {args.layers} layers, "
          f"width {args.width} ({torch.get_num_threads()} threads):")
    for name, t in times.items():
        print(f"  {name:>14}: {t * 1e3:8.3f} ms  ({t / times['eager']:.2f}x eager)")


if __name__ == "__main__":
    main()
