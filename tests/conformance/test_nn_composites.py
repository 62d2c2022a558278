"""Conformance of the composite nn refs (refs.nn.composites: linear, glu, dropouts in eval
mode and at p 0 and 1, scaled_dot_product_attention, batch_norm, group_norm,
cosine_similarity, pairwise_distance, pdist, normalize; refs.nn.classification: nll_loss, cross_entropy and the
ranking losses) against eager: float dtypes (and eager's refusals of the others), odd
layouts, empty and 0-d inputs, negative dims, argument errors. tests/tracer/
test_jit_conformance.py runs these SPECS through ``primtrace.jit``. Below: batch_norm's
running statistics, a model through jit with gradients, the torch names. Random draws
(dropout in training) are tested in test_random.py.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import primtrace
from primtrace import refs
from primtrace.refs.nn import functional as RF
from primtrace.tracer import mapping
from tests.conformance.harness import (OpSpec, SampleInput, check_sample, make_tensor,
                                       run_conformance, samples, with_specials)

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
OTHERS = (torch.int64, torch.bool, torch.complex64)


def t(shape, dtype=torch.float32, seed=0, layout="contiguous", domain=(-3.0, 3.0)):
    return make_tensor(shape, dtype, seed=seed, layout=layout, domain=domain)


def _name(dtype):
    return str(dtype).replace("torch.", "")


def spec(name, samples, ref=None, torch_fn=None, **kw):
    return OpSpec(name, ref or getattr(RF, name), torch_fn or getattr(F, name), supports_out=False,
                  kwargs_variants=(), extra_samples=samples, **kw)


# --- linear, glu, dropout --------------------------------------------------------------------
def _linear_samples(spec):
    for i, dtype in enumerate(FLOATS + OTHERS):
        x, w, b = t((3, 4), dtype, i), t((5, 4), dtype, i + 1), t((5,), dtype, i + 2)
        yield SampleInput((x, w), {}, _name(dtype))
        yield SampleInput((x, w, b), {}, f"{_name(dtype)} bias")
        yield SampleInput((t((2, 3, 4), dtype, i), w, b), {}, f"{_name(dtype)} 3-d bias")
        yield SampleInput((t((2, 4, 3), dtype, i).transpose(1, 2), w, b), {}, f"{_name(dtype)} 3-d strided")
        yield SampleInput((t((2, 2, 3, 4), dtype, i), w, b), {}, f"{_name(dtype)} 4-d bias")
    x, w, b = t((3, 4)), t((5, 4), seed=1), t((5,), seed=2)
    yield SampleInput((t((4,)), w, b), {}, "1-d input")
    yield SampleInput((x, t((4,))), {}, "1-d weight")
    yield SampleInput((x.t().contiguous().t(), t((4, 5)).t(), b), {}, "transposed")
    yield SampleInput((x, w, t(())), {}, "0-d bias")
    yield SampleInput((x, w, t((1,))), {}, "broadcast bias")
    yield SampleInput((torch.empty(0, 4), w, b), {}, "empty")
    yield SampleInput((t(()), w), {}, "0-d input")
    yield SampleInput((x, w.double()), {}, "weight dtype")
    yield SampleInput((x, w, b.double()), {}, "bias dtype")
    yield SampleInput((t((2, 2, 4)), w, b.double()), {}, "3-d bias dtype")
    yield SampleInput((x, t((5, 3))), {}, "shapes")


def _glu_samples(spec):
    for i, dtype in enumerate(FLOATS + OTHERS):
        yield SampleInput((t((3, 4), dtype, i),), {}, _name(dtype))
        yield SampleInput((t((4, 3), dtype, i),), {"dim": 0}, f"{_name(dtype)} dim 0")
    yield SampleInput((with_specials(t((2, 6))),), {}, "specials")
    yield SampleInput((t((4, 6), layout="transposed"),), {"dim": -2}, "transposed")
    yield SampleInput((t((3, 5)),), {}, "odd")
    yield SampleInput((t(()),), {}, "0-d")
    yield SampleInput((torch.empty(0, 4),), {}, "empty")


def _dropout_samples(spec):
    """Deterministic cases: eval mode (input itself), p 0, p 1, bad p."""
    for i, dtype in enumerate(FLOATS):
        x = with_specials(t((3, 4), dtype, i))
        yield SampleInput((x,), {"p": 0.3, "training": False}, f"{_name(dtype)} eval")
        yield SampleInput((x,), {"p": 0.0, "training": True}, f"{_name(dtype)} p 0")
        yield SampleInput((x,), {"p": 1.0, "training": True}, f"{_name(dtype)} p 1")
    yield SampleInput((t((3, 4)),), {"p": 1.5}, "bad p")
    yield SampleInput((t((3, 4)),), {"p": -0.1, "training": False}, "negative p")
    yield SampleInput((torch.empty(0, 3),), {"p": 0.5, "training": True}, "empty")
    yield SampleInput((t((3, 4), torch.int64),), {"p": 0.5, "training": False}, "int64 eval")


# --- attention --------------------------------------------------------------------------------
def _sdpa_samples(spec):
    for i, dtype in enumerate(FLOATS):
        q, k, v = t((2, 3, 5, 8), dtype, i), t((2, 3, 7, 8), dtype, i + 1), t((2, 3, 7, 4), dtype, i + 2)
        yield SampleInput((q, k, v), {}, _name(dtype))
        yield SampleInput((q, k, v), {"scale": 0.5}, f"{_name(dtype)} scale")
        yield SampleInput((q, k, v), {"attn_mask": t((5, 7), dtype, 9)}, f"{_name(dtype)} float mask")
        yield SampleInput((q, k, v), {"attn_mask": t((5, 7), torch.bool, 9)}, f"{_name(dtype)} bool mask")
        yield SampleInput((q, t((2, 3, 5, 8), dtype, 3), t((2, 3, 5, 4), dtype, 4)), {"is_causal": True},
                          f"{_name(dtype)} causal")
    q, k, v = t((3, 5, 8)), t((3, 7, 8), seed=1), t((3, 7, 4), seed=2)
    yield SampleInput((q.transpose(0, 1).contiguous().transpose(0, 1), k, v), {}, "strided query")
    yield SampleInput((q, k, v), {"is_causal": True}, "causal, L < S")
    yield SampleInput((q, k.double(), v), {}, "dtypes")
    yield SampleInput((q, k, v), {"attn_mask": t((5, 7), torch.bool), "is_causal": True}, "mask and causal")
    for dtype in (torch.float64, torch.float16, torch.int64):
        yield SampleInput((q, k, v), {"attn_mask": t((5, 7), dtype)}, f"{_name(dtype)} mask")
    yield SampleInput((q.double(), k.double(), v.double()), {"attn_mask": t((5, 7))},
                      "float64 query, float32 mask")
    masked = t((5, 7), torch.bool, 4)
    masked[1] = False
    yield SampleInput((q, k, v), {"attn_mask": masked}, "a row masked everywhere")
    yield SampleInput((q, t((3, 0, 8)), t((3, 0, 4))), {}, "no keys")
    yield SampleInput(_packed_heads(), {"is_causal": True}, "heads of a packed projection")
    yield SampleInput((t((3, 5, 8), torch.int64), t((3, 7, 8), torch.int64), t((3, 7, 4), torch.int64)), {},
                      "int64")
    # grouped query attention: 4 query heads over 2 (or 1) key/value heads
    gq, gk, gv = t((2, 4, 5, 8)), t((2, 2, 7, 8), seed=1), t((2, 2, 7, 4), seed=2)
    yield SampleInput((gq, gk, gv), {"enable_gqa": True}, "gqa")
    yield SampleInput((gq, gk[:, :1], gv[:, :1]), {"enable_gqa": True, "is_causal": True}, "gqa 1 head")
    yield SampleInput((gq, gk, gv), {"enable_gqa": True, "attn_mask": t((5, 7), torch.bool, 3)},
                      "gqa bool mask")
    yield SampleInput((gq, gq[:, :3], gq[:, :3]), {"enable_gqa": True}, "gqa heads not dividing")
    yield SampleInput((t((4, 5, 8)), t((2, 7, 8), seed=1), t((2, 7, 4), seed=2)), {"enable_gqa": True},
                      "gqa 3-d")
    yield SampleInput(tuple(x.transpose(1, 2) for x in (t((2, 5, 4, 8)), t((2, 5, 2, 8), seed=1),
                                                       t((2, 5, 2, 8), seed=2))),
                      {"enable_gqa": True}, "gqa transposed heads")


def _packed_heads(B=2, T=5, H=3, E=4):
    """GPT's q, k, v: (B, H, T, E) views of one (B, T, 3 * H * E) projection."""
    qkv = t((B, T, 3 * H * E))
    return tuple(x.view(B, T, H, E).transpose(1, 2) for x in qkv.split(H * E, dim=2))


