"""Off-policy agents (DQN, DDPG/TD3) as bundles of pure functions."""
