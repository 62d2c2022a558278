"""Conformance of the convolution and pooling refs (primtrace.refs.nn.convolution over the
library prims of primtrace.prims.library) against eager on CPU: float32/float64/bfloat16/
float16 (and the integer dtypes eager's kernels take or refuse), contiguous, channels_last,
transposed, sliced and size-1-ambiguous layouts, batch size 0, unbatched inputs, groups,
dilation, stride, padding forms ('same', 'valid'), ceil_mode, count_include_pad,
divisor_override, eager's errors (by exception type), and output strides equal to eager's in
every case. Then the torch names, the declined calls, and ``primtrace.jit`` with the default
executors (the bias + relu epilogue fuses after the library call) and with autograd.
"""
import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import prims
from primtrace.ir.proxy import TensorSpec
from primtrace.ir.trace import Trace, tracing
from primtrace.refs.nn import functional as RF
from primtrace.tracer import mapping
from tests.conformance.harness import SampleInput, check_sample, make_tensor

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _layouts(t):
    """t in several memory layouts (same values): contiguous, channels_last, spatial dims
    swapped, sliced, and channels-last-like for 3-d tensors."""
    yield "contiguous", t
    if t.ndim in CL:
        yield "channels_last", t.contiguous(memory_format=CL[t.ndim])
    if t.ndim >= 3:
        yield "transposed", t.transpose(-1, -2).contiguous().transpose(-1, -2)
        yield "channels-last-like", t.movedim(1, -1).contiguous().movedim(-1, 1)
    wide = torch.cat([t, t], dim=-1)[..., ::2] if t.shape[-1] else t
    yield "sliced", wide


def _x(shape, dtype, seed=1):
    if dtype.is_floating_point:
        return make_tensor(shape, dtype, seed=seed, domain=(-3.0, 3.0))
    return make_tensor(shape, dtype, seed=seed, domain=(-3.0, 3.0))


def traced(ref, args, kwargs):
    """The ref on proxies of `args`' tensors: what the meta functions say (nothing runs)."""
    trace = Trace("traced")

    def proxy(a):
        if isinstance(a, torch.Tensor):
            return trace.tensor(TensorSpec.of(a), requires_grad=a.requires_grad)
        return a
    with warnings.catch_warnings(), tracing(trace):
        warnings.simplefilter("ignore")
        return ref(*[proxy(a) for a in args], **{k: proxy(v) for k, v in kwargs.items()})


def check(ref, torch_fn, sample) -> str | None:
    """check_sample on tensors (values, dtype, shape, error kinds: the prims run torch's
    kernels), then the meta functions on proxies: eager's shape, dtype, device and strides,
    or eager's kind of error."""
    problem = check_sample(ref, torch_fn, sample)
    if problem is not None:
        return problem
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected, eager_error = torch_fn(*sample.args, **sample.kwargs), None
    except Exception as e:
        expected, eager_error = None, e
    try:
        spec, meta_error = traced(ref, sample.args, sample.kwargs), None
    except Exception as e:
        spec, meta_error = None, e
    if eager_error is not None:
        if not isinstance(meta_error, type(eager_error)):
            return f"traced: eager raised {eager_error!r}, the meta {meta_error!r}"
        return None
    if meta_error is not None:
        return f"traced: the meta raised {meta_error!r}"
    got = (tuple(spec.shape), spec.dtype, spec.device, spec.stride())
    want = (tuple(expected.shape), expected.dtype, expected.device, expected.stride())
    return None if got == want else f"traced: meta {got}, eager {want}"


def run(ref, torch_fn, samples, limit=6):
    """Every sample conforms, or is declined (then torch runs it); only sliced, permuted or
    transposed layouts may be declined here."""
    failures, count = [], 0
    for sample in samples:
        count += 1
        if ref.declines(*sample.args, **sample.kwargs):
            if not any(w in sample.desc for w in ("sliced", "transposed", "-like", "no channels",
                                                  "batch 0")):
                failures.append(f"[{sample.desc}] declined")
            continue
        problem = check(ref, torch_fn, sample)
        if problem:
            failures.append(f"[{sample.desc}] {problem}")
    assert count
    assert not failures, f"{len(failures)}/{count} fail:\n  " + "\n  ".join(failures[:limit])
    return count


