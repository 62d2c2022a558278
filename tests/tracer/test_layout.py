"""Convolution networks traced on a channels_last copy of their image (tracer/layout.py):
values, strides, aliasing and written inputs as eager's, and the row-major trace kept
wherever the program could tell the difference."""
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import primtrace


def notes(jfn):
    return " ".join(primtrace.last_trace(jfn).tags.get("notes", ()))


def traced_channels_last(jfn) -> bool:
    return "channels_last" in notes(jfn)


def net(convs=3, channels=8):
    layers, c = [], 3
    for _ in range(convs):
        layers += [nn.Conv2d(c, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU()]
        c = channels
    return nn.Sequential(*layers).eval()


def check_like_eager(fn, *args):
    jfn = primtrace.jit(fn)
    with torch.no_grad():
        want = fn(*args)
        got = jfn(*args)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for w, g in zip(wants, gots, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        assert g.stride() == w.stride()
    return jfn


def test_a_network_of_convolutions_runs_channels_last_with_eager_results_and_strides():
    m = net()
    jfn = check_like_eager(m, torch.randn(2, 3, 12, 12))
    assert traced_channels_last(jfn)
    src = str(primtrace.last_trace(jfn))
    assert "channels_last" in src   # the copy of the argument


def test_the_option_turns_it_off():
    m = net()
    jfn = primtrace.jit(m, channels_last=False)
    with torch.no_grad():
        jfn(torch.randn(1, 3, 8, 8))
    assert not traced_channels_last(jfn)


@pytest.mark.parametrize("why", ["two convolutions", "channels_last already", "one channel",
                                 "needs grad", "written", "returned", "reads strides",
                                 "reads contiguity", "a view the layout refuses"])
def test_kept_row_major_where_it_does_not_apply_or_the_program_could_tell(why):
    m = net(2 if why == "two convolutions" else 3)
    x = torch.randn(1, 1 if why == "one channel" else 3, 8, 8)
    if why == "one channel":
        m[0] = nn.Conv2d(1, 8, 3, padding=1)
    if why == "channels_last already":
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(x):
        if why == "written":
            x.mul_(2)
        y = m(x)
        if why == "reads strides":
            y = y * 2 if y.stride(1) == 1 else y
        if why == "reads contiguity":
            y = y + 1 if y.is_contiguous() else y - 1
        if why == "a view the layout refuses":
            return y.view(y.shape[0], -1)
        if why == "returned":
            return y, x
        return y

    jfn = primtrace.jit(fn)
    x0, x1 = x.clone(), x.clone()
    if why == "needs grad":
        got, want = jfn(x0), fn(x1)
        torch.testing.assert_close(got, want)
    else:
        with torch.no_grad():
            got, want = jfn(x0), fn(x1)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            assert g.stride() == w.stride()
    assert torch.equal(x0, x1)   # the written input, as eager wrote it
    assert not traced_channels_last(jfn), why


def test_results_sharing_memory_as_in_eager_keep_the_row_major_trace():
    m = net()

    def fn(x):
        y = m(x)
        return y, y.flatten(1)   # a view of y in eager; a copy of a channels_last y

    jfn = check_like_eager(fn, torch.randn(1, 3, 8, 8))
    with torch.no_grad():
        y, flat = jfn(torch.randn(1, 3, 8, 8))
    assert flat.data_ptr() == y.data_ptr()
    assert not traced_channels_last(jfn)


def test_four_d_results_come_back_row_major():
    m = net()

    def fn(x):
        y = m(x)
        return y, F.adaptive_avg_pool2d(y, 1), y.sum((2, 3))

    jfn = check_like_eager(fn, torch.randn(2, 3, 9, 7))
    assert traced_channels_last(jfn)


def test_the_backend_runs_it_too():
    m = net(4)
    x = torch.randn(1, 3, 10, 10)
    compiled = torch.compile(m, backend="primtrace")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-5)
    notes = " ".join(primtrace.dynamo.last_trace().tags["notes"])
    assert "channels_last" in notes and "weight" not in notes   # the image only


def _random_network(rng: random.Random) -> nn.Module:
    """A random stack of the blocks vision networks are made of."""
    class Block(nn.Module):
        def __init__(self, c, kind):
            super().__init__()
            self.kind = kind
            self.conv = nn.Conv2d(c, c, rng.choice([1, 3]), padding="same",
                                  groups=rng.choice([1, c]))
            self.bn = nn.BatchNorm2d(c)
            self.se = nn.Conv2d(c, c, 1)

        def forward(self, x):
            y = self.bn(self.conv(x))
            if self.kind == "residual":
                return F.relu(y + x)
            if self.kind == "squeeze":
                return y * torch.sigmoid(self.se(F.adaptive_avg_pool2d(y, 1)))
            if self.kind == "cat":
                return torch.cat([y, x], 1)[:, : x.shape[1]]
            if self.kind == "pool":
                return F.max_pool2d(F.silu(y), 2, ceil_mode=True)
            if self.kind == "permute":   # ConvNeXt's channels-last LayerNorm
                return F.layer_norm(y.permute(0, 2, 3, 1), (y.shape[1],)).permute(0, 3, 1, 2)
            return F.gelu(y)

    c = rng.choice([4, 8])
    kinds = ["residual", "squeeze", "cat", "pool", "permute", "plain"]
    layers = [nn.Conv2d(3, c, 3, padding=1)]
    layers += [Block(c, rng.choice(kinds)) for _ in range(rng.randint(2, 5))]
    head = rng.choice(["flatten", "pool", "map"])
    if head != "map":
        layers += [nn.AdaptiveAvgPool2d(1 if head == "pool" else 2), nn.Flatten(),
                   nn.Linear(c * (1 if head == "pool" else 4), 5)]
    return nn.Sequential(*layers).eval()


@pytest.mark.parametrize("seed", range(12))
def test_random_networks_match_eager(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    m = _random_network(rng)
    for bn in (b for b in m.modules() if isinstance(b, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(rng.choice([1, 2]), 3, rng.choice([7, 8, 12]), rng.choice([8, 11]))
    if rng.random() < 0.3:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)   # not row-major: kept as is
    check_like_eager(m, x)
