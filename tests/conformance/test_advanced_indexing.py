"""x[...] with integer tensors (refs.__getitem__ over prims.index) on random sizes, layouts
and index positions: eager's shape, strides (TensorIterator's layout of the result, which the
prim's meta computes) and values, eagerly and through jit."""
from __future__ import annotations

import random

import torch

import primtrace
from primtrace import refs


def _case(rng):
    nd = rng.randint(1, 4)
    shape = [rng.randint(1, 4) for _ in range(nd)]
    perm = list(range(nd))
    rng.shuffle(perm)
    x = torch.randn([shape[p] for p in perm]).permute([perm.index(i) for i in range(nd)])
    if rng.random() < 0.3:
        d = rng.randrange(nd)
        x = x.narrow(d, 0, max(1, x.shape[d] - 1))
    if rng.random() < 0.1:
        x = x[:1].expand(3, *x.shape[1:])
    index_shape = [rng.randint(1, 3) for _ in range(rng.randint(1, 2))]
    items = []
    for d in range(x.ndim):
        kind = rng.random()
        if kind < 0.45:
            s = list(index_shape)
            if rng.random() < 0.3:
                s[rng.randrange(len(s))] = 1
            t = torch.randint(-x.shape[d], x.shape[d], s)
            if t.ndim == 2 and t.shape[0] == t.shape[1] and rng.random() < 0.5:
                t = t.t().contiguous().t()
            items.append(t)
        elif kind < 0.65:
            items.append(slice(rng.randint(0, 1), None))
        elif kind < 0.75:
            items.append(rng.randrange(-x.shape[d], x.shape[d]))
        else:
            items.append(slice(None))
        if rng.random() < 0.1:
            items.append(None)
    return x, tuple(items)


def test_random_layouts_and_positions():
    rng, failures, count = random.Random(3), [], 0
    for _ in range(300):
        x, index = _case(rng)
        if not any(isinstance(i, torch.Tensor) for i in index):
            continue
        expected = x[index]
        count += 1
        tensors = [i for i in index if isinstance(i, torch.Tensor)]

        def fn(x, *ts, index=index):
            it = iter(ts)
            return x[tuple(next(it) if isinstance(i, torch.Tensor) else i for i in index)]
        for label, got in (("ref", refs.__getitem__(x, index)),
                           ("jit", primtrace.jit(fn)(x, *tensors))):
            if (got.shape, got.stride()) != (expected.shape, expected.stride()) and \
                    expected.numel() > 1 or not torch.equal(got, expected):
                failures.append(f"{label} {tuple(x.shape)} {x.stride()} {index}: "
                                f"{tuple(got.shape)} {got.stride()} vs {expected.stride()}")
    assert count > 100
    assert not failures, "\n".join(failures[:8])