# --- convolution -------------------------------------------------------------------------------
#: (batched input shape, weight shape, keyword arguments), per spatial dims; transposed
#: weights are (in, out / groups, *kernel)
CONV_CASES = {
    1: [((2, 4, 9), (6, 4, 3), {}), ((2, 4, 9), (6, 2, 3), {"groups": 2, "padding": 2}),
        ((1, 4, 9), (4, 1, 2), {"groups": 4, "dilation": 2, "stride": 2}),
        ((2, 4, 9), (6, 4, 4), {"padding": "valid"}), ((2, 4, 9), (6, 4, 3), {"padding": "same"}),
        ((2, 4, 9), (6, 4, 3), {"padding": "same", "dilation": 2}),
        ((2, 4, 9), (6, 4, 1), {"stride": (3,)}), ((2, 4, 9), (4, 4, 3), {"padding": 1}),
        ((2, 4, 9), (6, 2, 4), {"padding": "same", "groups": 2}),   # uneven: padded right
        ((2, 4, 9), (6, 4, 2), {"padding": "same", "dilation": 3})],
    2: [((2, 4, 7, 6), (6, 4, 3, 3), {}), ((2, 4, 7, 6), (6, 4, 3, 3), {"padding": 1}),
        ((1, 4, 7, 6), (8, 2, 3, 2), {"groups": 2, "stride": (2, 1), "padding": (1, 0)}),
        ((2, 4, 7, 6), (4, 1, 3, 3), {"groups": 4, "dilation": 2}),
        ((1, 4, 7, 6), (6, 4, 1, 1), {}), ((16, 2, 3, 3), (3, 2, 1, 1), {}),
        ((2, 4, 7, 6), (6, 4, 3, 3), {"padding": "same"}),
        ((2, 4, 7, 6), (6, 4, 3, 3), {"padding": "same", "dilation": (2, 1)}),
        ((1, 1, 5, 5), (1, 1, 5, 5), {}), ((2, 3, 1, 1), (2, 3, 1, 1), {}),
        ((1, 4, 9, 9), (6, 4, 5, 5), {"padding": "valid", "stride": 2}),
        ((2, 4, 7, 6), (4, 2, 3, 3), {"padding": 1, "groups": 2}),
        ((2, 4, 7, 6), (6, 4, 2, 3), {"padding": "same"})],
    3: [((2, 4, 5, 5, 4), (6, 4, 3, 3, 3), {}), ((1, 4, 5, 5, 4), (6, 4, 3, 3, 3), {}),
        ((2, 4, 5, 5, 4), (4, 2, 3, 1, 2), {"groups": 2, "padding": 1, "dilation": (1, 2, 1)}),
        ((1, 4, 5, 5, 4), (6, 4, 3, 3, 3), {"padding": "same"})],
}
CONV_T_CASES = {
    1: [((2, 4, 6), (4, 3, 3), {}), ((2, 4, 6), (4, 3, 3), {"stride": 2, "output_padding": 1}),
        ((2, 4, 6), (4, 1, 3), {"groups": 4, "padding": 1, "dilation": 2})],
    2: [((2, 4, 5, 4), (4, 3, 3, 3), {}),
        ((1, 4, 5, 4), (4, 2, 3, 2), {"stride": (2, 3), "output_padding": (1, 2), "groups": 2}),
        ((2, 4, 5, 4), (4, 3, 3, 3), {"padding": 1, "dilation": 2, "output_padding": 1}),
        ((1, 4, 5, 4), (4, 3, 1, 1), {})],
    3: [((2, 4, 3, 4, 3), (4, 3, 2, 2, 2), {"stride": 2}),
        ((1, 4, 3, 4, 3), (4, 2, 3, 3, 3), {"groups": 2, "padding": 1})],
}


