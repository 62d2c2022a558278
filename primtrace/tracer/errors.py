"""The errors and warnings of tracing (capture raises them; jit, the backend and users catch
them)."""


class TracingError(RuntimeError):
    """A function cannot be traced as written (the base of primtrace's tracing errors)."""


class DataDependentError(TracingError):
    """User code reads a tensor's values into Python while tracing (if t.sum() > 0: ...)."""


class OpaqueOpWarning(UserWarning):
    """A torch function has no ref and runs as an opaque torch call."""
