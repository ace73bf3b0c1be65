"""Q-learning agents with convolutional models for Atari frames [C, H, W]."""
