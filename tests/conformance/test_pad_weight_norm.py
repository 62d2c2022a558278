"""F.pad's reflect/replicate/circular modes, torch._weight_norm and the conv1d call forms
that use them (nn.Conv1d's padding_mode, a weight-normed Conv1d as Wav2Vec2's positional
convolution): refs against eager on real tensors and through jit (values, dtype, shape,
strides), eager's errors, and no opaque call left."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs

MODES = ("reflect", "replicate", "circular")
PAD_INPUTS = [
    ("3-d", lambda: torch.randn(2, 3, 5)), ("2-d", lambda: torch.randn(3, 5)),
    ("4-d", lambda: torch.randn(2, 3, 4, 5)), ("5-d", lambda: torch.randn(1, 2, 3, 4, 5)),
    ("transposed", lambda: torch.randn(3, 5, 4).transpose(1, 2)),
    ("channels_last", lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)),
    ("int64", lambda: torch.randint(0, 9, (2, 3, 5))), ("bool", lambda: torch.randn(2, 3, 5) > 0),
    ("no channels", lambda: torch.randn(2, 0, 4)), ("size 1", lambda: torch.randn(2, 3, 1)),
]
PADS = [(1, 2), (0, 4), (2, 2, 1, 0), (1, 1, 1, 1, 1, 1), (5, 0), (-1, 2), (1,), (3, 3)]


def _outcome(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(), None
        except Exception as e:
            return None, e


def _same(got, expected):
    return (got.dtype == expected.dtype and got.shape == expected.shape
            and got.stride() == expected.stride() and torch.equal(got, expected))


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_match_eager(mode):
    failures = []
    for desc, make in PAD_INPUTS:
        torch.manual_seed(0)
        x = make()
        for p in PADS:
            expected, eager_error = _outcome(lambda: F.pad(x, p, mode=mode))
            runs = [("jit", lambda: primtrace.jit(lambda x: F.pad(x, p, mode=mode))(x))]
            if not refs.pad.declines(x, p, mode):
                runs.append(("ref", lambda: refs.pad(x, p, mode)))
            for label, run in runs:
                got, error = _outcome(run)
                if eager_error is not None or error is not None:
                    if type(error) is not type(eager_error):
                        failures.append(f"{desc} {p} {label}: {eager_error!r} vs {error!r}")
                elif not _same(got, expected):
                    failures.append(f"{desc} {p} {label}: {got.shape} {got.stride()} vs "
                                    f"{expected.shape} {expected.stride()}")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_are_refs(mode):
    f = lambda x: F.pad(x, (1, 2), mode=mode)  # noqa: E731
    assert primtrace.explain(f, torch.randn(2, 3, 5)).opaque == []
    assert primtrace.explain(f, torch.randn(3, 5)).opaque == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_weight_norm_matches_eager(dim, dtype):
    torch.manual_seed(0)
    for v in (torch.randn(6, 4, 5), torch.randn(5, 4, 6).transpose(0, 2)):
        v = v.to(dtype)
        kept = None if dim == -1 else dim % 3
        g = torch.randn(*(n if i == kept else 1 for i, n in enumerate(v.shape))).to(dtype) \
            if kept is not None else torch.randn(()).to(dtype)
        expected = torch._weight_norm(v, g, dim)
        f = lambda v, g: torch._weight_norm(v, g, dim)  # noqa: E731
        for got in (refs._weight_norm(v, g, dim), primtrace.jit(f)(v, g)):
            assert (got.dtype, got.shape, got.stride()) == (expected.dtype, expected.shape,
                                                            expected.stride())
            # eager's fused kernel (dim 0 or last) sums in its own order: ulp-level
            torch.testing.assert_close(got, expected, rtol=2 * torch.finfo(dtype).eps, atol=0)
        assert primtrace.explain(f, v, g).opaque == []


def test_weight_norm_errors_are_eagers():
    v, g = torch.randn(4, 3), torch.randn(4, 1)
    for dim in (5, -3):
        with pytest.raises(IndexError):
            torch._weight_norm(v, g, dim)
        with pytest.raises(IndexError):
            primtrace.jit(lambda v, g: torch._weight_norm(v, g, dim))(v, g)


def _conv1d_modules():
    torch.manual_seed(0)
    yield "reflect", torch.nn.Conv1d(6, 4, 3, padding=1, padding_mode="reflect")
    yield "replicate", torch.nn.Conv1d(6, 4, 3, padding=2, padding_mode="replicate", dilation=2)
    yield "circular", torch.nn.Conv1d(6, 6, 4, padding=2, padding_mode="circular", groups=3)
    positional = torch.nn.Conv1d(6, 6, 4, padding=2, groups=3)   # Wav2Vec2's positional conv
    yield "weight_norm", torch.nn.utils.parametrizations.weight_norm(positional, name="weight",
                                                                     dim=2)


@pytest.mark.parametrize("name,module", list(_conv1d_modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_conv1d_modules_match_eager(name, module):
    for x in (torch.randn(2, 6, 10), torch.randn(6, 9)):
        with torch.no_grad():
            expected = module(x)
            got = primtrace.jit(module)(x)
            assert (got.shape, got.stride()) == (expected.shape, expected.stride())
            torch.testing.assert_close(got, expected)
            assert primtrace.explain(module, x).opaque == []


@pytest.mark.parametrize("kwargs", [{"padding": "same", "groups": 2}, {"padding": "valid"},
                                    {"padding": "same", "dilation": 3}])
def test_conv1d_string_padding_unbatched(kwargs):
    x, w = torch.randn(4, 9), torch.randn(6, 4 // kwargs.get("groups", 1), 4)
    f = lambda x, w: F.conv1d(x, w, **kwargs)  # noqa: E731
    expected, got = f(x, w), primtrace.jit(f)(x, w)
    assert (got.shape, got.stride()) == (expected.shape, expected.stride())
    torch.testing.assert_close(got, expected)
    assert primtrace.explain(f, x, w).opaque == []


@pytest.mark.parametrize("groups", [1, 4])
def test_conv1d_of_permuted_inputs_is_a_ref(groups):
    """eager's _convolution makes a 1-d input contiguous first: the ref copies a permuted one
    (a transposed (N, L, C) activation, as Wav2Vec2 passes) and convolves the copy."""
    torch.manual_seed(0)
    w, b = torch.randn(8, 8 // groups, 5), torch.randn(8)
    f = lambda x, w, b: F.conv1d(x, w, b, padding=2, groups=groups)  # noqa: E731
    for x in (torch.randn(2, 12, 8).transpose(1, 2), torch.randn(12, 8).t(),
              torch.randn(8, 2, 12).permute(1, 0, 2)):
        expected, got = f(x, w, b), primtrace.jit(f)(x, w, b)
        assert (got.shape, got.stride()) == (expected.shape, expected.stride())
        assert torch.equal(got, expected)
        assert primtrace.explain(f, x, w, b).opaque == []


def test_wav2vec2_positional_conv_embedding():
    transformers = pytest.importorskip("transformers")
    from transformers.models.wav2vec2.modeling_wav2vec2 import Wav2Vec2PositionalConvEmbedding
    config = transformers.Wav2Vec2Config(hidden_size=16, num_conv_pos_embeddings=8,
                                         num_conv_pos_embedding_groups=4)
    torch.manual_seed(0)
    module = Wav2Vec2PositionalConvEmbedding(config).eval()
    x = torch.randn(2, 12, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected, got = module(x), primtrace.jit(module)(x)
        assert primtrace.explain(module, x).opaque == []
    assert (got.shape, got.stride()) == (expected.shape, expected.stride())
    torch.testing.assert_close(got, expected)