# --- norms ----------------------------------------------------------------------------------------
def _batch_norm_samples(spec):
    for i, dtype in enumerate(FLOATS):
        x = t((4, 3, 5), dtype, i)
        mean, var = t((3,), torch.float32 if dtype in FLOATS[:2] else dtype, 1), \
            t((3,), torch.float32 if dtype in FLOATS[:2] else dtype, 2, domain=(0.5, 2.0))
        w, b = t((3,), mean.dtype, 3), t((3,), mean.dtype, 4)
        yield SampleInput((x, mean, var), {}, f"{_name(dtype)} eval")
        yield SampleInput((x, mean, var, w, b), {"eps": 1e-3}, f"{_name(dtype)} eval affine")
        yield SampleInput((x, None, None, w, b), {"training": True}, f"{_name(dtype)} training")
        yield SampleInput((t((4, 3), dtype, i), None, None), {"training": True}, f"{_name(dtype)} 2-d training")
    x = t((4, 3, 2, 2))
    mean, var = t((3,), seed=1), t((3,), seed=2, domain=(0.5, 2.0))
    yield SampleInput((x.to(memory_format=torch.channels_last), mean, var), {}, "channels_last")
    yield SampleInput((x.transpose(0, 2), None, None), {"training": True}, "transposed training")
    yield SampleInput((t((1, 3)), None, None), {"training": True}, "one value per channel")
    yield SampleInput((x, t((4,)), var), {}, "running_mean size")
    yield SampleInput((t((4, 3), torch.int64), mean, var), {}, "int64")


