"""Rebuild a trained agent from its run directory: the public path of
:mod:`rlframe.runners.loading`, which holds the implementation.

Rebuilding an agent uses agents, envs and samplers, so it lives in the runners'
layer; this module only re-exports it, so that
``from rlframe.utils.loading import load_agent`` keeps working.
"""
from rlframe.runners.loading import (SPEC_VERSION, AgentLoadError, LoadedRun, SnapshotError,
                                     agent_spec, build_agent, decode_value, encode_value,
                                     find_snapshot, load_agent, load_run, make_env,
                                     resolve_name)

__all__ = ["SPEC_VERSION", "AgentLoadError", "LoadedRun", "SnapshotError", "agent_spec",
           "build_agent", "decode_value", "encode_value", "find_snapshot", "load_agent",
           "load_run", "make_env", "resolve_name"]
