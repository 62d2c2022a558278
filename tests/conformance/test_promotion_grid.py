"""The promotion grid: every dtype as a dimensioned tensor, as a 0-dim tensor, and every
Python number type, on each side of one binary op per promotion kind, under both default
dtypes. The ref's result dtype and shape must be eager's (and where eager raises, the ref
raises the same exception type); ``elementwise_dtypes`` must predict eager's dtype.
"""
import itertools

import pytest
import torch

from primtrace import refs
from primtrace.refs import Kind, elementwise_dtypes
from tests.conformance.harness import ALL_DTYPES

pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")

NUMBERS = (True, 2, 2.5, 1.5 + 1j)  # the four Python number types


def forms():
    """(description, value): 12 dtypes x {dimensioned, 0-dim} and the 4 Python number types."""
    for dtype in ALL_DTYPES:
        name = str(dtype).replace("torch.", "")
        yield f"{name}[2]", torch.ones(2, dtype=dtype)
        yield f"{name}[]", torch.ones((), dtype=dtype)
    for number in NUMBERS:
        yield f"{type(number).__name__}", number


def _where(fn):
    def run(a, b):
        return fn(torch.tensor([True, False]), a, b)
    return run


# kind, ref, eager; the ref's promotion kind is the one elementwise_dtypes must reproduce
BINARY_OPS = {
    "DEFAULT add": (Kind.DEFAULT, refs.add, torch.add),
    "NO_OPMATH where": (Kind.NO_OPMATH, _where(refs.where), _where(torch.where)),
    "NO_OPMATH nextafter": (Kind.NO_OPMATH, refs.nextafter, torch.nextafter),
    "INT_TO_FLOAT true_divide": (Kind.INT_TO_FLOAT, refs.true_divide, torch.true_divide),
    "BOOL_TO_LONG pow": (Kind.BOOL_TO_LONG, refs.pow, torch.pow),
    "ALWAYS_BOOL lt": (Kind.ALWAYS_BOOL, refs.lt, torch.lt),
    "ALWAYS_BOOL eq": (Kind.ALWAYS_BOOL, refs.eq, torch.eq),
}


@pytest.fixture(params=[torch.float32, torch.float64], ids=["default_f32", "default_f64"])
def default_dtype(request):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    try:
        yield request.param
    finally:
        torch.set_default_dtype(previous)


def _run(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # the verdict is compared, not raised
        return None, e


def _is_pow_of_bool_to_bool_number(name, a, b):
    """Eager's pow keeps bool for bool ** True/False (its x ** 1 / x ** 0 shortcuts), where
    BOOL_TO_LONG would say int64; the ref uses plain promotion for pow (see refs.pow)."""
    return (name.endswith("pow") and isinstance(a, torch.Tensor) and a.dtype is torch.bool
            and isinstance(b, bool))


@pytest.mark.parametrize("name", list(BINARY_OPS))
def test_binary_grid(name, default_dtype):
    kind, ref, eager = BINARY_OPS[name]
    failures, checked = [], 0
    for (da, a), (db, b) in itertools.product(forms(), forms()):
        expected, eager_error = _run(eager, a, b)
        got, our_error = _run(ref, a, b)
        where = f"{da} , {db}"
        if eager_error is not None:
            if not isinstance(our_error, type(eager_error)):
                failures.append(f"{where}: eager raised {type(eager_error).__name__}, ours {our_error!r}")
            continue
        checked += 1
        if our_error is not None:
            failures.append(f"{where}: ours raised {our_error!r}")
            continue
        if got.dtype != expected.dtype or got.shape != expected.shape:
            failures.append(f"{where}: ours {got.dtype}{list(got.shape)}, eager {expected.dtype}{list(expected.shape)}")
        predicted = elementwise_dtypes(a, b, type_promotion_kind=kind)[1]
        if predicted != expected.dtype and not _is_pow_of_bool_to_bool_number(name, a, b):
            failures.append(f"{where}: elementwise_dtypes({kind.name}) {predicted}, eager {expected.dtype}")
    assert checked > 50, f"{name}: eager accepted only {checked} pairs"
    assert not failures, f"{name}: {len(failures)} failures:\n  " + "\n  ".join(failures[:10])


def test_pow_bool_exception_is_exactly_bool_to_bool_number(default_dtype):
    """The one place eager's pow departs from BOOL_TO_LONG is a bool tensor to a bool number."""
    for number in NUMBERS:
        for shape in ((2,), ()):
            t = torch.ones(shape, dtype=torch.bool)
            bool_to_long = elementwise_dtypes(t, number, type_promotion_kind=Kind.BOOL_TO_LONG)[1]
            eager = torch.pow(t, number).dtype
            assert refs.pow(t, number).dtype == eager
            assert (bool_to_long == eager) != isinstance(number, bool), (number, shape, eager)


@pytest.mark.parametrize("kind", [Kind.COMPLEX_TO_FLOAT, Kind.DEFAULT, Kind.INT_TO_FLOAT])
def test_unary_grid(kind, default_dtype):
    """No binary op is COMPLEX_TO_FLOAT, so that kind is checked on abs-like unary ops over
    the same forms (abs takes no numbers: those are checked against eager's rule directly)."""
    eager_op = {Kind.COMPLEX_TO_FLOAT: torch.abs, Kind.DEFAULT: torch.neg, Kind.INT_TO_FLOAT: torch.sin}[kind]
    failures = []
    for desc, a in forms():
        if not isinstance(a, torch.Tensor):
            expected = {bool: torch.bool, int: torch.int64, float: default_dtype,
                        complex: {torch.float32: torch.complex64, torch.float64: torch.complex128}[default_dtype]}[type(a)]
            expected, error = _run(eager_op, torch.tensor(a, dtype=expected))
            if error is not None:
                continue
            expected = expected.dtype
        else:
            expected, error = _run(eager_op, a)
            if error is not None:
                continue
            expected = expected.dtype
        predicted = elementwise_dtypes(a, type_promotion_kind=kind)[1]
        if predicted != expected:
            failures.append(f"{desc}: elementwise_dtypes {predicted}, eager {eager_op.__name__} {expected}")
    assert not failures, "\n".join(failures)
