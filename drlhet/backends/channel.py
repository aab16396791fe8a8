"""Bounded channels that XLA programs on CPU devices send to and receive from while they run.

docs/design.md section 6. The pipelined loop runs each stage as one program per chunk, on its
own host thread; inside it, every stage call receives its inputs and sends its outputs through
these channels (``kernels/cpu/channel.cc``, XLA FFI custom calls with side effects), so no
Python runs between stage calls and a stage waits only where its data are not there yet
(a send or receive is ~5 us; a host-side stage call with its device puts was ~0.3-0.5 ms on
this project's 2-core machine). A call that must wait holds its thread at most 100 ms, then
returns an unfinished XLA future, which the call at the other end completes (XLA may run a
program's channel call on its CPU thread pool; a call blocking there held a pool thread for as
long as it waited, and two such held both of a 2-core machine's). Closing a channel makes
every call waiting on it fail with ``CANCELLED``: that is how a run stops its stages.

Every message of one channel has the same shape and dtype (``spec``); a call moves ``count``
messages, stacked on a leading axis. A program takes its channels' ids as arguments
(`ChannelEnd`), so its compiled form serves every run (JAX's compilation cache).
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from drlhet.backends.base import CPU
from drlhet.backends.native import library_path

__all__ = ["NativeChannel", "ChannelEnd", "ChannelStats", "available"]


@functools.cache
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_path()))
    for target, symbol in (
        ("drlhet_channel_send", lib.DrlhetChannelSend),
        ("drlhet_channel_recv", lib.DrlhetChannelRecv),
    ):
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(symbol), platform=CPU)
    lib.drlhet_channel_open.restype = ctypes.c_int64
    lib.drlhet_channel_open.argtypes = [ctypes.c_int64, ctypes.c_int64]
    for name in ("drlhet_channel_close", "drlhet_channel_destroy"):
        getattr(lib, name).argtypes = [ctypes.c_int64]
    for name in ("drlhet_channel_put", "drlhet_channel_take"):
        getattr(lib, name).argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        getattr(lib, name).restype = ctypes.c_int
    lib.drlhet_channel_stats.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_double)]
    lib.drlhet_channel_stats.restype = ctypes.c_int
    return lib


def available(devices) -> bool:
    """Whether programs on ``devices`` can use channels: all CPU devices (the handlers are CPU
    custom calls)."""
    return all(d.platform == CPU for d in devices)


class ChannelStats(NamedTuple):
    """Seconds that senders (channel full) and receivers (empty) spent blocked, and messages
    sent and received by programs."""

    send_wait_s: float
    recv_wait_s: float
    sent: int
    received: int


class ChannelEnd(NamedTuple):
    """A channel as a program sees it: the ``spec`` of its messages and its ``id`` as an int32
    scalar. Where the id is an argument of the program (traced), the compiled program does not
    depend on which channels it runs with, so JAX's compilation cache serves it to every later
    run; an id baked in as a constant makes each run's programs new ones.

    ``token = end.send(x [count, *spec.shape], token, count)`` (``x`` of ``spec.shape`` when
    ``count`` is None) and ``x = end.recv(token, count)``; the token is an int32 scalar that
    orders one program's calls (thread it from each receive to the next send)."""

    spec: jax.ShapeDtypeStruct
    id: jax.Array

    def _shape(self, count: int | None) -> tuple[int, ...]:
        return tuple(self.spec.shape) if count is None else (count, *self.spec.shape)

    def send(self, x: jax.Array, token: jax.Array, count: int | None = None) -> jax.Array:
        """Sends ``x`` (``count`` messages); returns the next token. Blocks while full."""
        if tuple(x.shape) != self._shape(count) or x.dtype != self.spec.dtype:
            raise ValueError(
                f"a channel of {self.spec.shape} {self.spec.dtype} messages sends "
                f"{self._shape(count)} {self.spec.dtype}, got {tuple(x.shape)} {x.dtype}"
            )
        call = jax.ffi.ffi_call(
            "drlhet_channel_send", jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True
        )
        return call(x, token, self.id, count=np.int64(count or 1))

    def recv(self, token: jax.Array, count: int | None = None) -> jax.Array:
        """Receives ``count`` messages (one, unstacked, when None). Blocks while empty."""
        out = jax.ShapeDtypeStruct(self._shape(count), self.spec.dtype)
        call = jax.ffi.ffi_call("drlhet_channel_recv", out, has_side_effect=True)
        return call(token, self.id, count=np.int64(count or 1))