def _group_norm_samples(spec):
    for i, dtype in enumerate(FLOATS):
        x = t((2, 6, 5), dtype, i)
        yield SampleInput((x, 3), {}, f"{_name(dtype)}")
        yield SampleInput((x, 2, t((6,), dtype, 1), t((6,), dtype, 2)), {"eps": 1e-3}, f"{_name(dtype)} affine")
    x = t((2, 6, 3, 2))
    yield SampleInput((x, 6), {}, "a group per channel")
    yield SampleInput((x, 1), {}, "one group")
    yield SampleInput((x.to(memory_format=torch.channels_last), 3, t((6,), seed=1)), {}, "channels_last")
    yield SampleInput((t((2, 6)), 2), {}, "2-d")
    yield SampleInput((with_specials(t((2, 4, 3))), 2), {}, "specials")
    yield SampleInput((t((2, 6, 5), domain=(90.0, 110.0)), 3), {}, "large mean")
    yield SampleInput((torch.empty(0, 6, 2), 3), {}, "empty")
    yield SampleInput((x, 4), {}, "indivisible")
    yield SampleInput((t((1, 2)), 2), {}, "one value per group")
    yield SampleInput((x, 3, t((5,))), {}, "weight size")
    yield SampleInput((t((6,)), 3), {}, "1-d")
    yield SampleInput((t((2, 6, 5), torch.int64), 3), {}, "int64")


def _native_layer_norm_samples(spec):
    for i, dtype in enumerate(FLOATS):
        x = t((2, 3, 4), dtype, i)
        yield SampleInput((x, (4,), t((4,), dtype, 1), t((4,), dtype, 2), 1e-5), {}, _name(dtype))
        yield SampleInput((x, (3, 4), None, None, 1e-3), {}, f"{_name(dtype)} 2 dims")
    yield SampleInput((t((4, 3)).t(), (4,), None, None, 1e-5), {}, "transposed")
    yield SampleInput((torch.empty(0, 4), (4,), None, None, 1e-5), {}, "empty")
    yield SampleInput((t((2, 3)), (4,), None, None, 1e-5), {}, "shape")


