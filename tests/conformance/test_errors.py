"""Errors: each case raises eager's exception type (and message, where we reproduce it) and
mutates no input, out= tensors included."""
import pytest
import torch

from primtrace import refs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def _clone(args, kwargs):
    clone = lambda x: x.clone() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return [clone(a) for a in args], {k: clone(v) for k, v in kwargs.items()}


def _unchanged(before, after):
    return all(not isinstance(x, torch.Tensor) or (x.shape == y.shape and torch.equal(x, y))
               for x, y in zip(before, after))


def expanded(shape=(3, 4)):
    return torch.zeros((1, *shape[1:])).expand(shape)


# name, ref call, eager call, arguments factory, whether our message must equal eager's
CASES = [
    ("shape mismatch", refs.add, torch.add, lambda: ((t(1, 2, 3), t(1, 2, 3, 4)), {}), True),
    ("shape mismatch, 3 operands", refs.where, torch.where,
     lambda: ((torch.tensor([True, False]), t(1, 2, 3), t(1, 2)), {}), False),
    ("bitwise on floats", refs.bitwise_and, torch.bitwise_and, lambda: ((t(1.5), t(2.5)), {}), False),
    ("shift on bool", refs.bitwise_left_shift, torch.bitwise_left_shift,
     lambda: ((t(1, dtype=torch.bool), t(1, dtype=torch.bool)), {}), False),
    ("gcd on floats", refs.gcd, torch.gcd, lambda: ((t(4.0), t(6.0)), {}), False),
    ("sub on bool", refs.sub, torch.sub, lambda: ((t(1, dtype=torch.bool), t(0, dtype=torch.bool)), {}), True),
    ("maximum on complex", refs.maximum, torch.maximum,
     lambda: ((t(1j, dtype=torch.complex64), t(1, dtype=torch.complex64)), {}), True),
    ("unsafe out= cast", refs.add, torch.add,
     lambda: ((t(1.5), t(2.5)), {"out": torch.zeros(1, dtype=torch.int64)}), True),
    ("unsafe out= cast to bool", refs.mul, torch.mul,
     lambda: ((t(1, 2, dtype=torch.int32), 2), {"out": torch.zeros(2, dtype=torch.bool)}), True),
    ("float alpha with integers", refs.add, torch.add,
     lambda: ((t(1, 2, dtype=torch.int64), t(3, 4, dtype=torch.int64)), {"alpha": 0.5}), True),
    ("complex alpha with floats", refs.sub, torch.sub, lambda: ((t(1.0), t(2.0)), {"alpha": 1j}), True),
    ("bool alpha with floats", refs.add, torch.add, lambda: ((t(1.0), t(2.0)), {"alpha": True}), True),
    ("integer trunc division by zero", refs.div, torch.div,
     lambda: ((t(1, 2, dtype=torch.int32), t(1, 0, dtype=torch.int32)), {"rounding_mode": "trunc"}), True),
    ("integer floor division by zero", refs.div, torch.div,
     lambda: ((t(1, 2, dtype=torch.int64), 0), {"rounding_mode": "floor"}), True),
    ("floor_divide by zero", refs.floor_divide, torch.floor_divide,
     lambda: ((t(-7, 7, dtype=torch.int8), t(0, 2, dtype=torch.int8)), {}), True),
    ("remainder by zero", refs.remainder, torch.remainder,
     lambda: ((t(5, dtype=torch.uint8), t(0, dtype=torch.uint8)), {}), True),
    ("fmod by zero", refs.fmod, torch.fmod, lambda: ((t(5, dtype=torch.int16), 0), {}), True),
    ("bad rounding mode", refs.div, torch.div, lambda: ((t(1.0), t(2.0)), {"rounding_mode": "round"}), False),
    ("integer to a negative power", refs.pow, torch.pow, lambda: ((t(2, dtype=torch.int32), -1), {}), True),
    ("addcdiv of integers", refs.addcdiv, torch.addcdiv,
     lambda: ((t(1.0), t(1, dtype=torch.int64), t(2, dtype=torch.int64)), {}), True),
    ("clamp without bounds", refs.clamp, torch.clamp, lambda: ((t(1.0),), {}), True),
    ("masked_fill with an integer mask", refs.masked_fill, torch.masked_fill,
     lambda: ((t(1.0, 2.0), t(1, 0, dtype=torch.int64), 0.0), {}), True),
    ("where with an integer condition", refs.where, torch.where,
     lambda: ((t(1, dtype=torch.int64), t(1.0), t(2.0)), {}), True),
    ("masked_fill value overflows", refs.masked_fill, torch.masked_fill,
     lambda: ((t(1, 2, dtype=torch.int8), torch.tensor([True, False]), 300), {}), True),
    ("lerp end dtype", refs.lerp, torch.lerp, lambda: ((t(1.0), t(2.0, dtype=torch.float64), 0.5), {}), True),
    ("heaviside dtypes", refs.heaviside, torch.heaviside, lambda: ((t(1.0), t(2.0, dtype=torch.float64)), {}), True),
    ("isclose dtypes", refs.isclose, torch.isclose, lambda: ((t(1.0), t(2.0, dtype=torch.float64)), {}), True),
    ("float_power out dtype", refs.float_power, torch.float_power,
     lambda: ((t(1.0), 2), {"out": torch.zeros(1)}), True),
    ("partially overlapping out=", refs.add, torch.add,
     lambda: (lambda base: ((base[:6], 1.0), {"out": base[2:8]}))(torch.arange(10.0)), True),
    ("out= with internal overlap", refs.mul, torch.mul,
     lambda: ((torch.ones(3, 4), 2.0), {"out": expanded()}), True),
    ("out= with internal overlap, binary", refs.atan2, torch.atan2,
     lambda: ((torch.ones(3, 4), torch.ones(3, 4)), {"out": expanded()}), True),
    ("uint16 promotion", refs.add, torch.add,
     lambda: ((t(1, dtype=torch.uint16), t(1, dtype=torch.int32)), {}), True),
    ("uint64 with int8", refs.mul, torch.mul,
     lambda: ((t(1, dtype=torch.uint64), t(1, dtype=torch.int8)), {}), True),
    ("float8 promotion", refs.add, torch.add,
     lambda: ((torch.ones(2, dtype=torch.float8_e4m3fn), t(1.0, 2.0)), {}), True),
    ("float8 comparison", refs.lt, torch.lt,
     lambda: ((torch.ones(2, dtype=torch.float8_e5m2), t(1.0, 2.0, dtype=torch.float16)), {}), True),
]

