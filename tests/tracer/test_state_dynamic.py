"""Symbolic dims of state and inner dims (primtrace/tracer/dynamic.py, tracer/state.py).

State the function reads besides its arguments (a KV cache object's tensors, a module's
buffer) is guarded by its metadata; when only its sizes change under the same key, the next
trace holds those dims symbolic, and an inner dim's strides become size polynomials. Every
call is compared with eager, the state after it too, and every guard such a trace adds is
violated once, to show the call compiles again instead of running a wrong trace.
"""
import pytest
import torch
import torch.nn.functional as F

import primtrace


def misses(jf) -> int:
    return primtrace.cache_info(jf).misses


def symbolic_state(jf) -> bool:
    """Whether the last compile traced some state dim symbolic."""
    return bool(primtrace.last_traces(jf)[0].tags.get("state_dims"))


class Cache:
    """A plain KV cache object, as generation code writes one."""

    def __init__(self):
        self.k = None
        self.v = None

    def update(self, k, v):
        if self.k is not None:
            k, v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
        self.k, self.v = k, v
        return k, v


def attend(x, w, cache):
    """One decoding step of single-layer attention over (B, heads, T, D) keys and values."""
    B, T, C = x.shape
    q, k, v = (x @ w).split(C, -1)
    q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))
    k, v = cache.update(k, v)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
    return y.transpose(1, 2).reshape(B, T, C).tanh() * cache.k.shape[2]


def decode(step, w, tokens: int, batch: int = 2):
    torch.manual_seed(0)
    cache, x, outs = Cache(), torch.randn(batch, 5, 8), []
    for _ in range(tokens):
        y = step(x, w, cache)
        outs.append(y)
        x = y[:, -1:] / (1 + y[:, -1:].abs())
    return outs, cache


def test_a_growing_cache_object_is_traced_once_with_its_length_symbolic():
    w = torch.randn(8, 24) / 3
    jitted = primtrace.jit(attend)
    want, eager_cache = decode(attend, w, 12)
    got, cache = decode(jitted, w, 12)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(cache.k, eager_cache.k)
    assert type(cache.k) is torch.Tensor
    # the prompt, then every step: the first step's torch.cat grows the cache, so it is
    # traced with the length symbolic, taking the prompt's transposed views as a copy
    assert misses(jitted) == 2 and symbolic_state(jitted)
    assert primtrace.cache_info(jitted).hits == 10


def test_a_guard_on_a_state_size_recompiles_when_it_fails():
    """``if cache.k.shape[2] > 9`` holds for some lengths only: the call that crosses it
    compiles again and takes the other branch, as eager."""
    def step(x, w, cache):
        y = attend(x, w, cache)
        return y * 2 if cache.k.shape[2] > 9 else y - 1
    jitted = primtrace.jit(step)
    want, _ = decode(step, w := torch.randn(8, 24) / 3, 10)
    got, _ = decode(jitted, w, 10)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    reasons = [str(r) for r in primtrace.cache_info(jitted).recompiles]
    errors = jitted._dynamic.errors   # a dynamic compile that failed is traced static instead
    # (this once failed in a full -n 2 run and never alone: the message says which way)
    assert errors or any("size guard failed" in r and "> 9" in r for r in reasons), reasons
    assert misses(jitted) == 3 or errors, (reasons, errors)   # prompt, up to 9, from 10


def test_a_state_size_read_as_an_int_pins_it():
    """``int(n)`` fixes the length: the trace holds for that length only, and the dim is
    traced static from then on (one static trace per length, not a symbolic one each)."""
    def step(x, w, cache):
        y = attend(x, w, cache)
        return y + torch.zeros(int(cache.k.shape[2]))[:8].sum()
    jitted = primtrace.jit(step)
    want, _ = decode(step, w := torch.randn(8, 24) / 3, 7)
    got, _ = decode(jitted, w, 7)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert misses(jitted) == 7   # one per length (the values' length stays symbolic)


