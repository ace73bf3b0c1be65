"""Q-policy-gradient agents for continuous actions: DDPG, TD3 and SAC."""
