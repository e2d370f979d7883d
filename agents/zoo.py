"""rl-baselines3-zoo with MaskablePPO: ``python -m crop_gym.agents.zoo`` is ``python -m rl_zoo3.train`` plus
the ``ppo_mask`` algorithm.

rl_zoo3 (2.9) lists no MaskablePPO among its algorithms (``rl_zoo3.utils.ALGOS`` holds PPO,
RecurrentPPO, TRPO, ... of sb3-contrib, not the maskable one), and its evaluation callback calls
``model.predict`` without masks. :func:`register` adds ``ppo_mask`` (sb3-contrib's MaskablePPO) to
the zoo's algorithm table and makes the zoo's periodic evaluation sb3-contrib's
``MaskableEvalCallback``, which passes the environment's ``action_masks()`` to the policy; the
zoo's own ``train()`` then runs unchanged, with every one of its options::

    python -m crop_gym.agents.zoo --algo ppo_mask --env crop_gym/Placement-v0 --gym-packages crop_gym \\
        --conf-file agents/configs/zoo/ppo_mask.yml

Plain PPO needs no launcher (``python -m rl_zoo3.train --algo ppo ... --conf-file
agents/configs/zoo/ppo.yml``). Needs the zoo extra: ``pip install 'crop-gym[rl,zoo]'``.
"""

from __future__ import annotations

import sys

__all__ = ["MASKED_ALGO", "main", "register"]

#: The name MaskablePPO gets in the zoo's algorithm table (``--algo``).
MASKED_ALGO = "ppo_mask"


def register() -> None:
    """Add MaskablePPO to rl_zoo3 as ``ppo_mask``, with masked periodic evaluations.

    Idempotent. The evaluation callback is sb3-contrib's MaskableEvalCallback (it takes
    EvalCallback's arguments), masking only when the model is a MaskablePPO, so the zoo's other
    algorithms evaluate as before.

    Raises:
        ImportError: rl_zoo3 or sb3-contrib is not installed.
    """
    import rl_zoo3.exp_manager
    import rl_zoo3.utils
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

    class EvalCallback(MaskableEvalCallback):  # type: ignore[misc]
        """The zoo's EvalCallback; masked when the model is a MaskablePPO."""

        def _init_callback(self) -> None:
            super()._init_callback()
            self.use_masking = isinstance(self.model, MaskablePPO)

    rl_zoo3.utils.ALGOS.setdefault(MASKED_ALGO, MaskablePPO)
    rl_zoo3.exp_manager.EvalCallback = EvalCallback  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    """Run rl_zoo3's ``train()`` on ``argv`` (default: the command line) with ``ppo_mask`` added."""
    try:
        register()
        from rl_zoo3.train import train
    except ImportError as e:
        print(
            f"crop_gym.agents.zoo: {e.name or e} missing; pip install 'crop-gym[rl,zoo]'",
            file=sys.stderr,
        )
        return 2
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