def test_an_inner_state_dim_of_size_one_is_not_served_by_the_symbolic_trace():
    """Inner symbolic dims serve sizes >= 2 (a size-1 dim's stride is free): a cache of
    length 1 after a symbolic trace compiles again, and matches eager."""
    def step(x, cache):
        return (cache.k * x).sum(2)
    jitted = primtrace.jit(step)
    cache = Cache()
    for n in (3, 4, 5, 1, 6):
        cache.k = torch.randn(2, 3, n, 4)
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x, cache), step(x, cache))
    assert misses(jitted) == 3


def test_a_state_tensor_that_changes_dtype_or_layout_is_traced_static():
    def step(x, cache):
        return cache.k.sum(1) + x
    jitted = primtrace.jit(step)
    cache = Cache()
    for k in (torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 6).double(),
              torch.randn(7, 3).t(), torch.randn(3, 8)):
        cache.k = k
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x, cache), step(x, cache))
    assert misses(jitted) == 4


def test_a_module_that_keeps_its_cache():
    """A module holding its cache object as an attribute (state read through the module)."""
    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 24) / 3)
            self.cache = Cache()

        def forward(self, x):
            return attend(x, self.w, self.cache)

    eager, traced = Decoder(), Decoder()
    traced.load_state_dict(eager.state_dict())
    jitted = primtrace.jit(traced)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        for _ in range(8):
            want, got = eager(x), jitted(x)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(traced.cache.k, eager.cache.k)
            x = want[:, -1:].contiguous()
    assert misses(jitted) == 2 and symbolic_state(jitted)


def test_a_symbolic_argument_dim_and_a_symbolic_state_dim_together():
    """Guards that relate an argument's dim and a state tensor's are checked with both."""
    def step(x, cache):
        if x.shape[0] > cache.k.shape[2]:
            return x.sum() + cache.k.sum()
        return x.mean() - cache.k.mean()
    jitted = primtrace.jit(step)
    cache = Cache()
    for n, m in ((3, 4), (5, 6), (7, 8), (9, 8), (4, 9), (11, 3), (2, 12)):
        cache.k = torch.randn(2, 3, m, 4)
        x = torch.randn(n)
        torch.testing.assert_close(jitted(x, cache), step(x, cache))


def test_state_taken_as_a_copy_is_only_read():
    """A non-contiguous state tensor is passed to a symbolic trace as a row-major copy; where
    the trace writes into it, or returns a view of it, the copy would be seen: those calls
    are traced static, and eager's writes and aliases hold."""
    def write(x, cache):
        cache.k.mul_(2)
        return cache.k.sum(2) + x

    def alias(x, cache):
        return cache.k[:, 0], cache.k.sum() + x

    for fn in (write, alias):
        jitted, eager_cache, cache = primtrace.jit(fn), Cache(), Cache()
        for n in (3, 4, 5, 6):
            k = torch.randn(2, n, 3).transpose(1, 2)   # (2, 3, n), not contiguous
            eager_cache.k, cache.k = k.clone().transpose(1, 2).contiguous().transpose(1, 2), k
            x = torch.randn(1)
            got, want = jitted(x, cache), fn(x, eager_cache)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(cache.k, eager_cache.k)
            if fn is alias:
                assert got[0]._base is cache.k or got[0].data_ptr() == cache.k.data_ptr()
        assert not symbolic_state(jitted), fn.__name__
        assert any("takes as a copy" in e for e in jitted._dynamic.errors), fn.__name__


def test_two_state_lengths_guarded_equal_recompile_when_they_differ():
    """``cache.k * cache.v`` assumes their lengths equal (a guard over two symbolic state
    dims); lengths that differ compile again and raise eager's error."""
    def step(x, cache):
        return (cache.k * cache.v).sum(2) + x
    jitted, cache = primtrace.jit(step), Cache()
    for n in (3, 4, 5):
        cache.k, cache.v = torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4)
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x, cache), step(x, cache))
    assert symbolic_state(jitted)
    cache.k, cache.v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 7, 4)
    with pytest.raises(RuntimeError) as eager_error:
        step(x, cache)
    with pytest.raises(RuntimeError) as ours:
        jitted(x, cache)
    assert type(ours.value) is type(eager_error.value)
    cache.k, cache.v = torch.randn(2, 3, 8, 4), torch.randn(2, 3, 8, 4)
    torch.testing.assert_close(jitted(x, cache), step(x, cache))
