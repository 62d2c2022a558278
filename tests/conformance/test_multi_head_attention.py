"""F.multi_head_attention_forward (nn.MultiheadAttention): the ref and ``primtrace.jit``
against eager over the option grid (packed and separate projections, biases, bias_k/v,
add_zero_attn, every mask kind, is_causal, need_weights and average_attn_weights, unbatched,
static_k/v, empty batch), eager's errors and warnings, dropout's draws, the module's
gradients through jit, and its fast path (eval under no_grad) through jit.

Floats pass the harness rule: close to eager, or at least as close as eager to float64.
"""
from __future__ import annotations

import itertools
import warnings
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor
from primtrace.refs.nn import functional as RF
from tests.conformance.harness import compare_outputs, make_tensor

#: the refs.nn.functional names this suite covers (test_nn_functional checks every one is)
NAMES = ["multi_head_attention_forward"]
E, HEADS, L, S, N = 8, 2, 4, 5, 3
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
HALF = (torch.bfloat16, torch.float16)


def t(shape, dtype=torch.float32, seed=0, domain=(-2.0, 2.0)):
    return make_tensor(shape, dtype, seed=seed, domain=domain)


def module(dtype=torch.float32, kdim=None, vdim=None, bias=True, bias_kv=False, zero_attn=False,
           dropout=0.0, batch_first=False, seed=0):
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(E, HEADS, dropout=dropout, bias=bias, add_bias_kv=bias_kv,
                              add_zero_attn=zero_attn, kdim=kdim, vdim=vdim,
                              batch_first=batch_first)
    with torch.no_grad():  # biases are zeros at init: make them count
        for p in m.parameters():
            p.normal_(0, 0.5)
    return m.to(dtype)


def f_args(m, query, key, value, **kwargs):
    """The positional arguments and keywords nn.MultiheadAttention.forward passes to F."""
    args = (query, key, value, m.embed_dim, m.num_heads, m.in_proj_weight, m.in_proj_bias,
            m.bias_k, m.bias_v, m.add_zero_attn, m.dropout, m.out_proj.weight, m.out_proj.bias)
    kw = {"training": m.training}
    if not m._qkv_same_embed_dim:
        kw.update(use_separate_proj_weight=True, q_proj_weight=m.q_proj_weight,
                  k_proj_weight=m.k_proj_weight, v_proj_weight=m.v_proj_weight)
    return args, {**kw, **kwargs}


def _upcast(obj, memo):
    """Floats to float64, the same object for the same tensor (eager's `q is k` paths)."""
    if isinstance(obj, torch.Tensor) and obj.is_floating_point():
        if id(obj) not in memo:
            memo[id(obj)] = obj.detach().to(torch.float64)
        return memo[id(obj)]
    if isinstance(obj, tuple):
        return tuple(_upcast(x, memo) for x in obj)
    if isinstance(obj, dict):
        return {k: _upcast(v, memo) for k, v in obj.items()}
    return obj


