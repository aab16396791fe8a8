"""The tiny shape the DSE's command tests profile and predict (test_profile_cli.py and the tests
beside it): a network of 8 units, batches of 16 from 1,024 slots, 2 envs, 2 SGD steps."""

from drlhet.dse.key import ProfileKey

TINY = ProfileKey(hidden=(8,), batch=16, capacity=1024, num_envs=2, sgd_steps=2)
