"""The model cases and the comparison helpers the program tests share."""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import primtrace

from . import models

MODES = ("jit", "compile")


def compile_with(mode: str, fn):
    """``fn`` (a module or a function) through primtrace.jit or torch.compile's primtrace backend."""
    if mode == "jit":
        return primtrace.jit(fn)
    assert mode == "compile"
    return torch.compile(fn, backend="primtrace")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def get_path(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def set_path(obj, path: str, value):
    *parents, last = path.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


# --- inputs ----------------------------------------------------------------------------------
def mlp_inputs(seed, batch=4):
    g = gen(seed)
    return (torch.randn(batch, 16, generator=g), torch.randn(batch, 8, generator=g)), {}


def mlp_alt_inputs(seed):
    g = gen(seed)
    return (torch.randn(3, 5, 16, generator=g),), {}  # no residual, 3-d input


def conv_inputs(seed, batch=4):
    return (torch.rand(batch, 3, 16, 16, generator=gen(seed)),), {}


def conv_alt_inputs(seed):
    return (torch.rand(2, 3, 12, 12, generator=gen(seed)),), {}


def seq_inputs(seed, batch=2, seq=12, dim=32):
    return (torch.randn(batch, seq, dim, generator=gen(seed)),), {}


def seq_alt_inputs(seed):
    return seq_inputs(seed, batch=3, seq=8)


def llama_alt_inputs(seed):
    (x,), _ = seq_inputs(seed, batch=2, seq=8)
    return (x,), {"position_ids": (torch.arange(8) + 5).unsqueeze(0).expand(2, -1)}


def bert_inputs(seed, lengths=(10, 7, 4), seq=10):
    g = gen(seed)
    ids = torch.randint(1, 50, (len(lengths), seq), generator=g)
    mask = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]
    return (ids.masked_fill(~mask, 0), mask), {}


def bert_alt_inputs(seed):
    g = gen(seed)
    ids = torch.randint(1, 50, (2, 6), generator=g)
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    return (ids,), {"token_type_ids": token_type_ids}  # no padding mask: built with new_ones


# --- cases -----------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    build: Callable[[float], nn.Module]   # dropout probability -> model
    inputs: Callable                      # seed -> (args, kwargs)
    alt_inputs: Callable                  # seed -> (args, kwargs): other shapes / optional args
    attr: tuple                           # (dotted path of a plain attribute read in forward, new value)
    glob: tuple                           # (name of a global in models read in forward, new-value factory)
    param: str                            # dotted path of a parameter
    submodule: str                        # dotted path of an nn.Linear submodule
    buffer: tuple | None                  # (dotted path of a buffer, in-place update of it)
    has_batchnorm: bool = False


def _bert(attention):
    return lambda p: models.BertEncoder(models.BertConfig(
        hidden_dropout_prob=p, attention_probs_dropout_prob=p, attention=attention))


CASES = [
    Case("mlp", lambda p: models.MLP(models.MLPConfig(dropout=p, input_noise=p)), mlp_inputs, mlp_alt_inputs,
         attr=("scale", 3.0), glob=("MLP_OUT_SHIFT", lambda: torch.linspace(-1.0, 1.0, 8)),
         param="fc2.weight", submodule="fc2", buffer=("input_mean", lambda b: b.add_(0.5))),
    Case("convnet", lambda p: models.ConvNet(models.ConvNetConfig(dropout=p)), conv_inputs, conv_alt_inputs,
         attr=("temperature", 2.5), glob=("IMAGE_MEAN", lambda: torch.tensor([0.1, 0.5, 0.9]).view(3, 1, 1)),
         param="fc.weight", submodule="fc", buffer=("features.1.running_var", lambda b: b.mul_(4.0)), has_batchnorm=True),
    Case("gpt_sdpa", lambda p: models.GPTBlock(models.GPTConfig(dropout=p, use_sdpa=True, drop_path=p)),
         seq_inputs, seq_alt_inputs,
         attr=("attn.scale", 0.05), glob=("RESIDUAL_SCALE", lambda: 0.5),
         param="attn.c_proj.weight", submodule="mlp.c_proj", buffer=None),
    Case("gpt_explicit", lambda p: models.GPTBlock(models.GPTConfig(dropout=p, use_sdpa=False, drop_path=p)),
         seq_inputs, seq_alt_inputs,
         attr=("attn.scale", 0.05), glob=("RESIDUAL_SCALE", lambda: 0.5),
         param="attn.c_proj.weight", submodule="mlp.c_proj", buffer=("attn.bias", lambda b: b.fill_(1.0))),
    Case("llama", lambda p: models.LlamaBlock(models.LlamaConfig(attention_dropout=p)),
         seq_inputs, llama_alt_inputs,
         attr=("self_attn.scaling", 0.1), glob=("RESIDUAL_SCALE", lambda: 0.5),
         param="mlp.w2.weight", submodule="mlp.w2", buffer=("rotary_emb.cos_cached", lambda b: b.mul_(0.5))),
    Case("bert_manual", _bert("manual"), bert_inputs, bert_alt_inputs,
         attr=("embeddings.embed_scale", 2.0), glob=("RESIDUAL_SCALE", lambda: 0.5),
         param="layer.output.weight", submodule="layer.output",
         buffer=("embeddings.position_ids", lambda b: b.copy_(b.flip(-1)))),
    Case("bert_mha", _bert("torch"), bert_inputs, bert_alt_inputs,
         attr=("embeddings.embed_scale", 2.0), glob=("RESIDUAL_SCALE", lambda: 0.5),
         param="layer.attention.in_proj_weight", submodule="layer.output",
         buffer=("embeddings.position_ids", lambda b: b.copy_(b.flip(-1)))),
]



