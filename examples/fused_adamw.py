"""AdamW written as plain torch code, run through primtrace.jit, training a small MLP.

The update is the same arithmetic torch.optim.AdamW performs (single-tensor path); under
primtrace.jit each parameter's update becomes one fused kernel that writes the parameter
and both moment buffers in place. The script checks that the loss curve matches
torch.optim.AdamW and prints the speedup of the update step.

Run: python examples/fused_adamw.py [--steps 300] [--width 256]
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


def time_update(optimizer, repeats=20):
    for p in optimizer.params if hasattr(optimizer, "params") else [
            p for group in optimizer.param_groups for p in group["params"]]:
        p.grad = torch.randn_like(p)
    optimizer.step()  # warm-up (compiles)
    start = time.perf_counter()
    for _ in range(repeats):
        optimizer.step()
    return (time.perf_counter() - start) / repeats


def main(steps=300, width=256):
    torch.manual_seed(0)
    x, y = make_data()
    reference = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.GELU(),
                                    torch.nn.Linear(width, width), torch.nn.GELU(),
                                    torch.nn.Linear(width, 1))
    model = copy.deepcopy(reference)
    ref_losses = train(reference, torch.optim.AdamW(reference.parameters(), lr=1e-3, foreach=False), x, y, steps)
    ours = JitAdamW(model.parameters(), lr=1e-3)
    our_losses = train(model, ours, x, y, steps)

    max_rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(our_losses, ref_losses))
    print(f"loss: first {ref_losses[0]:.5f}, last {ref_losses[-1]:.5f} (torch.optim.AdamW) "
          f"vs {our_losses[-1]:.5f} (primtrace); max relative difference over {steps} steps: {max_rel:.2e}")
    assert our_losses[-1] < 0.5 * ref_losses[0], "training did not converge"
    assert max_rel < 1e-3, "loss curve differs from torch.optim.AdamW"

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
    return max_rel, regions


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    main(args.steps, args.width)
