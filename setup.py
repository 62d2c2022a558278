"""The one compiled piece: primtrace.jit's hit path in C (primtrace/_hitpath.c).

Optional: where it cannot be built (no C compiler), the install goes on and jit uses its
pure-Python hit path, the same checks at ~0.2 us more per call."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("primtrace._hitpath", ["primtrace/_hitpath.c"], optional=True)])
