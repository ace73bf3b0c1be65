"""Policy-gradient models: they output action-distribution parameters and a value estimate."""
