"""Real models through primtrace.jit(model) and torch.compile(model, backend="primtrace"),
compared with eager: outputs, grads, training, and state changes after the first call.

Value checks in train mode use dropout p=0 (the modules are there and run); dropout itself is
checked separately: seeded masks match eager's, and eval()/train() switch it off and on.
"""
import pytest
import torch
from torch import nn

import primtrace.dynamo
from primtrace.tracer import mapping

from . import models
from .harness import (
    CASES,
    MODES,
    Phases,
    assert_differs,
    assert_grads_match,
    assert_same,
    assert_state_match,
    compile_with,
    get_path,
    loss_fn,
    make_pair,
    set_path,
)

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")

modes = pytest.mark.parametrize("mode", MODES)

# Marked slow (the whole suite takes over a minute; `-m "not slow"` is the quick subset):
# checks whose mechanism another case already covers. gpt_sdpa and bert_mha differ from
# gpt_explicit and bert_manual only in the attention op (sdpa, nn.MultiheadAttention): their
# value and grad checks stay quick; llama's state-change checks repeat what mlp, convnet,
# gpt_explicit and bert_manual check; eval-mode grads differ from train-mode ones (dropout
# p=0) only through BatchNorm.
SLOW_VARIANTS = {"gpt_sdpa", "bert_mha"}
SLOW_STATE = SLOW_VARIANTS | {"llama"}
SLOW_EVAL_GRADS = {c.name for c in CASES if not c.has_batchnorm}


def over_cases(slow=(), where=lambda case: True):
    return pytest.mark.parametrize("case", [
        pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.name in slow else [])
        for c in CASES if where(c)])


cases = over_cases()


def run(fn, inputs):
    args, kwargs = inputs
    return fn(*args, **kwargs)


def backward_both(out, ref, model, eager, phases, what="grads"):
    """loss.backward() through eager's output and the compiled one's; every parameter's grad equal."""
    for m in (model, eager):
        m.zero_grad(set_to_none=True)
    loss_fn(ref).backward()
    with phases(what):
        assert out is not None, "no output to differentiate (the call failed)"
        loss_fn(out).backward()
        assert_grads_match(model, eager, what)


# --- outputs ---------------------------------------------------------------------------------
@modes
@cases
def test_eval_output_no_grad(case, mode):
    """Inference: eval mode under no_grad (eval mode with grad: test_grads[eval]). In compile
    mode also: every graph Dynamo hands the backend runs through primtrace, not a fallback
    (so that the compile-mode checks test primtrace)."""
    eager, model = make_pair(case, dropout=0.1)
    eager.eval(), model.eval()
    fn = compile_with(mode, model)
    before = {id(g) for g in primtrace.dynamo.graphs()}
    with torch.no_grad():
        for seed in (1, 2):
            assert_same(run(fn, case.inputs(seed)), run(eager, case.inputs(seed)), f"call with inputs {seed}")
    if mode == "compile":
        new = [g for g in primtrace.dynamo.graphs() if id(g) not in before]
        assert new, "no graph reached the primtrace backend"
        fell_back = [g.fallback_reason for g in new if g.fallback_reason is not None]
        assert not fell_back, f"{len(fell_back)} of {len(new)} graphs ran in eager torch: {fell_back}"


@modes
@over_cases(SLOW_VARIANTS)
def test_second_input_kind(case, mode):
    """Other shapes, and optional arguments given / left to their None default."""
    eager, model = make_pair(case, dropout=0.1)
    eager.eval(), model.eval()
    fn = compile_with(mode, model)
    with torch.no_grad():
        assert_same(run(fn, case.inputs(1)), run(eager, case.inputs(1)), "first kind")
        assert_same(run(fn, case.alt_inputs(2)), run(eager, case.alt_inputs(2)), "second kind")
        assert_same(run(fn, case.inputs(3)), run(eager, case.inputs(3)), "first kind again")


