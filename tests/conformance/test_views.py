"""Conformance of the view and shape refs (refs/views.py, refs/joins.py) against eager.

Each spec is a torch callable, its ref, and calls built from an input tensor (several
shapes and layouts: contiguous, transposed, sliced, expanded, 0-dim, empty). Eager and the
ref run on the same real inputs; the rule, beyond the harness's (same exception type,
dtype, shape, values, no input mutated): the same strides and the same aliasing (each
result shares an input's storage exactly when eager's does). Every call also runs through
``primtrace.jit`` with the default executors, float32 and int64 inputs.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import primtrace
from primtrace import refs
from tests.conformance.harness import make_tensor

DTYPES = (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.complex64)
JIT_DTYPES = (torch.float32, torch.int64)


def inputs(dtype):
    """(description, tensor): the layouts every spec sees."""
    yield "2-d", make_tensor((3, 4), dtype, seed=1)
    yield "transposed", make_tensor((3, 4), dtype, seed=2, layout="transposed")
    yield "sliced", make_tensor((2, 3, 4), dtype, seed=3, layout="sliced")
    yield "expanded", make_tensor((3, 1), dtype, seed=4).expand(3, 4)
    yield "3-d", make_tensor((2, 3, 4), dtype, seed=5)
    yield "permuted", make_tensor((4, 2, 3), dtype, seed=6).permute(1, 2, 0)
    yield "size-1", make_tensor((3, 1, 4), dtype, seed=7)
    yield "0-dim", make_tensor((), dtype, seed=8)
    yield "empty", make_tensor((0, 3), dtype, seed=9)


def same_values(a, b) -> bool:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        a, b = a.to(torch.complex128), b.to(torch.complex128)
        return torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
    return torch.equal(a, b)


def _leaves(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [x for o in obj for x in _leaves(o)]
    return []


def _storages(tensors):
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


def compare(got, expected, args) -> str | None:
    """None when `got` is eager's `expected` (structure, dtype, shape, strides, values,
    sharing memory with the inputs `args`)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected {len(expected)} results, got {got!r:.80}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare(g, e, args)
            if problem:
                return f"result {i}: {problem}"
        return None
    if not isinstance(expected, torch.Tensor):
        return None if got == expected else f"expected {expected!r}, got {got!r}"
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, got {type(got).__name__}"
    for what in ("dtype", "shape"):
        if getattr(got, what) != getattr(expected, what):
            return f"{what}: ours {getattr(got, what)}, eager {getattr(expected, what)}"
    if got.numel() > 1 and got.stride() != expected.stride():
        return f"strides: ours {got.stride()}, eager {expected.stride()}"
    if not same_values(got, expected):
        return "values differ"
    shared = _storages(_leaves(args))
    if got.numel() and (got.untyped_storage().data_ptr() in shared) != (
            expected.untyped_storage().data_ptr() in shared):
        return (f"aliasing: ours a view {got.untyped_storage().data_ptr() in shared}, eager's a "
                f"view {expected.untyped_storage().data_ptr() in shared}")
    return None


def run(fn, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args), None
        except Exception as e:   # eager's verdict is the spec
            return None, e


def _first_line(e) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def check(ours, theirs, args) -> str | None:
    before = [t.clone() for t in _leaves(args)]
    expected, eager_error = run(theirs, args)
    got, our_error = run(ours, args)
    if not all(torch.equal(b, a) for b, a in zip(before, _leaves(args))):
        return "an input was mutated"
    if eager_error is not None:
        if our_error is None:
            return f"eager raised {_first_line(eager_error)}; ours returned"
        if not isinstance(our_error, type(eager_error)):
            return f"eager raised {_first_line(eager_error)}; ours raised {_first_line(our_error)}"
        return None
    if our_error is not None:
        return f"ours raised {_first_line(our_error)}"
    return compare(got, expected, args)