def check(fn, args, kwargs, what, message=False):
    """fn against eager on the same arguments: eager's error type (and `message`: its text),
    or its outputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected, eager_error = F.multi_head_attention_forward(*args, **kwargs), None
        except Exception as e:  # eager's verdict is the spec
            expected, eager_error = None, e
        try:
            got, our_error = fn(*args, **kwargs), None
        except Exception as e:
            got, our_error = None, e
    if eager_error is not None:
        assert isinstance(our_error, type(eager_error)), (
            f"{what}: eager raised {type(eager_error).__name__}: {eager_error}; ours "
            f"{'returned' if our_error is None else repr(our_error)}")
        assert not message or str(our_error) == str(eager_error), f"{what}: {our_error}"
        return
    assert our_error is None, f"{what}: ours raised {our_error!r}"

    def reference():
        memo = {}
        return F.multi_head_attention_forward(*_upcast(args, memo), **_upcast(kwargs, memo))
    with torch.no_grad():
        problem = compare_outputs(tuple(got), tuple(expected), reference)
        if problem and args[0].dtype in HALF and not kwargs.get("need_weights", True):
            # eager's sdpa is its CPU flash kernel here, which rounds where it likes (its
            # error against float64 is of the same size as ours); ours is its math backend
            with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = F.multi_head_attention_forward(*args, **kwargs)
            problem = compare_outputs(tuple(got), tuple(expected), reference)
    assert problem is None, f"{what}: {problem}"


# --- the grid ---------------------------------------------------------------------------------
def projections(dtype):
    """(name, module, query, key, value): self-attention (q is k is v), encoder-decoder
    (k is v), three inputs, separate weights (kdim, vdim), no biases."""
    x, y, z = t((L, N, E), dtype, 1), t((S, N, E), dtype, 2), t((S, N, E), dtype, 3)
    packed = module(dtype)
    yield "self", packed, x, x, x
    yield "enc-dec", packed, x, y, y
    yield "three", packed, x, y, z
    separate = module(dtype, kdim=6, vdim=4)
    yield "kdim vdim", separate, x, t((S, N, 6), dtype, 4), t((S, N, 4), dtype, 5)
    yield "no bias", module(dtype, bias=False), x, y, z


def masks(dtype, tgt, src):
    """(name, keywords): every mask kind eager takes, and is_causal."""
    kpm = torch.zeros(N, src, dtype=torch.bool)
    kpm[0, -2:] = kpm[2, 0] = True
    causal = torch.ones(tgt, src, dtype=torch.bool).tril().logical_not()
    yield "no mask", {}
    yield "kpm bool", {"key_padding_mask": kpm}
    yield "kpm float", {"key_padding_mask": t((N, src), dtype, 6)}
    yield "attn 2-d bool", {"attn_mask": causal}
    yield "attn 2-d float", {"attn_mask": t((tgt, src), dtype, 7)}
    yield "attn 3-d float", {"attn_mask": t((N * HEADS, tgt, src), dtype, 8)}
    yield "attn 3-d bool, kpm bool", {"attn_mask": t((N * HEADS, tgt, src), dtype, 9) > 1.0,
                                      "key_padding_mask": kpm}
    yield "attn float, kpm bool", {"attn_mask": t((tgt, src), dtype, 7), "key_padding_mask": kpm}
    yield "is_causal", {"attn_mask": causal, "is_causal": True}
    yield "is_causal, kpm", {"attn_mask": causal, "is_causal": True, "key_padding_mask": kpm}


WEIGHTS = (("need_weights", {"need_weights": True}),
           ("per head", {"need_weights": True, "average_attn_weights": False}),
           ("no weights", {"need_weights": False}))


def grid(dtype):
    """Pairwise: every mask with every weights option (the projection kinds in turn), and in
    float32 also every projection kind with every mask (the weights options in turn); in
    half precision each mask once, the weights options and projection kinds in turn."""
    projs, names = list(projections(dtype)), [name for name, _ in masks(dtype, L, S)]
    pairs = [(i % len(projs), mask, w) for i, (mask, w) in enumerate(
        itertools.product(names, range(len(WEIGHTS))))]
    if dtype in HALF:
        pairs = [(i % len(projs), mask, i % len(WEIGHTS)) for i, mask in enumerate(names)]
    if dtype is torch.float32:
        pairs += [(p, mask, i % len(WEIGHTS)) for i, (p, mask) in enumerate(
            itertools.product(range(len(projs)), names))]
    for p, mask, w in pairs:
        name, m, q, k, v = projs[p]
        mkw = dict(masks(dtype, L, L if q is k else S))[mask]
        yield f"{name}, {mask}, {WEIGHTS[w][0]}", f_args(m, q, k, v, **mkw, **WEIGHTS[w][1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ref_over_the_grid(dtype):
    for what, (args, kwargs) in grid(dtype):
        check(RF.multi_head_attention_forward, args, kwargs, what)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_ref_extra_keys_unbatched_static(dtype):
    """bias_k/bias_v and add_zero_attn (with masks: their padded column), unbatched inputs,
    static_k/static_v, an empty batch."""
    x, y = t((L, N, E), dtype, 1), t((S, N, E), dtype, 2)
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[1, :2] = True
    cases = []
    for bias_kv, zero in ((True, False), (False, True), (True, True)):
        m = module(dtype, bias_kv=bias_kv, zero_attn=zero)
        for mkw in ({}, {"key_padding_mask": kpm, "attn_mask": t((L, S), dtype, 4)}):
            for wkw in ({"need_weights": True}, {"need_weights": False}):
                cases.append((f"bias_kv {bias_kv} zero_attn {zero} {sorted(mkw)} {wkw}",
                              f_args(m, x, y, y, **mkw, **wkw)))
    m = module(dtype)
    for wkw in ({"need_weights": True}, {"need_weights": False},
                {"need_weights": True, "average_attn_weights": False}):
        u = t((L, E), dtype, 5)
        cases.append((f"unbatched self {wkw}", f_args(m, u, u, u, **wkw)))
        cases.append((f"unbatched masks {wkw}", f_args(
            m, u, t((S, E), dtype, 6), t((S, E), dtype, 6), key_padding_mask=kpm[1],
            attn_mask=t((HEADS, L, S), dtype, 7) > 0, **wkw)))
        static_k, static_v = (t((N * HEADS, 6, E // HEADS), dtype, seed) for seed in (8, 9))
        cases.append((f"static k/v {wkw}", f_args(m, x, y, y, static_k=static_k,
                                                  static_v=static_v, **wkw)))
        empty = t((L, 0, E), dtype, 10)
        cases.append((f"empty batch {wkw}", f_args(m, empty, empty, empty, **wkw)))
    for what, (args, kwargs) in cases:
        check(RF.multi_head_attention_forward, args, kwargs, what)


def test_ref_raises_eagers_errors():
    """Where eager raises, the ref raises the same error, with eager's message."""
    m, ms = module(), module(kdim=6, vdim=4)
    x, y = t((L, N, E), seed=1), t((S, N, E), seed=2)
    args, kw = f_args(m, x, y, y)
    bad = {
        "number query": ((1.0, y, y, *args[3:]), kw),
        "4-d query": ((t((1, L, N, E)), y, y, *args[3:]), kw),
        "2-d query, 3-d key": ((t((L, E)), y, y, *args[3:]), kw),
        "unbatched query, batched key": ((t((L, E)), y, y, *args[3:]), kw),
        "unbatched, 2-d kpm": ((t((L, E)), t((S, E)), t((S, E)), *args[3:]),
                               {**kw, "key_padding_mask": torch.zeros(1, S, dtype=torch.bool)}),
        "unbatched, 3-d attn shape": ((t((L, E)), t((S, E)), t((S, E)), *args[3:]),
                                      {**kw, "attn_mask": torch.zeros(HEADS + 1, L, S)}),
        "embed dim": ((x, y, y, 6, *args[4:]), kw),
        "heads": ((x, y, y, E, 3, *args[5:]), kw),
        "key/value shapes": ((x, y, t((S + 1, N, E)), *args[3:]), kw),
        "no in_proj_weight": ((x, y, y, E, HEADS, None, *args[6:]), kw),
        "int mask": (args, {**kw, "key_padding_mask": torch.zeros(N, S, dtype=torch.int64)}),
        "kpm shape": (args, {**kw, "key_padding_mask": torch.zeros(N, S + 1, dtype=torch.bool)}),
        "kpm 3-d": (args, {**kw, "key_padding_mask": torch.zeros(1, N, S, dtype=torch.bool)}),
        "attn 2-d shape": (args, {**kw, "attn_mask": torch.zeros(L, S + 1)}),
        "attn 3-d shape": (args, {**kw, "attn_mask": torch.zeros(HEADS, L, S)}),
        "attn 4-d": (args, {**kw, "attn_mask": torch.zeros(1, 1, L, S)}),
        "is_causal without mask": (args, {**kw, "is_causal": True}),
        "bias_k alone": ((*args[:7], t((1, 1, E)), None, *args[9:]), kw),
        "bias_v alone": ((*args[:7], None, t((1, 1, E)), *args[9:]), kw),
        "bias_k with static_k": ((*args[:7], t((1, 1, E)), t((1, 1, E)), *args[9:]),
                                 {**kw, "static_k": t((N * HEADS, S, E // HEADS))}),
        "static_k size": (args, {**kw, "static_k": t((N, S, E // HEADS))}),
        "static_v head dim": (args, {**kw, "static_v": t((N * HEADS, S, 3))}),
        "separate, no q weight": (f_args(ms, x, t((S, N, 6)), t((S, N, 4)))[0],
                                  {**f_args(ms, x, t((S, N, 6)), t((S, N, 4)))[1],
                                   "q_proj_weight": None}),
        "separate, kdim mismatch": f_args(ms, x, t((S, N, 5)), t((S, N, 4))),
        "separate, key/value batch": f_args(ms, x, t((S, N, 6)), t((S + 1, N, 4))),
        "mixed dtypes": f_args(m, x.double(), y, y),
    }
    for what, (a, k) in bad.items():
        check(RF.multi_head_attention_forward, a, k, what, message=True)
    # masks of another float dtype than the query's: baddbmm's and sdpa's dtype errors
    # (refs.baddbmm words its own)
    for mkw in ({"key_padding_mask": t((N, S), torch.float64)},
                {"attn_mask": t((L, S), torch.float64)},
                {"attn_mask": t((L, S), torch.float64), "need_weights": False},
                {"attn_mask": t((L, S), torch.float16), "key_padding_mask": t((N, S)) > 0}):
        check(RF.multi_head_attention_forward, args, {**kw, **mkw}, f"mask dtypes {mkw}")


def test_mismatched_mask_types_warn_as_eager():
    m = module()
    x = t((L, N, E))
    args, kw = f_args(m, x, x, x, key_padding_mask=torch.zeros(N, L, dtype=torch.bool),
                      attn_mask=torch.zeros(L, L))
    for fn in (F.multi_head_attention_forward, RF.multi_head_attention_forward):
        with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
            fn(*args, **kw)


# --- dropout ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, need_weights", [
    (torch.float32, True), (torch.float32, False), (torch.float64, True), (torch.float64, False),
    (torch.float16, True), (torch.bfloat16, True)], ids=str)
def test_dropout_draws_eagers_mask(dtype, need_weights):
    """With need_weights eager drops the weights with F.dropout, without them sdpa drops
    them (its math path on the CPU in float32/float64, F.dropout's draws again): the ref and
    jit draw the same numbers for a seed."""
    m = module(dtype, dropout=0.4)
    x, y = t((L, N, E), dtype, 1), t((S, N, E), dtype, 2)
    kpm = torch.rand(N, S, generator=torch.Generator().manual_seed(0)) > 0.8
    args, kw = f_args(m, x, y, y, need_weights=need_weights, key_padding_mask=kpm)
    assert kw["training"]

    def draw(fn):
        torch.manual_seed(11)
        return fn(*args, **kw)
    eager = draw(F.multi_head_attention_forward)
    jfn = primtrace.jit(F.multi_head_attention_forward, executors=[primtrace.TORCH])  # prims
    with torch.no_grad():
        for fn in (RF.multi_head_attention_forward, jfn):
            got = draw(fn)
            torch.testing.assert_close(got[0], eager[0])
            if need_weights:
                torch.testing.assert_close(got[1], eager[1])
        assert not torch.equal(draw(jfn)[0], jfn(*args, **kw)[0])   # a new draw per call


def test_sdpa_dropout_in_half_precision_is_left_to_torch():
    """Without weights eager drops inside sdpa, whose ref has no dropout in half precision
    (eager's CPU kernel draws its own way): the call is torch's (opaque). Not training, or
    with weights (F.dropout's draws), it has its ref."""
    m = module(torch.float16, dropout=0.3)
    x = t((L, N, E), torch.float16)
    args, kw = f_args(m, x, x, x, need_weights=False)
    with pytest.raises(NotImplementedError):
        RF.multi_head_attention_forward(*args, **kw)
    opaque = [name for name, _ in _opaque(F.multi_head_attention_forward, *args, **kw)]
    assert opaque == ["torch.nn.functional.multi_head_attention_forward"]
    for other in ({"training": False}, {"need_weights": True}):
        assert _opaque(F.multi_head_attention_forward, *args, **{**kw, **other}) == []
    check(RF.multi_head_attention_forward, args, {**kw, "training": False}, "not training")


# --- through jit ------------------------------------------------------------------------------
def _opaque(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return primtrace.explain(fn, *args, **kwargs).opaque


JIT_CASES = [  # (name, module options, call keywords, batch_first)
    ("self, kpm, weights", {}, {"key_padding_mask": "kpm"}, False),
    ("self, no weights", {}, {"need_weights": False, "attn_mask": "causal"}, True),
    ("causal hint", {}, {"need_weights": False, "attn_mask": "causal", "is_causal": True}, True),
    ("per head", {"bias_kv": True, "zero_attn": True},
     {"average_attn_weights": False, "key_padding_mask": "kpm"}, False),
    ("kdim vdim", {"kdim": 6, "vdim": 4}, {"need_weights": False}, True),
]


def _module_call(options, call, batch_first, dtype=torch.float32):
    m = module(dtype, batch_first=batch_first, **options)
    x = t((N, L, E) if batch_first else (L, N, E), dtype, 1)
    kv = x
    if "kdim" in options:
        k = t((N, L, 6) if batch_first else (L, N, 6), dtype, 2)
        v = t((N, L, 4) if batch_first else (L, N, 4), dtype, 3)
    else:
        k = v = kv
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[1, -2:] = True
    named = {"kpm": kpm, "causal": torch.ones(L, L, dtype=torch.bool).tril().logical_not()}
    kwargs = {key: named.get(value, value) if isinstance(value, str) else value
              for key, value in call.items()}
    return m, (x, k, v), kwargs


@pytest.mark.parametrize("name, options, call, batch_first", JIT_CASES,
                         ids=[c[0] for c in JIT_CASES])
def test_jit_module_values_grads_and_no_opaque_op(name, options, call, batch_first):
    """The module through jit: no opaque op, the outputs and weights of eager without grad
    (the prims run) and with it, and the parameters' gradients of eager's (backward outside
    jit; the call then runs as eager's own, for autograd)."""
    m, args, kwargs = _module_call(options, call, batch_first)
    assert _opaque(m, *args, **kwargs) == []
    jm = primtrace.jit(m)
    with torch.no_grad():
        check_module(jm, m, args, kwargs, name)
    eager, ours = m(*args, **kwargs), jm(*args, **kwargs)
    grads = []
    for out in (eager, ours):
        m.zero_grad()
        loss = out[0].square().sum() + (out[1].sum() if out[1] is not None else 0)
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
    for n, expected in grads[0].items():   # jit's q, k, v are three inputs: eager's three
        scale = float(expected.abs().max())   # linears where it had one (rounding apart)
        torch.testing.assert_close(grads[1][n], expected, rtol=1.3e-6, atol=1e-6 * scale,
                                   msg=lambda m, n=n: f"{name}: grad of {n}: {m}")


def check_module(fn, m, args, kwargs, what):
    expected, got = m(*args, **kwargs), fn(*args, **kwargs)
    for i, (g, e) in enumerate(zip(got, expected)):
        if e is None:
            assert g is None, f"{what}: output {i} is not None"
            continue
        memo = {}

        def reference(i=i):
            return m.double()(*_upcast(args, memo), **_upcast(kwargs, memo))[i]
        problem = compare_outputs(g, e, reference)
        m.to(e.dtype)
        assert problem is None, f"{what}: output {i}: {problem}"


@pytest.mark.parametrize("need_weights", [True, False])
def test_fast_path_model_through_jit(need_weights):
    """Eval mode under no_grad, batch_first self-attention: eager takes the fast path
    (torch._native_multi_head_attention); traced, the proxies' __torch_function__ turns it
    off, so jit runs the ref (no opaque op) and gives the fast path's values."""
    m, args, kwargs = _module_call({}, {"key_padding_mask": "kpm", "need_weights": need_weights},
                                   batch_first=True)
    m.eval()
    native = torch._native_multi_head_attention
    with torch.no_grad():
        with mock.patch.object(torch, "_native_multi_head_attention", wraps=native) as spy:
            m(*args, **kwargs)
        assert spy.called, "eager did not take the fast path: the test checks nothing"
        assert _opaque(m, *args, **kwargs) == []
        check_module(primtrace.jit(m), m, args, kwargs, "fast path")


#: through jit, the default executors keep the call whole (its matmuls do not fuse: torch's
#: own call runs); these run the ref's prims, one by one or fused without the cost model
PRIMS_RUN = {"torch executor": [primtrace.TORCH],
             "numba, no cost model": [NumbaFusionExecutor(cost_model=False), primtrace.TORCH]}


@pytest.mark.parametrize("executors", PRIMS_RUN.values(), ids=PRIMS_RUN.keys())
def test_jit_runs_the_refs_prims(executors):
    """F.multi_head_attention_forward through jit with its prims run (each dtype, a few
    options), and a module in eval mode under no_grad, where eager takes the fast path."""
    jfn = primtrace.jit(F.multi_head_attention_forward, executors=executors)
    for dtype in DTYPES:
        m = module(dtype)
        x, y = t((L, N, E), dtype, 1), t((S, N, E), dtype, 2)
        for kw in ({"attn_mask": t((L, S), dtype, 3)}, {"need_weights": False},
                   {"average_attn_weights": False, "key_padding_mask": t((N, S), dtype, 4) > 0}):
            args, kwargs = f_args(m, x, y, y, **kw)
            with torch.no_grad():
                check(jfn, args, kwargs, f"{dtype} {sorted(kw)}")
            nodes = primtrace.last_trace(jfn).flat_nodes()
            assert [n for n in nodes if n.symbol.kind == "opaque"] == []
    m, args, kwargs = _module_call({}, {"key_padding_mask": "kpm"}, batch_first=True)
    with torch.no_grad():
        check_module(primtrace.jit(m.eval(), executors=executors), m, args, kwargs, "eval")


def test_torch_name_maps_to_the_ref():
    from primtrace.tracer import mapping
    assert mapping.resolve(F.multi_head_attention_forward).ref is RF.multi_head_attention_forward