def _conv_samples(nd, transposed):
    cases = (CONV_T_CASES if transposed else CONV_CASES)[nd]
    for i, (shape, wshape, kw) in enumerate(cases):
        for dtype in FLOATS:
            x, w = _x(shape, dtype, seed=i), _x(wshape, dtype, seed=i + 50)
            out_channels = wshape[1] * kw.get("groups", 1) if transposed else wshape[0]
            b = _x((out_channels,), dtype, seed=i + 90)
            first = dtype is torch.float32
            for (xl, xt), (wl, wt) in itertools.product(_layouts(x), _layouts(w)):
                if not first and (xl, wl) not in (("contiguous", "contiguous"),
                                                  ("channels_last", "contiguous"),
                                                  ("contiguous", "channels_last")):
                    continue
                yield SampleInput((xt, wt, b if wl == "contiguous" else None), dict(kw),
                                  f"{dtype} case {i} x {xl} w {wl}")
            if first:
                yield SampleInput((x[:0], w), dict(kw), f"case {i} batch 0")
                yield SampleInput((x[:0].contiguous(memory_format=CL[x.ndim]) if x.ndim in CL
                                   else x[:0], w), dict(kw), f"case {i} batch 0 channels_last")
                yield SampleInput((x[0], w, b), dict(kw), f"case {i} unbatched")
                yield SampleInput((x[0].movedim(0, -1).contiguous().movedim(-1, 0), w), dict(kw),
                                  f"case {i} unbatched channels-last-like")
    shape, wshape, kw = cases[0]
    x, w = _x(shape, torch.float32), _x(wshape, torch.float32, seed=5)
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):  # eager's integer kernels
        yield SampleInput((x.to(dtype), w.to(dtype)), {}, f"{dtype}")
        yield SampleInput((x[:0].to(dtype), w.to(dtype)), {}, f"{dtype} batch 0")
    yield from _conv_errors(nd, transposed, x, w)


def _conv_errors(nd, transposed, x, w):
    bad = {
        "input/weight dtypes": ((x, w.double()), {}), "weight/input dtypes": ((x.double(), w), {}),
        "bias dtype": ((x, w, torch.zeros(w.shape[0], dtype=torch.float64)), {}),
        "float16 with float32 bias": ((x.half(), w.half(), torch.zeros(w.shape[0])), {}),
        "bias shape": ((x, w, torch.zeros(w.shape[0] + 1)), {}),
        "input dims": ((x[0, 0], w), {}), "weight dims": ((x, w[0]), {}),
        "input channels": ((x[:, :1], w), {}), "groups 0": ((x, w), {"groups": 0}),
        "groups 3": ((x, w), {"groups": 3}), "negative padding": ((x, w), {"padding": -1}),
        "stride 0": ((x, w), {"stride": 0}), "dilation 0": ((x, w), {"dilation": 0}),
        "stride of nd+1": ((x, w), {"stride": (1,) * (nd + 1)}),
        "float stride": ((x, w), {"stride": 1.5}), "input not a tensor": (([1.0], w), {}),
        "kernel too big (sliced)": ((x[..., :1], w), {"padding": 0}),
        "too much padding": ((x, w), {"padding": 9}),
    }
    if transposed:
        bad["output_padding >= stride"] = ((x, w), {"output_padding": 1})
        bad["padding string"] = ((x, w), {"padding": "same"})
    else:
        bad["padding string"] = ((x, w), {"padding": "full"})
        bad["'same' with stride"] = ((x, w), {"padding": "same", "stride": 2})
    for desc, (args, kw) in bad.items():
        yield SampleInput(args, kw, desc)


CONV_NAMES = [f"conv{nd}d" for nd in (1, 2, 3)] + [f"conv_transpose{nd}d" for nd in (1, 2, 3)]


@pytest.mark.parametrize("name", CONV_NAMES)
def test_convolution(name):
    nd, transposed = int(name[-2]), "transpose" in name
    run(getattr(RF, name), getattr(F, name), _conv_samples(nd, transposed))


# --- pooling -------------------------------------------------------------------------------------
POOL_SHAPES = {1: (2, 3, 9), 2: (2, 3, 7, 6), 3: (2, 3, 5, 4, 5)}
MAX_POOL_KW = ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
               {"kernel_size": 3, "stride": 2, "ceil_mode": True},
               {"kernel_size": 2, "dilation": 2, "padding": 1}, {"kernel_size": 2, "stride": []})
AVG_POOL_KW = ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
               {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
               {"kernel_size": 3, "stride": 2, "ceil_mode": True})
AVG_POOL_DIVISOR = ({"kernel_size": 2, "divisor_override": 3},
                    {"kernel_size": 2, "padding": 1, "divisor_override": 0})
POOL_ERRORS = ({"kernel_size": 0}, {"kernel_size": 2, "stride": 0}, {"kernel_size": 2, "padding": 2},
               {"kernel_size": 2, "padding": -1}, {"kernel_size": 20}, {"kernel_size": (2, 2, 2, 2)},
               {"kernel_size": 2.5})