class NativeChannel:
    """One bounded channel of ``capacity`` messages shaped like ``spec``.

    Inside a jitted program: ``ch.end(id)`` with ``id = ch.id_on(device)`` passed as an argument
    of the program (cacheable; see `ChannelEnd`), or ``ch.send`` / ``ch.recv`` with the id as a
    constant. On the host: `put` (seeding, never blocks), `drain`, `close`, `destroy`.
    """

    def __init__(self, capacity: int, spec: jax.ShapeDtypeStruct):
        if capacity < 1:
            raise ValueError(f"a channel holds at least one message, got capacity {capacity}")
        self.spec = jax.ShapeDtypeStruct(tuple(spec.shape), spec.dtype)
        self.nbytes = int(np.prod(self.spec.shape)) * np.dtype(self.spec.dtype).itemsize
        if self.nbytes == 0:
            raise ValueError(f"a channel's message holds at least one byte, got shape {spec.shape}")
        self.id = int(_library().drlhet_channel_open(capacity, self.nbytes))
        if self.id <= 0:
            raise ValueError(f"cannot open a channel of {capacity} x {self.nbytes} bytes")

    def id_on(self, device: jax.Device) -> jax.Array:
        """This channel's id, an int32 scalar on ``device``: a program's argument."""
        return jax.device_put(np.int32(self.id), device)

    def end(self, id: jax.Array | None = None) -> ChannelEnd:
        """This channel inside a program; ``id``: the program's argument from `id_on` (None:
        the id as a constant, which ties the compiled program to this channel)."""
        return ChannelEnd(self.spec, jnp.int32(self.id) if id is None else id)

    def send(self, x: jax.Array, token: jax.Array, count: int | None = None) -> jax.Array:
        """`ChannelEnd.send` with the id as a constant."""
        return self.end().send(x, token, count)

    def recv(self, token: jax.Array, count: int | None = None) -> jax.Array:
        """`ChannelEnd.recv` with the id as a constant."""
        return self.end().recv(token, count)

    def put(self, x) -> None:
        """Appends one message from the host; raises if the channel is full or closed."""
        a = np.array(x, dtype=self.spec.dtype, order="C")  # a copy; 0-d stays 0-d
        if a.shape != tuple(self.spec.shape):
            raise ValueError(f"channel {self.id} carries {self.spec.shape}, got {a.shape}")
        if _library().drlhet_channel_put(self.id, a.ctypes.data, self.nbytes) != 1:
            raise RuntimeError(f"channel {self.id} is full or closed")

    def drain(self) -> list[np.ndarray]:
        """Takes every message left, oldest first (also after `close`)."""
        out: list[np.ndarray] = []
        while True:
            a = np.empty(self.spec.shape, self.spec.dtype)
            got = _library().drlhet_channel_take(self.id, a.ctypes.data, self.nbytes)
            if got != 1:
                return out
            out.append(a)

    def stats(self) -> ChannelStats:
        """Totals since the channel opened (programs' sends and receives, not the host's)."""
        out = (ctypes.c_double * 4)()
        _library().drlhet_channel_stats(self.id, out)
        return ChannelStats(out[0], out[1], int(out[2]), int(out[3]))

    def close(self) -> None:
        """Makes every call waiting on the channel, and every later one, fail (CANCELLED)."""
        _library().drlhet_channel_close(self.id)

    def destroy(self) -> None:
        """Closes the channel and frees it; the object is unusable afterwards."""
        _library().drlhet_channel_destroy(self.id)
