"""Rollouts: the engine that samples a step's completions (vLLM in process, or transformers ``generate`` on the
trained model itself), the weights pushed to it after an update, and math-verify grading into shaped rewards.

Every sample is seeded from (seed, step, prompt position, index), so runs repeat; with several ranks each rolls out
its share of the global batch and every rank gets all groups back in global order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from curate.difficulty import HFEngine, VLLMEngine
from rl_stage.distributed import ProcessGroup

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from rl_stage.algorithms import Algorithm


@dataclass
class Group:
    """One prompt's completions from a round, graded: what rollouts, screens, evaluation and the update pass on."""

    position: int  # the prompt's place in its round (the batch order every rank agrees on)
    prompt: Any  # rl_stage.data.Prompt
    prompt_ids: list[int]
    completions: list  # curate.difficulty.Completion, in sample order
    rewards: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    def then(self, rest: Group) -> Group:
        """This group's completions followed by ``rest``'s (a screen and the rest of its group), at ``rest``'s place."""
        return Group(rest.position, self.prompt, self.prompt_ids, self.completions + rest.completions,
                     self.rewards + rest.rewards, self.correct + rest.correct)


def request_key(tag: str, position: int, prompt) -> str:
    """The key a prompt's samples are seeded from in a round: ``TAG/POSITION/ID`` (positional: two rows may share a
    problem id, and the position is the prompt's place in the global batch, so its samples do not depend on the rank)."""
    return f"{tag}/{position}/{prompt.id}"


@dataclass
class Rollout:
    """The groups a step trains on and what it took to collect them."""

    kept: list[Group] = field(default_factory=list)  # the groups with a learning signal
    accuracy: list[float] = field(default_factory=list)  # every generated group's, dropped ones included
    dropped: int = 0
    gen_rounds: int = 0
    groups_generated: int = 0
    too_long: int = 0
    gen_s: float = 0.0
    reward_s: float = 0.0
    target: int = 0  # groups a step trains on: prompts_per_step, or the whole stage when it is smaller
    short: bool = False  # dynamic sampling ended below the target (max_gen_batches reached, or the pool drawn)
    pool_drawn: bool = False  # every prompt of the pool was drawn in this step: no more rounds could be had
    boxed: list[bool] = field(default_factory=list)  # every generated completion: has an explicit answer
    completions: int = 0  # every generated completion, dropped groups' and screens' too
    screened_out: int = 0  # candidates whose screen said the rest of the group was not worth generating
    screen_completions: int = 0  # completions of the screening passes (continued groups' first ones included)
    screens_carried: int = 0  # screened candidates held over from the step before (their screens counted there)
    by_bucket: dict = field(default_factory=dict)  # offline bucket -> [correct, completions] of every generated group


def explicit(text: str) -> bool:
    """An explicit final answer (a box or an answer tag), as the grader reads it."""
    from curate.difficulty import EXPLICIT, extract_prediction

    return extract_prediction(text)[1] in EXPLICIT


