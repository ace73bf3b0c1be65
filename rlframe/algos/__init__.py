"""Reinforcement learning algorithms: losses and optimizer steps over an agent."""
