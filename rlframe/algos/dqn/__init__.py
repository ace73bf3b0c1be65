"""Q-learning algorithms with replay: DQN, categorical DQN (C51) and R2D1."""
