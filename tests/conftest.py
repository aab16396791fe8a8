"""Test-session setup: two CPU devices, so that multi-device mappings run for real."""

import jax

jax.config.update("jax_num_cpu_devices", 2)
