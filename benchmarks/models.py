"""Library models (torchvision, transformers; built from configs, random weights, eval mode,
no_grad) under eager, ``primtrace.jit``, ``torch.compile(backend="primtrace")`` and
``torch.compile`` (inductor). Every contender's output is checked against eager's; times are
taken interleaved in rounds in one process and reported as ratios to eager (median over
rounds of each round's ratio: absolute times drift on a shared VM, ratios much less).

    python benchmarks/models.py                       # every model
    python benchmarks/models.py --only t5,mistral     # a subset
    python benchmarks/models.py --no-compile          # skip both torch.compile contenders
    python benchmarks/models.py --quick               # a small subset (smoke test)
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import types

#: torch.compile's compile workers keep running after it compiles and take a core from
#: whoever is timed next on a small machine: compile in this process
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
import primtrace.dynamo  # noqa: E402
from fusion import bench  # noqa: E402


# --- optional libraries ---------------------------------------------------------------------
def import_torchvision():
    """torchvision.models, or None. Its wheel here is built against a CUDA torch: importing it
    beside CPU torch fails in torchvision/_meta_registrations.py ("operator torchvision::nms
    does not exist"). The models below use no torchvision ops, so that module is stubbed."""
    try:
        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))
        import torchvision.models as tvm
        return tvm
    except Exception as e:  # noqa: BLE001 - any import failure means: skip these models
        print(f"note: torchvision models skipped ({type(e).__name__}: {e})")
        return None


def import_transformers():
    try:
        import transformers
        return transformers
    except Exception as e:  # noqa: BLE001
        print(f"note: transformers models skipped ({type(e).__name__}: {e})")
        return None


# --- models: name -> (library, builder returning (model, args, kwargs)) ----------------------
def _img(n=224, cl=False):
    x = torch.randn(1, 3, n, n, generator=torch.Generator().manual_seed(0))
    return x.to(memory_format=torch.channels_last) if cl else x


def _tv(ctor, n=224, cl=False, **kw):
    def build(tvm):
        m = getattr(tvm, ctor)(weights=None, **kw).eval()
        if cl:
            m = m.to(memory_format=torch.channels_last)
        return m, (_img(n, cl),), {}
    return build


TV = {
    "mobilenet_v3_small": _tv("mobilenet_v3_small"),
    "efficientnet_b0": _tv("efficientnet_b0", 160),
    "convnext_tiny": _tv("convnext_tiny", 128),
    "regnet_y_400mf": _tv("regnet_y_400mf", 160),
    "densenet121": _tv("densenet121", 128),
    "vit_b_16": _tv("vit_b_16", 112, image_size=112),
    "swin_t": _tv("swin_t", 128),
    "resnet18_cl": _tv("resnet18", 160, cl=True),
}

SEQ = 64


def _ids(vocab, n=SEQ, batch=1):
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(0))


def _lm(cfg_name, dtype=torch.float32, **cfg):
    def build(tf):
        torch.manual_seed(0)
        config = getattr(tf, cfg_name)(**cfg)
        m = tf.AutoModel.from_config(config).eval().to(dtype)
        return m, (), {"input_ids": _ids(config.vocab_size)}
    return build


_DEC = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def _t5(tf):
    torch.manual_seed(0)
    c = tf.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2,
                    num_decoder_layers=2, num_heads=4)
    m = tf.T5Model(c).eval()
    return m, (), {"input_ids": _ids(1000), "decoder_input_ids": _ids(1000, 32)}


def _whisper(tf):
    torch.manual_seed(0)
    c = tf.WhisperConfig(vocab_size=1000, num_mel_bins=80, d_model=128, encoder_layers=2,
                         decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                         encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=100,
                         max_target_positions=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, decoder_start_token_id=1)
    m = tf.WhisperModel(c).eval()
    feats = torch.randn(1, 80, 200, generator=torch.Generator().manual_seed(0))
    return m, (), {"input_features": feats, "decoder_input_ids": _ids(1000, 16)}


def _wav2vec2(tf):
    torch.manual_seed(0)
    c = tf.Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=256, conv_dim=(64,) * 7, num_conv_pos_embeddings=16,
                          num_conv_pos_embedding_groups=4)
    m = tf.Wav2Vec2Model(c).eval()
    return m, (torch.randn(1, 16000, generator=torch.Generator().manual_seed(0)),), {}


def _vit(tf):
    torch.manual_seed(0)
    c = tf.ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, image_size=64, patch_size=8)
    return tf.ViTModel(c).eval(), (_img(64),), {}


def _clip_text(tf):
    torch.manual_seed(0)
    c = tf.CLIPTextConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=77)
    return tf.CLIPTextModel(c).eval(), (), {"input_ids": _ids(1000)}


HF = {
    "t5": _t5,
    "mistral": _lm("MistralConfig", **_DEC),
    "qwen2": _lm("Qwen2Config", **_DEC),
    "gpt_neox": _lm("GPTNeoXConfig", vocab_size=1000, hidden_size=128, intermediate_size=256,
                    num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256),
    "distilbert": _lm("DistilBertConfig", vocab_size=1000, dim=128, hidden_dim=256, n_layers=2,
                      n_heads=4),
    "whisper": _whisper,
    "wav2vec2": _wav2vec2,
    "vit": _vit,
    "clip_text": _clip_text,
    "phi": _lm("PhiConfig", vocab_size=1000, hidden_size=128, intermediate_size=256,
               num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256),
    "falcon": _lm("FalconConfig", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                  num_attention_heads=4, new_decoder_architecture=False),
    "qwen2_bf16": _lm("Qwen2Config", dtype=torch.bfloat16, **_DEC),
}

