#!/usr/bin/env python
"""Run PyTorch's reference list (OpInfo ``python_ref_db``, FFT entries aside) against
primtrace: every sample of every supported CPU dtype through the primtrace ref on real
tensors and through ``primtrace.jit`` of the torch call, compared with eager.

The rule is tests/conformance/harness.py's: same dtype and shape, integers and bools exact,
floats close to eager or at least as close to a float64 computation as eager is, NaN where
eager has NaN; an output that shares an input's memory in eager must share it in ours (and
one that does not, must not); inputs end as eager leaves them (in-place ops write, others do
not); where eager raises, ours raises the same kind. Random and uninitialized results
(normal, dropout, empty) are checked by dtype and shape only. ``error_inputs`` must raise
the kind of error eager raises.

    python scripts/opinfo_conformance.py                      # everything (slow: jit compiles)
    python scripts/opinfo_conformance.py --entries add,cat --dtypes float32 --no-jit
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import math
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conformance.harness import _same, _upcast, compare_outputs  # noqa: E402

#: results that are random or uninitialized: compared by dtype and shape only
NONDETERMINISTIC = frozenset({
    "cauchy", "exponential", "geometric", "log_normal", "normal", "normal_", "randn",
    "nn.functional.dropout", "nn.functional.alpha_dropout", "empty", "empty_like",
    "new_empty", "new_empty_strided", "empty_strided", "bernoulli",
})

#: result tolerances widened like PyTorch's own ref tests (ill-conditioned or reassociated)
SCALE = {}

#: entries whose torch op (an OpInfo lambda) orders its arguments unlike the ref: the ref,
#: called the torch op's way
ADAPT = {
    "where": lambda ref: lambda self, condition, other, **kw: ref(condition, self, other, **kw),
}

#: float dtypes without a tolerance in the harness: compared exactly, as float32
_EXACT_FLOATS = tuple(getattr(torch, n) for n in (
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(torch, n))


def _load_coverage():
    spec = importlib.util.spec_from_file_location("ref_coverage", ROOT / "scripts" / "ref_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(names=None, exact=False):
    """(label, entry name, PythonRefInfo) for the non-FFT entries, in python_ref_db's order;
    the label adds the OpInfo's variant (``div.floor_rounding``). `names` selects by label
    or name (``div`` selects every div), by label only when `exact`."""
    from torch.testing._internal.common_methods_invocations import python_ref_db
    out = []
    for op in python_ref_db:
        name = op.name.removeprefix("_refs.")
        if name.startswith("fft."):
            continue
        if op.variant_test_name:
            label = f"{name}.{op.variant_test_name}"
        else:
            label = name
        if names and label not in names and (exact or name not in names):
            continue
        out.append((label, name, op))
    return out


# --- copies that keep the layout ------------------------------------------------------------
def _copy_tensor(t: torch.Tensor, storages: dict) -> torch.Tensor:
    """A copy with the same sizes, strides, offset and storage size (expanded stays expanded);
    tensors that shared a storage share the copy's (an out= that is an input stays one)."""
    if t.is_conj() or t.is_neg() or t.layout != torch.strided or t.requires_grad:
        return t.clone()
    storage = t.untyped_storage()
    key = (storage.data_ptr(), storage.nbytes())
    if key not in storages or storage.nbytes() == 0:
        storages[key] = storage.clone()
    new = torch.empty(0, dtype=t.dtype, device=t.device)
    new.set_(storages[key], t.storage_offset(), t.size(), t.stride())
    return new


def copy_tree(obj, storages=None):
    """A copy of a sample's arguments, with the same layouts and the same aliasing."""
    storages = {} if storages is None else storages
    if isinstance(obj, torch.Tensor):  # one object twice (out= an input) stays one object
        if id(obj) not in storages:
            storages[id(obj)] = (obj, _copy_tensor(obj, storages))
        return storages[id(obj)][1]
    if isinstance(obj, (tuple, list)):
        return type(obj)(copy_tree(x, storages) for x in obj)
    if isinstance(obj, dict):
        return {k: copy_tree(v, storages) for k, v in obj.items()}
    return obj


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _aliases(out: torch.Tensor, inputs) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == ptr for t in _tensors(inputs)
               if t.untyped_storage().nbytes() > 0)


