"""Devices that are modeled, not profiled: their sheets and their analytical cost models (pure).

docs/design.md section 5. A *device sheet* (``drlhet/dse/sheets/*.json``) names a device, its
``kind`` (a platform of `drlhet.backends.base`, or ``link``), the link it hangs on, and values,
each with its source. `MODELS` holds the cost model of each kind of device that is modeled from
its sheet (`drlhet.dse.devices.gpu`, `drlhet.dse.devices.fpga`); a CPU device of this machine
is profiled instead (`drlhet.dse.profile`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from drlhet.backends.base import FPGA, GPU
from drlhet.dse.devices import fpga, gpu
from drlhet.dse.devices.links import link_seconds
from drlhet.dse.shapes import Shapes

__all__ = ["DeviceModel", "MODELS", "load_sheets", "link_seconds"]


class DeviceModel(NamedTuple):
    """The analytical costs of one kind of device.

    Attributes:
      seconds: ``(primitive, sheet, shapes, link) -> s`` per call when fused (no dispatch);
        ``link`` is the sheet of the link the device hangs on.
      host_overhead: ``(sheet) -> s`` of the host thread per call of a stage (dispatch or
        invocation; the run itself is asynchronous).
      infeasible: ``(group, sheet, shapes) -> why`` the group cannot run there (empty: it can).
      source: ``(group) -> what`` its costs for that group rest on (``sheet``, ``cycle
        model``): a prediction is labelled *modeled (sources)*.
    """

    seconds: Callable[[str, dict, Shapes, dict], float]
    host_overhead: Callable[[dict], float]
    infeasible: Callable[[str, dict, Shapes], str]
    source: Callable[[str], str]


MODELS: dict[str, DeviceModel] = {
    GPU: DeviceModel(gpu.seconds, gpu.host_overhead, gpu.infeasible, gpu.source),
    FPGA: DeviceModel(fpga.seconds, fpga.host_overhead, fpga.infeasible, fpga.source),
}
"""Kind of device -> its cost model."""


def _sheet_files(directory: Path | None) -> list[Any]:
    if directory:
        return sorted(Path(directory).glob("*.json"))
    shipped = resources.files("drlhet.dse").joinpath("sheets").iterdir()
    return sorted((p for p in shipped if p.name.endswith(".json")), key=lambda p: p.name)


def load_sheets(directory: Path | None = None) -> dict[str, dict]:
    """Device sheets by name (``h100``, ``u250``, ``pcie3``, ...): the JSON files of a folder
    (default: the ones shipped in ``drlhet/dse/sheets``).

    Raises:
      ValueError: a sheet that is not valid JSON, lacks ``name``, ``kind`` or ``values``, has
        a value without a source, or (a device) names a link that no sheet of kind ``link``
        describes.
    """
    sheets = {}
    for f in _sheet_files(directory):
        try:
            sheet = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"device sheet {f} is not valid JSON: {e}") from e
        for field in ("name", "kind", "values"):
            if field not in sheet:
                raise ValueError(f"device sheet {f} lacks {field!r}")
        for name, v in sheet["values"].items():
            if not isinstance(v, dict) or "value" not in v or not v.get("source"):
                raise ValueError(f"device sheet {f}: {name} needs a value and a source")
        sheets[sheet["name"]] = sheet
    for name, sheet in sheets.items():
        link = sheet.get("link")
        if sheet["kind"] != "link" and sheets.get(link, {}).get("kind") != "link":
            raise ValueError(f"device sheet {name}: its link {link!r} has no sheet of kind link")
    return sheets