# --- specs: (name, torch callable, calls: input -> args) -------------------------------------
T = torch.Tensor
SPECS = [
    ("reshape", torch.reshape, [lambda x: (x, (-1,)),
                                lambda x: (x, (x.shape[0] if x.ndim else 1, -1)),
                                lambda x: (x, (2, -1)), lambda x: (x, (-1, -1)),
                                    lambda x: (x, (5, 7)),
                                lambda x: (x, tuple(x.shape)), lambda x: (x, ()),
                                    lambda x: (x, (0, -1))]),
    ("view", T.view, [lambda x: (x, -1), lambda x: (x, (-1, 2)), lambda x: (x, tuple(x.shape)),
                      lambda x: (x, 1, *x.shape), lambda x: (x, (3, -2))]),
    ("view_as", T.view_as, [lambda x: (x, x.reshape(-1)), lambda x: (x, x)]),
    ("reshape_as", T.reshape_as, [lambda x: (x, x.reshape(-1))]),
    ("flatten", torch.flatten, [lambda x: (x,), lambda x: (x, 1), lambda x: (x, 0, 1),
                                lambda x: (x, -1, -1),
                                lambda x: (x, 1, 0), lambda x: (x, 5)]),
    ("unflatten", torch.unflatten, [lambda x: (x, -1, (2, -1)), lambda x: (x, 0, (1, -1)),
                                    lambda x: (x, 1, (5, 5))]),
    ("ravel", torch.ravel, [lambda x: (x,)]),
    ("permute", torch.permute, [lambda x: (x, tuple(range(x.ndim))[::-1]), lambda x: (x, (0, 0)),
                                lambda x: (x, (0,)), lambda x: (x, tuple(range(-1, x.ndim - 1)))]),
    ("transpose", torch.transpose, [lambda x: (x, 0, -1), lambda x: (x, 1, 1),
                                    lambda x: (x, 0, 3)]),
    ("swapaxes", torch.swapaxes, [lambda x: (x, 0, -1)]),
    ("swapdims", torch.swapdims, [lambda x: (x, -1, 0)]),
    ("t", torch.t, [lambda x: (x,)]),
    ("adjoint", torch.adjoint, [lambda x: (x,)]),
    ("movedim", torch.movedim, [lambda x: (x, 0, -1), lambda x: (x, (0, 1), (1, 0)),
                                lambda x: (x, (0, 0), (1, 2)),
                                lambda x: (x, (0,), (1, 2))]),
    ("moveaxis", torch.moveaxis, [lambda x: (x, -1, 0)]),
    ("squeeze", torch.squeeze, [lambda x: (x,), lambda x: (x, 1), lambda x: (x, -1),
                                lambda x: (x, (0, 1)),
                                lambda x: (x, (1, 1)), lambda x: (x, 4)]),
    ("unsqueeze", torch.unsqueeze, [lambda x: (x, 0), lambda x: (x, -1), lambda x: (x, 1),
                                    lambda x: (x, 9)]),
    ("expand", T.expand, [lambda x: (x, 2, *x.shape), lambda x: (x, *([-1] * x.ndim)),
                          lambda x: (x, 5, 5),
                          lambda x: (x, -1, *x.shape), lambda x: (x, 1, *x.shape), lambda x: (x,)]),
    ("expand_as", T.expand_as, [lambda x: (x, torch.zeros(2, *x.shape))]),
    ("broadcast_to", torch.broadcast_to, [lambda x: (x, (3, *x.shape)), lambda x: (x, (7,))]),
    ("broadcast_tensors", torch.broadcast_tensors,
     [lambda x: (x, torch.zeros(x.shape[-1:], dtype=x.dtype)),
      lambda x: (x, torch.zeros(5, 1, 1, 1, dtype=x.dtype))]),
    ("narrow", torch.narrow, [lambda x: (x, 0, 1, 1), lambda x: (x, -1, -2, 2),
                              lambda x: (x, 0, 0, 5),
                              lambda x: (x, 0, 1, -1)]),
    ("narrow_copy", torch.narrow_copy, [lambda x: (x, 0, 1, 1), lambda x: (x, -1, 0, 2)]),
    ("select", torch.select, [lambda x: (x, 0, 1), lambda x: (x, -1, -1), lambda x: (x, 0, 7)]),
    ("unbind", torch.unbind, [lambda x: (x,), lambda x: (x, -1)]),
    ("split", torch.split, [lambda x: (x, 2), lambda x: (x, 1, -1), lambda x: (x, [1, 2], 0),
                            lambda x: (x, 0),
                            lambda x: (x, [1, 1], 1), lambda x: (x, -1)]),
    ("split_with_sizes", torch.split_with_sizes,
     [lambda x: (x, [1, x.shape[0] - 1] if x.ndim else [1])]),
    ("chunk", torch.chunk, [lambda x: (x, 2), lambda x: (x, 3, -1), lambda x: (x, 0),
                            lambda x: (x, 5)]),
    ("tensor_split", torch.tensor_split, [lambda x: (x, 2), lambda x: (x, [1, 5, -1], -1),
                                          lambda x: (x, (2, 1)),
                                          lambda x: (x, 0)]),
    ("hsplit", torch.hsplit, [lambda x: (x, 2), lambda x: (x, [1]), lambda x: (x, 3)]),
    ("vsplit", torch.vsplit, [lambda x: (x, [1, 2]), lambda x: (x, 1)]),
    ("dsplit", torch.dsplit, [lambda x: (x, 2), lambda x: (x, [1])]),
    ("diagonal", torch.diagonal, [lambda x: (x,), lambda x: (x, 1), lambda x: (x, -1, 1, 0),
                                  lambda x: (x, 0, -1, -2),
                                  lambda x: (x, 0, 1, 1), lambda x: (x, 9)]),
    ("unfold", T.unfold, [lambda x: (x, 0, 2, 1), lambda x: (x, -1, 2, 2), lambda x: (x, 0, 9, 1),
                          lambda x: (x, 0, 1, 0),
                          lambda x: (x, 0, 0, 1)]),
    ("as_strided", torch.as_strided, [lambda x: (x, (2, 2), (1, 2)), lambda x: (x, (2,), (1,), 1),
                                      lambda x: (x, (2,), (-1,))]),
    ("__getitem__", T.__getitem__, [lambda x: (x, 0), lambda x: (x, -1),
                                    lambda x: (x, (slice(1, None), None)),
                                    lambda x: (x, (Ellipsis, slice(None, None, 2))),
                                        lambda x: (x, (None, 1)),
                                    lambda x: (x, (slice(None), 1)), lambda x: (x, Ellipsis),
                                        lambda x: (x, ()),
                                    lambda x: (x, (slice(-2, 100),)), lambda x: (x, (0, 0, 0, 0)),
                                    lambda x: (x, (slice(None, None, -1),)), lambda x: (x, 5),
                                    lambda x: (x, (None, Ellipsis, None)),
                                        lambda x: (x, (slice(3, 1),)),
                                    # integer tensors and lists: eager's advanced indexing
                                    lambda x: (x, torch.tensor([0, -1, 1])), lambda x: (x, [0, -1]),
                                    lambda x: (x, (slice(None), torch.tensor([[1, 0], [-1, 0]]))),
                                    lambda x: (x, (torch.tensor([0, 1]), torch.tensor([1, -1]))),
                                    lambda x: (x, (None, torch.tensor([1]), Ellipsis,
                                                   torch.tensor([[0], [2]], dtype=torch.int32))),
                                    lambda x: (x, (0, Ellipsis, torch.tensor([2, 0]))),
                                    lambda x: (x, (slice(1, None), [[0, 1]], None)),
                                    lambda x: (x, (torch.tensor([0, 1]), torch.tensor([0, 1, 2]))),
                                    lambda x: (x, (Ellipsis, torch.tensor([7]))),
                                    lambda x: (x, torch.tensor([-9]))]),
    ("T.__get__", lambda x: x.T, [lambda x: (x,)]),
    ("mT.__get__", lambda x: x.mT, [lambda x: (x,)]),
    ("H.__get__", lambda x: x.H, [lambda x: (x,)]),
    ("mH.__get__", lambda x: x.mH, [lambda x: (x,)]),
    ("view_copy", torch.view_copy, [lambda x: (x, (-1,))]),
    ("permute_copy", torch.permute_copy, [lambda x: (x, tuple(range(x.ndim))[::-1])]),
    ("transpose_copy", torch.transpose_copy, [lambda x: (x, 0, -1)]),
    ("t_copy", torch.t_copy, [lambda x: (x,)]),
    ("squeeze_copy", torch.squeeze_copy, [lambda x: (x,)]),
    ("unsqueeze_copy", torch.unsqueeze_copy, [lambda x: (x, 0)]),
    ("expand_copy", torch.expand_copy, [lambda x: (x, (2, *x.shape))]),
    ("diagonal_copy", torch.diagonal_copy, [lambda x: (x,)]),
    ("select_copy", torch.select_copy, [lambda x: (x, 0, 0)]),
    ("unbind_copy", torch.unbind_copy, [lambda x: (x,)]),
    ("split_copy", torch.split_copy, [lambda x: (x, 2)]),
    ("unfold_copy", torch.unfold_copy, [lambda x: (x, 0, 1, 1)]),
    ("slice_copy", torch.slice_copy, [lambda x: (x, 0, 1), lambda x: (x, -1, None, -1, 2),
                                      lambda x: (x, 0, -9, 9),
                                      lambda x: (x, 0, 0, 1, 0)]),
    ("as_strided_copy", torch.as_strided_copy, [lambda x: (x, (2,), (2,))]),
    # joins
    ("cat", torch.cat, [lambda x: ([x, x],), lambda x: ([x, x], -1),
                        lambda x: ([x, x.to(torch.float64)], 0),
                        lambda x: ([x, torch.empty(0, dtype=x.dtype)],), lambda x: ([x, x[:1]], 1),
                            lambda x: ([],),
                        lambda x: ([x, x.unsqueeze(0)],), lambda x: ([x],)]),
    ("concat", torch.concat, [lambda x: ([x, x],)]),
    ("concatenate", torch.concatenate, [lambda x: ([x, x], -1)]),
    ("stack", torch.stack, [lambda x: ([x, x],), lambda x: ([x, x], -1), lambda x: ([x, x[:1]],),
                            lambda x: ([],)]),
    ("hstack", torch.hstack, [lambda x: ([x, x],)]),
    ("vstack", torch.vstack, [lambda x: ([x, x],)]),
    ("row_stack", torch.row_stack, [lambda x: ([x, x],)]),
    ("dstack", torch.dstack, [lambda x: ([x, x],)]),
    ("column_stack", torch.column_stack, [lambda x: ([x, x],)]),
    ("atleast_1d", torch.atleast_1d, [lambda x: (x,), lambda x: ((x, x),)]),
    ("atleast_2d", torch.atleast_2d, [lambda x: (x,)]),
    ("atleast_3d", torch.atleast_3d, [lambda x: (x,), lambda x: (x, x)]),
    ("meshgrid", lambda *a: torch.meshgrid(*a, indexing="ij"),
     [lambda x: (x.reshape(-1)[:3], x.reshape(-1)[:2])]),
    ("flip", torch.flip, [lambda x: (x, (0,)), lambda x: (x, (-1, 0)), lambda x: (x, ()),
                          lambda x: (x, (0, 0))]),
    ("fliplr", torch.fliplr, [lambda x: (x,)]),
    ("flipud", torch.flipud, [lambda x: (x,)]),
    ("roll", torch.roll, [lambda x: (x, 1), lambda x: (x, -5, 0), lambda x: (x, (1, 2), (0, -1)),
                          lambda x: (x, (1, 2), 0)]),
    ("rot90", torch.rot90, [lambda x: (x,), lambda x: (x, 2), lambda x: (x, -1, (1, 0)),
                            lambda x: (x, 1, (0, 0))]),
    ("repeat", T.repeat, [lambda x: (x, 2, *([1] * x.ndim)), lambda x: (x, *([2] * x.ndim)),
                          lambda x: (x,),
                          lambda x: (x, 0, *([1] * x.ndim))]),
    ("diag", torch.diag, [lambda x: (x,), lambda x: (x, 1), lambda x: (x.reshape(-1), -2)]),
    ("diag_embed", torch.diag_embed, [lambda x: (x,), lambda x: (x, 1, 0, -1),
                                      lambda x: (x, 0, 1, 1)]),
    ("block_diag", torch.block_diag, [lambda x: (x, x)]),
    ("constant_pad_nd", torch.constant_pad_nd, [lambda x: (x, (1, 2)),
                                                lambda x: (x, (1, -1, 0, 1), 2),
                                                lambda x: (x, (-1, 0)), lambda x: (x, (0, 0)),
                                                    lambda x: (x, (1,)),
                                                lambda x: (x, (-9, 1))]),
    ("pad", torch.nn.functional.pad, [lambda x: (x, (1, 2)),
                                      lambda x: (x, (1, 1, 0, -1), "constant", 2.5),
                                      lambda x: (x, (1, 1), "reflect")]),
    ("sum_to_size", T.sum_to_size, [lambda x: (x, *x.shape[1:]), lambda x: (x, 1),
                                    lambda x: (x, 5)]),
    ("slice_scatter", torch.slice_scatter, [lambda x: (x, x[1:], 0, 1),
                                            lambda x: (x, x[::2], 0, None, None, 2),
                                            lambda x: (x, x, 0, 1)]),
    ("select_scatter", torch.select_scatter, [lambda x: (x, x[0], 0, 0),
                                              lambda x: (x, x[0], 0, -1),
                                              lambda x: (x, x[0].to(torch.float64), 0, 1)]),
    ("diagonal_scatter", torch.diagonal_scatter, [lambda x: (x, x.diagonal().clone())]),
    ("as_strided_scatter", torch.as_strided_scatter,
     [lambda x: (x, torch.ones(2, dtype=x.dtype), (2,), (2,))]),
]


