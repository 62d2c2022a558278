"""The compiled pieces, both optional: primtrace.jit's hit path in C (primtrace/_hitpath.c)
and the dict version tags its state guards read (primtrace/_dictwatch.c).

Where they cannot be built (no C compiler), the install goes on: jit uses its pure-Python
hit path (the same checks at ~0.2 us more per call) and guards check every item every call."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("primtrace._hitpath", ["primtrace/_hitpath.c"], optional=True),
                   Extension("primtrace._dictwatch", ["primtrace/_dictwatch.c"], optional=True)])
