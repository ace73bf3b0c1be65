"""The stepping core under every collector: B envs stepped as one, whole rows written.

:class:`EnvStepper` owns the agent's input rows (observation, prev_action,
prev_reward, each [B]) and, per time step, steps the envs, writes row ``t`` of
the ``[T, B]`` sample buffer (observation, action, reward, done, env_info,
agent_info) in one assignment per field, accounts trajectory statistics
(:class:`TrajTracker`) and resets finished envs. Collectors only decide who
picks the actions (the local agent, or the master of a GPU sampler) and when
finished envs restart (at once, or after the batch).
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlframe.agents.base import AgentInputs
from rlframe.envs.vector import EnvList, as_vec_env
from rlframe.samplers.collections import TrajInfo
from rlframe.utils.buffer import (RowWriter, buffer_from_example, numpify_buffer,
                                  torchify_buffer)

if TYPE_CHECKING:
    from rlframe.envs.base import Env
    from rlframe.envs.vector import VecEnv
    from rlframe.samplers.collections import Samples
    from rlframe.utils.buffer import ArrayTree, TensorTree
    from rlframe.utils.collections import NamedArrayTuple


class TrajTracker:
    """Trajectory statistics of B envs; a TrajInfo is built when a trajectory ends.

    With ``TrajInfoCls`` whose ``step`` is :meth:`TrajInfo.step` (the base class
    or a subclass that only adds ``__init__`` keys or overrides ``terminate``),
    Length, Return, NonzeroRewards and DiscountedReturn are kept in [B] arrays:
    each step's rewards are appended as one row to a block [block, B]; a
    trajectory that ends reads its own column of the block (from the row where
    it started, ``start`` [B]) on top of its [B] sums, and the whole block is
    folded into the sums only when it is full. A fresh
    ``TrajInfoCls(**traj_info_kwargs)`` receives the statistics at the end of
    each trajectory. A subclass that overrides ``step`` is stepped per env, as
    its code expects: one instance per env, ``step(observation, action,
    reward, done, agent_info, env_info)`` with that env's rows, every step.

    Args:
        TrajInfoCls: trajectory statistics class.
        traj_info_kwargs: keyword arguments of every instance (e.g. ``discount``).
        B: number of envs.
        block: rewards kept before they are folded into the sums.
    """

    def __init__(self, TrajInfoCls: type[TrajInfo], traj_info_kwargs: dict, B: int,
                 block: int = 64):
        self.TrajInfoCls = TrajInfoCls
        self.kwargs = dict(traj_info_kwargs)
        self.B = B
        self.vectorized = TrajInfoCls.step is TrajInfo.step
        if self.vectorized:
            self.discount = float(TrajInfoCls(**self.kwargs)._discount)
            # Sums over the steps before the block (or before the trajectory's start in it).
            self._length = np.zeros(B, dtype=np.int64)
            self.ret = np.zeros(B, dtype=np.float64)
            self.nonzero = np.zeros(B, dtype=np.int64)
            self.disc_ret = np.zeros(B, dtype=np.float64)
            self.cur_discount = np.ones(B, dtype=np.float64)
            self._block = np.zeros((block, B), dtype=np.float32)
            self._start = np.zeros(B, dtype=np.int64)  # Block row where each trajectory began.
            self._powers = self.discount ** np.arange(block, dtype=np.float64)
            self._power_list: list[float] = self._powers.tolist()
            self._k = 0
        else:
            self.infos = [TrajInfoCls(**self.kwargs) for _ in range(B)]

    @property
    def length(self) -> np.ndarray:
        """Steps of each env's running trajectory [B] (vectorized statistics)."""
        self.flush()
        return self._length

    def record(self, observation: ArrayTree, action: ArrayTree, reward: np.ndarray,
               done: np.ndarray,
               agent_info: NamedArrayTuple | None, env_info: NamedArrayTuple,
               idx: np.ndarray | None = None) -> None:
        """Account one step of every env (or of the envs in ``idx``).

        Args:
            observation: rows [B] the actions were taken from (all envs).
            action, agent_info: rows [B] (all envs).
            reward, done, env_info: rows [n] of the stepped envs (n = B, or len(idx)).
            idx: env indexes of the stepped rows, or None for all.
        """
        if self.vectorized:
            if idx is None:
                self._block[self._k] = reward
                self._k += 1
                if self._k == len(self._block):
                    self.flush()
            else:  # Some envs only (held envs, decorrelation): fold in at once.
                self.flush()
                self._length[idx] += 1
                self.ret[idx] += reward
                self.nonzero[idx] += reward != 0
                self.disc_ret[idx] += self.cur_discount[idx] * reward
                self.cur_discount[idx] *= self.discount
            return
        for j, b in enumerate(range(len(reward)) if idx is None else idx):
            self.infos[b].step(observation[b], action[b], reward[j], done[j],
                               None if agent_info is None else agent_info[b], env_info[j])

    def finish(self, traj_done: np.ndarray, next_observation: ArrayTree,
               idx: np.ndarray | None = None) -> list[TrajInfo]:
        """End the trajectories marked in ``traj_done`` (rows as in :meth:`record`).

        Returns:
            their TrajInfos, after ``terminate(last observation)``; the envs
            start new trajectories.
        """
        rows = traj_done.nonzero()[0]
        envs = rows if idx is None else idx[rows]
        if self.vectorized:
            if len(envs) > 8:  # One fold of the block costs less than many columns.
                self.flush()
            completed = [self._build(b).terminate(next_observation[j])
                         for j, b in zip(rows, envs)]
        else:
            completed = [self.infos[b].terminate(next_observation[j])
                         for j, b in zip(rows, envs)]
        self.restart(envs)
        return completed

    def flush(self) -> None:
        """Fold the block of recorded rewards into the [B] sums."""
        k = self._k if self.vectorized else 0
        if k == 0:
            return
        rewards = self._block[:k].astype(np.float64)
        start = self._start
        if np.count_nonzero(start):  # Rows before a trajectory's start are not its own.
            j = np.arange(k)[:, None] - start  # [k, B] steps since each trajectory began.
            own = j >= 0
            rewards *= own
            n = k - start
            discounted = (np.where(own, self._powers[np.maximum(j, 0)], 0.) * rewards).sum(0)
            start[:] = 0
        else:
            n = k
            discounted = self._powers[:k] @ rewards
        self._length += n
        self.ret += rewards.sum(axis=0)
        self.nonzero += np.count_nonzero(rewards, axis=0)
        self.disc_ret += self.cur_discount * discounted
        self.cur_discount *= self.discount ** n
        self._k = 0

    def restart(self, idx: Sequence[int] | np.ndarray) -> None:
        """Start new trajectories in envs ``idx``."""
        if self.vectorized:
            self._length[idx] = 0
            self.ret[idx] = 0
            self.nonzero[idx] = 0
            self.disc_ret[idx] = 0
            self.cur_discount[idx] = 1
            self._start[idx] = self._k
        else:
            for b in idx:
                self.infos[b] = self.TrajInfoCls(**self.kwargs)

    def _build(self, b: int) -> TrajInfo:
        """A TrajInfo of env ``b``'s running trajectory: its sums plus its block rows."""
        info = self.TrajInfoCls(**self.kwargs)
        n = self._k - int(self._start[b])
        length, ret, nonzero = int(self._length[b]), float(self.ret[b]), int(self.nonzero[b])
        disc_ret, cur_discount = float(self.disc_ret[b]), float(self.cur_discount[b])
        if n > 0:
            # Python floats: a trajectory's column is short, and numpy's calls cost more.
            rewards = self._block[self._k - n:self._k, b].tolist()
            length += n
            ret += sum(rewards)
            nonzero += n - rewards.count(0.)
            disc_ret += cur_discount * sum(map(operator.mul, self._power_list, rewards))
            cur_discount *= self.discount ** n
        info["Length"] = length
        info["Return"] = ret
        info["NonzeroRewards"] = nonzero
        info["DiscountedReturn"] = disc_ret
        info["_cur_discount"] = cur_discount
        return info


