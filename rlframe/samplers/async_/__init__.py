"""Samplers of asynchronous runners: they run in their own process and write into one
half of a double buffer while the other half is copied into the replay buffer."""