@cases
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_no_opaque_op(case, train):
    """Every torch call of the models has a ref: explain names no opaque op (with grad and
    under no_grad, where an eval-mode nn.MultiheadAttention takes eager's fast path); the
    torch calls of the execution trace under no_grad are calls with a ref that the cost
    model keeps whole (their prims would not fuse)."""
    _, model = make_pair(case, dropout=0.1)
    model.train(train)
    args, kwargs = case.inputs(1)
    assert primtrace.explain(model, *args, **kwargs).opaque == []
    fn = primtrace.jit(model)
    with torch.no_grad():
        assert primtrace.explain(model, *args, **kwargs).opaque == []
        fn(*args, **kwargs)
    calls = [n.symbol for n in primtrace.last_trace(fn).flat_nodes() if n.symbol.kind == "opaque"]
    assert [s.qualname for s in calls if mapping.resolve(s.torch_function).ref is None] == []


# --- autograd and training -------------------------------------------------------------------
@modes
@pytest.mark.parametrize("case,train", [
    pytest.param(c, t, id=f"{t}-{c.name}", marks=[pytest.mark.slow] if t == "eval" and c.name in SLOW_EVAL_GRADS else [])
    for t in ("train", "eval") for c in CASES])
def test_grads(case, mode, train):
    """Output (requires_grad included) and every parameter's grad; in train mode (dropout
    p=0) also the buffers (BatchNorm's running stats) after the call."""
    eager, model = make_pair(case, dropout=0.0)
    eager.train(train == "train"), model.train(train == "train")
    fn = compile_with(mode, model)
    phases, out = Phases(), None
    ref = run(eager, case.inputs(1))
    with phases("output"):
        out = run(fn, case.inputs(1))
        assert_same(out, ref)
    with phases("buffers after the call"):
        assert_state_match(model, eager)
    backward_both(out, ref, model, eager, phases)
    phases.done()


@modes
@over_cases(SLOW_VARIANTS)
@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_grad_call_after_no_grad_call(case, mode, context):
    """A validation pass under no_grad / inference_mode, then a training call: output and
    grads as eager's."""
    eager, model = make_pair(case, dropout=0.0)
    fn = compile_with(mode, model)
    phases, out = Phases(), None
    with getattr(torch, context)(), phases(f"{context} call"):
        assert_same(run(fn, case.inputs(1)), run(eager, case.inputs(1)))
    ref = run(eager, case.inputs(2))
    with phases("grad call"):
        out = run(fn, case.inputs(2))
        assert_same(out, ref)
    backward_both(out, ref, model, eager, phases)
    phases.done()


