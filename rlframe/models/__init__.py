"""Neural network modules (torch.nn.Module only): MLP and conv bodies, PG and DQN heads."""