# name, Tensor method, arguments factory (self first), whether the message must match
INPLACE_CASES = [
    ("in-place into a broadcast shape", "add_", lambda: ((t(1.0, 2.0, 3.0), torch.ones(2, 3)), {}), True),
    ("in-place 0-dim self, dimensioned other", "mul_", lambda: ((torch.tensor(2.0), t(1.0, 2.0)), {}), True),
    ("in-place masked_fill into a broadcast shape", "masked_fill_",
     lambda: ((t(1.0, 2.0), torch.tensor([[True], [False]]), 0.0), {}), True),
    ("in-place into an expanded self", "add_", lambda: ((expanded(), torch.ones(3, 4)), {}), True),
    ("in-place result does not cast to self", "div_", lambda: ((t(1, 2, dtype=torch.int64), 2), {}), False),
    ("in-place comparison into bool keeps going", "lt_", lambda: ((t(1.5), t(2.5, dtype=torch.complex64)), {}), False),
    ("in-place clamp promotes", "clamp_", lambda: ((t(1, 2, dtype=torch.int32), 0.5), {}), False),
    ("in-place float_power of float32", "float_power_", lambda: ((t(1.0, 2.0), 2), {}), True),
    ("in-place sub on bool", "sub_", lambda: ((t(1, dtype=torch.bool), t(1, dtype=torch.bool)), {}), True),
    ("in-place partial overlap", "add_",
     lambda: (lambda base: ((base[2:8], base[:6]), {}))(torch.arange(10.0)), True),
]


def _check(ref_call, eager_call, make, same_message):
    eager_args, eager_kwargs = make()
    eager_before = _clone(eager_args, eager_kwargs)
    with pytest.raises(Exception) as eager_info:
        eager_call(*eager_args, **eager_kwargs)
    args, kwargs = make()
    before = _clone(args, kwargs)
    with pytest.raises(type(eager_info.value)) as ours_info:
        ref_call(*args, **kwargs)
    assert _unchanged(before[0], args) and _unchanged(list(before[1].values()), list(kwargs.values())), \
        "the ref mutated an input"
    assert _unchanged(eager_before[0], eager_args), "eager itself mutated an input (test is wrong)"
    if same_message:
        assert str(ours_info.value) == str(eager_info.value)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error(case):
    _, ref_call, eager_call, make, same_message = case
    _check(ref_call, eager_call, make, same_message)


@pytest.mark.parametrize("case", INPLACE_CASES, ids=[c[0] for c in INPLACE_CASES])
def test_inplace_error(case):
    _, method, make, same_message = case
    _check(getattr(refs, method), getattr(torch.Tensor, method), make, same_message)


def test_float_division_by_zero_is_not_an_error():
    """Only integer division checks its divisor: floats follow IEEE."""
    a, b = torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.0, 0.0, 0.0])
    for mode in (None, "trunc", "floor"):
        assert torch.equal(refs.div(a, b, rounding_mode=mode).nan_to_num(7.0),
                           torch.div(a, b, rounding_mode=mode).nan_to_num(7.0))
