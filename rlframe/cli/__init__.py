"""The rlframe command line."""