@modes
@over_cases(SLOW_VARIANTS)
def test_sgd_5_steps(case, mode):
    """5 SGD steps through the compiled model: losses, parameters and buffers as eager's."""
    eager, model = make_pair(case, dropout=0.0)
    fn = compile_with(mode, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for step in range(5):
        losses = []
        for f, o in ((eager, eager_opt), (fn, opt)):
            o.zero_grad()
            loss = loss_fn(run(f, case.inputs(10 + step)))
            losses.append(loss)
            loss.backward()
            o.step()
        assert_same(losses[1], losses[0], f"loss at step {step + 1}")
        assert_state_match(model, eager, f"after step {step + 1}")
    with torch.no_grad():
        assert_same(run(fn, case.inputs(1)), run(eager, case.inputs(1)), "output after training")


# --- dropout ---------------------------------------------------------------------------------
@modes
@over_cases(SLOW_VARIANTS)
def test_train_dropout_seeded_matches_eager(case, mode):
    """Train mode, dropout p=0.25: with the RNG seeded alike, the masks (so outputs) match eager's."""
    eager, model = make_pair(case, dropout=0.25)
    fn = compile_with(mode, model)
    for seed in (123, 7):
        torch.manual_seed(seed)
        ref = run(eager, case.inputs(1))
        torch.manual_seed(seed)
        out = run(fn, case.inputs(1))
        assert_same(out, ref, f"train-mode output, RNG seeded {seed}")


@modes
@over_cases(SLOW_VARIANTS)
def test_eval_train_toggle(case, mode):
    """First call in train mode; model.eval() stops dropout; model.train() starts it again."""
    eager, model = make_pair(case, dropout=0.25)
    fn = compile_with(mode, model)
    x = case.inputs(1)
    phases = Phases()

    def call():  # eager makes the same calls (BatchNorm's running stats stay in step)
        run(eager, x)
        return run(fn, x)
    with torch.no_grad():
        a, b = call(), call()
        with phases("train mode"):
            assert_differs(a, b, "two calls (dropout active)")
        eager.eval(), model.eval()
        ev = run(fn, x)
        with phases("after model.eval()"):
            assert_same(ev, run(eager, x))
        with phases("after model.eval(), second call"):
            assert_same(run(fn, x), ev, "deterministic")
        eager.train(), model.train()
        c, d = call(), call()
        with phases("after model.train()"):
            assert_differs(c, d, "two calls (dropout active again)")
        with phases("after model.train(), vs the eval output"):
            assert_differs(c, ev, "train output vs eval output")
    eager.eval(), model.eval()
    with phases("after model.eval(), grad mode on"):
        assert_same(run(fn, x), run(eager, x))
    eager.train()
    with phases("train() through the compiled wrapper"):
        fn.train()
        assert model.training, "the model is still in eval mode"
        with torch.no_grad():
            c, d = call(), call()
        assert_differs(c, d, "two calls (dropout active)")
    eager.eval()
    with phases("eval() through the compiled wrapper"):
        fn.eval()
        assert not model.training, "the model is still in train mode"
        with torch.no_grad():
            assert_same(run(fn, x), run(eager, x))
    phases.done()


# --- state changes after the first call ------------------------------------------------------
def check_change(case, mode, change, pair=None):
    """Call (no_grad, then grad) in eval mode, apply ``change`` to both models, call again:
    results, requires_grad and grads follow eager; the change must change eager's output.
    Every phase is checked (see Phases), so the report lists every symptom."""
    eager, model = pair or make_pair(case, dropout=0.1)
    eager.eval(), model.eval()
    fn = compile_with(mode, model)
    x = case.inputs(1)
    phases, out = Phases(), None
    with torch.no_grad():
        before = run(eager, x)
        with phases("first call (no_grad)"):
            assert_same(run(fn, x), before)
    with phases("first call (grad)"):
        assert_same(run(fn, x), run(eager, x))
    change(eager, model)
    with torch.no_grad():
        ref = run(eager, x)
        assert_differs(ref, before, "test sanity: the change changes eager's output")
        with phases("after the change (no_grad)"):
            assert_same(run(fn, x), ref)
    ref = run(eager, x)
    with phases("after the change (grad)"):
        out = run(fn, x)
        assert_same(out, ref)
    backward_both(out, ref, model, eager, phases, "grads after the change")
    phases.done()
    return fn


@modes
@over_cases(SLOW_STATE)
def test_attribute_change(case, mode):
    path, value = case.attr

    def change(*ms):
        for m in ms:
            set_path(m, path, value)
    check_change(case, mode, change)


@modes
@over_cases(SLOW_STATE)
def test_global_rebind(case, mode, monkeypatch):
    name, factory = case.glob
    check_change(case, mode, lambda *ms: monkeypatch.setattr(models, name, factory()))


@modes
@over_cases(SLOW_STATE)
def test_parameter_reassignment(case, mode):
    def change(*ms):
        for m in ms:
            p = get_path(m, case.param)
            new = torch.randn(p.shape, generator=torch.Generator().manual_seed(5))
            set_path(m, case.param, nn.Parameter(new))
    check_change(case, mode, change)


@modes
@over_cases(SLOW_STATE)
def test_inplace_parameter_update(case, mode):
    def change(*ms):
        with torch.no_grad():
            for m in ms:
                get_path(m, case.param).mul_(2.0)
    check_change(case, mode, change)


@modes
@over_cases(SLOW_STATE)
def test_submodule_replacement(case, mode):
    """``model.head = nn.Linear(...)`` after the first call (a new head, as for fine-tuning)."""
    def change(*ms):
        for m in ms:
            old = get_path(m, case.submodule)
            torch.manual_seed(7)
            set_path(m, case.submodule, nn.Linear(old.in_features, old.out_features, bias=old.bias is not None))
    check_change(case, mode, change)


@over_cases(SLOW_STATE)
def test_forward_hook(case):
    """A forward hook registered on a submodule after the first call changes its output, and
    removing it restores the model (hooks as feature extractors and steering code use them).
    jit only: torch.compile itself does not see hooks added after compiling (Dynamo's
    ``skip_nnmodule_hook_guards`` is True by default; backend="eager" behaves the same)."""
    mode = "jit"
    eager, model = make_pair(case, dropout=0.1)
    handles = []

    def change(*ms):
        for m in ms:
            handles.append(get_path(m, case.submodule).register_forward_hook(lambda mod, args, out: out * 0.5))
    fn = check_change(case, mode, change, (eager, model))
    for h in handles:
        h.remove()
    with torch.no_grad():
        assert_same(run(fn, case.inputs(1)), run(eager, case.inputs(1)), "after the hooks are removed")


@modes
@over_cases(SLOW_STATE, where=lambda c: c.buffer is not None)
def test_inplace_buffer_update(case, mode):
    path, update = case.buffer

    def change(*ms):
        with torch.no_grad():
            for m in ms:
                update(get_path(m, path))
    check_change(case, mode, change)


@modes
@over_cases(SLOW_STATE, where=lambda c: c.buffer is not None)
def test_buffer_reassignment(case, mode):
    """``module.buf = new_tensor`` (a registered buffer replaced, as when a cache is rebuilt)."""
    path, update = case.buffer

    def change(*ms):
        for m in ms:
            new = get_path(m, path).clone()
            update(new)
            set_path(m, path, new)
    check_change(case, mode, change)


@modes
@over_cases(SLOW_STATE)
def test_load_state_dict(case, mode):
    """A checkpoint loaded after the first call (load_state_dict copies into the tensors)."""
    torch.manual_seed(1)
    checkpoint = case.build(0.1).state_dict()
    check_change(case, mode, lambda *ms: [m.load_state_dict(checkpoint) for m in ms])


@modes
@over_cases(SLOW_STATE)
def test_requires_grad_toggle(case, mode):
    """Freezing after the first call (``requires_grad_(False)``), as fine-tuning code does:
    outputs' requires_grad and the grads follow eager; then everything frozen; then unfrozen."""
    eager, model = make_pair(case, dropout=0.0)
    fn = compile_with(mode, model)
    x = case.inputs(1)
    phases = Phases()

    def step(what):
        out = None
        ref = run(eager, x)
        with phases(f"{what}: output"):
            out = run(fn, x)
            assert_same(out, ref)
        if ref.requires_grad:
            backward_both(out, ref, model, eager, phases, f"{what}: grads")

    step("first call")
    for m in (model, eager):
        get_path(m, case.param).requires_grad_(False)
    step(f"{case.param} frozen")
    for m in (model, eager):
        m.requires_grad_(False)
    step("all parameters frozen")
    for m in (model, eager):
        m.requires_grad_(True)
    step("all unfrozen")
    phases.done()


@modes
@over_cases(where=lambda c: c.has_batchnorm)
def test_batchnorm_running_stats(case, mode):
    """Train-mode calls update running stats exactly as eager; eval mode uses them."""
    eager, model = make_pair(case, dropout=0.0)
    fn = compile_with(mode, model)
    phases = Phases()
    for seed in (1, 2, 3):
        ref = run(eager, case.inputs(seed))
        with phases(f"train call {seed}"):
            assert_same(run(fn, case.inputs(seed)), ref)
        with phases(f"running stats after train call {seed}"):
            assert_state_match(model, eager)
    with torch.no_grad():
        for seed in (1, 2):
            ref = run(eager, case.inputs(seed))
            with phases(f"no_grad train call {seed}"):
                assert_same(run(fn, case.inputs(seed)), ref)
        with phases("running stats after no_grad train calls"):
            assert_state_match(model, eager)
    eager.eval(), model.eval()
    with torch.no_grad():
        ref = run(eager, case.inputs(4))
        with phases("eval call (running stats used)"):
            assert_same(run(fn, case.inputs(4)), ref)
    with phases("running stats unchanged by eval calls"):
        assert_state_match(model, eager)
    ref = run(eager, case.inputs(5))
    with phases("eval call with grad"):
        assert_same(run(fn, case.inputs(5)), ref)
    phases.done()