ADAPTIVE_SIZES = {1: (4, 1, (3,), 9, 12, 0, -1), 2: ((3, 2), 1, (1, 1), 4, (None, 2), (5, 7), -1, (0, 2)),
                  3: ((2, 3, 2), 1, (1, 1, 1), (None, 2, None), 3, (0, 1, 1))}


def _pool_inputs(nd, dtypes):
    shape = POOL_SHAPES[nd]
    for dtype in dtypes:
        x = _x(shape, dtype, seed=3)
        layouts = list(_layouts(x)) if dtype is torch.float32 else list(_layouts(x))[:2]
        for layout, t in layouts:
            yield f"{dtype} {layout}", t
        if dtype is torch.float32:
            yield "unbatched", x[0]
            yield "batch 0", x[:0]
            if x.ndim in CL:
                yield "batch 0 channels_last", x[:0].contiguous(memory_format=CL[x.ndim])
            yield "channels 1", _x((2, 1, *shape[2:]), dtype, seed=4).movedim(1, -1)
            yield "spatial 1", _x((2, 3, *([1] * nd)), dtype, seed=4).movedim(1, -1).contiguous().movedim(-1, 1)
            yield "empty spatial", x[..., :0]
            yield "no channels", x[:, :0]
            yield "too few dims", x[0, 0] if nd > 1 else x[0, 0, :2]
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool):
        yield f"{dtype}", _x(shape, dtype, seed=3)
        yield f"{dtype} batch 0", _x(shape, dtype, seed=3)[:0]


def _pool_samples(kind, nd):
    kwargs_list = {"max_pool": MAX_POOL_KW, "avg_pool": AVG_POOL_KW + (AVG_POOL_DIVISOR if nd > 1 else ()),
                   "adaptive_avg_pool": ADAPTIVE_SIZES[nd],
                   "adaptive_max_pool": ADAPTIVE_SIZES[nd]}[kind]
    for desc, x in _pool_inputs(nd, FLOATS):
        for kw in kwargs_list:
            kw = dict(kw) if isinstance(kw, dict) else {"output_size": kw}
            yield SampleInput((x,), kw, f"{desc} {kw}")
    if "adaptive" not in kind:
        x = _x(POOL_SHAPES[nd], torch.float32)
        for kw in POOL_ERRORS:
            yield SampleInput((x,), dict(kw), f"error {kw}")


POOL_NAMES = [f"{kind}{nd}d" for kind in ("max_pool", "avg_pool", "adaptive_avg_pool",
                                           "adaptive_max_pool") for nd in (1, 2, 3)]


@pytest.mark.parametrize("name", POOL_NAMES)
def test_pooling(name):
    kind, nd = name[:-2], int(name[-2])
    run(getattr(RF, name), getattr(F, name), _pool_samples(kind, nd))


@pytest.mark.parametrize("nd", (1, 2, 3))
def test_max_pool_under_autograd_has_eagers_strides(nd):
    """max_pool1d takes another kernel under autograd (2-d on unsqueeze(-2)): the meta follows."""
    samples = [SampleInput((x.detach().requires_grad_(),), dict(kw), f"{layout} {kw}")
               for layout, x in _layouts(_x(POOL_SHAPES[nd], torch.float32)) for kw in MAX_POOL_KW]
    run(getattr(RF, f"max_pool{nd}d"), getattr(F, f"max_pool{nd}d"), samples)


# --- names, declines, prims ---------------------------------------------------------------------
def test_torch_names_map_to_the_refs():
    names = CONV_NAMES + POOL_NAMES
    for name in names:
        for namespace in (F, torch):
            func = getattr(namespace, name, None)
            if func is not None:
                assert mapping.resolve(func).ref is getattr(RF, name), (namespace, name)
    for func in (torch.max_pool2d, torch.avg_pool1d, torch.adaptive_max_pool1d, torch.conv_tbc):
        assert (mapping.resolve(func).ref is not None) == (func is not torch.conv_tbc), func


