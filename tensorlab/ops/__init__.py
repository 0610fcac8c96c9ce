"""The differentiable operations, one family per file.

Each op is a :class:`~tensorlab.function.Function` whose docstring gives its forward formula
and its local gradient; ``docs/derivations.md`` derives them in the same notation. ``g`` is
the gradient arriving at the op's output (dL/dy), and each backward returns dL/d(input).
"""
