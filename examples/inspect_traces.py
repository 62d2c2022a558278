"""Look inside a jitted function: its trace stages, unsupported ops, and the cache.

Run: python examples/inspect_traces.py
"""
import warnings

import torch

import primtrace


def scaled_softplus(x, scale):
    y = torch.nn.functional.softplus(x) * scale
    return y.logcumsumexp(0) + x.abs()  # logcumsumexp has no ref: it runs as torch


if __name__ == "__main__":
    x = torch.randn(8, 4, dtype=torch.float16)
    jf = primtrace.jit(scaled_softplus)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = jf(x, 2.0)
    torch.testing.assert_close(out, scaled_softplus(x, 2.0))
    print("warnings:", [str(w.message) for w in caught])

    for trace in primtrace.last_traces(jf):     # acquisition, prims, optimized, execution
        print(trace, end="\n\n")

    print(primtrace.explain(scaled_softplus, x, 2.0))

    jf(x, 3.0)                      # another value of the same Python type: a cache hit
    jf(x.float(), 2.0)              # another dtype: a miss
    jf(x, 3)                        # an int instead of a float: a miss
    info = primtrace.cache_info(jf)
    print(f"cache: {info.hits} hits, {info.misses} misses")
    assert (info.hits, info.misses) == (1, 3)
    for recompile in info.recompiles:   # why each compile after the first happened
        print("recompiled:", recompile)
