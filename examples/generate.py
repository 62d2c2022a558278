"""Greedy decoding with a KV cache, eagerly, through primtrace.jit and through
torch.compile(backend="primtrace") (and inductor, for time).

Two models, each written the way generation code usually is:

1. the nanoGPT model of examples/gpt.py with a KV cache: a plain Python object holding each
   layer's keys and values, which every step concatenates to and returns (state that lives
   across calls: after each call it holds real tensors, never primtrace's proxies);
2. a transformers Llama built from a tiny config (random weights), called as its generation
   loop calls it: ``model(input_ids=..., cache=cache, use_cache=True)`` with a
   ``DynamicCache`` (skipped when transformers is not installed).

For each it checks that the tokens equal eager's, and prints how many traces each
contender compiled (a step grows the cache by one token: a static trace per length is one
compile a token; a trace whose sequence dim is symbolic serves every length), the time of
the first two steps (compiles included), the time per token after them, and the whole
loop's time against eager's.

Run: python examples/generate.py [--tokens 128] [--batch 1] [--no-compile] [--no-transformers]
"""
import argparse
import inspect
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile workers left running
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import primtrace  # noqa: E402
from gpt import GPT, TEXT, Config  # noqa: E402


class KVCache:
    """Each layer's keys and values so far, (B, heads, T, head size): what a step appends to."""

    def __init__(self, layers: int):
        self.keys = [None] * layers
        self.values = [None] * layers

    def update(self, layer: int, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]


def gpt_step(model: GPT, idx, cache: KVCache):
    """The logits of the last position after feeding `idx` (B, T) to `model`, whose earlier
    tokens are in `cache` (updated in place)."""
    B, T = idx.shape
    start = cache.length()
    pos = torch.arange(start, start + T, dtype=torch.long, device=idx.device)
    x = model.wte(idx) + model.wpe(pos)
    for i, block in enumerate(model.blocks):
        attn = block.attn
        h = block.ln_1(x)
        C = h.shape[-1]
        q, k, v = attn.qkv(h).split(C, dim=2)
        q, k, v = (t.view(B, T, attn.heads, C // attn.heads).transpose(1, 2) for t in (q, k, v))
        k, v = cache.update(i, k, v)
        # the new tokens see every cached one and, among themselves, the earlier ones
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        x = x + attn.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + block.mlp(block.ln_2(x))
    return model.head(model.ln_f(x[:, -1]))


def greedy(step, prompt, tokens: int, make_cache):
    """(generated tokens, seconds of each step): the prompt, then one token a step."""
    cache, idx, out, times = make_cache(), prompt, [], []
    for _ in range(tokens):
        start = time.perf_counter()
        logits = step(idx, cache)
        idx = logits.argmax(-1, keepdim=True)
        times.append(time.perf_counter() - start)
        out.append(idx)
    return torch.cat(out, dim=1), times


def compiles_of(fn) -> str:
    if isinstance(fn, primtrace.JitFunction):
        return str(primtrace.cache_info(fn).misses)
    return "-"


def run(title, contenders, prompt, tokens, make_cache):
    print(f"\n{title}: {tokens} new tokens, batch {prompt.shape[0]}, prompt of "
          f"{prompt.shape[1]} ({torch.get_num_threads()} threads)")
    print(f"  {'':<34}{'traces':>7}{'first 2 steps':>15}{'per token after':>17}"
          f"{'loop':>9}{'x eager':>9}")
    expected, rows = None, []
    for name, (step, counter) in contenders.items():
        torch._dynamo.reset() if name.startswith("torch.compile") else None
        with torch.no_grad():
            got, times = greedy(step, prompt, tokens, make_cache)
        if expected is None:
            expected = got
        same = torch.equal(got, expected)
        steady = sorted(times[2:])[len(times[2:]) // 2] if len(times) > 2 else float("nan")
        rows.append((name, compiles_of(counter), sum(times[:2]), steady, sum(times), same))
    eager_total = rows[0][4]
    for name, traces, first, steady, total, same in rows:
        print(f"  {name:<34}{traces:>7}{first * 1e3:>13.1f}ms{steady * 1e3:>15.3f}ms"
              f"{total:>8.2f}s{total / eager_total:>9.2f}" + ("" if same else "  TOKENS DIFFER"))
        if not same:
            raise SystemExit(f"{name}: the tokens differ from eager's")
    print("  tokens equal eager's for every contender")


def nanogpt(args):
    chars = sorted(set(TEXT))
    torch.manual_seed(0)
    config = Config(vocab=len(chars), context=args.tokens + 16, layers=2, heads=4, width=128)
    model = GPT(config).eval()
    prompt = torch.tensor([[chars.index(c) for c in "It is a truth"]] * args.batch)
    jitted = primtrace.jit(gpt_step)
    contenders = {"eager": (lambda i, c: gpt_step(model, i, c), None),
                  "primtrace.jit": (lambda i, c: jitted(model, i, c), jitted)}
    backend = torch.compile(gpt_step, backend="primtrace")
    contenders['torch.compile(backend="primtrace")'] = (lambda i, c: backend(model, i, c), None)
    if not args.no_compile:
        inductor = torch.compile(gpt_step)
        contenders["torch.compile"] = (lambda i, c: inductor(model, i, c), None)
    run("nanoGPT (examples/gpt.py) with a KV cache object", contenders, prompt, args.tokens,
        lambda: KVCache(config.layers))


def llama(args):
    try:
        from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("\ntransformers is not installed: its Llama is skipped")
        return
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=args.tokens + 16)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 256, (args.batch, 6), generator=torch.Generator().manual_seed(1))

    # transformers 5 renamed past_key_values to cache
    cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"

    def stepper(fn):
        return lambda idx, cache: fn(input_ids=idx, use_cache=True,
                                     **{cache_name: cache}).logits[:, -1]
    jitted = primtrace.jit(model)
    contenders = {"eager": (stepper(model), None), "primtrace.jit": (stepper(jitted), jitted),
                  'torch.compile(backend="primtrace")':
                      (stepper(torch.compile(model, backend="primtrace")), None)}
    if not args.no_compile:
        contenders["torch.compile"] = (stepper(torch.compile(model)), None)
    run("transformers Llama (tiny config) with its DynamicCache", contenders, prompt,
        args.tokens, lambda: DynamicCache(config=config))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-compile", action="store_true", help="skip inductor")
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args()
    nanogpt(args)
    if not args.no_transformers:
        llama(args)


if __name__ == "__main__":
    main()