def _native_group_norm_samples(spec):
    for i, dtype in enumerate(FLOATS):
        x = t((2, 6, 5), dtype, i)
        yield SampleInput((x, None, None, 2, 6, 5, 3, 1e-5), {}, _name(dtype))
        yield SampleInput((x, t((6,), dtype, 1), t((6,), dtype, 2), 2, 6, 5, 2, 1e-3), {},
                          f"{_name(dtype)} affine")
    yield SampleInput((t((2, 6, 5)), None, None, 2, 6, 5, 4, 1e-5), {}, "indivisible")


# --- distances ----------------------------------------------------------------------------------
def _distance_samples(spec):
    cosine = spec.name == "cosine_similarity"
    for i, dtype in enumerate(FLOATS + (torch.int64, torch.complex64)):
        yield SampleInput((t((4, 5), dtype, i), t((4, 5), dtype, i + 1)), {}, _name(dtype))
    x, y = t((4, 5)), t((4, 5), seed=1)
    yield SampleInput((x, y[:1]), {}, "broadcast")
    yield SampleInput((x.t(), y.t()), {"dim": 0} if cosine else {"p": 1.0}, "transposed")
    yield SampleInput((x, y), {"eps": 0.5} if cosine else {"p": math.inf, "keepdim": True}, "options")
    yield SampleInput((x, torch.zeros(4, 5)), {}, "zeros")
    yield SampleInput((x, y.double()), {}, "float64 other")
    yield SampleInput((t((5,)), t((5,), seed=1)), {"dim": 0} if cosine else {}, "1-d")
    yield SampleInput((t((4, 5), torch.int64), t((4, 5), torch.int32)), {}, "integers")
    yield SampleInput((torch.empty(0, 5), torch.empty(0, 5)), {}, "empty")
    if not cosine:
        yield SampleInput((x, y), {"p": 0.5}, "p 0.5")


def _normalize_samples(spec):
    for i, dtype in enumerate(FLOATS + (torch.int64, torch.complex64)):
        yield SampleInput((t((4, 5), dtype, i),), {}, _name(dtype))
    x = t((4, 5))
    yield SampleInput((x,), {"dim": 0}, "dim 0")
    yield SampleInput((x,), {"dim": -1, "p": 1.0}, "p 1")
    yield SampleInput((x,), {"p": math.inf}, "p inf")
    yield SampleInput((x,), {"p": 0.5, "eps": 0.1}, "p 0.5 eps")
    yield SampleInput((t((5, 4), layout="transposed"),), {}, "transposed")
    yield SampleInput((t((2, 3, 4)),), {"dim": (1, 2)}, "dims")
    yield SampleInput((t((5,)),), {"dim": 0}, "1-d")
    yield SampleInput((t(()),), {"dim": 0}, "0-d")
    yield SampleInput((torch.zeros(3, 4),), {}, "zeros (eps)")
    yield SampleInput((with_specials(t((3, 4))),), {}, "specials")
    yield SampleInput((torch.empty(0, 5),), {}, "empty")
    yield SampleInput((x,), {"dim": 2}, "bad dim")


def _pdist_samples(spec):
    for i, dtype in enumerate(FLOATS + (torch.int64, torch.complex64)):
        yield SampleInput((t((5, 3), dtype, i),), {}, _name(dtype))
    x = t((6, 4))
    for p in (1, 0, 3, 0.5, math.inf, -1):
        yield SampleInput((x, p), {}, f"p={p}")
    yield SampleInput((t((4, 6), layout="transposed"),), {}, "transposed")
    yield SampleInput((with_specials(t((4, 3))),), {}, "specials")
    yield SampleInput((t((1, 3)),), {}, "one row")
    yield SampleInput((torch.empty(0, 3),), {}, "empty")
    yield SampleInput((t((2, 3, 4)),), {}, "3-d")


# --- losses ------------------------------------------------------------------------------------
REDUCTIONS = ("mean", "sum", "none")


