"""In-program channels: messages between XLA programs that run at the same time."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from drlhet.backends.channel import NativeChannel, available

SPEC = jax.ShapeDtypeStruct((2, 3), jnp.uint32)


def run_threads(*fns):
    """Runs each ``fn()`` on a thread; returns (results, errors) by position."""
    results, errors = [None] * len(fns), [None] * len(fns)

    def guard(i, fn):
        try:
            results[i] = fn()
        except Exception as e:  # noqa: BLE001 - inspected by the test
            errors[i] = e

    threads = [threading.Thread(target=guard, args=(i, f)) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return results, errors


def test_two_programs_pass_messages_in_order_through_a_bounded_channel():
    cpu = jax.devices("cpu")
    ch = NativeChannel(2, SPEC)  # smaller than the messages sent: the producer must wait
    n = 20

    def produce(token):
        def body(token, i):
            x = jnp.full(SPEC.shape, i, jnp.uint32) * jnp.arange(6, dtype=jnp.uint32).reshape(2, 3)
            return ch.send(x, token), None

        return jax.lax.scan(body, token, jnp.arange(n, dtype=jnp.uint32))[0]

    def consume(token):
        def body(token, _):
            x = ch.recv(token, 2)  # two messages a call
            return token, x

        return jax.lax.scan(body, token, None, n // 2)[1]

    tok = [jax.device_put(jnp.int32(0), d) for d in cpu[:2]]
    (sent, got), errors = run_threads(
        lambda: jax.jit(produce)(tok[0]).block_until_ready(),
        lambda: np.asarray(jax.jit(consume)(tok[1])),
    )
    assert errors == [None, None]
    expect = np.arange(n, dtype=np.uint32)[:, None, None] * np.arange(6, dtype=np.uint32).reshape(
        2, 3
    )
    np.testing.assert_array_equal(got.reshape(n, 2, 3), expect)
    assert int(sent) == n  # the token counts the sends
    stats = ch.stats()
    assert (stats.sent, stats.received) == (n, n)
    ch.destroy()


def test_close_wakes_a_waiting_program_with_a_clear_error():
    ch = NativeChannel(1, SPEC)
    _, errors = run_threads(
        lambda: jax.jit(lambda t: ch.recv(t))(jnp.int32(0)).block_until_ready(),
        lambda: (time.sleep(0.5), ch.close()),
    )
    assert "CANCELLED" in str(errors[0]) and "closed" in str(errors[0])
    with pytest.raises(RuntimeError, match="full or closed"):
        ch.put(np.zeros(SPEC.shape, np.uint32))
    ch.destroy()


def test_a_waiting_receive_takes_a_later_put_and_a_waiting_send_a_later_drain():
    # a call that cannot finish within the hold (100 ms) returns an unfinished future; the
    # host's put (drain) moves the message to (from) it and completes it, on a completer
    # thread; the wait is counted until then
    into, out = NativeChannel(1, SPEC), NativeChannel(1, SPEC)
    msgs = np.arange(3 * 6, dtype=np.uint32).reshape(3, 2, 3)
    # compiled first, so that each call starts as its thread does
    recv = jax.jit(lambda t: into.recv(t)).lower(jnp.int32(0)).compile()
    send = jax.jit(lambda t: out.send(jnp.asarray(msgs), t, 3)).lower(jnp.int32(0)).compile()

    called = []

    def host():
        time.sleep(0.3)
        put_at = time.monotonic()
        into.put(msgs[1])
        drained = []
        while len(drained) < 3:
            drained += out.drain()
            time.sleep(0.01)
        return drained, put_at

    def receive():
        called.append(time.monotonic())
        return np.asarray(recv(jnp.int32(0)))

    (got, token, (drained, put_at)), errors = run_threads(
        receive, lambda: int(send(jnp.int32(5))), host
    )
    assert errors == [None, None, None]
    np.testing.assert_array_equal(got, msgs[1])
    assert token == 6
    np.testing.assert_array_equal(np.stack(drained), msgs)
    # it counts its wait for the put (however late its thread started: no bound on load)
    assert into.stats().recv_wait_s >= put_at - called[0] - 0.02
    assert into.stats().received == 1
    assert out.stats().sent == 3
    into.destroy()
    out.destroy()


@pytest.mark.parametrize("after_s", [0.02, 0.3])  # while the send is held; once let go
def test_close_ends_a_waiting_send_and_later_calls_with_a_clear_error(after_s):
    ch = NativeChannel(1, SPEC)
    ch.put(np.zeros(SPEC.shape, np.uint32))  # full: the send waits
    send = jax.jit(lambda t: ch.send(jnp.ones(SPEC.shape, jnp.uint32), t))
    send = send.lower(jnp.int32(0)).compile()  # so that the send waits before the close
    _, errors = run_threads(
        lambda: send(jnp.int32(0)).block_until_ready(), lambda: (time.sleep(after_s), ch.close())
    )
    assert ch.stats().send_wait_s == 0.0  # a call ended by close adds no wait
    assert "CANCELLED" in str(errors[0]) and "closed" in str(errors[0])
    with pytest.raises(Exception, match="CANCELLED"):
        jax.jit(lambda t: ch.recv(t))(jnp.int32(0)).block_until_ready()
    assert len(ch.drain()) == 1  # what was in it stays drainable
    ch.destroy()


def test_a_close_while_a_send_waits_completes_the_receive_that_send_served():
    """A receive past its hold (an unfinished future) served by a send of three messages into
    a channel of one, closed while the send waits for room: the send fails (CANCELLED) and
    the receive, which has its message, ends with it (its future was left unfinished, and its
    program hung, when the send's failure returned before completing it)."""
    one = jax.ShapeDtypeStruct((1,), jnp.int32)
    ch = NativeChannel(1, one)
    recv = jax.jit(lambda t: ch.recv(t)).lower(jnp.int32(0)).compile()
    msgs = jnp.arange(3, dtype=jnp.int32)[:, None]
    send = jax.jit(lambda t: ch.send(msgs, t, 3)).lower(jnp.int32(0)).compile()

    def sender():
        time.sleep(0.4)  # the receive is past its hold by now
        return int(send(jnp.int32(0)))

    def closer():
        deadline = time.monotonic() + 30
        while ch.stats().received < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        ch.close()  # within the send's hold: it waits for room for its second message

    (got, _, _), errors = run_threads(lambda: np.asarray(recv(jnp.int32(0))), sender, closer)
    assert errors[0] is None and got.tolist() == [0]
    assert "CANCELLED" in str(errors[1])
    ch.destroy()


def test_a_channel_of_scalar_messages_round_trips():
    ch = NativeChannel(2, jax.ShapeDtypeStruct((), jnp.float32))
    ch.put(np.float32(2.5))
    assert float(jax.jit(lambda t: ch.recv(t))(jnp.int32(0))) == 2.5
    jax.jit(lambda t: ch.send(jnp.float32(4.0), t))(jnp.int32(0)).block_until_ready()
    (x,) = ch.drain()
    assert x.shape == () and float(x) == 4.0
    ch.destroy()


def test_host_put_and_drain_keep_order_and_refuse_bad_input():
    ch = NativeChannel(2, SPEC)
    a, b = (np.full(SPEC.shape, v, np.uint32) for v in (7, 9))
    ch.put(a)
    ch.put(b)
    with pytest.raises(RuntimeError, match="full"):
        ch.put(a)
    with pytest.raises(ValueError, match=r"carries \(2, 3\)"):
        ch.put(np.zeros((3, 2), np.uint32))
    with pytest.raises(ValueError, match="sends"):
        ch.send(jnp.zeros((2, 3), jnp.float32), jnp.int32(0))
    out = ch.drain()
    assert len(out) == 2
    np.testing.assert_array_equal(out[0], a)
    np.testing.assert_array_equal(out[1], b)
    assert ch.drain() == []
    with pytest.raises(ValueError, match="capacity"):
        NativeChannel(0, SPEC)
    with pytest.raises(ValueError, match=r"at least one byte, got shape \(0,\)"):
        NativeChannel(1, jax.ShapeDtypeStruct((0,), jnp.uint32))  # every call would fail
    ch.destroy()


def test_a_message_of_the_wrong_size_is_an_error_not_a_corruption():
    ch = NativeChannel(2, SPEC)
    ch.put(np.zeros(SPEC.shape, np.uint32))
    wrong = jax.ffi.ffi_call(
        "drlhet_channel_recv", jax.ShapeDtypeStruct((4,), jnp.uint32), has_side_effect=True
    )
    with pytest.raises(Exception, match="messages of 24 bytes"):
        wrong(jnp.int32(0), jnp.int32(ch.id), count=np.int64(1)).block_until_ready()
    ch.destroy()


def test_one_compiled_program_serves_any_channel_whose_id_it_is_given():
    # the id is an argument, not a constant: the program is the same for every channel
    # (JAX's compilation cache then serves later runs), and each call uses the channel named
    a, b = NativeChannel(1, SPEC), NativeChannel(1, SPEC)
    cpu = jax.devices("cpu")[0]

    def echo(token, src, dst):
        x = a.end(src).recv(token)
        return a.end(dst).send(x + 1, token)

    lowered = [jax.jit(echo).lower(jnp.int32(0), ch.id_on(cpu), b.id_on(cpu)) for ch in (a, b)]
    assert lowered[0].as_text() == lowered[1].as_text()
    program = lowered[0].compile()
    a.put(np.full(SPEC.shape, 4, np.uint32))
    program(jnp.int32(0), a.id_on(cpu), b.id_on(cpu)).block_until_ready()
    program(jnp.int32(0), b.id_on(cpu), a.id_on(cpu)).block_until_ready()
    np.testing.assert_array_equal(a.drain()[0], np.full(SPEC.shape, 6, np.uint32))
    assert b.drain() == []
    # a constant id ties a program to one channel
    consts = [jax.jit(lambda t, ch=ch: ch.recv(t)).lower(jnp.int32(0)).as_text() for ch in (a, b)]
    assert consts[0] != consts[1]
    a.destroy()
    b.destroy()
    with pytest.raises(Exception, match=f"no open channel with id {a.id}"):
        program(jnp.int32(0), a.id_on(cpu), b.id_on(cpu)).block_until_ready()


def test_available_only_for_cpu_devices():
    assert available(jax.devices("cpu"))

    class Other:
        platform = "other"

    assert not available([jax.devices("cpu")[0], Other()])
