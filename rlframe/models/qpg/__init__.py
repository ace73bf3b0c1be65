"""Models of the Q-policy-gradient family (DDPG, TD3, SAC): policies and critics."""
