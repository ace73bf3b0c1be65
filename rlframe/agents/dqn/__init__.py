"""Q-learning agents (DQN, categorical DQN, R2D1) with epsilon-greedy exploration."""
