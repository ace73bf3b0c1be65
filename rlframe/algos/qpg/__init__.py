"""Q-policy-gradient algorithms for continuous actions, with replay: DDPG, TD3 and SAC."""