def _class_samples(spec):
    ce = spec.name == "cross_entropy"
    target = torch.tensor([0, 2, 4, 1])
    for i, dtype in enumerate(FLOATS):
        x = t((4, 5), dtype, i)
        x = x if ce else x.log_softmax(1)
        for reduction in REDUCTIONS:
            yield SampleInput((x, target), {"reduction": reduction}, f"{_name(dtype)} {reduction}")
        yield SampleInput((x, target), {"weight": t((5,), dtype, 1, domain=(0.1, 2.0))}, f"{_name(dtype)} weight")
        yield SampleInput((x, torch.tensor([0, -100, 4, 1])), {}, f"{_name(dtype)} ignored")
    x = t((4, 5)) if ce else t((4, 5)).log_softmax(1)
    w = t((5,), seed=1, domain=(0.1, 2.0))
    yield SampleInput((x, torch.tensor([0, 2, 2, 1])), {"ignore_index": 2, "weight": w}, "ignore_index 2")
    yield SampleInput((x, torch.full((4,), -100)), {}, "all ignored")
    yield SampleInput((x, torch.full((4,), -100)), {"reduction": "sum"}, "all ignored sum")
    yield SampleInput((x, target.to(torch.uint8)), {}, "uint8 target")
    yield SampleInput((x, target.int()), {}, "int32 target")
    yield SampleInput((x, target.float()), {}, "float target")
    yield SampleInput((x, target[:3]), {}, "batch sizes")
    yield SampleInput((x, torch.tensor([0, 2, 7, 1])), {}, "target out of range")
    yield SampleInput((x, torch.tensor([0, 2, -1, 1])), {}, "negative target")
    yield SampleInput((x, target), {"weight": t((4,))}, "weight size")
    yield SampleInput((x, target), {"reduction": "bad"}, "bad reduction")
    yield SampleInput((x[0], target[0]), {}, "1-d input")
    yield SampleInput((x.t().contiguous().t(), target), {}, "transposed")
    yield SampleInput((torch.empty(0, 5), torch.empty(0, dtype=torch.int64)), {}, "empty")
    yield SampleInput((torch.empty(0, 5), torch.empty(0, dtype=torch.int64)), {"reduction": "none"}, "empty none")
    y3 = t((2, 5, 3, 2), seed=3)
    y3 = y3 if ce else y3.log_softmax(1)
    target3 = torch.tensor([[[0, 1], [2, 3], [4, 0]], [[1, 1], [-100, 2], [3, 4]]])
    for reduction in REDUCTIONS:
        yield SampleInput((y3, target3), {"reduction": reduction, "weight": w}, f"4-d {reduction}")
    yield SampleInput((t((4, 5), torch.int64), target), {}, "int64 input")
    specials = x.clone()
    specials[1], specials[2, 0], specials[3, 1] = float("nan"), float("-inf"), float("-inf")
    for reduction in REDUCTIONS:   # ignored rows add 0 even where inf or NaN; -inf at a target
        yield SampleInput((specials, torch.tensor([0, -100, -100, 1])), {"reduction": reduction},
                          f"nonfinite rows {reduction}")
    if ce:
        for dtype in FLOATS:
            for big in (x * 100, x + 1000):
                yield SampleInput((big.to(dtype), target), {"reduction": "none"},
                                  f"{_name(dtype)} large")
    if ce:
        for smoothing in (0.1, 1.0):
            for reduction in REDUCTIONS:
                yield SampleInput((x, torch.tensor([0, -100, 4, 1])), {"label_smoothing": smoothing,
                                  "reduction": reduction, "weight": w}, f"smoothing {smoothing} {reduction}")
            yield SampleInput((y3, target3), {"label_smoothing": smoothing}, f"4-d smoothing {smoothing}")
        yield SampleInput((x, target), {"label_smoothing": 1.5}, "bad smoothing")
        probs = t((4, 5), seed=5).softmax(1)
        for reduction in REDUCTIONS:
            yield SampleInput((x, probs), {"reduction": reduction}, f"probabilities {reduction}")
            yield SampleInput((x, probs), {"reduction": reduction, "weight": w, "label_smoothing": 0.2},
                              f"probabilities weight smoothing {reduction}")
        yield SampleInput((x, probs.double()), {}, "float64 probabilities")
        yield SampleInput((t((5,)), torch.tensor(2)), {}, "0-d target")


