"""The paper-style baseline: a Python-level prioritized buffer on the host (modeled only).

The authors' framework keeps its replay buffer in Python on the host, so transitions come to
the host and sampled batches go back to the device every step. drlhet does not run such a
buffer in its loop; the DSE costs it from a profile of cpprb (`drlhet.dse.baselines`) so that
the speedup over this baseline can be stated.
"""

from drlhet.backends.base import CPU, Backend, register

BACKEND = register(
    Backend(
        name="python",
        platforms=(CPU,),
        provides=("replay",),
        needs="cpprb (the `bench` extra) for its profile; the scheduler never runs it",
        loader=None,
        host=True,
        summary="Python-level buffer on the host (cpprb), the paper-style baseline mapping",
    )
)
