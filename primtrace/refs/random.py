"""Random refs: torch.rand, randn, rand_like, randn_like, normal, bernoulli and the in-place
fills Tensor.uniform_, normal_, bernoulli_, exponential_, cauchy_, geometric_, log_normal_.

Each is one random prim (``prims.random``), which runs eager's own fill on a tensor laid out
as eager lays out its result, from torch's default generator: under one seed the refs draw
eager's numbers for every call here, except the in-place fills of a non-dense tensor (a
slice: the fill runs on a dense tensor, then is copied in) and normal_ on such a tensor.
(Checked on the CPU; on CUDA the fills are eager's own calls too, but F.dropout there is a
fused kernel whose draws differ from refs.nn.functional.dropout's.)
A ``generator=`` argument, out=, requires_grad=True and a probability tensor (bernoulli of
a tensor, bernoulli_(p=tensor)) are declined: torch runs those calls. The parameter checks
(uniform_'s from <= to...) are the fills' own: a trace raises them when it runs.
"""
from __future__ import annotations

import torch

from primtrace import dtypes, prims
from primtrace.refs.core import exports, is_tensor, maybe_convert, ref
from primtrace.refs.creation import _untraceable, _varargs_size, as_dtype, as_nodes, device_of
from primtrace.refs.out import copy_to_self
from primtrace.refs.scalars import concrete, type_name


def _declines(*args, generator=None, out=None, **kwargs) -> bool:
    return generator is not None or out is not None or _untraceable(**{
        k: v for k, v in kwargs.items() if k in ("layout", "pin_memory", "requires_grad")}) is not None


def _refuse(name, generator=None, out=None, **options):
    reason = _untraceable(**options)
    if generator is not None:
        reason = "generator="
    if out is not None:
        reason = "out="
    if reason is not None:
        raise NotImplementedError(f"primtrace: {name} with {reason} has no ref; torch runs it")


def _float_dtype(name, dtype):
    dtype = as_dtype(name, dtype) or dtypes.default_float()
    return dtype


def _draw(prim, shape, *values, dtype, device, strides=None):
    with as_nodes():
        return prim(tuple(shape), *values, dtype=dtype, device=device, strides=strides)


def _factory(name, prim, values):
    def factory(*size, generator=None, out=None, dtype=None, layout=None, device=None,
                requires_grad=False, pin_memory=False):
        _refuse(name, generator, out, layout=layout, pin_memory=pin_memory,
                requires_grad=requires_grad)
        shape = _varargs_size(name, size, None)
        return _draw(prim, shape, *values, dtype=_float_dtype(name, dtype),
                     device=device_of(device))
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"torch.{name}(*size): a new tensor of draws ({prim.doc.split(': ')[-1]})"
    return ref(factory, declines=_declines)


rand = _factory("rand", prims.uniform, (0.0, 1.0))
randn = _factory("randn", prims.normal, (0.0, 1.0))


def _like_strides(input):
    return prims.elementwise_strides(tuple(input.shape), [tuple(input.stride())])


def _like_factory(name, prim, values):
    def factory(input, *, dtype=None, layout=None, device=None, requires_grad=False,
                memory_format=torch.preserve_format, pin_memory=False):
        _refuse(name, layout=layout, pin_memory=pin_memory, requires_grad=requires_grad)
        if not is_tensor(input):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                            f"{type_name(input)}")
        if memory_format not in (torch.preserve_format, torch.contiguous_format):
            raise NotImplementedError(f"primtrace: {name}(memory_format={memory_format}) has no "
                                      "ref; torch runs it")
        strides = _like_strides(input) if memory_format is torch.preserve_format else None
        return _draw(prim, input.shape, *values, dtype=as_dtype(name, dtype) or input.dtype,
                     device=input.device if device is None else torch.device(device),
                     strides=strides)
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"{name}(input): draws shaped and laid out like input."

    def declines(input, *args, device=None, **kwargs):
        return _declines(**kwargs) or (device is not None and is_tensor(input)
                                       and torch.device(device) != input.device)
    return ref(factory, declines=declines)


rand_like = _like_factory("rand_like", prims.uniform, (0.0, 1.0))
randn_like = _like_factory("randn_like", prims.normal, (0.0, 1.0))


def _normal_declines(mean, std=1.0, size=None, *, generator=None, out=None, **kwargs) -> bool:
    return _declines(generator=generator, out=out, **kwargs) or (
        size is None and not (is_tensor(mean) or is_tensor(std)))


