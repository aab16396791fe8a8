"""Mappings: parsing, validation against the registry and this process's devices, segments."""

from __future__ import annotations

import pytest

from drlhet import backends
from drlhet.backends import BackendUnavailable
from drlhet.runtime.mapping import Mapping, Placement, cpu_devices_named, segments


def test_parse_and_segments():
    m = Mapping.parse("actors=cpu:0, replay=native@cpu:1, learner=cpu:1")
    assert m.replay == Placement("native", "cpu:1")
    assert m.actors == Placement("jax", "cpu:0") and m.learner == Placement("jax", "cpu:1")
    assert segments(m) == [
        ("cpu:0", ("act", "env_step")),
        ("cpu:1", ("insert", "sample", "train", "update")),
    ]
    assert len(segments(Mapping.fused("cpu:0"))) == 1
    three = Mapping.parse("actors=cpu:0,replay=cpu:1,learner=cpu:0")
    assert [d for d, _ in segments(three)] == ["cpu:0", "cpu:1", "cpu:0", "cpu:1"]
    assert Mapping.parse(str(m)) == m


@pytest.mark.parametrize("spelling", ["cpu", "cpu:", "cpu:00", " cpu:0 ", "cpu : 0"])
def test_every_spelling_of_a_device_is_that_device(spelling):
    # the groups of one device are one segment, however the device is spelled: a mapping with
    # "cpu" beside "cpu:0" ran as a split (the host loop, or refused by the pipeline)
    m = Mapping.parse(f"actors={spelling},replay=jax@cpu:0,learner=jax@{spelling}")
    assert {p.device for p in m.places().values()} == {"cpu:0"}
    assert (
        segments(m)
        == segments(Mapping.fused("cpu:0", "jax"))
        == segments(Mapping.fused(spelling, "jax"))
    )
    assert len(segments(m)) == 1
    # a primitive's key spelling its group's device otherwise agrees with it
    both = Mapping.parse(f"replay=jax@cpu:0,sample=jax@{spelling},actors=cpu:1,learner=cpu:1")
    assert both.replay == Placement("jax", "cpu:0")


def test_a_bare_device_takes_the_fastest_backend_that_loads_there():
    fastest = backends.providing("replay", backends.CPU, runnable=True)[0].name
    assert Mapping.parse("actors=cpu:0,replay=cpu:0,learner=cpu:0").replay.backend == fastest
    assert Mapping.fused("cpu:0").replay.backend == fastest == backends.default("replay", "cpu")
    assert fastest == "native"  # built by `make test`: the C++ tree is the faster one here
    # ... that also holds the run's tree: native's kernels take K <= 256
    wide = Mapping.parse("actors=cpu:0,replay=cpu:0,learner=cpu:0", tree=(1000, 300))
    assert wide.replay.backend == "jax" and wide.actors.backend == "jax"
    assert Mapping.fused("cpu:0", tree=(1000, 300)).replay.backend == "jax"
    assert Mapping.parse("actors=cpu:0,replay=cpu:0,learner=cpu:0", tree=(1000, 256)).replay == (
        Mapping.fused("cpu:0").replay
    )


def test_per_primitive_keys_must_agree_with_their_group():
    m = Mapping.parse(
        "act=cpu:0,env_step=cpu:0,insert=jax@cpu:1,sample=jax@cpu:1,update=jax@cpu:1,train=cpu:0"
    )
    assert m.replay == Placement("jax", "cpu:1")
    with pytest.raises(ValueError, match="replay .* must share"):
        Mapping.parse("actors=cpu:0,learner=cpu:0,replay=jax@cpu:0,sample=jax@cpu:1")


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("actors=cpu:0,replay=cpu:7,learner=cpu:0", BackendUnavailable, "not present"),
        ("actors=cpu:0,replay=nope@cpu:0,learner=cpu:0", BackendUnavailable, "no backend 'nope'"),
        ("actors=cpu:0,replay=cpu:0,learner=native@cpu:0", ValueError, "not the learner"),
        ("actors=fpga@cpu:0,replay=cpu:0,learner=cpu:0", ValueError, "not the actors on 'cpu'"),
        ("actors=cpu:0,replay=python@cpu:0,learner=cpu:0", BackendUnavailable, "modeled only"),
        ("actors=gpu:0,replay=cpu:0,learner=cpu:0", BackendUnavailable, "gpu"),
        ("actors=tpu:0,replay=cpu:0,learner=cpu:0", ValueError, "kind must be one of"),
        ("actors=cpu:x,replay=cpu:0,learner=cpu:0", ValueError, "must be a number"),
        ("actors=cpu:\u00b2,replay=cpu:0,learner=cpu:0", ValueError, "must be a number"),
        ("actors=cpu:-1,replay=cpu:0,learner=cpu:0", ValueError, "must be a number >= 0"),
        (
            "actors=fpga:0,replay=cpu:0,learner=cpu:0",
            BackendUnavailable,
            "no backend implements the actors on 'fpga' \\(they run on \\['cpu', 'gpu'\\]\\)",
        ),  # was "loads ...: []"
        (
            "actors=cpu:0,replay=cpu:0,learner=cpu:0,learner=cpu:1",
            ValueError,
            "places learner twice",
        ),
        ("bogus=cpu:0", ValueError, "unknown group or primitive"),
        ("replay", ValueError, "key=backend@device"),
        ("replay=a@b@c", ValueError, "expected backend@device"),
        ("actors=cpu:0,replay=cpu:0", ValueError, "does not place \\['learner'\\]"),
    ],
)
def test_bad_mappings_are_clear_errors(text, error, match):
    with pytest.raises(error, match=match):
        Mapping.parse(text).validate()


def test_validate_returns_each_groups_device():
    devices = Mapping.parse("actors=cpu:0,replay=cpu:1,learner=cpu:1").validate()
    assert [d.id for d in devices.values()] == [0, 1, 1]


def test_cpu_devices_named():
    assert cpu_devices_named("actors=cpu:0,replay=native@cpu:3,learner=cpu:1") == 4
    assert cpu_devices_named("") == 1
    with pytest.raises(ValueError, match="device 'cpu:x': the index after ':' must be a number"):
        cpu_devices_named("actors=cpu:0,replay=cpu:x,learner=cpu:0")


def test_auto_is_named_as_the_clis_with_the_way_to_get_its_pick():
    # was: "mapping item 'auto' is not key=backend@device" from drlhet.run(cfg, mapping="auto")
    with pytest.raises(ValueError, match=r"mapping 'auto' is drlhet train's .*auto_mapping"):
        Mapping.parse(" Auto ")
