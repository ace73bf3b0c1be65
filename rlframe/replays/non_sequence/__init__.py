"""Replay buffers that sample single time steps (DQN, DDPG, TD3, SAC)."""