@ref(declines=_normal_declines)
def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, pin_memory=False, requires_grad=False):
    """normal(mean, std, size) of numbers: draws of N(mean, std^2); of tensors: mean + std *
    N(0, 1) drawn in their broadcast shape (eager's order of operations)."""
    _refuse("normal", generator, out, layout=layout, pin_memory=pin_memory,
            requires_grad=requires_grad)
    if not (is_tensor(mean) or is_tensor(std)):
        if size is None:
            raise NotImplementedError("primtrace: normal() of two numbers needs a size")
        shape = _varargs_size("normal", (size,), None)
        if concrete(std) < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {concrete(std)}")
        return _draw(prims.normal, shape, mean, std, dtype=_float_dtype("normal", dtype),
                     device=device_of(device))
    like = mean if is_tensor(mean) else std
    shape = tuple(like.shape)
    if is_tensor(mean) and is_tensor(std):
        from primtrace.refs.core import broadcast_shapes
        shape = broadcast_shapes(tuple(mean.shape), tuple(std.shape))
    draws = _draw(prims.normal, shape, 0.0, 1.0, dtype=like.dtype, device=like.device)
    from primtrace import refs
    return maybe_convert(refs.add(refs.mul(draws, std), mean), like.dtype)


def _bernoulli_declines(input, p=None, *, generator=None, out=None) -> bool:
    return generator is not None or out is not None or p is None or is_tensor(p)


@ref(declines=_bernoulli_declines)
def bernoulli(input, p=None, *, generator=None, out=None):
    """bernoulli(input, p): 0/1 draws with probability p, of input's shape and dtype,
    contiguous (a tensor of probabilities, p None, is declined)."""
    _refuse("bernoulli", generator, out)
    if p is None or is_tensor(p):
        raise NotImplementedError("primtrace: bernoulli of a probability tensor has no ref; "
                                  "torch runs it")
    return _draw(prims.bernoulli, input.shape, p, dtype=input.dtype, device=input.device)


def _feature_dropout_declines(input, p, train):
    return is_tensor(input) and not input.dtype.is_floating_point and bool(train)


@ref(declines=_feature_dropout_declines)
def feature_dropout(input, p, train):
    """torch.feature_dropout (F.dropout2d's kernel): dropout with one draw per (sample,
    channel)."""
    from primtrace.refs.nn.composites import _dropout
    return _dropout("feature_dropout", input, p, train, False, alpha=False, feature=True)


# --- in-place fills --------------------------------------------------------------------------
def _fill(name, prim, defaults, in_place=True):
    """Tensor.<name>: self filled with draws in place; or (in_place=False) the functional
    form PyTorch's reference list has for some (cauchy, exponential...): a new tensor like
    self with the draws, which torch itself has no function for."""
    params = list(defaults)

    def fill(self, *values, generator=None, **named):
        if generator is not None:
            raise NotImplementedError(f"primtrace: {name}(generator=) has no ref; torch runs it")
        if len(values) > len(params):
            raise TypeError(f"{name}() takes at most {len(params)} arguments ({len(values)} given)")
        given = dict(zip(params, values))
        for key, value in named.items():
            if key not in defaults or key in given:
                raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
            given[key] = value
        if not is_tensor(self):
            raise TypeError(f"{name}(): argument 'self' must be Tensor, not {type_name(self)}")
        args = [given.get(k, defaults[k]) for k in params]
        if any(is_tensor(a) for a in args):
            raise NotImplementedError(f"primtrace: {name} of a tensor parameter has no ref")
        draws = _draw(prim, self.shape, *args, dtype=self.dtype, device=self.device,
                      strides=_like_strides(self))
        return copy_to_self(self, draws) if in_place else draws
    fill.__name__ = fill.__qualname__ = name
    signature = ", ".join(f"{k}={v}" for k, v in defaults.items())
    fill.__doc__ = (f"Tensor.{name}({signature}): self filled with draws in place." if in_place
                    else f"{name}(self, {signature}): a new tensor like self, of draws.")

    def declines(self, *values, generator=None, **named):
        return generator is not None or any(is_tensor(v) for v in (*values, *named.values()))
    return ref(fill, declines=declines)


uniform_ = _fill("uniform_", prims.uniform, {"from": 0.0, "to": 1.0})
normal_ = _fill("normal_", prims.normal, {"mean": 0.0, "std": 1.0})
bernoulli_ = _fill("bernoulli_", prims.bernoulli, {"p": 0.5})
exponential_ = _fill("exponential_", prims.exponential, {"lambd": 1.0})
cauchy_ = _fill("cauchy_", prims.cauchy, {"median": 0.0, "sigma": 1.0})
geometric_ = _fill("geometric_", prims.geometric, {"p": None})
log_normal_ = _fill("log_normal_", prims.log_normal, {"mean": 1.0, "std": 2.0})
exponential = _fill("exponential", prims.exponential, {"lambd": 1.0}, in_place=False)
cauchy = _fill("cauchy", prims.cauchy, {"median": 0.0, "sigma": 1.0}, in_place=False)
geometric = _fill("geometric", prims.geometric, {"p": None}, in_place=False)
log_normal = _fill("log_normal", prims.log_normal, {"mean": 1.0, "std": 2.0}, in_place=False)

__all__ = exports(globals())
