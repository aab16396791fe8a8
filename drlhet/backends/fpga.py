"""The FPGA backend: the replay module and the learner as HLS designs (modeled only so far).

Until the HLS modules and their C-simulation exist, the DSE costs an FPGA from its device sheet
(`drlhet.dse.devices.fpga`); nothing runs it, and loading it says so.
"""

from drlhet.backends.base import FPGA, Backend, register

BACKEND = register(
    Backend(
        name="fpga",
        platforms=(FPGA,),
        provides=("replay", "learner"),
        needs="the HLS replay and learner modules (not built yet: modeled from device sheets)",
        loader=None,
        summary="HLS replay module and learner on an FPGA board; today a device-sheet model",
    )
)
