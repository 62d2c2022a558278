"""Training through primtrace's fused backward: 5 AdamW steps, compared with eager step by step.

Every model of the suite (harness.CASES), in train mode, runs 5 AdamW steps through
``primtrace.jit(model)`` and eager on a copy; after each step the loss, the output (strides
and requires_grad included), every parameter's grad, and after the optimizer step every
parameter and buffer (BatchNorm's running statistics) equal eager's. Every call must run
primtrace's fused forward and backward: no fallback to torch's autograd op by op (none of
the suite's models uses what justifies one: hooks on intermediates, retain_grad, custom
autograd.Functions, in-place writes into leaves that require grad, tensor subclasses), and
training never recompiles (the optimizer updates the parameters in place; the guards fetch
them). With dropout the masks come from the same seeded generator as eager's. Also: one
model through ``torch.compile(model, backend="primtrace")``; tied, frozen and shared
parameters; inputs and buffers that require grad; transformers models from tiny configs
(LLaMA; GPT-2 and BERT with PRIMTRACE_SLOW=1, as the dropout cases whose mechanism
gpt_explicit's covers).

AdamW's ``eps`` is 1e-5, not 1e-8: attention's key bias has a gradient that is zero but for
rounding (softmax ignores a constant added to a row of scores), ~1e-10 in eager and in
primtrace alike, and Adam divides that noise by its own magnitude, a full step of ``lr`` in
a random direction: two correct programs would differ by ``lr`` there.
"""
import copy
import os
import warnings

import pytest
import torch
from torch import nn

import primtrace
import primtrace.dynamo

from .harness import (
    CASES,
    assert_grads_match,
    assert_same,
    assert_state_match,
    compile_with,
    loss_fn,
    make_pair,
)

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")

STEPS = 5
FUSED = "_TracedFunctionBackward"
#: what another case's mechanism already covers (dropout on attention: gpt_explicit)
SLOW = pytest.mark.skipif(not os.environ.get("PRIMTRACE_SLOW"), reason="slow: PRIMTRACE_SLOW=1")


def adamw(params, lr=1e-2):
    return torch.optim.AdamW(params, lr=lr, eps=1e-5, weight_decay=0.01)


def run(fn, inputs):
    args, kwargs = inputs
    return fn(*args, **kwargs)


def assert_fused(jfn, out):
    """The last call ran primtrace's forward and backward (no fallback, no plain trace)."""
    traces = primtrace.last_traces(jfn)
    assert traces[1].tags.get("fallback") is None, traces[1].tags["fallback"]
    assert "backward" in traces[-1].tags, "the call compiled no backward"
    assert type(out.grad_fn).__name__ == FUSED, type(out.grad_fn).__name__


def train_both(model, eager, call, steps=STEPS, seeds=None, modes=None, lr=1e-2,
               loss_of=loss_fn, check=None):
    """`steps` AdamW steps on both models; `call(module, step)` returns the output. Per step:
    `seeds` seeds torch's generator before each forward (dropout), `modes` sets train/eval."""
    opt, eager_opt = adamw(model.parameters(), lr), adamw(eager.parameters(), lr)
    for step in range(steps):
        for m in (model, eager):
            m.train(True if modes is None else modes[step])
        opt.zero_grad(), eager_opt.zero_grad()
        if seeds is not None:
            torch.manual_seed(seeds[step])
        ref = call(eager, step)
        eager_loss = loss_of(ref)
        eager_loss.backward()
        if seeds is not None:
            torch.manual_seed(seeds[step])
        out = call(None, step)
        loss = loss_of(out)
        if check is not None:
            check(out)
        assert_same(out, ref, f"step {step + 1}: output")
        assert_same(loss, eager_loss, f"step {step + 1}: loss")
        loss.backward()
        assert_grads_match(model, eager, f"step {step + 1}: grads")
        opt.step(), eager_opt.step()
        assert_state_match(model, eager, f"after step {step + 1}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_adamw_5_steps(case):
    """Dropout 0 (the modules run): every step fused and equal to eager's."""
    eager, model = make_pair(case, dropout=0.0)
    jfn = primtrace.jit(model)
    train_both(model, eager, lambda m, step: run(m or jfn, case.inputs(10 + step)),
               check=lambda out: assert_fused(jfn, out))
    assert primtrace.cache_info(jfn).misses == 1


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.name, marks=[SLOW] if c.name in ("llama", "bert_manual", "gpt_sdpa",
                                                         "bert_mha") else [])
    for c in CASES])
def test_adamw_with_dropout_and_an_eval_step(case):
    """Dropout (and the MLP's input noise, GPT's drop path) p=0.1, masks from the same seeded
    generator as eager's; the third step runs in eval mode (dropout off, BatchNorm on its
    running statistics), the later ones in train mode again: two compiles, both fused."""
    eager, model = make_pair(case, dropout=0.1)
    jfn = primtrace.jit(model)
    train_both(model, eager, lambda m, step: run(m or jfn, case.inputs(20 + step)),
               seeds=[5, 6, 7, 8, 9], modes=[True, True, False, True, True],
               check=lambda out: assert_fused(jfn, out))
    assert primtrace.cache_info(jfn).misses == 2


