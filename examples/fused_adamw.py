"""AdamW written as plain torch code, run through primtrace.jit, training a small MLP.

The update is the same arithmetic torch.optim.AdamW performs (single-tensor path); under
primtrace.jit each parameter's update becomes one fused kernel that writes the parameter
and both moment buffers in place. The script trains the same MLP with both optimizers,
checks that every update step matches torch.optim.AdamW's on the same state to float32
rounding, and prints the speedup of the update step.

Why the check is per step and not on the loss curves: the fused kernel matches eager to
an ulp, not bitwise (torch's CPU ``lerp`` uses a fused multiply-add; the ref rounds the
product and the sum separately), and training amplifies such differences. Here the two
loss curves end up 0.4% apart at some step, while torch.optim.AdamW itself, started from
weights that differ by one ulp in one element, moves 0.2%; at 300 steps and width 256,
where the loss reaches 1e-5 and Adam's loss spikes begin, that 1-ulp change moves it 11x.
So both trainings must converge, and each step must match to rounding.

Run: python examples/fused_adamw.py [--steps 200] [--width 128]
"""
import argparse
import copy
import time

import torch

import primtrace


def adamw_update(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay,
                 bias_correction1, bias_correction2_sqrt):
    """One AdamW step over lists of tensors, in place (torch.optim.AdamW's arithmetic)."""
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-lr / bias_correction1)


class JitAdamW:
    """A minimal optimizer around the jitted update; state as in torch.optim.AdamW."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = [p for p in params]
        self.lr, (self.beta1, self.beta2), self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]
        self.step_count = 0
        self.update = primtrace.jit(adamw_update)

    @torch.no_grad()
    def step(self):
        self.step_count += 1
        bc1 = 1 - self.beta1 ** self.step_count
        bc2_sqrt = (1 - self.beta2 ** self.step_count) ** 0.5
        self.update(self.params, [p.grad for p in self.params], self.exp_avgs, self.exp_avg_sqs,
                    self.lr, self.beta1, self.beta2, self.eps, self.weight_decay, bc1, bc2_sqrt)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def make_data(n=512, features=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def train(model, optimizer, x, y, steps):
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_checking_each_step(model, update, x, y, steps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=1e-2):
    """Train with torch.optim.AdamW; before each of its steps, run `update` on copies of the
    same parameters, gradients and moments. Returns the largest difference of the two
    steps' results (parameters, both moments), relative to the tensor's largest magnitude
    before or after the step (moments cancel: a result near 0 has no relative accuracy)."""
    params = list(model.parameters())
    reference = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                  foreach=False)
    worst = 0.0
    for step in range(1, steps + 1):
        reference.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        state = [reference.state[p] for p in params]
        ps = [p.detach().clone() for p in params]
        ms = [s["exp_avg"].clone() if s else torch.zeros_like(p) for s, p in zip(state, params)]
        vs = [s["exp_avg_sq"].clone() if s else torch.zeros_like(p) for s, p in zip(state, params)]
        scales = [[t.abs().max() for t in ts] for ts in (ps, ms, vs)]
        with torch.no_grad():
            update(ps, [p.grad for p in params], ms, vs, lr, betas[0], betas[1], eps, weight_decay,
                   1 - betas[0] ** step, (1 - betas[1] ** step) ** 0.5)
        reference.step()
        expected = (params, [reference.state[p]["exp_avg"] for p in params],
                    [reference.state[p]["exp_avg_sq"] for p in params])
        for ours, theirs, before in zip((ps, ms, vs), expected, scales):
            for a, b, scale in zip(ours, theirs, before):
                scale = torch.maximum(scale, b.abs().max()).clamp_min(1e-30)
                worst = max(worst, ((a - b).abs().max() / scale).item())
    return worst


def time_update(optimizer, repeats=20):
    for p in optimizer.params if hasattr(optimizer, "params") else [
            p for group in optimizer.param_groups for p in group["params"]]:
        p.grad = torch.randn_like(p)
    optimizer.step()  # warm-up (compiles)
    start = time.perf_counter()
    for _ in range(repeats):
        optimizer.step()
    return (time.perf_counter() - start) / repeats


def main(steps=200, width=128):
    torch.manual_seed(0)
    x, y = make_data()
    reference = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.GELU(),
                                    torch.nn.Linear(width, width), torch.nn.GELU(),
                                    torch.nn.Linear(width, 1))
    model, checked = copy.deepcopy(reference), copy.deepcopy(reference)
    ref_losses = train(reference, torch.optim.AdamW(reference.parameters(), lr=1e-3, foreach=False), x, y, steps)
    ours = JitAdamW(model.parameters(), lr=1e-3)
    our_losses = train(model, ours, x, y, steps)
    print(f"loss: first {ref_losses[0]:.5f}, last {ref_losses[-1]:.2e} (torch.optim.AdamW) "
          f"vs {our_losses[-1]:.2e} (primtrace) after {steps} steps")
    assert max(ref_losses[-1], our_losses[-1]) < 0.1 * ref_losses[0], "training did not converge"

    step_error = train_checking_each_step(checked, primtrace.jit(adamw_update), x, y, steps)
    print(f"one update step vs torch.optim.AdamW on the same state, max relative difference "
          f"over {steps} steps: {step_error:.2e}")
    assert step_error < 1e-6, "an update step differs from torch.optim.AdamW"

    params = [p for p in model.parameters()]
    eager = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    fused = torch.optim.AdamW(params, lr=1e-3, fused=True)
    t_eager, t_fused, t_ours = time_update(eager), time_update(fused), time_update(ours)
    print(f"update step over {sum(p.numel() for p in params)} parameters: "
          f"torch.optim.AdamW {t_eager * 1e6:.0f} us, fused=True {t_fused * 1e6:.0f} us, "
          f"primtrace.jit {t_ours * 1e6:.0f} us -> speedup vs eager {t_eager / t_ours:.2f}x")
    regions = [n.symbol.name for n in primtrace.last_trace(ours.update).nodes if n.symbol.kind == "fused"]
    info = primtrace.cache_info(ours.update)
    print(f"fused regions in the update: {len(regions)}; compiles: {info.misses}, cached calls: {info.hits}")
    return step_error, regions


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    main(args.steps, args.width)
