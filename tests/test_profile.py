"""primtrace.profile: every node of a cached call timed, the call's results and state kept."""
import torch
import torch.nn.functional as F

import primtrace


def _chain(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def test_profile_times_every_node_of_the_forward():
    args = [torch.randn(512, 256) for _ in range(2)] + [torch.randn(256), torch.randn(256)]
    jfn = primtrace.jit(_chain)
    prof = primtrace.profile(jfn, *args, rounds=3)
    nodes = [r for r in prof.rows if r.kind != "rest"]
    assert {r.index for r in nodes} == set(range(len(primtrace.last_trace(jfn).nodes)))
    assert any(r.kind == "fused" and "layer_norm" in r.what for r in nodes)
    assert all(r.ms >= 0 and r.bytes > 0 for r in nodes)
    assert prof.rows[-1].kind == "rest" and prof.total_ms > 0
    assert [r.ms for r in nodes] == sorted((r.ms for r in nodes), reverse=True)
    text = str(prof)
    assert "share" in text and "layer_norm" in text and "(the rest)" in text
    assert primtrace.cache_info(jfn).misses == 1   # the profile used the cached entry
    torch.testing.assert_close(jfn(*args), _chain(*args))


def test_profile_of_a_training_call_times_the_backward_and_keeps_grads():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    before = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    prof = primtrace.profile(model, x, rounds=2)
    stages = {r.stage for r in prof.rows}
    assert {"forward", "backward"} <= stages
    assert any(r.kind == "library" for r in prof.rows)   # the matmuls
    for n, p in model.named_parameters():
        assert p.grad is None and before[n] is None, n
    with torch.no_grad():
        prof = primtrace.profile(model, x, rounds=2)
    assert {r.stage for r in prof.rows} == {"forward", ""}


def test_profile_of_a_call_without_tensor_results():
    prof = primtrace.profile(lambda x: x.shape[0], torch.ones(3), rounds=1)
    assert [r.kind for r in prof.rows] == ["rest"]
