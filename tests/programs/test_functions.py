"""Library-style functions (not modules) through primtrace.jit and torch.compile(backend="primtrace"):
a training step reading a global model and optimizer, in-place updates of passed-in tensors
behind isinstance / torch.is_tensor checks, a module-level config object."""
import copy

import pytest
import torch

from primtrace.tracer import TracingError

from . import models
from .harness import MODES, Phases, assert_same, assert_state_match, compile_with, gen

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
modes = pytest.mark.parametrize("mode", MODES)


@modes
def test_train_step_with_global_model_and_optimizer(mode, monkeypatch):
    torch.manual_seed(0)
    base = models.MLP(models.MLPConfig(dropout=0.0))
    eager, model = copy.deepcopy(base), copy.deepcopy(base)
    g = gen(3)
    batches = [(torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g)) for _ in range(5)]

    monkeypatch.setattr(models, "MODEL", eager)
    monkeypatch.setattr(models, "OPTIMIZER", torch.optim.SGD(eager.parameters(), lr=0.1))
    eager_losses, eager_states = [], []
    for x, y in batches:
        eager_losses.append(models.train_step(x, y))
        eager_states.append(copy.deepcopy(eager.state_dict()))

    monkeypatch.setattr(models, "MODEL", model)
    monkeypatch.setattr(models, "OPTIMIZER", torch.optim.SGD(model.parameters(), lr=0.1))
    step = compile_with(mode, models.train_step)
    if mode == "jit":   # backward inside jit is refused, clearly, before anything changes
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(TracingError, match="backward"):
            step(*batches[0])
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, before[name], rtol=0, atol=0)
        step = compile_with(mode, models.forward_loss)   # what jit supports: the forward
        for i, ((x, y), expected) in enumerate(zip(batches, eager_losses)):
            models.OPTIMIZER.zero_grad()
            loss = step(x, y)
            loss.backward()
            models.OPTIMIZER.step()
            assert_same(loss.detach(), expected, f"loss at step {i + 1}")
            for name, value in model.state_dict().items():
                torch.testing.assert_close(value, eager_states[i][name],
                                           msg=lambda m, name=name, i=i: f"after step {i + 1}: {name}: {m}")
        return
    for i, ((x, y), expected) in enumerate(zip(batches, eager_losses)):
        assert_same(step(x, y), expected, f"loss at step {i + 1}")
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, eager_states[i][name],
                                       msg=lambda m, name=name, i=i: f"after step {i + 1}: {name}: {m}")
    assert_state_match(model, eager, "parameters after 5 steps")


@modes
@pytest.mark.parametrize("decay", ["float", "tensor"])
def test_ema_update_in_place(mode, decay):
    """The passed-in tensors are updated in place (each call builds on the last); the result is
    the same tensor object eager returns (``ema`` itself)."""
    g = gen(4)
    values = [torch.randn(6, 5, generator=g) for _ in range(3)]
    d = 0.75 if decay == "float" else torch.tensor(0.75, dtype=torch.float64)
    ema, step = torch.zeros(6, 5), torch.zeros((), dtype=torch.int64)
    eager_ema, eager_step = ema.clone(), step.clone()
    fn = compile_with(mode, models.ema_update_)
    with torch.no_grad():
        for i, v in enumerate(values):
            expected = models.ema_update_(eager_ema, v, d, step=eager_step)
            out = fn(ema, v, d, step=step)
            assert_same(ema, eager_ema, f"ema after call {i + 1} (updated in place)")
            assert_same(step, eager_step, f"step counter after call {i + 1} (updated in place)")
            assert_same(out, expected, f"returned value of call {i + 1}")
            assert out is ema, f"call {i + 1}: the returned tensor is not the ema tensor passed in"


@modes
def test_ema_update_number_value(mode):
    """A Python number for ``value``: the non-tensor branch (torch.as_tensor)."""
    ema, eager_ema = torch.ones(4), torch.ones(4)
    fn = compile_with(mode, models.ema_update_)
    for v in (2.0, -1.0):
        models.ema_update_(eager_ema, v, 0.5)
        fn(ema, v, 0.5)
        assert_same(ema, eager_ema, f"ema after value {v}")


@modes
def test_isinstance_tensor_branch(mode):
    """isinstance(residual, torch.Tensor) must take the tensor branch for a tensor argument."""
    g = gen(5)
    x, r = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    fn = compile_with(mode, models.scaled_residual)
    assert_same(fn(x, r, 0.5), models.scaled_residual(x, r, 0.5), "tensor residual")
    assert_same(fn(x, r, 2.0), models.scaled_residual(x, r, 2.0), "tensor residual, other alpha")
    assert_same(fn(x, 1.5), models.scaled_residual(x, 1.5), "number residual")
    assert_same(fn(x), models.scaled_residual(x), "no residual")


@modes
def test_module_level_config_object(mode, monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.PreprocessConfig())
    x = 3 * torch.randn(4, 7, generator=gen(6))
    fn = compile_with(mode, models.preprocess)
    phases = Phases()
    with phases("default config"):
        assert_same(fn(x), models.preprocess(x))
    models.CONFIG.clip = 1.0   # attributes of the global object change
    with phases("after CONFIG.clip = 1.0"):
        assert_same(fn(x), models.preprocess(x))
    models.CONFIG.scale = 2.0
    with phases("after CONFIG.scale = 2.0"):
        assert_same(fn(x), models.preprocess(x))
    monkeypatch.setattr(models, "CONFIG", models.PreprocessConfig(activation="relu", center=False))
    with phases("after rebinding CONFIG (relu, no centering)"):
        assert_same(fn(x), models.preprocess(x))
    phases.done()
