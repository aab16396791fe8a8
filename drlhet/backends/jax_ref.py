"""The pure-JAX reference backend: jitted on any XLA device (CPU or GPU)."""

from drlhet.backends.base import register
from drlhet.replay import sum_tree

register("find", "jax", lambda: sum_tree.descend)
register("update", "jax", lambda: sum_tree.write)