class EnvStepper:
    """Steps B envs for a collector and writes whole rows of its ``[T, B]`` batch.

    Args:
        envs: a :class:`~rlframe.envs.vector.VecEnv`, or a list of rlframe envs
            (stepped by the plain backend).
        TrajInfoCls: trajectory statistics class.
        traj_info_kwargs: keyword arguments of every TrajInfo.
        samples_np: the numpy ``[T, B]`` sample buffer to fill (None: evaluation).
        inputs: ``AgentInputs`` of numpy [B] rows to use as the agent's input
            buffers (e.g. a GPU sampler's shared step buffer); allocated if None.
        mid_batch_reset: reset an env as soon as its trajectory ends; otherwise
            hold it idle (zeros recorded, ``done`` True) until :meth:`release_held`.
        null_done_inputs: after ``done``, give the agent a null prev_action and
            zero prev_reward (evaluation); training keeps the taken action and
            reward, which the sample buffer records as the next prev_action.
    """

    def __init__(self, envs: VecEnv | Sequence[Env], TrajInfoCls: type[TrajInfo],
                 traj_info_kwargs: dict | None = None, samples_np: Samples | None = None,
                 inputs: AgentInputs | None = None, mid_batch_reset: bool = True,
                 null_done_inputs: bool = False):
        self.venv = as_vec_env(envs)
        if not mid_batch_reset and not self.venv.steps_subsets:
            raise ValueError(
                f"{type(self.venv).__name__} steps every env at once, so it cannot hold "
                "finished envs idle as a collector with mid_batch_reset=False needs; use "
                "env_backend='plain' or 'envpool', or a collector that resets mid-batch.")
        self.B = self.venv.num_envs
        self.tracker = TrajTracker(TrajInfoCls, traj_info_kwargs or {}, self.B)
        self.samples_np = samples_np
        self.inputs = inputs
        self.inputs_pyt: AgentInputs | None = None if inputs is None else torchify_buffer(inputs)
        self.mid_batch_reset = mid_batch_reset
        self.null_done_inputs = null_done_inputs
        self.null_action = self.venv.spaces.action.null_value()
        self.held = np.zeros(self.B, dtype=bool)
        self.need_reset = np.zeros(self.B, dtype=bool)
        self.any_held = False
        self.completed: list[TrajInfo] = []
        self.completed_envs: list[int] = []  # The env of each entry of ``completed``.
        self._temp_obs: Any = None
        self._full: tuple | None = None  # [B] reward, done and env_info rows (holding envs).
        # Row t of each [T, B] field, written leaf by leaf (see RowWriter); one set per
        # buffer this stepper has written (the two halves of a double buffer).
        self._writers: tuple[RowWriter, ...] | None = None
        self._writers_of: dict[int, tuple[Samples, tuple[RowWriter, ...]]] = {}
        if samples_np is not None:
            self.use_samples(samples_np)

    def use_samples(self, samples_np: Samples) -> None:
        """Write the following rows into ``samples_np`` (a ``[T, B]`` buffer of the
        same layout, e.g. the other half of a double buffer)."""
        if samples_np is self.samples_np and self._writers is not None:
            return
        entry = self._writers_of.get(id(samples_np))
        if entry is None or entry[0] is not samples_np:
            agent, env = samples_np.agent, samples_np.env
            entry = (samples_np, tuple(RowWriter(buf) for buf in (
                env.observation, agent.action, env.reward, env.done, env.env_info,
                agent.agent_info)))
            self._writers_of[id(samples_np)] = entry  # Keeps samples_np alive: ids stay unique.
        self.samples_np, self._writers = entry

    def start(self, max_decorrelation_steps: int = 0) -> AgentInputs:
        """Reset every env, optionally take random steps; returns the agent inputs [B].

        Each env takes ``1 + int(U * max_decorrelation_steps)`` random steps (U
        uniform in [0, 1), one draw per env from numpy's global RNG), so that
        the B envs are not in lockstep. Backends that step every env at once
        take the largest count in every env.
        """
        observation = self.venv.reset()
        if self.inputs is None:
            self.inputs = AgentInputs(buffer_from_example(observation[0], self.B),
                                      buffer_from_example(self.null_action, self.B),
                                      np.zeros(self.B, dtype=np.float32))
            self.inputs_pyt = torchify_buffer(self.inputs)
        obs, prev_action, prev_reward = self.inputs
        obs[:] = observation
        prev_action[:] = self.null_action
        prev_reward[:] = 0
        self.held[:] = False
        self.need_reset[:] = False
        self.any_held = False
        self.tracker.restart(np.arange(self.B))
        if max_decorrelation_steps > 0:
            self._decorrelate(max_decorrelation_steps)
        self.completed, self.completed_envs = [], []
        return self.inputs

    def begin_batch(self) -> None:
        """Record the batch's leading prev_action and prev_reward (row 0 of the buffer)."""
        if self.samples_np is not None:
            self.samples_np.agent.prev_action[0] = self.inputs.prev_action
            self.samples_np.env.prev_reward[0] = self.inputs.prev_reward

    def step(self, t: int, action: ArrayTree | TensorTree, agent_info: NamedArrayTuple | None
             ) -> np.ndarray:
        """Step the envs once with ``action`` [B] and record row ``t``.

        The agent inputs are updated in place: next observations (reset ones
        where a trajectory ended and envs reset mid-batch), prev_action and
        prev_reward. Completed TrajInfos collect in ``self.completed``.

        Args:
            t: time index in the batch (ignored without a sample buffer).
            action: actions [B], numpy or CPU torch (numpy views are taken);
                rows of held envs are zeroed in place.
            agent_info: the agent's step info [B] (numpy or torch), or None.

        Returns:
            done [B] (bool): envs whose episode ended on this step, and held envs.
        """
        if type(action) is not np.ndarray:
            action = numpify_buffer(action)
        obs, prev_action, prev_reward = self.inputs
        writers = self._writers
        if writers is not None:
            writers[0].write(t, obs)
        if self.any_held or not self.tracker.vectorized:
            agent_info = numpify_buffer(agent_info)  # Indexed per env, or zeroed where held.
        if self.any_held:
            reward, done, env_info, traj_done, new_obs = self._step_some(action, agent_info)
            any_done = np.count_nonzero(done) > 0
        else:
            new_obs, reward, done, env_info = self.venv.step(action)
            traj_done = getattr(env_info, "traj_done", done)
            self.tracker.record(obs, action, reward, done, agent_info, env_info)
            any_done = np.count_nonzero(done) > 0
            if any_done:  # Before any reset: new_obs may be a view of the env's buffer.
                self.completed.extend(self.tracker.finish(traj_done, new_obs))
                self.completed_envs.extend(np.flatnonzero(traj_done).tolist())
            obs[:] = new_obs
        if writers is not None:
            writers[1].write(t, action)
            writers[2].write(t, reward)
            writers[3].write(t, done)
            writers[4].write(t, env_info)
            if agent_info:
                writers[5].write(t, agent_info)
        prev_reward[:] = reward
        if prev_action is not action:
            prev_action[:] = action
        if any_done:
            self._after_done(done, traj_done)
        return done

    def release_held(self) -> np.ndarray:
        """Restart held envs (between batches); returns their indexes.

        Envs whose trajectory ended are reset; envs that were only ``done``
        (e.g. a lost life) continue from their last observation. Their agent
        inputs become the observation, a null prev_action and zero prev_reward.
        """
        ids = np.flatnonzero(self.held)
        if ids.size:
            obs, prev_action, prev_reward = self.inputs
            obs[ids] = self._temp_obs[ids]
            reset_ids = np.flatnonzero(self.need_reset)
            if reset_ids.size:
                obs[reset_ids] = self.venv.reset(reset_ids)
            prev_action[ids] = self.null_action
            prev_reward[ids] = 0
        self.held[:] = False
        self.need_reset[:] = False
        self.any_held = False
        return ids

    def pop_completed(self) -> list[TrajInfo]:
        """The TrajInfos completed since the last call."""
        completed, self.completed, self.completed_envs = self.completed, [], []
        return completed

    def pop_completed_by_env(self) -> list[tuple[int, TrajInfo]]:
        """The TrajInfos completed since the last call, each with its env's index."""
        pairs = list(zip(self.completed_envs, self.completed))
        self.completed, self.completed_envs = [], []
        return pairs

    def close(self) -> None:
        """Close the envs."""
        self.venv.close()

    def state(self) -> dict[str, Any]:
        """The envs mid-episode and this stepper's per-env bookkeeping, for a checkpoint.

        Returns:
            a dict to pickle (envs, trajectory tracker, agent input rows [B], held
            and reset flags, completed TrajInfos not yet collected).

        Raises:
            TypeError: the envs are not plain envs of this process (a vector-env
                backend steps them elsewhere), so they cannot be saved.
        """
        if not isinstance(self.venv, EnvList):
            raise TypeError(f"the envs are stepped by {type(self.venv).__name__}, not as "
                            "plain envs of this process")
        return dict(envs=self.venv.envs, tracker=self.tracker, inputs=self.inputs,
                    held=self.held, need_reset=self.need_reset, any_held=self.any_held,
                    completed=self.completed, completed_envs=self.completed_envs,
                    temp_obs=self._temp_obs)

    def replace_envs(self, envs: list) -> None:
        """Close this stepper's envs and step ``envs`` (those of :meth:`state`) instead.

        Raises:
            TypeError: this stepper's envs are not plain envs of this process.
            ValueError: ``envs`` are not as many as this stepper's.
        """
        if not isinstance(self.venv, EnvList):
            raise TypeError(f"the envs are stepped by {type(self.venv).__name__}; only "
                            "plain envs of this process can be restored")
        if len(envs) != self.B:
            raise ValueError(f"the saved sampler has {len(envs)} envs, this one {self.B}.")
        self.venv.close()
        self.venv.envs[:] = envs

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` of a stepper with the same settings; this
        stepper's own envs are closed and replaced (:meth:`replace_envs`)."""
        self.replace_envs(state["envs"])
        self.tracker = state["tracker"]
        self.inputs[:] = state["inputs"]  # In place: inputs_pyt are views of these arrays.
        self.held[:] = state["held"]
        self.need_reset[:] = state["need_reset"]
        self.any_held = state["any_held"]
        self.completed = state["completed"]
        # Snapshots written before env indexes were kept: -1, unknown.
        self.completed_envs = state.get("completed_envs", [-1] * len(self.completed))
        if state["temp_obs"] is not None:
            self._temp_obs = state["temp_obs"]

    def _after_done(self, done: np.ndarray, traj_done: np.ndarray | None) -> None:
        obs, prev_action, prev_reward = self.inputs
        if self.mid_batch_reset:
            reset_ids = traj_done.nonzero()[0]
            if reset_ids.size:
                obs[reset_ids] = self.venv.reset(reset_ids)
            if self.null_done_inputs:
                ids = np.flatnonzero(done)
                prev_action[ids] = self.null_action
                prev_reward[ids] = 0
            return
        if traj_done is not None:  # Newly done envs (when none were held before).
            self.need_reset |= traj_done
        new = done & ~self.held
        if self._temp_obs is None:
            self._temp_obs = buffer_from_example(obs[0], self.B)
        ids = np.flatnonzero(new)
        self._temp_obs[ids] = obs[ids]
        obs[ids] = 0
        self.held |= new
        self.any_held = True

    def _step_some(self, action: Any, agent_info: NamedArrayTuple | None) -> tuple:
        """Step the envs that are not held; held rows record zeros and done."""
        obs = self.inputs.observation
        held = self.held
        action[held] = 0
        if agent_info:
            agent_info[held] = 0
        active = np.flatnonzero(~held)
        if self._full is None:
            self._full = (np.zeros(self.B, dtype=np.float32), np.zeros(self.B, dtype=bool),
                          buffer_from_example(self.samples_np.env.env_info[0, 0], self.B))
        full_reward, full_done, full_info = self._full
        full_reward[:] = 0
        full_done[:] = held
        full_info[:] = 0
        if active.size:
            new_obs, reward, done, env_info = self.venv.step(action[active], active)
            traj_done = getattr(env_info, "traj_done", done)
            self.tracker.record(obs, action, reward, done, agent_info, env_info, idx=active)
            if done.any():
                self.completed.extend(self.tracker.finish(traj_done, new_obs, idx=active))
                self.completed_envs.extend(active[np.flatnonzero(traj_done)].tolist())
            full_reward[active] = reward
            full_done[active] = done
            full_info[active] = env_info
            obs[active] = new_obs
            self.need_reset[active] |= traj_done
        return full_reward, full_done, full_info, None, None

    def _decorrelate(self, max_steps: int) -> None:
        obs, prev_action, prev_reward = self.inputs
        n_steps = 1 + (np.random.rand(self.B) * max_steps).astype(np.int64)
        if not self.venv.steps_subsets:
            n_steps[:] = n_steps.max()
        for s in range(int(n_steps.max())):
            idx = np.flatnonzero(n_steps > s)
            all_idx = idx.size == self.B
            action = self.venv.sample_actions()
            rows = action if all_idx else action[idx]
            new_obs, reward, done, env_info = self.venv.step(rows, None if all_idx else idx)
            traj_done = getattr(env_info, "traj_done", done)
            self.tracker.record(obs, action, reward, done, None, env_info,
                                idx=None if all_idx else idx)
            self.tracker.finish(traj_done, new_obs, idx=None if all_idx else idx)
            obs[idx] = new_obs
            prev_action[idx] = rows
            prev_reward[idx] = reward
            ended = idx[traj_done]
            if ended.size:
                obs[ended] = self.venv.reset(ended)
            dead = idx[done]
            prev_action[dead] = self.null_action
            prev_reward[dead] = 0
