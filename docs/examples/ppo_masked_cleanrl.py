"""PPO with action masking on crop_gym, in one file (CleanRL style: plain PyTorch, no SB3).

    python docs/examples/ppo_masked_cleanrl.py --total-timesteps 16384

Every step the agent picks one row of the candidate table (a job on a set of GPUs) or *stop*;
``env.action_masks()`` says which rows are real candidates. The policy's logits of the other rows
are set to a large negative number before sampling, so invalid actions are never taken and their
probability (and gradient) is zero. The observation is a Dict (candidates, gpus, queue, summary),
flattened into one vector for an MLP. The reward is the change of F (GPUs, weighted by speed and
health); with gamma = 1 the return of an episode is exactly the F it gained.

At the end the greedy policy plays held-out seeds beside CROP (its expert wrapper,
crop_gym.baselines.expert.CropExpert) and the script prints both mean F gains and their ratio.
Needs torch (``pip install 'crop-gym[rl]'``); run from the repository root or with crop_gym
installed.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import crop_gym  # noqa: F401  (registers the crop_gym/ IDs)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="crop_gym/Placement-v0")
    p.add_argument("--total-timesteps", type=int, default=16_384)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--num-steps", type=int, default=256, help="steps per env per rollout")
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--reward-scale", type=float, default=0.1, help="value targets of order 1")
    p.add_argument("--eval-episodes", type=int, default=10)
    return p.parse_args()


def flatten(obs: dict[str, np.ndarray]) -> torch.Tensor:
    """The Dict observation as one float vector per environment (keys in sorted order)."""
    return torch.as_tensor(
        np.concatenate([obs[k] for k in sorted(obs)], axis=-1), dtype=torch.float32
    )


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self, n_obs: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(n_obs, 256), nn.Tanh(), layer(256, 256), nn.Tanh(), layer(256, 1, 1.0)
        )
        self.actor = nn.Sequential(
            layer(n_obs, 256), nn.Tanh(), layer(256, 256), nn.Tanh(), layer(256, n_actions, 0.01)
        )

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def act(self, x: torch.Tensor, mask: torch.Tensor, action: torch.Tensor | None = None):
        """Masked categorical: logits of invalid actions at -1e8 (probability 0)."""
        logits = torch.where(mask, self.actor(x), torch.tensor(-1e8))
        dist = Categorical(logits=logits)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)


def masks(envs: gym.vector.VectorEnv) -> torch.Tensor:
    return torch.as_tensor(np.stack(envs.call("action_masks")), dtype=torch.bool)


def evaluate(agent: Agent, env_id: str, episodes: int, first_seed: int) -> tuple[float, float]:
    """Mean F gain of the greedy policy and of CROP on the same held-out seeds."""
    from crop_gym.baselines.expert import CropExpert

    gains: dict[str, list[float]] = {"policy": [], "crop": []}
    env = gym.make(env_id)
    expert = CropExpert(env)
    for who in gains:
        for i in range(episodes):
            obs, info = env.reset(seed=first_seed + i)
            done, f0 = False, info["F"]
            while not done:
                if who == "crop":
                    a = expert.action()
                else:
                    with torch.no_grad():
                        m = torch.as_tensor(env.unwrapped.action_masks(), dtype=torch.bool)
                        logits = torch.where(m, agent.actor(flatten(obs)), torch.tensor(-1e8))
                    a = int(logits.argmax())
                obs, _, term, trunc, info = env.step(a)
                done = term or trunc
            gains[who].append(info["F"] - f0)
    env.close()
    return float(np.mean(gains["policy"])), float(np.mean(gains["crop"]))


def main() -> None:
    args = parse_args()
    batch = args.num_envs * args.num_steps
    minibatch = batch // args.num_minibatches
    iterations = max(1, -(-args.total_timesteps // batch))  # whole rollouts, rounded up
    print(
        f"{iterations} rollouts of {args.num_envs} x {args.num_steps} = {iterations * batch} steps"
    )
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    # SAME_STEP autoreset: the observation returned with done=True is already the next episode's.
    # Candidate-mode IDs have a batched environment (PlacementVectorEnv) behind make_vec; the
    # others are vectorised one environment after another.
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if gym.spec(args.env_id).vector_entry_point is not None:
        envs = gym.make_vec(args.env_id, num_envs=args.num_envs, autoreset_mode=same_step)
    else:
        envs = gym.make_vec(
            args.env_id,
            num_envs=args.num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": same_step},
        )
    obs_np, _ = envs.reset(seed=args.seed)
    obs, mask = flatten(obs_np), masks(envs)
    agent = Agent(obs.shape[1], int(envs.single_action_space.n))
    opt = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    n, s = args.num_steps, args.num_envs
    b_obs = torch.zeros((n, s, obs.shape[1]))
    b_mask = torch.zeros((n, s, mask.shape[1]), dtype=torch.bool)
    b_act, b_logp, b_rew, b_done, b_val = (torch.zeros((n, s)) for _ in range(5))
    done = torch.zeros(s)
    returns: list[float] = []
    ep_ret = np.zeros(s)
    t0, step = time.perf_counter(), 0
    for it in range(iterations):
        frac = 1.0 - it / iterations  # linear learning-rate decay
        opt.param_groups[0]["lr"] = frac * args.learning_rate
        for t in range(n):
            step += s
            b_obs[t], b_mask[t], b_done[t] = obs, mask, done
            with torch.no_grad():
                act, logp, _, val = agent.act(obs, mask)
            b_act[t], b_logp[t], b_val[t] = act, logp, val
            obs_np, rew, term, trunc, _ = envs.step(act.numpy())
            ep_ret += rew
            for i in np.flatnonzero(term | trunc):
                returns.append(float(ep_ret[i]))
                ep_ret[i] = 0.0
            # Truncation (step cap) is treated as an end too: rare, and the return is F gained.
            b_rew[t] = torch.as_tensor(rew * args.reward_scale, dtype=torch.float32)
            obs, mask = flatten(obs_np), masks(envs)
            done = torch.as_tensor(term | trunc, dtype=torch.float32)

        with torch.no_grad():  # generalised advantage estimation
            adv = torch.zeros((n, s))
            last, next_val = torch.zeros(s), agent.value(obs)
            for t in reversed(range(n)):
                nonterminal = 1.0 - (done if t == n - 1 else b_done[t + 1])
                nv = next_val if t == n - 1 else b_val[t + 1]
                delta = b_rew[t] + args.gamma * nv * nonterminal - b_val[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                adv[t] = last
            ret = adv + b_val

        f_obs, f_mask = b_obs.reshape(batch, -1), b_mask.reshape(batch, -1)
        f_act, f_logp, f_adv, f_ret = (x.reshape(-1) for x in (b_act, b_logp, adv, ret))
        for _ in range(args.update_epochs):
            for idx in torch.randperm(batch).split(minibatch):
                _, logp, ent, val = agent.act(f_obs[idx], f_mask[idx], f_act[idx].long())
                ratio = (logp - f_logp[idx]).exp()
                a = f_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = torch.max(
                    -a * ratio, -a * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                ).mean()
                v_loss = 0.5 * ((val - f_ret[idx]) ** 2).mean()
                loss = pg - args.ent_coef * ent.mean() + args.vf_coef * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                opt.step()
        recent = np.mean(returns[-20:]) if returns else float("nan")
        sps = step / (time.perf_counter() - t0)
        print(
            f"step {step:7d}  episodes {len(returns):5d}  mean F gain (last 20) {recent:7.2f}  {sps:5.0f} steps/s"
        )
    envs.close()

    pol, crop = evaluate(agent, args.env_id, args.eval_episodes, first_seed=10**9)
    print(f"held-out seeds: policy mean F gain {pol:.2f}, CROP {crop:.2f}, ratio {pol / crop:.4f}")


if __name__ == "__main__":
    main()
