"""Plug in your own executors through the public API that primtrace's own executors use.

1. An operator executor that claims one prim (`exp`) with a checker that accepts only
   float32 nodes, and runs it through NumPy instead of torch.
2. A fusion executor that claims regions of add/sub/mul/neg and compiles each region into
   one Python function that evaluates it with NumPy in a single pass over the inputs.

Run: python examples/custom_executor.py
"""
import numpy as np
import torch

import primtrace
from primtrace import prims

# --- 1. an operator executor ---------------------------------------------------------------
numpy_exp = primtrace.OperatorExecutor("numpy_exp")


def exp_with_numpy(a):
    return torch.from_numpy(np.exp(a.numpy()))


numpy_exp.register(prims.exp, exp_with_numpy, checker=lambda a: a.dtype == torch.float32)


# --- 2. a fusion executor ------------------------------------------------------------------
class NumpyArithmeticFusion(primtrace.FusionExecutor):
    """Fuses chains of add/sub/mul/neg on CPU tensors into one NumPy expression."""
    name = "numpy_fusion"
    OPS = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "neg": "(-{})"}

    def can_fuse(self, node):
        return (node.symbol.name in self.OPS
                and all(getattr(p, "device", torch.device("cpu")).type == "cpu" for p in node.inputs))

    def compile(self, region):
        names = {p.name: f"x{i}" for i, p in enumerate(region.inputs)}
        lines = []
        for node in region.nodes:
            args = [names.get(a.name, repr(a)) if hasattr(a, "name") else repr(a) for a in node.args]
            out = node.output_proxies[0]
            names[out.name] = f"v_{out.name}"
            lines.append(f"    v_{out.name} = {self.OPS[node.symbol.name].format(*args)}")
        params = ", ".join(names[p.name] for p in region.inputs)
        loads = [f"    {names[p.name]} = {names[p.name]}.numpy() if isinstance({names[p.name]}, torch.Tensor) "
                 f"else {names[p.name]}" for p in region.inputs]
        results = ", ".join(f"torch.from_numpy(np.asarray({names[p.name]}, dtype=np.{str(p.dtype)[6:]}))"
                            for p in region.outputs)
        source = "\n".join([f"def region({params}):", *loads, *lines, f"    return ({results},)"]) + "\n"
        namespace = {"np": np, "torch": torch}
        exec(compile(source, f"<{self.name}>", "exec"), namespace)
        fn = namespace["region"]
        fn.source = source
        return fn


def f(a, b, c):
    y = torch.exp(a) * b - c      # exp -> numpy_exp (f32 only); mul, sub -> numpy_fusion
    return -y + a


if __name__ == "__main__":
    a, b, c = (torch.randn(1000) for _ in range(3))
    jf = primtrace.jit(f, executors=[numpy_exp, NumpyArithmeticFusion()])
    out = jf(a, b, c)
    torch.testing.assert_close(out, f(a, b, c))
    print(primtrace.last_trace(jf))
    print("matches eager:", True)
    # float64 inputs: the checker rejects them, so exp falls back to the next executor
    jf(a.double(), b.double(), c.double())
    print(primtrace.last_trace(jf))
