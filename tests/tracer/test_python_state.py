"""Python state a jitted function reads or writes besides its arguments' tensors: globals
of exec'd functions, closure cells, and writes to plain objects, lists and dicts. Each
test compares the returned values AND the state after each call with eager."""
import pytest
import torch

import primtrace

pytestmark = [pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning"),
              pytest.mark.usefixtures("both_hit_paths")]


# --- item 6: globals of exec'd functions, closure cells ---------------------------------------
def test_globals_of_a_function_execd_in_its_own_dict_are_read_per_call():
    g = {"torch": torch, "K": 1.0, "W": torch.ones(2)}
    exec("def f(x): return x * W + K", g)   # noqa: S102
    jf, x = primtrace.jit(g["f"]), torch.randn(2)
    torch.testing.assert_close(jf(x), g["f"](x))
    g["K"] = 5.0
    torch.testing.assert_close(jf(x), g["f"](x))
    g["W"] = torch.full((2,), 3.0)
    torch.testing.assert_close(jf(x), g["f"](x))


def test_a_closure_of_an_execd_function_is_read_per_call():
    g = {"torch": torch}
    exec("def make():\n"                          # noqa: S102
         "    k = 1.0\n"
         "    def f(x): return x + k\n"
         "    def set_k(v):\n"
         "        nonlocal k\n"
         "        k = v\n"
         "    return f, set_k\n", g)
    f, set_k = g["make"]()
    jf, x = primtrace.jit(f), torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    set_k(4.0)
    torch.testing.assert_close(jf(x), f(x))


SCALE = 2.0


def test_helpers_held_in_cells_are_guarded_even_if_they_never_call_torch():
    k = 2.0

    def helper():            # reads a cell and a global, never calls torch
        return k * SCALE

    def f(x):
        return x * helper()
    jf, x = primtrace.jit(f), torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    k = 5.0
    torch.testing.assert_close(jf(x), f(x))
    global SCALE
    old, SCALE = SCALE, -1.0
    try:
        torch.testing.assert_close(jf(x), f(x))
    finally:
        SCALE = old
