"""The pure-JAX reference backend: every group, jitted on any XLA device (CPU or GPU)."""

from drlhet.backends.base import CPU, GPU, GROUPS, Backend, register
from drlhet.replay import sum_tree

BACKEND = register(
    Backend(
        name="jax",
        platforms=(CPU, GPU),
        provides=GROUPS,
        needs="jax (always present)",
        loader=lambda: sum_tree.REFERENCE,
        rank=0,
        reference=True,
        summary="pure-functional jitted JAX; the reference all other backends match bit for bit",
    )
)
