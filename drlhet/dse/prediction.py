"""`Prediction`: a mapping's predicted iteration time and throughput (`drlhet.dse.model`)."""

from __future__ import annotations

import dataclasses

from drlhet.backends.base import GROUPS, Placement

__all__ = ["Prediction"]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A mapping's predicted iteration time and throughput.

    Attributes:
      places: group -> `Place`.
      iteration_s: predicted seconds per iteration.
      trained_samples_per_s: ``sgd_steps * batch / iteration_s``.
      env_steps_per_s: ``num_envs / iteration_s``.
      basis: ``profiled`` (costs measured on this machine; ``profiled (<gpu> measured)``:
        on a GPU whose primitives were measured) or ``modeled (...)`` naming its sources
        (``sheet``: device sheets; ``cycle model``: the FPGA replay module's; ``<gpu>
        measured``: a GPU profile).
      runnable: every device and backend is present here.
      bottleneck: the term that sets the time (a resource, or ``chain``/``fused``).
      terms: the cost terms (seconds) the time was built from.
      note: why a mapping is infeasible, if it is (``iteration_s`` is then ``inf``).
    """

    places: dict[str, Placement]
    iteration_s: float
    trained_samples_per_s: float
    env_steps_per_s: float
    basis: str
    runnable: bool
    bottleneck: str
    terms: dict[str, float]
    note: str = ""

    def mapping_text(self) -> str:
        return ",".join(f"{g}={self.places[g]}" for g in GROUPS)
