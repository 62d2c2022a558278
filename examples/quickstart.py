"""primtrace in one minute: trace torch code, read the traces, run it fused.

Run: python examples/quickstart.py [--size N]
"""
import argparse
import time

import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor


def add(a, b):
    return torch.add(a, b)


def chain(a, b, c):
    y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
    return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c


def best_time(fn, *args, repeats=5):
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main(size=1 << 20):
    a16 = torch.randn(4, 5, dtype=torch.float16)
    b32 = torch.randn(4, 5)

    # 1. torch.add on f16 and f32: promotion makes the f16 operand's conversion explicit
    jadd = primtrace.jit(add, executors=[NumbaFusionExecutor()])
    torch.testing.assert_close(jadd(a16, b32), add(a16, b32))
    for trace in primtrace.last_traces(jadd):
        print(trace, end="\n\n")

    # 2. an 11-op chain: one fused kernel
    c32 = torch.randint(-3, 3, (4, 5), dtype=torch.int32)
    jchain = primtrace.jit(chain, executors=[NumbaFusionExecutor()])
    out = jchain(a16, b32, c32)
    assert out.dtype == chain(a16, b32, c32).dtype
    torch.testing.assert_close(out, chain(a16, b32, c32))
    execution = primtrace.last_trace(jchain)
    print(execution, end="\n\n")
    print(primtrace.kernel_source(jchain))

    # 3. timing against eager on bigger inputs
    a, b = torch.randn(size, dtype=torch.float16), torch.randn(size)
    c = torch.randint(-3, 3, (size,), dtype=torch.int32)
    t_eager, t_jit = best_time(chain, a, b, c), best_time(jchain, a, b, c)
    print(f"chain on {size} elements: eager {t_eager * 1e3:.2f} ms, primtrace.jit "
          f"{t_jit * 1e3:.2f} ms ({t_jit / t_eager:.2f}x eager)")
    return execution


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1 << 22)
    main(parser.parse_args().size)
