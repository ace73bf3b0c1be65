"""DQN-family models: Q-values (DQN, R2D1) and return distributions (C51), dueling heads."""
