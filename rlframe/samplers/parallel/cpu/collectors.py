"""Collectors in which the agent acts in the same process as the envs."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlframe.agents.base import AgentInputs
from rlframe.samplers.collectors import (BaseEvalCollector, DecorrelatingStartCollector,
                                        reset_envs, step_eval_envs)
from rlframe.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer

if TYPE_CHECKING:
    from rlframe.agents.base import BaseAgent
    from rlframe.samplers.collections import TrajInfo
    from rlframe.utils.collections import AttrDict


class CpuResetCollector(DecorrelatingStartCollector):
    """Resets an env as soon as its trajectory ends, mid-batch (``mid_batch_reset=True``).

    The batch then holds the start of the next episode after a ``done``.
    """

    agent: BaseAgent  # These collectors act themselves.
    mid_batch_reset = True

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list[TrajInfo],
                      itr: int) -> tuple[AgentInputs, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        completed_infos = []
        observation, action, reward = agent_inputs
        obs_pyt, act_pyt, rew_pyt = torchify_buffer(agent_inputs)
        agent_buf.prev_action[0] = action  # leading prev_action of this batch
        env_buf.prev_reward[0] = reward
        self.agent.sample_mode(itr)
        for t in range(self.batch_T):
            env_buf.observation[t] = observation
            # The agent's outputs become next step's prev_action inputs (shared memory).
            act_pyt, agent_info = self.agent.step(obs_pyt, act_pyt, rew_pyt)
            action = numpify_buffer(act_pyt)
            for b, env in enumerate(self.envs):
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(observation[b], action[b], r, d, agent_info[b], env_info)
                if getattr(env_info, "traj_done", d):
                    completed_infos.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    o = env.reset()
                if d:
                    self.agent.reset_one(idx=b)
                observation[b] = o
                reward[b] = r
                env_buf.done[t, b] = d
                if env_info:
                    env_buf.env_info[t, b] = env_info
            agent_buf.action[t] = action
            env_buf.reward[t] = reward
            if agent_info:
                agent_buf.agent_info[t] = agent_info
        if "bootstrap_value" in agent_buf:
            # Value of the observation after the last step (for returns/GAE).
            agent_buf.bootstrap_value[:] = self.agent.value(obs_pyt, act_pyt, rew_pyt)
        return AgentInputs(observation, action, reward), traj_infos, completed_infos


class CpuWaitResetCollector(DecorrelatingStartCollector):
    """Holds a finished env idle until the batch ends (``mid_batch_reset=False``).

    After ``done`` an env records zeros (``done`` stays True) for the rest of the
    batch; it is reset in :meth:`reset_if_needed` between batches. Each batch
    column is then at most one episode tail, which recurrent training and
    algorithms without mid-batch resets rely on.
    """

    agent: BaseAgent
    mid_batch_reset = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        B = len(self.envs)
        self.need_reset = np.zeros(B, dtype=bool)
        self.done = np.zeros(B, dtype=bool)
        self.temp_observation = buffer_from_example(self.samples_np.env.observation[0, 0], B)

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list[TrajInfo],
                      itr: int) -> tuple[AgentInputs, list[TrajInfo], list[TrajInfo]]:
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        completed_infos = []
        observation, action, reward = agent_inputs
        obs_pyt, act_pyt, rew_pyt = torchify_buffer(agent_inputs)
        agent_buf.prev_action[0] = action
        env_buf.prev_reward[0] = reward
        self.agent.sample_mode(itr)
        for t in range(self.batch_T):
            env_buf.observation[t] = observation
            act_pyt, agent_info = self.agent.step(obs_pyt, act_pyt, rew_pyt)
            action = numpify_buffer(act_pyt)
            for b, env in enumerate(self.envs):
                if self.done[b]:
                    action[b] = 0  # Record blank.
                    reward[b] = 0
                    if agent_info:
                        agent_info[b] = 0
                    continue
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(observation[b], action[b], r, d, agent_info[b], env_info)
                if getattr(env_info, "traj_done", d):
                    completed_infos.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls(**self.traj_info_kwargs)
                    self.need_reset[b] = True
                if d:
                    self.temp_observation[b] = o  # Restored (or replaced by reset) next batch.
                    o = 0
                observation[b] = o
                reward[b] = r
                self.done[b] = d
                if env_info:
                    env_buf.env_info[t, b] = env_info
            agent_buf.action[t] = action
            env_buf.reward[t] = reward
            env_buf.done[t] = self.done
            if agent_info:
                agent_buf.agent_info[t] = agent_info
        if "bootstrap_value" in agent_buf:
            agent_buf.bootstrap_value[:] = self.agent.value(obs_pyt, act_pyt, rew_pyt)
        return AgentInputs(observation, action, reward), traj_infos, completed_infos

    def reset_if_needed(self, agent_inputs: AgentInputs) -> None:
        for b in np.where(self.done)[0]:
            agent_inputs[b] = 0  # Null prev_action and prev_reward for the new episode.
            if self.need_reset[b]:
                agent_inputs.observation[b] = self.envs[b].reset()
            else:
                agent_inputs.observation[b] = self.temp_observation[b]
            null_action = self.envs[b].action_space.null_value()
            agent_inputs.prev_action[b] = null_action
            self.agent.reset_one(idx=b)
        self.need_reset[:] = False
        self.done[:] = False


class CpuEvalCollector(BaseEvalCollector):
    """Evaluation in a worker: completed TrajInfos go on ``traj_infos_queue``.

    Stops after ``max_T`` steps or when ``sync.stop_eval`` is set, then puts a
    ``None`` sentinel.
    """

    agent: BaseAgent
    sync: AttrDict

    def collect_evaluation(self, itr: int) -> None:
        traj_infos = [self.TrajInfoCls(**self.traj_info_kwargs) for _ in range(len(self.envs))]
        observation, action, reward = reset_envs(self.envs)
        agent_inputs = AgentInputs(observation, action, reward)
        obs_pyt, act_pyt, rew_pyt = torchify_buffer(agent_inputs)
        self.agent.reset()
        self.agent.eval_mode(itr)
        for _t in range(self.max_T):
            act_pyt, agent_info = self.agent.step(obs_pyt, act_pyt, rew_pyt)
            completed = step_eval_envs(self.envs, self.agent, self.TrajInfoCls, traj_infos,
                                       observation, numpify_buffer(act_pyt), reward, agent_info,
                                       self.traj_info_kwargs)
            for traj_info in completed:
                self.traj_infos_queue.put(traj_info)
            if self.sync.stop_eval.value:
                break
        self.traj_infos_queue.put(None)  # End sentinel.