def test_adamw_through_torch_compile():
    """torch.compile(model, backend="primtrace"): Dynamo's graph runs primtrace's fused
    forward and backward."""
    case = next(c for c in CASES if c.name == "gpt_explicit")
    eager, model = make_pair(case, dropout=0.0)
    fn = compile_with("compile", model)
    before = {id(g) for g in primtrace.dynamo.graphs()}

    def check(out):
        assert type(out.grad_fn).__name__ == FUSED, type(out.grad_fn).__name__
    train_both(model, eager, lambda m, step: run(m or fn, case.inputs(30 + step)), check=check)
    graphs = [g for g in primtrace.dynamo.graphs() if id(g) not in before]
    assert graphs, "no graph reached the primtrace backend"
    for g in graphs:
        assert g.fallback_reason is None, g.fallback_reason
        assert g.last_traces()[1].tags.get("fallback") is None
        assert "backward" in g.last_traces()[-1].tags


# --- parameters in unusual arrangements ----------------------------------------------------
class Tied(nn.Module):
    """An embedding tied to the output projection (GPT-2's wte / lm_head), a frozen layer,
    a buffer, and a parameter used twice."""

    def __init__(self, vocab=20, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.frozen = nn.Linear(width, width)
        self.frozen.requires_grad_(False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.gate = nn.Parameter(torch.ones(width))
        self.register_buffer("shift", torch.zeros(width))

    def forward(self, ids):
        h = self.embed(ids) * self.gate
        h = self.norm(torch.tanh(self.frozen(h)) + self.shift) * self.gate
        return self.head(h)


def tied_inputs(step):
    return torch.randint(0, 20, (3, 7), generator=torch.Generator().manual_seed(step))


def test_tied_and_frozen_parameters():
    """A weight shared by two modules gets the sum of both uses' gradients; a frozen layer
    gets none; the output's requires_grad and the grads follow eager's."""
    torch.manual_seed(0)
    eager = Tied()
    model = copy.deepcopy(eager)
    assert model.head.weight is model.embed.weight
    jfn = primtrace.jit(model)
    train_both(model, eager, lambda m, step: (m or jfn)(tied_inputs(step)),
               check=lambda out: assert_fused(jfn, out))
    assert model.frozen.weight.grad is None
    assert primtrace.cache_info(jfn).misses == 1


class WithOffset(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3))
        self.register_buffer("offset", torch.randn(3).requires_grad_())

    def forward(self, x):
        return self.net(x) + self.offset


def test_inputs_that_require_grad_and_a_buffer_that_does():
    """An input that requires grad (a saliency or adversarial step) gets eager's gradient,
    and so does a buffer that requires grad (state tensors differentiate like arguments)."""
    torch.manual_seed(0)
    eager = WithOffset()
    model = copy.deepcopy(eager)
    jfn = primtrace.jit(model)
    xs = {}

    def call(m, step):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step)).requires_grad_()
        xs[m is None] = x
        return (m or jfn)(x)

    def check(out):
        assert_fused(jfn, out)
    train_both(model, eager, call, steps=1, check=check)
    torch.testing.assert_close(xs[True].grad, xs[False].grad)
    torch.testing.assert_close(model.offset.grad, eager.offset.grad)


# --- transformers models (tiny configs, random weights) ------------------------------------
VOCAB = 100


def _gpt2(transformers):
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=16, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _llama(transformers):
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0))


def _bert(transformers):
    return transformers.BertForMaskedLM(transformers.BertConfig(
        num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


@pytest.mark.parametrize("build", [_llama, pytest.param(_gpt2, marks=SLOW),
                                   pytest.param(_bert, marks=SLOW)],
                         ids=["llama", "gpt2", "bert"])
def test_transformers_model_trains_fused(build):
    """``model(input_ids=, attention_mask=, labels=)`` in train mode, the loss computed by the
    model (transformers' loss functions; BERT's makes a CrossEntropyLoss in its forward).
    lr 1e-3: f32 rounding differs between any two correct programs, and Adam's normalization
    grows it step by step (primtrace's gradients are as close to float64's as eager's)."""
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # transformers' config and deprecation notes
        torch.manual_seed(0)
        model = build(transformers)
    model.train()
    eager = copy.deepcopy(model)
    jfn = primtrace.jit(model)
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(STEPS):
        ids = torch.randint(1, VOCAB, (2, 8), generator=g)
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[1, 6:] = 0
        batches.append(dict(input_ids=ids, attention_mask=mask, labels=ids))

    def call(m, step):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (m or jfn)(**batches[step]).loss
    train_both(model, eager, call, lr=1e-3, loss_of=lambda loss: loss,
               check=lambda loss: assert_fused(jfn, loss))
    assert primtrace.cache_info(jfn).misses == 1