class Rollouts:
    """Generation and grading for a trainer: ``round`` rolls out and grades one global batch, ``push`` hands the
    trained weights to the engine. Holds the engine and the grading worker pool (``close`` ends the pool)."""

    def __init__(self, torch, cfg, alg: Algorithm, pg: ProcessGroup, scfg, *, template: str, tokenizer, model,
                 device: str, bf16: bool, path: str, model_name: str):
        from curate.difficulty import GradingPool

        self.torch, self.cfg, self.alg, self.pg, self.scfg = torch, cfg, alg, pg, scfg
        self.template, self.tokenizer, self.model, self.device, self.bf16 = template, tokenizer, model, device, bf16
        self.grader = GradingPool().start()
        try:
            self.engine = self._start_engine(path, model_name)
        except BaseException:
            self.grader.close()
            raise

    def close(self) -> None:
        """End the grading pool and shut the engine down (its memory back to the device or the process)."""
        try:
            self.grader.close()
        finally:
            engine = self.__dict__.pop("engine", None)
            if engine is not None:
                engine.close()

    def _start_engine(self, path: str, model_name: str) -> VLLMEngine | HFEngine:
        cfg = self.cfg
        if cfg.rollout_backend == "vllm":
            # processed log-probs: after temperature scaling, i.e. of the distribution that was sampled (vLLM's
            # default returns the raw model's), so the rollout/trainer mismatch check compares like with like.
            # Colocated: in this process on this rank's device, sharing it with the trainer (memory share, sleep).
            sleep = cfg.vllm_sleep if cfg.vllm_sleep is not None else self.device == "cuda"
            args = {"dtype": "bfloat16" if self.bf16 else None, **cfg.vllm_engine_args}
            if self.device == "cuda":  # the share of the GPU it leaves the trainer
                args.setdefault("gpu_memory_utilization", cfg.vllm_gpu_memory_utilization)
            return VLLMEngine(path, self.scfg, model_name=model_name, logprobs_mode="processed_logprobs", colocate=True,
                               sleep_mode=sleep, device=self.device, **args)
        # transformers: one process samples from the trained model itself; sharded ranks each from a whole copy (``push``)
        return HFEngine(path, self.scfg, model_name=model_name, dtype="bfloat16" if self.bf16 else "float32",
                         model=self.model if self.pg.world == 1 else None, tokenizer=self.tokenizer,
                         batch_prompts=cfg.rollout_batch_prompts or cfg.prompts_per_step)

    def full_weights(self, dtype):
        """(name, tensor) of the whole model, one tensor at a time: gathered from the FSDP shards (every rank takes
        part, in the same order) and cast to the engine's dtype, so at most one extra tensor is alive."""
        from torch.distributed.tensor import DTensor

        with self.torch.no_grad():
            for k, v in self.model.state_dict().items():
                t = v.full_tensor() if isinstance(v, DTensor) else v
                yield k, t.detach().to(dtype)

    def push(self) -> float:
        if isinstance(self.engine, VLLMEngine):
            return self.engine.push_weights(self.full_weights(self.engine.dtype))
        if self.pg.world > 1:  # transformers rollouts from a whole copy
            return self.engine.load_weights(self.full_weights(next(self.engine.model.parameters()).dtype))
        return 0.0  # transformers rollouts sample from the trained model itself

    def requests(self, prompts, tag: str, positions: list[int], first: int = 0, n: int | None = None,
                 keys: list[str] | None = None):
        from curate.difficulty import templates

        reqs, ok = [], []
        special = templates.adds_special_tokens(self.template)
        keys = [request_key(tag, i, p) for i, p in zip(positions, prompts, strict=True)] if keys is None else keys
        for i, p, key in zip(positions, prompts, keys, strict=True):
            text = templates.render(self.template, p.problem, self.tokenizer)
            ids = self.tokenizer(text, add_special_tokens=special)["input_ids"]
            if len(ids) > self.cfg.max_prompt_tokens:
                continue
            reqs.append(self.gen_request(f"{i}:{p.id}", text, ids, key, first, n))
            ok.append((i, p))
        return reqs, ok

    @staticmethod
    def gen_request(pid, text, ids, key, first: int = 0, n: int | None = None):
        from curate.difficulty import GenRequest

        return GenRequest(pid, text, ids, None, key, first, n)

    def generate(self, prompts, tag: str, cfg=None, positions: list[int] | None = None, first: int = 0,
                 n: int | None = None, keys: list[str] | None = None):
        """The ungraded ``Group`` of every prompt that fits, and how many did not. ``first``,
        ``n``: samples ``first .. first + n - 1`` of each prompt (a screened group's screen, then its rest);
        ``keys``: each prompt's request key, which seeds its samples (default ``request_key``)."""
        positions = list(range(len(prompts))) if positions is None else positions
        reqs, ok = self.requests(prompts, tag, positions, first, n, keys)
        self.model.eval()
        # transformers rollouts sample from the trained model itself, under the same autocast as its training pass
        with self.torch.autocast(self.device, dtype=self.torch.bfloat16,
                                 enabled=self.bf16 and self.cfg.rollout_backend == "hf"):
            res = dict(self.engine.stream(reqs, logprobs=self.cfg.rollout_backend == "vllm", cfg=cfg))
        return [Group(i, p, r.prompt_ids, res[r.id]) for (i, p), r in zip(ok, reqs, strict=True)], len(prompts) - len(ok)

    def round(self, prompts, tag: str, cfg=None, positions: list[int] | None = None, first: int = 0,
              n: int | None = None, keys: list[str] | None = None):
        """Generate and grade one global batch: each rank its share (every world-th prompt from its rank), then
        every rank gets all graded groups in global order, the number of prompts too long, and this rank's generate
        and reward seconds. ``positions``: the
        prompts' places in their round (their samples' seeds derive from them; default 0, 1, ...); ``first``, ``n``,
        ``keys``: which samples of each prompt (``generate``)."""
        positions = list(range(len(prompts))) if positions is None else positions
        mine = list(range(self.pg.rank, len(prompts), self.pg.world))
        tg = time.perf_counter()
        groups, n_long = self.generate([prompts[i] for i in mine], tag, cfg=cfg, positions=[positions[i] for i in mine],
                                       first=first, n=n, keys=None if keys is None else [keys[i] for i in mine])
        gen_s = time.perf_counter() - tg
        tr = time.perf_counter()
        rewards, correct = self.rewards(groups)
        reward_s = time.perf_counter() - tr
        for g, r, c in zip(groups, rewards, correct, strict=True):
            g.rewards, g.correct = r, c
        parts = self.pg.gather((groups, n_long))
        merged = sorted((g for part, _ in parts for g in part), key=lambda g: g.position)
        return merged, sum(n for _, n in parts), gen_s, reward_s

    def rewards(self, groups: list[Group]) -> tuple[list[list[float]], list[list[bool]]]:
        """Shaped rewards and correctness per group. A completion cut off before any explicit answer is wrong
        without grading (``cut_off_unanswered``); a grading timeout or crash is wrong too (not "skipped")."""
        from rl_stage.algorithms import shaped_rewards

        comps = [c for g in groups for c in g.completions]
        golds = [g.prompt.answer for g in groups for _ in g.completions]
        flat = self.grader.grade_completions(golds, [c.text for c in comps], [c.truncated for c in comps])
        correct, at = [], 0
        for g in groups:
            correct.append([o == "correct" for o in flat[at : at + len(g.completions)]])
            at += len(g.completions)
        alg = self.alg
        rewards = [
            shaped_rewards(correct[gi], [c.n_tokens for c in g.completions], [c.truncated for c in g.completions],
                           [bool(self.cfg.format_reward) and explicit(c.text) for c in g.completions],
                           wrong_reward=alg.wrong_reward, format_reward=self.cfg.format_reward,
                           overlong=alg.overlong_shaping, max_len=self.cfg.max_tokens, buffer=alg.overlong_buffer)
            for gi, g in enumerate(groups)
        ]
        return rewards, correct
