"""Reward functions for other trainers, graded exactly as gradus grades: math-verify in worker processes with hard
deadlines, the anchored answer rule (a box, an R1 ``<answer>`` tag, or an anchored "answer: ..."; never the last
number of unfinished text), and timeouts, crashes and errors scored 0. A prompt set exported by gradus and its
grader leave together.

TRL (``GRPOTrainer(reward_funcs=[math_reward])``): every dataset column reaches the function as a keyword, so a
``--format trl`` export's ``answer`` column is the gold::

    from rl_stage.rewards import math_reward

verl (``custom_reward_function.path=.../rl_stage/rewards.py custom_reward_function.name=compute_score``)::

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float

The grading pool starts on first use (one worker per CPU unless ``GRADUS_REWARD_WORKERS`` says otherwise) and is
closed at exit.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from curate.difficulty import GradingPool

_POOL: GradingPool | None = None
_LOCK = threading.Lock()
CORRECT, WRONG = 1.0, 0.0


def _pool() -> GradingPool:
    global _POOL
    with _LOCK:
        if _POOL is None:
            workers = int(os.environ.get("GRADUS_REWARD_WORKERS", "0")) or None
            _POOL = GradingPool(workers).start()
            atexit.register(_POOL.close)
        return _POOL


def _text(completion: Any) -> str:
    """A completion as text: TRL passes strings (standard) or lists of messages (conversational)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    return str(completion)


def grade(golds: list[str], texts: list[str]) -> list[str]:
    """Outcomes (``correct``, ``wrong``, ``no_answer``, ``timeout``, ...) of each (gold, response) pair."""
    return _pool().grade([str(g) for g in golds], texts)


def math_reward(completions: list, answer: list, **kwargs) -> list[float]:
    """TRL reward function: 1.0 for a right final answer, 0.0 otherwise (timeouts and errors included)."""
    outcomes = grade(list(answer), [_text(c) for c in completions])
    return [CORRECT if o == "correct" else WRONG for o in outcomes]


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """verl's custom reward function signature: the score of one response."""
    return CORRECT if grade([ground_truth], [solution_str])[0] == "correct" else WRONG


__all__ = ["compute_score", "grade", "math_reward"]