def _ref(name):
    return getattr(refs, name) if name != "meshgrid" else (
        lambda *a: refs.meshgrid(*a, indexing="ij"))


@pytest.mark.parametrize("name,torch_fn,calls", SPECS, ids=[s[0] for s in SPECS])
def test_ref_matches_eager(name, torch_fn, calls):
    ref = _ref(name)
    failures = []
    for dtype in DTYPES:
        for desc, x in inputs(dtype):
            for i, call in enumerate(calls):
                try:
                    args = call(x)
                except Exception:
                    continue   # the call does not apply to this input
                declines = getattr(ref, "declines", None)
                if declines is not None and declines(*args):
                    continue   # torch makes it
                problem = check(ref, torch_fn, args)
                if problem:
                    failures.append(f"{dtype} {desc} call {i}: {problem}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:8])


#: eager messages ours does not reproduce: expand(-1, ...) of a 0-dim tensor fails in eager's
#: size arithmetic before its argument check
OTHER_MESSAGES = {"numel: integer multiplication overflow"}


def test_error_messages_match_eager():
    """Where eager raises, the ref raises the same first line of message (float32 inputs)."""
    different = []
    for name, torch_fn, calls in SPECS:
        ref = _ref(name)
        declines = getattr(ref, "declines", None)
        for desc, x in inputs(torch.float32):
            for call in calls:
                try:
                    args = call(x)
                except Exception:
                    continue
                if declines is not None and declines(*args):
                    continue
                _, eager_error = run(torch_fn, args)
                if eager_error is None:
                    continue
                _, our_error = run(ref, args)
                eager_line, our_line = (str(e).splitlines()[0] if e is not None and str(e) else ""
                                        for e in (eager_error, our_error))
                if eager_line != our_line and eager_line not in OTHER_MESSAGES:
                    different.append(f"{name} {desc}: eager {eager_line!r}, ours {our_line!r}")
    assert not different, "\n".join(different[:10])


def _tensors_only(args):
    """(jitted function of the tensor arguments, those tensors): other arguments are
    constants of the function."""
    def is_tensors(a):
        return isinstance(a, torch.Tensor) or isinstance(a, (list, tuple)) and a and all(
            isinstance(t, torch.Tensor) for t in a)
    positions = [i for i, a in enumerate(args) if is_tensors(a)]

    def fn(*tensors):
        full = list(args)
        for i, t in zip(positions, tensors):
            full[i] = t
        return fn.torch_fn(*full)
    return fn, [args[i] for i in positions]


@pytest.mark.parametrize("name,torch_fn,calls", SPECS, ids=[s[0] for s in SPECS])
def test_jit_matches_eager(name, torch_fn, calls):
    failures = []
    for dtype in JIT_DTYPES:
        for desc, x in inputs(dtype):
            for i, call in enumerate(calls):
                try:
                    args = call(x)
                except Exception:
                    continue
                fn, tensors = _tensors_only(args)
                fn.torch_fn = torch_fn
                jitted = primtrace.jit(fn)

                def eager(*_, args=args):
                    return torch_fn(*args)

                def ours(*_, jitted=jitted, tensors=tensors):
                    return jitted(*tensors)
                problem = check(ours, eager, args)
                if problem:
                    failures.append(f"{dtype} {desc} call {i}: {problem}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:8])


def test_every_spec_is_a_ref_in_traces():
    """The specs' calls trace to refs (no opaque torch call is left)."""
    x = make_tensor((2, 3, 4), torch.float32)
    opaque = []
    for name, torch_fn, calls in SPECS:
        for call in calls:
            args = call(x)
            try:
                run_ok = torch_fn(*args) is not None
            except Exception:
                continue
            fn, tensors = _tensors_only(args)
            fn.torch_fn = torch_fn
            explanation = primtrace.explain(fn, *tensors)
            if run_ok and "every op maps" not in str(explanation):
                opaque.append(f"{name}: {explanation}")
            break
    assert not opaque, "\n".join(opaque)


ERRORS = [   # eager's messages, reproduced
    (lambda x: x.t().view(-1), "view size is not compatible"),
    (lambda x: x.reshape(5, 7), "shape '[5, 7]' is invalid for input of size 12"),
    (lambda x: x.reshape(-1, -1), "only one dimension can be inferred"),
    (lambda x: x.permute(0), "number of dimensions in the tensor input does not match"),
    (lambda x: x.expand(5, 5), "must match the existing size"),
    (lambda x: x.select(0, 7),
     "select(): index 7 out of range for tensor of size [3, 4] at dimension 0"),
    (lambda x: x[9], "index 9 is out of bounds for dimension 0 with size 3"),
    (lambda x: x[0, 0, 0], "too many indices for tensor of dimension 2"),
    (lambda x: x.narrow(0, 1, 5), "start (1) + length (5) exceeds dimension size (3)."),
    (lambda x: x.split([1, 1]), "split_with_sizes expects split_sizes to sum exactly to 3"),
    (lambda x: torch.cat([x, x[:, :1]], 0), "Sizes of tensors must match except in dimension 0"),
    (lambda x: torch.stack([x, x[:1]]), "stack expects each tensor to be equal size"),
    (lambda x: x.unsqueeze(5),
     "Dimension out of range (expected to be in range of [-3, 2], but got 5)"),
    (lambda x: x.t().t().t().t().t().reshape(3, 4).view(2, 7), "shape '[2, 7]' is invalid"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_error_messages(i):
    fn, message = ERRORS[i]
    x = make_tensor((3, 4), torch.float32)
    with pytest.raises(Exception) as eager:
        fn(x)
    assert message in str(eager.value)
    with pytest.raises(type(eager.value)) as ours:
        primtrace.jit(fn)(x)
    assert str(ours.value).startswith(str(eager.value))
