"""Replay buffers that sample ``[batch_T, batch_B]`` sequences (recurrent agents, R2D1)."""