def test_prims_are_library_prims_not_fused():
    from primtrace.executors.numba import ops
    for name in ("convolution", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"):
        assert prims.ALL_PRIMS[name] is getattr(prims, name)
        assert name not in ops.OPS and "library" in getattr(prims, name).tags


DECLINED = {
    "max_pool2d return_indices": (lambda x: F.max_pool2d(x, 2, return_indices=True), RF.max_pool2d,
                                  lambda x: ((x, 2), {"return_indices": True})),
    "adaptive_max_pool2d return_indices": (
        lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True), RF.adaptive_max_pool2d,
        lambda x: ((x, 2), {"return_indices": True})),
    "conv2d of no channels": (lambda x: F.conv2d(x[:, :0], torch.ones(2, 0, 2, 2)), RF.conv2d,
                              lambda x: ((x[:, :0], torch.ones(2, 0, 2, 2)), {})),
    "complex conv2d": (lambda x: F.conv2d(x.to(torch.complex64), torch.ones(2, 3, 2, 2, dtype=torch.complex64)),
                       None, None),
    "complex adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x.to(torch.complex64), 1),
                                    None, None),
}


@pytest.mark.parametrize("name", list(DECLINED))
def test_declined_calls_run_in_torch(name):
    fn, ref, arguments = DECLINED[name]
    x = _x((2, 3, 6, 6), torch.float32)
    expected = fn(x)
    got = primtrace.jit(fn)(x)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert torch.equal(g, e) and g.stride() == e.stride()
    if ref is not None:
        args, kwargs = arguments(x)
        assert ref.declines(*args, **kwargs)
        with pytest.raises(NotImplementedError):
            ref(*args, **kwargs)


