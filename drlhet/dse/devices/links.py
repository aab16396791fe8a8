"""The time to move bytes over a link between the host and an accelerator, from its sheet."""

from __future__ import annotations

__all__ = ["link_seconds"]


def link_seconds(link: dict, nbytes: int) -> float:
    """Seconds to move ``nbytes`` over the link of sheet ``link``: latency + bytes / bandwidth."""
    values = link["values"]
    return values["latency_us"]["value"] * 1e-6 + nbytes / (values["bw_gbs"]["value"] * 1e9)