def _ranking_samples(spec):
    n = spec.name
    for i, dtype in enumerate(FLOATS):
        x, y = t((6,), dtype, i), t((6,), dtype, i + 1)
        sign = torch.tensor([1, -1, 1, 1, -1, -1]).to(dtype)
        for reduction in REDUCTIONS:
            kw = {"reduction": reduction}
            if n == "margin_ranking_loss":
                yield SampleInput((x, y, sign), dict(kw, margin=0.5), f"{_name(dtype)} {reduction}")
            elif n == "hinge_embedding_loss":
                yield SampleInput((x, sign), dict(kw, margin=2.0), f"{_name(dtype)} {reduction}")
            elif n == "triplet_margin_loss":
                yield SampleInput((t((3, 6), dtype, i), t((3, 6), dtype, i + 1), t((3, 6), dtype, i + 2)),
                                  dict(kw, swap=reduction == "sum"), f"{_name(dtype)} {reduction}")
            else:  # poisson_nll_loss
                target = t((6,), dtype, i + 2, domain=(0.0, 4.0))
                yield SampleInput((x, target), kw, f"{_name(dtype)} {reduction}")
                yield SampleInput((x.abs(), target), dict(kw, log_input=False, full=True),
                                  f"{_name(dtype)} {reduction} rate full")
    yield SampleInput((t((6,)), t((6,), seed=1), t((6,), seed=2)), {"reduction": "bad"}, "bad reduction")
    if n == "margin_ranking_loss":
        yield SampleInput((t((2, 3)), t((2, 3)), t((3,))), {}, "ranks differ")
    if n == "triplet_margin_loss":
        yield SampleInput((t((3, 6)), t((3, 6)), t((6,))), {}, "ranks differ")
        yield SampleInput((t((3, 6)), t((3, 6), seed=1), t((3, 6), seed=2)), {"p": 1, "eps": 0.0}, "p 1")


SPECS = [
    spec("linear", _linear_samples),
    spec("glu", _glu_samples),
    spec("dropout", _dropout_samples),
    spec("alpha_dropout", _dropout_samples),
    spec("feature_alpha_dropout", _dropout_samples),
    spec("scaled_dot_product_attention", _sdpa_samples),
    spec("batch_norm", _batch_norm_samples),
    spec("group_norm", _group_norm_samples),
    spec("native_layer_norm", _native_layer_norm_samples, refs.native_layer_norm, torch.native_layer_norm),
    spec("native_group_norm", _native_group_norm_samples, refs.native_group_norm, torch.native_group_norm),
    spec("cosine_similarity", _distance_samples),
    spec("pairwise_distance", _distance_samples),
    spec("pdist", _pdist_samples),
    spec("normalize", _normalize_samples),
    spec("nll_loss", _class_samples),
    spec("cross_entropy", _class_samples),
    spec("margin_ranking_loss", _ranking_samples),
    spec("hinge_embedding_loss", _ranking_samples),
    spec("triplet_margin_loss", _ranking_samples),
    spec("poisson_nll_loss", _ranking_samples),
]


#: the refs.nn.functional names these suites cover (embedding: test_linalg_indexing;
#: the dropouts in training: test_random)
NN_NAMES = [s.name for s in SPECS if not s.name.startswith("native_")] + ["embedding"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_conformance(spec):
    run_conformance(spec)


def fused_slice(spec, count):
    """Every k-th sample of `spec` through jit with the default executors (Numba fusion
    first; test_jit_conformance runs every sample with the torch executor)."""
    jfn = primtrace.jit(spec.torch_fn)
    every = list(samples(spec))
    failures = []
    for sample in every[::max(1, len(every) // count)]:
        problem = check_sample(jfn, spec.torch_fn, sample, spec.rtol_scale)
        if problem:
            failures.append(f"[{sample.desc}] {problem}")
    assert not failures, "\n".join(failures[:5])


FUSED = ["linear", "glu", "scaled_dot_product_attention", "batch_norm", "group_norm",
         "cosine_similarity", "normalize", "nll_loss", "cross_entropy"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", FUSED)
def test_fused_slice(name):
    fused_slice(next(s for s in SPECS if s.name == name), 6)


# --- state, names, jit ----------------------------------------------------------------------------
def test_batch_norm_updates_running_statistics_as_eager():
    x = t((4, 3, 5))
    for momentum in (0.1, 0.5):
        ours = [torch.zeros(3), torch.ones(3)]
        eager = [torch.zeros(3), torch.ones(3)]
        y = RF.batch_norm(x, *ours, training=True, momentum=momentum)
        expected = F.batch_norm(x, *eager, training=True, momentum=momentum)
        assert torch.allclose(y, expected, atol=1e-6)
        for a, b in zip(ours, eager):
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


def test_jit_batch_norm_module_updates_its_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.GroupNorm(2, 4))
    twin = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.GroupNorm(2, 4))
    twin.load_state_dict(model.state_dict())
    jm = primtrace.jit(model)
    for _ in range(2):
        x = torch.randn(5, 6)
        with torch.no_grad():
            assert torch.allclose(jm(x), twin(x), atol=1e-6)
    for name, buffer in model.named_buffers():
        assert torch.allclose(buffer, dict(twin.named_buffers())[name]), name
    model.eval(), twin.eval()
    with torch.no_grad():
        assert torch.allclose(jm(x), twin(x), atol=1e-6)


@pytest.mark.parametrize("executors", [None, [primtrace.TORCH]], ids=["default", "torch"])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True},
                                    {"attn_mask": torch.ones(5, 5, dtype=torch.bool).tril()}])