# --- jit ---------------------------------------------------------------------------------------------
def _net(x, w, b, w2):
    y = torch.relu(F.conv2d(x, w, b, padding=1))
    y = F.max_pool2d(y, 2) + F.avg_pool2d(y, 2, ceil_mode=True)[..., :y.shape[-2] // 2, :y.shape[-1] // 2]
    y = F.conv_transpose2d(y, w2, stride=2) * 0.5
    return F.adaptive_avg_pool2d(y, (1, 1)).flatten(1) + F.adaptive_max_pool2d(y, 3).sum((-1, -2))


def _net_args(dtype, layout):
    x = _x((2, 3, 8, 8), dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    return (x, _x((4, 3, 3, 3), dtype, seed=2), _x((4,), dtype, seed=3), _x((4, 5, 2, 2), dtype, seed=4))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_jit_default_executors(dtype, layout):
    jfn = primtrace.jit(_net)
    for _ in range(2):  # traced, then cached
        problem = check_sample(jfn, _net, SampleInput(_net_args(dtype, layout), {}, str(dtype)))
        assert problem is None, problem
    opaque = [name for name, _ in primtrace.explain(_net, *_net_args(dtype, layout)).opaque]
    assert not [name for name in opaque if "conv" in name or "pool" in name], opaque


def test_conv_bias_relu_epilogue_fuses_after_the_library_call():
    def fn(x, w, b):
        return torch.relu(F.conv2d(x, w) + b.view(1, -1, 1, 1))
    x, w, b = _x((2, 3, 8, 8), torch.float32), _x((4, 3, 3, 3), torch.float32, seed=2), _x((4,), torch.float32, seed=3)
    x = x.contiguous(memory_format=torch.channels_last)
    jfn = primtrace.jit(fn)
    got, expected = jfn(x, w, b), fn(x, w, b)
    assert torch.allclose(got, expected) and got.stride() == expected.stride()
    prims_trace, execution = str(primtrace.last_traces(jfn)[1]), str(primtrace.last_trace(jfn))
    assert "prims.convolution(" in prims_trace
    assert "numba_fusion_0" in execution and "prims.maximum" in execution
    conv_line = next(line for line in execution.splitlines() if "conv" in line and "=" in line)
    assert "numba_fusion" not in conv_line   # the library call runs alone, by torch


def test_trace_of_a_ref_records_library_prims():
    x, w = _x((2, 3, 8, 8), torch.float32), _x((4, 3, 3, 3), torch.float32, seed=2)

    def fn(x, w):
        return F.max_pool2d(F.conv2d(x, w, stride=2), 2, ceil_mode=True)
    text = str(primtrace.trace(fn, stage="prims")(x, w))
    assert "prims.convolution(" in text and "prims.max_pool(" in text


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_gradients_through_jit_are_eagers(layout):
    def make():
        x, w, b, w2 = _net_args(torch.float64, layout)
        return [x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), w2.requires_grad_()]
    ours, eager = make(), make()
    loss = primtrace.jit(_net)(*ours).square().sum()
    loss.backward()
    expected = _net(*eager).square().sum()
    expected.backward()
    assert torch.allclose(loss, expected)
    for a, b in zip(ours, eager):
        assert torch.allclose(a.grad, b.grad)


# --- random layouts ------------------------------------------------------------------------------
def _random_layout(shape, dtype, rng):
    """A tensor of `shape` with a random memory order: permuted, channels_last, contiguous or
    sliced (size-1 dims get whatever strides the layout gives them)."""
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    t = _x([shape[p] for p in perm], dtype, seed=rng.randrange(100)).permute(*[perm.index(i) for i in range(len(shape))])
    r = rng.random()
    if r < 0.25 and t.ndim in CL:
        return t.contiguous(memory_format=CL[t.ndim])
    if r < 0.4:
        return t.contiguous()
    if r < 0.5:
        return torch.cat([t, t], -1)[..., ::2]
    return t


def _random_samples(rng, count):
    """(name, sample) pairs: convolutions and pools of random sizes, layouts and arguments."""
    for _ in range(count):
        nd, dtype = rng.choice((1, 2, 3)), rng.choice(FLOATS)
        n, ci = rng.choice((0, 1, 1, 2, 16)), rng.choice((1, 2, 4))
        groups = rng.choice((1, 1, 2)) if ci % 2 == 0 else 1
        co = rng.choice((1, 2, 4)) * groups
        spatial = tuple(rng.choice((1, 2, 3, 5)) for _ in range(nd))
        kernel = tuple(rng.choice((1, 1, 2, 3)) for _ in range(nd))
        transposed = rng.random() < 0.3
        x = _random_layout((n, ci) + spatial, dtype, rng)
        if rng.random() < 0.2 and n:
            x = x[0]
        w = _random_layout(((ci, co // groups) if transposed else (co, ci // groups)) + kernel, dtype, rng)
        kw = {"stride": rng.choice((1, 2)), "padding": rng.choice((0, 1)),
              "dilation": rng.choice((1, 1, 2)), "groups": groups}
        yield f"conv_transpose{nd}d" if transposed else f"conv{nd}d", SampleInput((x, w), kw, f"conv {kw}")
        kind = rng.choice(("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"))
        x = _random_layout((n, ci) + spatial, dtype, rng)
        if rng.random() < 0.2 and n:
            x = x[0]
        if kind.startswith("adaptive"):
            kw = {"output_size": tuple(rng.choice((1, 2, 3)) for _ in range(nd))}
        else:
            kw = {"kernel_size": rng.choice((1, 2)), "stride": rng.choice((1, 2)),
                  "padding": rng.choice((0, 0, 1)), "ceil_mode": rng.random() < 0.3}
            if kind == "max_pool" and rng.random() < 0.3:
                kw["dilation"] = 2
            if kind == "max_pool" and rng.random() < 0.3:
                x = x.detach().requires_grad_()
        yield f"{kind}{nd}d", SampleInput((x,), kw, f"{kind} {kw}")


@pytest.mark.parametrize("threads", [None, 1])
def test_random_layouts_strides_and_errors_as_eager(threads):
    """Random sizes, layouts (size-1 dims with odd strides included), dtypes and arguments: the
    meta gives eager's strides (or eager's error) wherever the ref does not decline. One
    thread changes eager's choice of the mkldnn backend (3-d layouts)."""
    import random
    rng, before = random.Random(7 + (threads or 0)), torch.get_num_threads()
    failures, declined, count = [], 0, 0
    try:
        if threads:
            torch.set_num_threads(threads)
        for name, sample in _random_samples(rng, 150):
            count += 1
            ref = getattr(RF, name)
            if ref.declines(*sample.args, **sample.kwargs):
                declined += 1
                continue
            problem = check(ref, getattr(F, name), sample)
            if problem:
                failures.append(f"{name} {[(tuple(a.shape), a.stride(), a.dtype) for a in sample.args]} "
                                f"{sample.kwargs}: {problem}")
    finally:
        torch.set_num_threads(before)
    assert not failures, f"{len(failures)}/{count}:\n  " + "\n  ".join(failures[:5])
    assert declined < count // 2, (declined, count)  # convs of permuted or sliced operands