QUICK = ["distilbert", "mobilenet_v3_small"]


# --- outputs ----------------------------------------------------------------------------------
def tensors(out):
    """The tensors of a model output (tensor, tuple/list/dict, dataclass or ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # ModelOutput is an OrderedDict of its non-None fields
        return [t for v in out.values() for t in tensors(v)]
    if dataclasses.is_dataclass(out):
        return [t for f in dataclasses.fields(out) for t in tensors(getattr(out, f.name))]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in tensors(v)]
    return []


def mismatch(ref, out) -> str | None:
    a, b = tensors(ref), tensors(out)
    if len(a) != len(b):
        return f"{len(b)} output tensors, eager has {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        # f32: a few ulps of reassociation through several layers; bf16/f16: a few ulps of
        # their 8/11-bit mantissas
        tol = {"rtol": 1e-4, "atol": 1e-4} if x.dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        try:
            torch.testing.assert_close(y, x, **tol)
        except AssertionError as e:
            return f"output {i}: {str(e).splitlines()[0]} {' '.join(str(e).split())[:300]}"
    return None


# --- run ----------------------------------------------------------------------------------------
def contenders(model, use_compile):
    yield "jit", lambda: primtrace.jit(model)
    if use_compile:
        yield "backend", lambda: torch.compile(model, backend="primtrace")
        yield "compile", lambda: torch.compile(model)


def count(who, fn):
    if who == "jit":
        return str(primtrace.cache_info(fn).misses)
    if who == "backend":
        gs = primtrace.dynamo.graphs()
        eager = sum(1 for g in gs if g.fallback_reason)
        return f"{len(gs)}" + (f" ({eager} eager)" if eager else "")
    return ""


def run_model(name, build, lib, args):
    model, a, kw = build(lib)
    call = (lambda f: (lambda: f(*a, **kw)))
    with torch.no_grad():
        ref = model(*a, **kw)
        fns, notes, counts = {"eager": call(model)}, {}, {}
        for who, make in contenders(model, not args.no_compile):
            torch._dynamo.reset()
            try:
                f = make()
                out = f(*a, **kw)
            except Exception as e:  # noqa: BLE001 - recorded in the table, reported
                notes[who] = f"error: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
                print(f"  {name} {who}: {notes[who]}", flush=True)
                continue
            bad = mismatch(ref, out)
            if bad:
                notes[who] = f"MISMATCH {bad}"
                print(f"  {name} {who}: MISMATCH {bad}", flush=True)
            counts[who] = count(who, f)
            fns[who] = call(f)
        rounds = []
        for _ in range(args.rounds):
            rounds.append({who: bench(fn, min_time=args.time, warmup=1) for who, fn in fns.items()})
    ratios = {who: statistics.median(r[who] / r["eager"] for r in rounds) for who in fns}
    eager_ms = statistics.median(r["eager"] for r in rounds) * 1e3
    return eager_ms, ratios, notes, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=float, default=0.5, help="seconds per contender per round")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--quick", action="store_true", help=f"only {','.join(QUICK)}")
    args = ap.parse_args()
    names = list(TV) + list(HF)
    if args.quick:
        names = QUICK
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = set(names) - set(TV) - set(HF)
        if unknown:
            ap.error(f"unknown models {sorted(unknown)}; known: {', '.join(list(TV) + list(HF))}")
    tvm = import_torchvision() if any(n in TV for n in names) else None
    tf = import_transformers() if any(n in HF for n in names) else None
    who_all = ["jit"] + ([] if args.no_compile else ["backend", "compile"])
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}, rounds: {args.rounds}; "
          f"ratios to eager, median over rounds of each round's ratio\n", flush=True)
    rows = []
    for n in names:
        lib = tvm if n in TV else tf
        if lib is None:
            continue
        print(f"{n} ...", flush=True)
        try:
            rows.append((n, *run_model(n, TV.get(n) or HF[n], lib, args)))
        except Exception as e:  # noqa: BLE001 - the model could not be built or run in eager
            print(f"note: {n} skipped: it fails in eager or cannot be built here "
                  f"({type(e).__name__}: {' '.join(str(e).split())[:200]})", flush=True)
    head = "| model | eager ms | " + " | ".join(f"{w}/eager" for w in who_all) + \
        " | jit traces | backend graphs | notes |"
    print("\n" + head + "\n|" + "---|" * (head.count("|") - 1))
    for n, ms, ratios, notes, counts in rows:
        cells = [f"{ratios[w]:.2f}" if w in ratios else "-" for w in who_all]
        note = "; ".join(f"{w}: {t}" for w, t in notes.items())
        print(f"| {n} | {ms:.2f} | " + " | ".join(cells) +
              f" | {counts.get('jit', '-')} | {counts.get('backend', '-')} | {note} |")
    print()
    for w in who_all:
        got = [(r[2][w], r[0]) for r in rows if w in r[2]]
        if not got:
            continue
        gm = math.exp(sum(math.log(x) for x, _ in got) / len(got))
        worst = max(got)
        slower = ", ".join(f"{n} {x:.2f}" for x, n in sorted(got, reverse=True) if x > 1.0)
        print(f"{w}: geometric mean {gm:.2f}x eager over {len(got)} models; slowest {worst[1]} "
              f"{worst[0]:.2f}x; slower than eager: {slower or 'none'}")
    print(f"worst jit/eager: {max((r[2]['jit'] for r in rows if 'jit' in r[2]), default=float('nan')):.2f}")


if __name__ == "__main__":
    main()
