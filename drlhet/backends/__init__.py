"""Backends: implementations of the replay and training primitives on a device.

Importing this package registers every backend; `lookup` returns one or raises
`BackendUnavailable` naming what is missing.
"""

from drlhet.backends import jax_ref as _jax_ref  # noqa: F401  (registers "jax")
from drlhet.backends import native as _native  # noqa: F401  (registers "native")
from drlhet.backends.base import BackendUnavailable, available, lookup, register

__all__ = ["BackendUnavailable", "available", "lookup", "register"]
