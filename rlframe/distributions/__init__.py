"""Action distributions: Categorical (discrete) and Gaussian (continuous, optionally squashed)."""