def make_pair(case: Case, dropout: float, seed: int = 0):
    """Two identical models (deep copies of one built from ``seed``): eager's and the compiled one's."""
    torch.manual_seed(seed)
    base = case.build(dropout)
    return copy.deepcopy(base), copy.deepcopy(base)


# --- comparisons -----------------------------------------------------------------------------
def _one_line(text) -> str:
    return " ".join(str(text).split())


def assert_same(actual, expected, what=""):
    """Same structure; tensors: same shape and dtype, then close values, the same strides
    (code downstream may ``view`` the result) and the same requires_grad (all reported)."""
    prefix = f"{what}: " if what else ""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), \
            f"{prefix}structure {type(actual)} != {type(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{i}]")
        return
    assert isinstance(actual, torch.Tensor), f"{prefix}got {type(actual).__name__}, expected a tensor"
    assert actual.shape == expected.shape, f"{prefix}shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{prefix}dtype {actual.dtype} != {expected.dtype}"
    problems = []
    try:
        torch.testing.assert_close(actual.detach(), expected.detach())
    except AssertionError as e:
        problems.append(_one_line(e))
    if actual.stride() != expected.stride() and actual.numel() > 1:
        problems.append(f"strides {actual.stride()} != eager's {expected.stride()}")
    if actual.requires_grad != expected.requires_grad:
        problems.append(f"requires_grad {actual.requires_grad} != eager's {expected.requires_grad}")
    assert not problems, prefix + "; ".join(problems)


def assert_differs(a, b, what):
    assert not torch.allclose(a.detach(), b.detach()), f"{what}: outputs are equal, expected them to differ"


def loss_fn(out, seed=99):
    """A simple non-degenerate loss: mean squared error to a fixed random target."""
    target = torch.randn(out.shape, generator=gen(seed))
    return (out - target).pow(2).mean()


def assert_grads_match(model, eager_model, what="grads"):
    """Every parameter's grad equals eager's; none missing."""
    params = dict(model.named_parameters())
    eager_params = dict(eager_model.named_parameters())
    assert params.keys() == eager_params.keys()
    missing = [n for n, p in params.items() if p.grad is None and eager_params[n].grad is not None]
    assert not missing, f"{what}: no grad for {missing}"
    wrong = []
    for name, p in params.items():
        e = eager_params[name].grad
        if e is None:
            if p.grad is not None:
                wrong.append(f"{name} has a grad, eager's has none")
        elif not torch.allclose(p.grad, e, rtol=1.3e-6, atol=1e-5):
            wrong.append(f"{name} (max abs diff {(p.grad - e).abs().max().item():.3g})")
    assert not wrong, f"{what}: differ from eager's for {wrong}"


def assert_state_match(model, eager_model, what="state"):
    """Parameters and buffers equal eager's."""
    state, eager_state = model.state_dict(keep_vars=True), eager_model.state_dict(keep_vars=True)
    assert state.keys() == eager_state.keys()
    for name, value in state.items():
        torch.testing.assert_close(value.detach(), eager_state[name].detach(),
                                   msg=lambda m, name=name: _one_line(f"{what}: {name}: {m}"))


class Phases:
    """Soft checks: a failing phase is recorded and the test goes on, so that one report shows
    every symptom (stale values after a change *and* missing grads, say); ``done()`` fails
    the test with all of them."""

    def __init__(self):
        self.failures = []

    @contextlib.contextmanager
    def __call__(self, name):
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure of the phase is the finding
            text = _one_line(e)
            text = text if text.startswith(name) else f"{name}: {text}"
            self.failures.append(text if isinstance(e, AssertionError) else f"{type(e).__name__}: {text}")

    def done(self):
        if self.failures:
            raise AssertionError("\n".join(["", *self.failures]))