def test_sdpa_result_has_eagers_strides(executors, kwargs):
    """Eager's CPU flash kernel lays the result out as the query ((B, T, H, E) for packed
    heads): the ref's result has its strides, so y.transpose(1, 2).contiguous() is free."""
    def fn(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, **kwargs)
        return y, y.transpose(1, 2).contiguous()
    args = _packed_heads()
    jfn = primtrace.jit(fn, executors=executors)
    with torch.no_grad():
        got, expected = jfn(*args), fn(*args)
    for g, e in zip(got, expected):
        assert g.stride() == e.stride()
        torch.testing.assert_close(g, e)
    assert g.data_ptr() == got[0].data_ptr() and e.data_ptr() == expected[0].data_ptr()


TORCH_NAMES = [
    (F.linear, RF.linear), (F.glu, RF.glu), (F.dropout, RF.dropout), (torch.dropout, RF.dropout),
    (F.alpha_dropout, RF.alpha_dropout), (F.feature_alpha_dropout, RF.feature_alpha_dropout),
    (torch.feature_dropout, refs.feature_dropout),
    (F.scaled_dot_product_attention, RF.scaled_dot_product_attention),
    (F.batch_norm, RF.batch_norm), (torch.batch_norm, refs.batch_norm), (F.group_norm, RF.group_norm),
    (torch.group_norm, RF.group_norm), (F.cosine_similarity, RF.cosine_similarity),
    (F.pairwise_distance, RF.pairwise_distance), (torch.pdist, RF.pdist), (F.normalize, RF.normalize),
    (F.nll_loss, RF.nll_loss),
    (F.cross_entropy, RF.cross_entropy), (F.poisson_nll_loss, RF.poisson_nll_loss),
    (F.hinge_embedding_loss, RF.hinge_embedding_loss), (F.margin_ranking_loss, RF.margin_ranking_loss),
    (F.triplet_margin_loss, RF.triplet_margin_loss),
]


@pytest.mark.parametrize("func,expected", TORCH_NAMES, ids=lambda x: getattr(x, "__name__", ""))
def test_torch_names_map_to_the_refs(func, expected):
    assert mapping.resolve(func).ref is expected


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.attn_in = nn.Linear(8, 24)
        self.norm = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, tokens, labels):
        h = self.embed(tokens)
        q, k, v = self.attn_in(h).chunk(3, -1)
        h = h + F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        logits = self.head(F.dropout(h, 0.1, self.training)).mean(1)
        return F.cross_entropy(logits, labels, label_smoothing=0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_model_through_jit(dtype):
    torch.manual_seed(0)
    model = Classifier().to(dtype).eval()
    tokens, labels = torch.randint(0, 10, (3, 6)), torch.tensor([0, 4, 2])
    jm = primtrace.jit(model)
    with torch.no_grad():
        problem = check_sample(jm, model, SampleInput((tokens, labels), {}, str(dtype)))
    assert problem is None, problem
    loss = jm(tokens, labels)  # with grad: the calls that need autograd run as torch's
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(tokens, labels).backward()
    for ours, eager in zip(grads, (p.grad for p in model.parameters())):
        assert torch.allclose(ours, eager, atol=1e-6)