# --- one sample -----------------------------------------------------------------------------
def describe(obj) -> str:
    """A short, runnable-looking description of an argument."""
    if isinstance(obj, torch.Tensor):
        dt = str(obj.dtype).replace("torch.", "")
        extra = ""
        if obj.dim() and not obj.is_contiguous():
            extra = f", stride={tuple(obj.stride())}"
        if obj.numel() <= 4:
            return f"tensor({obj.tolist()}, {dt}{extra})"
        return f"T{list(obj.shape)}:{dt}{extra}"
    if isinstance(obj, (tuple, list)):
        inner = ", ".join(describe(x) for x in obj)
        return f"[{inner}]" if isinstance(obj, list) else f"({inner}{',' if len(obj) == 1 else ''})"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}={describe(v)}" for k, v in obj.items()) + "}"
    return repr(obj)


def describe_sample(sample) -> str:
    parts = [describe(sample.input)] + [describe(a) for a in sample.args]
    parts += [f"{k}={describe(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _call(fn, sample):
    args, kwargs = copy_tree(((sample.input, *sample.args), dict(sample.kwargs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs), None, (args, kwargs)
        except Exception as e:  # noqa: BLE001 - the verdict is the comparison
            return None, e, (args, kwargs)


def _compare_structure(got, expected) -> str | None:
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected a sequence of {len(expected)}, got {type(got).__name__}"
        for i, (g, e) in enumerate(zip(got, expected)):
            p = _compare_structure(g, e)
            if p:
                return f"output {i}: {p}"
        return None
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if got.dtype != expected.dtype:
            return f"dtype: ours {got.dtype}, eager {expected.dtype}"
        if got.shape != expected.shape:
            return f"shape: ours {list(got.shape)}, eager {list(expected.shape)}"
    return None


def _compare_numbers(got, expected) -> str | None:
    """Python results (item, equal, allclose): same type, same value, NaN for NaN."""
    if isinstance(expected, (bool, int, float, complex)):
        if type(got) is not type(expected):
            return f"expected a {type(expected).__name__}, got {type(got).__name__} {got!r}"
        if isinstance(expected, float) and math.isnan(expected) and math.isnan(got):
            return None
        return None if got == expected else f"expected {expected!r}, got {got!r}"
    return "unhandled"


def _compare_aliasing(got, expected, our_inputs, eager_inputs) -> str | None:
    gs = [got] if isinstance(got, torch.Tensor) else list(got) if isinstance(got, (tuple, list)) else []
    es = [expected] if isinstance(expected, torch.Tensor) else list(expected) \
        if isinstance(expected, (tuple, list)) else []
    for i, (g, e) in enumerate(zip(gs, es)):
        if not (isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor)) or e.numel() == 0:
            continue
        eager_alias, our_alias = _aliases(e, eager_inputs), _aliases(g, our_inputs)
        if eager_alias != our_alias:
            which = f"output {i} " if len(es) > 1 else ""
            return (f"{which}aliasing: eager's result {'is' if eager_alias else 'is not'} a view "
                    f"of an input, ours {'is' if our_alias else 'is not'}")
    return None


def _widen(obj):
    if isinstance(obj, torch.Tensor) and obj.dtype in _EXACT_FLOATS:
        return obj.to(torch.float32)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_widen(x) for x in obj)
    return obj


def check(fn, torch_fn, sample, random: bool, scale: float = 1.0, functional_ref=False) -> str | None:
    """None if `fn` conforms to eager `torch_fn` on `sample`, else what went wrong.

    `functional_ref`: `fn` is a functional ref of an in-place torch op (refs.cauchy for
    Tensor.cauchy_): its inputs and aliasing are not compared."""
    expected, eager_error, eager_inputs = _call(torch_fn, sample)
    got, our_error, our_inputs = _call(fn, sample)
    if eager_error is not None:
        if our_error is None:
            return f"eager raised {type(eager_error).__name__}; ours returned"
        if not isinstance(our_error, type(eager_error)):
            return f"eager raised {type(eager_error).__name__}; ours raised {type(our_error).__name__}: {our_error}"
        return None
    if our_error is not None:
        return f"raised {type(our_error).__name__}: {_first_line(our_error)}"
    problem = _compare_structure(got, expected)
    if random or problem:
        pass
    elif isinstance(expected, (bool, int, float, complex)):
        problem = _compare_numbers(got, expected)
    else:
        def reference():
            args = _upcast(copy_tree((sample.input, *sample.args)))
            kwargs = {k: _upcast(v) for k, v in copy_tree(dict(sample.kwargs)).items()}
            return torch_fn(*args, **kwargs)
        problem = compare_outputs(_widen(got), _widen(expected), lambda: _widen(reference()), scale)
    if problem:
        return problem
    if functional_ref:
        return None
    if not random and not _same(eager_inputs, our_inputs):
        return "inputs after the call differ from eager's (a missing or extra in-place write)"
    return _compare_aliasing(got, expected, our_inputs[0], eager_inputs[0])


def _first_line(e) -> str:
    text = str(e).strip().splitlines()
    return text[0][:160] if text else ""


# --- the run --------------------------------------------------------------------------------
def classify(problem: str) -> str:
    """The failure's class: the message with numbers, shapes and quoted values blanked."""
    text = problem.split(": ours ")[0] if problem.startswith("values differ") else problem
    text = re.sub(r"values differ at \[.*", "values differ", text)
    text = re.sub(r"\[[^\]]*\]", "[..]", text)
    text = re.sub(r"\(.*?\)", "(..)", text)
    text = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text[:140]


@dataclass
class Stats:
    passed: collections.Counter = field(default_factory=collections.Counter)
    total: collections.Counter = field(default_factory=collections.Counter)
    classes: dict = field(default_factory=dict)   # (path, class) -> [count, entries, repro]
    failures: list = field(default_factory=list)  # (path, entry, problem, repro)

    def record(self, path, entry, ok, problem=None, repro=None):
        self.total[path, entry] += 1
        if ok:
            self.passed[path, entry] += 1
            return
        self.failures.append((path, entry, problem, repro))
        key = (path, classify(problem))
        slot = self.classes.setdefault(key, [0, collections.Counter(), f"{repro}: {problem}"])
        slot[0] += 1
        slot[1][entry] += 1

    def rate(self, path):
        p = sum(v for (q, _), v in self.passed.items() if q == path)
        t = sum(v for (q, _), v in self.total.items() if q == path)
        return p, t


def make_jit(torch_fn):
    import primtrace

    def call(*args, **kwargs):
        return torch_fn(*args, **kwargs)
    return primtrace.jit(call)


def run(names=None, dtypes=None, max_samples=None, jit=True, errors=True, verbose=False,
        out=sys.stdout, exact=False) -> Stats:
    coverage = _load_coverage()
    stats = Stats()
    for label, name, op in entries(names, exact):
        _, ref = coverage.lookup(name)
        torch_fn = op.torch_opinfo.op
        random = name in NONDETERMINISTIC
        scale = SCALE.get(name, 1.0)
        if ref is not None and name in ADAPT:
            ref = ADAPT[name](ref)
        paths = {"refs": ref} if ref is not None else {}
        if jit:
            paths["jit"] = make_jit(torch_fn)
        t0 = time.time()
        supported = op.supported_dtypes("cpu")
        chosen = [d for d in (dtypes or sorted(supported, key=str)) if d in supported]
        for dtype in chosen:
            try:
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
            except Exception as e:  # noqa: BLE001
                print(f"  {label} {dtype}: sample_inputs raised {e!r}", file=out)
                continue
            if max_samples is not None:
                samples = samples[:max_samples]
            for i, sample in enumerate(samples):
                repro = f"{label} {str(dtype).replace('torch.', '')} #{i} {describe_sample(sample)}"
                for path in ("refs", "jit"):
                    if path == "jit" and not jit:
                        continue
                    fn = paths.get(path)
                    if fn is None:
                        stats.record(path, label, False, "no ref", repro)
                        continue
                    try:
                        problem = check(fn, torch_fn, sample, random, scale,
                                        functional_ref=random and path == "refs")
                    except Exception as e:  # noqa: BLE001 - a checker crash is a failure too
                        problem = f"checker crashed: {type(e).__name__}: {_first_line(e)}"
                        if verbose:
                            traceback.print_exc()
                    stats.record(path, label, problem is None, problem, repro)
                    if problem and verbose:
                        print(f"    FAIL {path} {repro}: {problem}", file=out)
        if errors:
            try:
                error_inputs = list(op.torch_opinfo.error_inputs("cpu")) if op.torch_opinfo.error_inputs_func else []
            except Exception:  # noqa: BLE001
                error_inputs = []
            if max_samples is not None:
                error_inputs = error_inputs[:max_samples]
            for i, ei in enumerate(error_inputs):
                repro = f"{label} error #{i} {describe_sample(ei.sample_input)}"
                for path, fn in paths.items():
                    # eager's verdict is the spec: its error kind (error_type may be a base
                    # class, and a few error inputs no longer raise in eager)
                    try:
                        problem = check(fn, torch_fn, ei.sample_input, random, scale,
                                        functional_ref=random and path == "refs")
                    except Exception as e:  # noqa: BLE001
                        problem = f"checker crashed: {type(e).__name__}: {_first_line(e)}"
                    stats.record(path, label, problem is None, problem, repro)
                    if problem and verbose:
                        print(f"    FAIL {path} {repro}: {problem}", file=out)
        line = " ".join(f"{p} {stats.passed[p, label]}/{stats.total[p, label]}" for p in ("refs", "jit")
                        if stats.total[p, label])
        print(f"{label:40s} {line}  ({time.time() - t0:.1f}s)", file=out, flush=True)
    return stats


def report(stats: Stats, out=sys.stdout) -> None:
    print("\n== failure classes (count, entries, one repro) ==", file=out)
    for (path, cls), (count, ents, repro) in sorted(stats.classes.items(), key=lambda kv: -kv[1][0]):
        names = ", ".join(f"{e}({n})" for e, n in ents.most_common(8))
        more = f" +{len(ents) - 8}" if len(ents) > 8 else ""
        print(f"[{path}] {count:5d}  {cls}\n        entries: {names}{more}\n        repro: {repro[:400]}",
              file=out)
    print("\n== overall ==", file=out)
    for path in ("refs", "jit"):
        p, t = stats.rate(path)
        if t:
            print(f"{path}: {p}/{t} samples pass ({100.0 * p / t:.2f}%)", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", help="comma-separated entry names (e.g. add,nn.functional.gelu)")
    ap.add_argument("--dtypes", help="comma-separated dtypes (e.g. float32,int64)")
    ap.add_argument("--max-samples", type=int, help="at most this many samples per dtype")
    ap.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--errors", action=argparse.BooleanOptionalAction, default=True,
                    help="also run error_inputs (the error kind must match)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    args = ap.parse_args(argv)
    names = set(args.entries.split(",")) if args.entries else None
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")] if args.dtypes else None
    torch.manual_seed(0)
    stats = run(names, dtypes, args.max_samples, args.jit, args.errors, args.verbose)
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
