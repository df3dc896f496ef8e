"""The built-in GRPO trainer: vLLM (or transformers) rollouts, math-verify rewards, exact resume.

One step:

1. draw ``prompts_per_step`` prompts from the prompt sampler (``rl_stage.sampler``; the others in ``rl_stage.data``);
2. roll out ``group_size`` completions each with the rollout engine (vLLM in process, weights pushed
   after every update; or transformers ``generate`` on the trained model itself), every sample seeded
   from (seed, step, prompt id, index) so runs repeat;
3. reward: math-verify correctness in worker processes with hard timeouts (``curate.difficulty.grading``), plus an
   optional format reward and DAPO's overlong shaping; truncated completions are optionally masked;
4. dynamic sampling (DAPO): groups whose rewards are all equal are dropped and more prompts are drawn,
   up to ``max_gen_batches`` generation rounds; how many were dropped is logged;
5. advantages, clipped surrogate, aggregation and optional k3 KL from ``rl_stage.algorithms``; log-probs
   recomputed by the trainer (the engine's own are kept only to report the rollout/trainer mismatch);
   ``num_iterations`` optimizer steps per rollout batch, micro-batches with gradient accumulation,
   AdamW, gradient clipping; a step with a non-finite loss or gradient is skipped and logged, and
   ``max_bad_steps`` of them in a row stop the run;
6. metrics to ``OUT/metrics.jsonl`` (and TensorBoard when asked); every ``save_every`` steps a checkpoint
   in Hugging Face format plus optimizer, scheduler, sampler and RNG state, written under a temporary
   name and renamed. ``resume=True`` continues from the newest complete checkpoint exactly.

Settings and their sources: ``rl_stage.config.TrainConfig``; the run folder's rules: ``rl_stage.run_folder``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from curate.difficulty import HFSampler, VLLMSampler
from rl_stage import checkpoint
from rl_stage.config import SAMPLERS, TrainConfig, TrainError, make_sampler

__all__ = ["SAMPLERS", "TrainConfig", "TrainError", "Trainer", "make_sampler"]

log = logging.getLogger(__name__)


@dataclass
class _Seq:
    """One completion to train on: its group, prompt and completion ids, advantage, and what was logged."""

    group: int
    prompt: list[int]
    completion: list[int]
    advantage: float
    use: bool  # False: masked out of the loss (truncated, with mask_truncated)
    engine_logp: list[float] | None
    n_tokens: int
    truncated: bool


@dataclass
class _UpdateStats:
    """What the updates of one rollout step did (summed over tokens where it says so)."""

    loss: float = 0.0  # mean over updates of each update's loss
    clip_low: float = 0.0  # tokens
    clip_high: float = 0.0  # tokens
    kl: float = 0.0  # summed over tokens
    entropy: float = 0.0  # summed over tokens
    tokens: float = 0.0
    ratio_dev_max: float = 0.0
    updates: int = 0
    skipped: str | None = None
    grad_norm: float | None = None
    mismatch: list[float] = field(default_factory=list)


@dataclass
class _Rollout:
    """The groups a step trains on and what it took to collect them."""

    kept: list = field(default_factory=list)  # (group, rewards, correct) with a learning signal
    accuracy: list[float] = field(default_factory=list)  # every generated group's, dropped ones included
    dropped: int = 0
    gen_rounds: int = 0
    groups_generated: int = 0
    too_long: int = 0
    gen_s: float = 0.0
    reward_s: float = 0.0
    target: int = 0  # groups a step trains on: prompts_per_step, or the whole stage when it is smaller
    short: bool = False  # dynamic sampling ended below the target (max_gen_batches reached)
    boxed: list[bool] = field(default_factory=list)  # every generated completion: has an explicit answer
    completions: int = 0  # every generated completion, dropped groups' too
    by_bucket: dict = field(default_factory=dict)  # offline bucket -> [correct, completions] of every generated group


def _explicit(text: str) -> bool:
    """An explicit final answer (a box or an answer tag), as the grader reads it."""
    from curate.difficulty import EXPLICIT, extract_prediction

    return extract_prediction(text)[1] in EXPLICIT


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False):
        cfg.check()
        if cfg.template is None:  # train on the prompts as they were scored
            from rl_stage.data import scored_template

            cfg = replace(cfg, template=scored_template(cfg.data) or "chat")
        self.cfg = cfg
        self.template: str = cfg.template or "chat"  # resolved above
        self.alg = cfg.resolved()
        self.out = Path(cfg.out)
        self.resume = resume
        self.step = 0
        self.bad_in_row = 0
        self.completions = 0  # generated in the run so far (dropped groups counted)
        self.online: dict[str, list] = {}  # prompt id -> [last correct, last graded, last step, total correct, total graded]
        self.world, self.rank = 1, 0

    # ---- distributed helpers (no-ops in one process) -------------------------------------------------
    def _dist_init(self) -> None:
        """Data parallel on torch.distributed when launched by torchrun (WORLD_SIZE > 1): NCCL on GPUs, gloo on CPU."""
        torch = self.torch
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.world == 1:
            return
        import torch.distributed as dist

        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def _gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (one process: ``[obj]``)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def _sum(self, values: list[float], op: str = "sum") -> list[float]:
        if self.world == 1:
            return values
        import torch.distributed as dist

        t = self.torch.tensor(values, dtype=self.torch.float64, device=self._comm_device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.tolist()

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def _shard(self) -> None:
        """FSDP2: each decoder layer its own unit, then the policy module (embeddings, norm, head) as the root."""
        from torch.distributed.fsdp import fully_shard

        layers = getattr(self.model.base_model, "layers", None)
        if layers is None:
            raise TrainError(f"{type(self.model).__name__}: no decoder layers at .base_model.layers to shard with FSDP2")
        for layer in layers:
            fully_shard(layer)
        fully_shard(self.policy)

    # ---- setup -------------------------------------------------------------------------------------
    def setup(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from curate.difficulty import GradingPool, ModelError, SamplingConfig, resolve_model
        from rl_stage.data import held_out_prompts
        from rl_stage.policy import PolicyModule

        cfg = self.cfg
        self.torch = torch
        self._dist_init()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self._comm_device = torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else torch.device("cpu")
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else self.device == "cuda"
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        from rl_stage import run_folder

        self._lock = None
        if self.main:  # the folder's rules (rl_stage.run_folder): checked and held before anything is written
            run_folder.check(self.out, self.resume)
            if self.resume:
                diff = run_folder.changed(self.out, asdict(cfg))
                if diff:
                    raise TrainError(f"--resume with other settings than the run in {self.out} ({'; '.join(diff)}): they "
                                     "would change what its checkpoint continues; use another out folder")
            self._lock = run_folder.claim(self.out)
        self._barrier()  # rank 0 has checked and claimed the folder
        ckpt = self._latest_checkpoint() if self.resume else None
        if self.resume and ckpt is None:
            log.warning("no complete checkpoint in %s: starting from step 0", self.out / "checkpoints")
            if self.main:  # what the run logged before it died belongs to steps that run again
                for name in ("metrics.jsonl", "eval.jsonl"):
                    (self.out / name).unlink(missing_ok=True)
        self._barrier()  # every rank has looked before rank 0 writes
        path, self.model_name = resolve_model(cfg.model)
        load_from = str(ckpt) if ckpt else path
        # Precision: the policy's weights and AdamW's state are fp32 whatever ``bf16`` says; bf16 is used for
        # compute only (autocast in the forward pass), as verl keeps its actor. A bf16 policy loses almost
        # every update at lr 1e-6 (a bf16 weight near 0.05 moves in steps of 2e-4).
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(load_from, dtype=torch.float32).to(self.device)
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot load model {load_from}: {e}") from e
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if cfg.gradient_checkpointing or (cfg.gradient_checkpointing is None and self.device == "cuda"):
            self.model.gradient_checkpointing_enable()
        # a group's completions share their prompt's forward pass (rl_stage.policy.shared_prefix_hidden); with gradient
        # checkpointing the model returns no key/value cache to share, so every row runs whole
        self.policy = PolicyModule(self.model, cfg.temperature, self.bf16, self.device, cfg.logprob_chunk,
                                   share_prompts=not self.model.is_gradient_checkpointing)
        if self.world > 1:
            self._shard()
        self.ref = self.ref_policy = None
        if self.alg["kl_coef"] > 0:  # frozen: bf16 storage is fine; a whole copy on every rank
            ref_dtype = torch.bfloat16 if self.bf16 else torch.float32
            self.ref = AutoModelForCausalLM.from_pretrained(path, dtype=ref_dtype).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            self.ref_policy = PolicyModule(self.ref, cfg.temperature, self.bf16, self.device, cfg.logprob_chunk)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
        # the schedule advances once per rollout step (the unit DAPO's 20-step warm-up counts in), not per update
        warm = max(0, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        # every rank holds the same sampler (same seed, same updates from every rank's groups): the global batch
        # is the one a single process would draw, and each rank rolls out its share of it
        self.sampler = make_sampler(cfg, self.alg)
        if self.alg["mini_batches"] > cfg.prompts_per_step:
            log.warning("preset %s makes %d updates per rollout batch; with %d prompts per step it makes %d "
                        "(at most one group per update)", cfg.preset, self.alg["mini_batches"], cfg.prompts_per_step,
                        cfg.prompts_per_step)
        if cfg.top_p < 1 and cfg.rollout_backend == "vllm":
            log.warning("top_p < 1: vLLM's log-probs are of the renormalized nucleus, the trainer's of the full "
                        "tempered distribution (as TRL and verl); rollout_logp_abs_diff is biased upward")
        self.eval_prompts = held_out_prompts(cfg.eval_data, cfg.eval_prompts) if cfg.eval_data else []
        self.scfg = SamplingConfig(k=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                   seed=cfg.seed, max_prompt_tokens=cfg.max_prompt_tokens)
        self.grader = GradingPool().start()
        self._engine(path)
        if ckpt:
            self._load_state(ckpt)
        self._tb = None
        if cfg.tensorboard and self.main:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.out / "tensorboard"))
        if self.main:
            (self.out / "config.json").write_text(json.dumps({**asdict(cfg), "resolved": self.alg, "world_size": self.world},
                                                             indent=2, default=str))

    def _engine(self, path: str) -> None:
        self.engine: VLLMSampler | HFSampler
        cfg = self.cfg
        if cfg.rollout_backend == "vllm":
            # processed log-probs: after temperature scaling, i.e. of the distribution that was sampled (vLLM's
            # default returns the raw model's), so the rollout/trainer mismatch check compares like with like.
            # Colocated: in this process on this rank's device, sharing it with the trainer (memory share, sleep).
            sleep = cfg.vllm_sleep if cfg.vllm_sleep is not None else self.device == "cuda"
            self.engine = VLLMSampler(path, self.scfg, model_name=self.model_name, dtype="bfloat16" if self.bf16 else None,
                                      logprobs_mode="processed_logprobs", colocate=True, sleep_mode=sleep,
                                      gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
        else:  # one process samples from the trained model itself; sharded ranks each from a whole copy (``_push``)
            self.engine = HFSampler(path, self.scfg, model_name=self.model_name, dtype="bfloat16" if self.bf16 else "float32",
                                    model=self.model if self.world == 1 else None, tokenizer=self.tokenizer,
                                    batch_prompts=cfg.rollout_batch_prompts or cfg.prompts_per_step)

    def _full_weights(self, dtype):
        """(name, tensor) of the whole model, one tensor at a time: gathered from the FSDP shards (every rank takes
        part, in the same order) and cast to the engine's dtype, so at most one extra tensor is alive."""
        from torch.distributed.tensor import DTensor

        with self.torch.no_grad():
            for k, v in self.model.state_dict().items():
                t = v.full_tensor() if isinstance(v, DTensor) else v
                yield k, t.detach().to(dtype)

    def _push(self) -> float:
        if isinstance(self.engine, VLLMSampler):
            return self.engine.push_weights(self._full_weights(self.engine.dtype))
        if self.world > 1:  # transformers rollouts from a whole copy
            return self.engine.load_weights(self._full_weights(next(self.engine.model.parameters()).dtype))
        return 0.0  # transformers rollouts sample from the trained model itself

    # ---- rollouts and rewards ----------------------------------------------------------------------
    def _requests(self, prompts, tag: str, positions: list[int]):
        from curate.difficulty import templates

        reqs, ok = [], []
        special = templates.adds_special_tokens(self.template)
        for i, p in zip(positions, prompts, strict=True):
            text = templates.render(self.template, p.problem, self.tokenizer)
            ids = self.tokenizer(text, add_special_tokens=special)["input_ids"]
            if len(ids) > self.cfg.max_prompt_tokens:
                continue
            # request ids are positional: two rows may share a problem id (the same text in two sources); the
            # position is the prompt's place in the global batch, so its samples do not depend on the rank
            reqs.append(self._gen_request(f"{i}:{p.id}", text, ids, f"{tag}/{i}/{p.id}"))
            ok.append((i, p))
        return reqs, ok

    @staticmethod
    def _gen_request(pid, text, ids, key):
        from curate.difficulty import GenRequest

        return GenRequest(pid, text, ids, None, key)

    def _generate(self, prompts, tag: str, cfg=None, positions: list[int] | None = None):
        """[(position, prompt, prompt ids, completions)] for the prompts that fit, and how many did not."""
        positions = list(range(len(prompts))) if positions is None else positions
        reqs, ok = self._requests(prompts, tag, positions)
        self.model.eval()
        # transformers rollouts sample from the trained model itself, under the same autocast as its training pass
        with self.torch.autocast(self.device, dtype=self.torch.bfloat16,
                                 enabled=self.bf16 and self.cfg.rollout_backend == "hf"):
            res = dict(self.engine.stream(reqs, logprobs=self.cfg.rollout_backend == "vllm", cfg=cfg))
        return [(i, p, r.prompt_ids, res[r.id]) for (i, p), r in zip(ok, reqs, strict=True)], len(prompts) - len(ok)

    def _round(self, prompts, tag: str, cfg=None):
        """Generate and grade one global batch: each rank its share (positions rank, rank + world, ...), then
        every rank gets all groups in global order: [(position, (prompt, prompt ids, completions), rewards,
        correct)], the number of prompts too long, and this rank's generate and reward seconds."""
        mine = list(range(self.rank, len(prompts), self.world))
        tg = time.perf_counter()
        groups, n_long = self._generate([prompts[i] for i in mine], tag, cfg=cfg, positions=mine)
        gen_s = time.perf_counter() - tg
        tr = time.perf_counter()
        rewards, correct = self._rewards([g[1:] for g in groups])
        reward_s = time.perf_counter() - tr
        local = [(g[0], g[1:], r, c) for g, r, c in zip(groups, rewards, correct, strict=True)]
        parts = self._gather((local, n_long))
        merged = sorted((x for part, _ in parts for x in part), key=lambda x: x[0])
        return merged, sum(n for _, n in parts), gen_s, reward_s

    def _rewards(self, groups) -> tuple[list[list[float]], list[list[bool]]]:
        """Shaped rewards and correctness per group. A completion cut off before any explicit answer is wrong
        without grading (``cut_off_unanswered``); a grading timeout or crash is wrong too (not "skipped")."""
        from curate.difficulty import EXPLICIT, extract_prediction
        from rl_stage.algorithms import shaped_rewards

        golds = [p.answer for p, _, comps in groups for _ in comps]
        flat = self.grader.grade_completions(golds, [c.text for _, _, comps in groups for c in comps],
                                             [c.truncated for _, _, comps in groups for c in comps])
        correct, at = [], 0
        for _, _, comps in groups:
            correct.append([o == "correct" for o in flat[at : at + len(comps)]])
            at += len(comps)
        alg = self.alg
        rewards = [
            shaped_rewards(correct[gi], [c.n_tokens for c in comps], [c.truncated for c in comps],
                           [bool(self.cfg.format_reward) and extract_prediction(c.text)[1] in EXPLICIT for c in comps],
                           wrong_reward=alg["wrong_reward"], format_reward=self.cfg.format_reward,
                           overlong=alg["overlong_shaping"], max_len=self.cfg.max_tokens, buffer=alg["overlong_buffer"])
            for gi, (_, _, comps) in enumerate(groups)
        ]
        return rewards, correct

    def _record(self, p, n_correct: int, n_graded: int) -> None:
        """A graded group of prompt ``p`` into the run's online difficulty table."""
        row = self.online.setdefault(p.id, [0, 0, 0, 0, 0])
        row[0], row[1], row[2] = n_correct, n_graded, self.step + 1
        row[3] += n_correct
        row[4] += n_graded

    def write_online(self, folder: Path) -> Path:
        """The pool's pass rates as this run measured them (``rl_stage.online``) into ``folder``."""
        from rl_stage.online import online_table, write_table

        table = online_table(self.sampler, self.online, model=self.model_name, template=self.template,
                             temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, step=self.step)
        return write_table(table, folder / "online_difficulty.parquet")

    # ---- the step: rollout, reward, advantages, update, push -----------------------------------------
    def _batch(self, seqs: list[_Seq]):
        """Right-padded input ids, attention and completion masks (aligned to next-token targets)."""
        torch = self.torch
        L = max(len(q.prompt) + len(q.completion) for q in seqs)
        ids = torch.full((len(seqs), L), self.tokenizer.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), L), dtype=torch.long)
        cm = torch.zeros((len(seqs), L - 1), dtype=torch.float32)
        for i, q in enumerate(seqs):
            n = len(q.prompt) + len(q.completion)
            ids[i, :n] = torch.tensor(q.prompt + q.completion)
            attn[i, :n] = 1
            if q.use:
                cm[i, len(q.prompt) - 1 : n - 1] = 1.0
        return ids.to(self.device), attn.to(self.device), cm.to(self.device)

    def _rollout(self) -> _Rollout:
        """Generate and reward groups until ``prompts_per_step`` carry a learning signal, or one round without
        dynamic sampling. DAPO's dynamic sampling as verl's recipe runs it: each round draws a *full* generation
        batch, rounds go on until enough groups are kept (at most ``max_gen_batches``; 0: no limit), the kept
        groups past the batch are dropped, and a batch still short is never trained on (``short_batch``)."""
        import torch

        from rl_stage import algorithms

        cfg, alg = self.cfg, self.alg
        ro = _Rollout()
        dynamic = alg["dynamic_sampling"]
        limit = (cfg.max_gen_batches or None) if dynamic else 1
        ro.target = target = min(cfg.prompts_per_step, self.sampler.size)
        kept_ids: set[str] = set()
        while len(ro.kept) < target and (limit is None or ro.gen_rounds < limit):
            prompts = self.sampler.sample(cfg.prompts_per_step, need=target - len(ro.kept) if dynamic else None)
            if not prompts:  # every prompt of the pool was drawn in this step already
                break
            groups, n_long, gen_s, reward_s = self._round(prompts, f"{self.step}/{ro.gen_rounds}")
            ro.gen_s += gen_s
            ro.reward_s += reward_s
            ro.too_long += n_long
            ro.gen_rounds += 1
            ro.groups_generated += len(groups)
            self.sampler.observe([(g[0].index, sum(c), len(c)) for _, g, _, c in groups])
            for _, g, r, c in groups:
                p = g[0]
                self._record(p, sum(c), len(c))
                ro.completions += len(c)
                ro.accuracy.append(sum(c) / len(c))
                by = ro.by_bucket.setdefault(p.bucket or "unscored", [0, 0])
                by[0] += sum(c)
                by[1] += len(c)
                ro.boxed += [_explicit(x.text) for x in g[2]]
                signal = [float(x) for x in c] if alg["dynamic_sampling_metric"] == "acc" else r
                if dynamic and (not bool(algorithms.dynamic_sampling_keep(torch.tensor([signal]))[0]) or p.id in kept_ids):
                    ro.dropped += 1
                    continue
                kept_ids.add(p.id)
                ro.kept.append((g, r, c))
            if dynamic and len(ro.kept) < target:
                log.info("step %d: %d of %d groups with a learning signal after %d generation batch(es)%s",
                         self.step + 1, len(ro.kept), target, ro.gen_rounds,
                         "" if limit is None or ro.gen_rounds < limit else "; max_gen_batches reached")
        ro.short = dynamic and len(ro.kept) < target
        ro.kept = ro.kept[:target]
        return ro

    def _sequences(self, kept) -> tuple[list[_Seq], tuple[Any, Any]]:
        """Group advantages, then one ``_Seq`` per completion (groups stay contiguous)."""
        from rl_stage import algorithms

        R = self.torch.tensor([r for _, r, _ in kept], dtype=self.torch.float32)
        adv = algorithms.ADVANTAGES[self.alg["advantage"]](R)
        seqs = []
        for gi, ((_, pids, comps), _, _) in enumerate(kept):
            for j, c in enumerate(comps):
                seqs.append(_Seq(gi, list(pids), list(c.token_ids), float(adv[gi, j]),
                                 not (self.alg["mask_truncated"] and c.truncated), c.logprobs, c.n_tokens, c.truncated))
        return seqs, (R, adv)

    def _mini_batches(self, seqs: list[_Seq]) -> list[list[int]]:
        """Sequence positions of each mini-batch: ``mini_batches`` slices of whole groups (at most one per group)."""
        n_groups = seqs[-1].group + 1
        n = max(1, min(self.alg["mini_batches"], n_groups))
        bounds = np.array_split(np.arange(n_groups), n)
        return [[i for i, q in enumerate(seqs) if q.group in set(b.tolist())] for b in bounds]

    def _micro(self, seqs: list[_Seq], minis: list[list[int]]):
        """(mini-batch index, micro-batch index, sequences) of this rank, in update order: the same grid for every
        pass. A rank takes every world-th sequence of a mini-batch; every rank runs the same number of
        micro-batches (FSDP's collectives need it), a rank with nothing left runs one sequence with an empty mask."""
        mb = self.cfg.micro_batch_size
        for m, mini in enumerate(minis):
            share = mini[self.rank :: self.world]
            n_micro = math.ceil(math.ceil(len(mini) / self.world) / mb)
            for s in range(n_micro):
                part = [seqs[i] for i in share[s * mb : (s + 1) * mb]]
                if not part:
                    part = [replace(seqs[mini[0]], use=False)]
                yield m, s, part

    def _reference_passes(self, seqs: list[_Seq], minis: list[list[int]], need_old: bool) -> tuple[dict, dict, list[float]]:
        """Log-probs before any update: the sampling policy's (when a later update needs a ratio against it)
        and the reference model's (KL); and the rollout/trainer mismatch on unmasked sequences."""
        torch = self.torch
        old: dict[tuple[int, int], Any] = {}
        ref: dict[tuple[int, int], Any] = {}
        mismatch: list[float] = []
        if not need_old and self.ref_policy is None:
            return old, ref, mismatch
        with torch.no_grad():
            for m, s, part in self._micro(seqs, minis):
                ids, attn, cm = self._batch(part)
                plens = [len(q.prompt) for q in part]
                if need_old:
                    old[m, s] = self.policy(ids, attn, cm, prompt_lens=plens)[0]
                    mismatch += self._mismatch(part, old[m, s])
                if self.ref_policy is not None:
                    ref[m, s] = self.ref_policy(ids, attn, cm, prompt_lens=plens)[0]
        return old, ref, mismatch

    def _mismatch(self, part: list[_Seq], lp) -> list[float]:
        out = []
        for i, q in enumerate(part):
            if q.engine_logp and q.use:
                p0 = len(q.prompt) - 1
                t = lp[i, p0 : p0 + len(q.engine_logp)].detach().float().cpu()
                out.append(float((t - self.torch.tensor(q.engine_logp)).abs().mean()))
        return out

    def _update(self, seqs: list[_Seq]) -> _UpdateStats:
        """``num_iterations`` epochs of one optimizer update per mini-batch, micro-batches accumulated.

        Each mini-batch is its own loss, aggregated with the *global* mini-batch's sequence and token counts (as
        verl and TRL do; every rank holds the whole batch's metadata, so these are the all-reduced counts). A
        rank's loss is its share of that one loss; FSDP averages gradients over ranks, so each rank's loss is
        scaled by the world size: N ranks compute the gradient of one process on the same global batch. With one
        update per rollout batch the sampling policy is the current one, so the first pass's detached
        log-probs serve as the old ones; otherwise they come from a no-grad pass before any update. A non-finite
        loss or gradient stops this step's updates (every rank agrees); updates already made stay (and are pushed).
        """
        torch, cfg, alg = self.torch, self.cfg, self.alg
        from rl_stage import algorithms

        minis = self._mini_batches(seqs)
        need_old = len(minis) > 1 or cfg.num_iterations > 1
        old, ref, mismatch = self._reference_passes(seqs, minis, need_old)
        st = _UpdateStats()
        self.policy.train()
        sums = np.zeros(5)  # clip_low, clip_high, kl, entropy, tokens: this rank's
        for epoch in range(cfg.num_iterations):
            for m, mini in enumerate(minis):
                n_seqs = len(mini)
                n_tokens = max(1, sum(len(seqs[i].completion) for i in mini if seqs[i].use))
                self.opt.zero_grad(set_to_none=True)
                loss_total, bad = 0.0, False
                for _, s, part in self._micro(seqs, [mini]):
                    ids, attn, cm = self._batch(part)
                    lp, ent = self.policy(ids, attn, cm, want_entropy=True, prompt_lens=[len(q.prompt) for q in part])
                    if need_old:
                        old_lp = old[m, s]
                    else:  # one update per batch: the policy that sampled is this one
                        old_lp = lp.detach()
                        if epoch == 0:
                            mismatch += self._mismatch(part, old_lp)
                    a = torch.tensor([q.advantage for q in part], device=self.device)
                    pl, info = algorithms.clipped_policy_loss(lp, old_lp, a, alg["eps_low"], alg["eps_high"], alg["dual_clip"])
                    tok_loss = pl
                    if self.ref_policy is not None:
                        kl = algorithms.kl_k3(lp, ref[m, s])
                        tok_loss = tok_loss + alg["kl_coef"] * kl
                        sums[2] += float((kl * cm).sum())
                    loss = algorithms.aggregate(alg["aggregation"], tok_loss, cm, n_seqs=n_seqs, n_tokens=n_tokens,
                                                max_len=cfg.max_tokens)
                    if not torch.isfinite(loss):
                        bad = True
                        if self.world == 1:
                            break
                    (loss * self.world).backward()
                    loss_total += loss.item()
                    with torch.no_grad():
                        dev = ((lp - old_lp).exp() - 1).abs() * cm
                        st.ratio_dev_max = max(st.ratio_dev_max, float(dev.max()) if dev.numel() else 0.0)
                    sums[0] += float((info["clip_low"] * cm).sum())
                    sums[1] += float((info["clip_high"] * cm).sum())
                    sums[3] += float((ent * cm).sum())
                    sums[4] += float(cm.sum())
                bad_any, loss_total = self._sum([float(bad), loss_total])
                if bad_any:
                    st.skipped = "non-finite loss"
                else:
                    gn = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                    gn = float(gn.full_tensor() if hasattr(gn, "full_tensor") else gn)
                    if math.isfinite(gn):
                        st.grad_norm = gn
                    else:
                        st.skipped = "non-finite gradient"
                if st.skipped is not None:
                    self.opt.zero_grad(set_to_none=True)
                    break
                self.opt.step()
                st.updates += 1
                st.loss += loss_total
            if st.skipped is not None:
                break
        # the gradients go before the push: fp32, 4 bytes a parameter (6 GB at 1.5B) held through vLLM's wake-up
        # otherwise (verl's actor zeroes them after its update loop too)
        self.opt.zero_grad(set_to_none=True)
        if st.updates:
            st.loss /= st.updates
        st.clip_low, st.clip_high, st.kl, st.entropy, st.tokens = self._sum(sums.tolist())
        st.ratio_dev_max = self._sum([st.ratio_dev_max], op="max")[0]
        st.mismatch = [x for part in self._gather(mismatch) for x in part]
        return st

    def _advance_schedule(self) -> None:
        """One schedule step per rollout step, also when no update ran (torch warns about that order)."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.sched.step()

    def train_step(self) -> dict:
        """One rollout step: rollout (+ dynamic sampling) -> rewards -> advantages -> updates -> weight push."""
        t0 = time.perf_counter()
        ro = self._rollout()
        self.completions += ro.completions
        kept_prompts = [g[0] for g, _, _ in ro.kept[: ro.target]] if not ro.short else []
        priors = [p.prior for p in kept_prompts if p.prior is not None]
        expected = [p.expected for p in kept_prompts if p.expected is not None]
        with_signal = sum(1 for _, r, _ in (ro.kept[: ro.target] if not ro.short else []) if max(r) != min(r))
        metrics = {"step": self.step + 1, "stage": self.sampler.stage_name, "groups": len(kept_prompts),
                   "groups_with_signal": with_signal,
                   "groups_generated": ro.groups_generated, "dropped_groups": ro.dropped, "gen_rounds": ro.gen_rounds,
                   "completions": ro.completions, "completions_total": self.completions,
                   "completions_per_group": round(ro.completions / len(kept_prompts), 3) if kept_prompts else None,
                   "prior_pass_rate": float(np.mean(priors)) if priors else None,
                   "expected_pass_rate": float(np.mean(expected)) if expected else None,
                   "accuracy_by_bucket": {b: round(c / n, 4) for b, (c, n) in sorted(ro.by_bucket.items())},
                   "completions_by_bucket": {b: n for b, (_, n) in sorted(ro.by_bucket.items())},
                   "prompts_too_long": ro.too_long, "accuracy": float(np.mean(ro.accuracy)) if ro.accuracy else None,
                   "boxed_rate": float(np.mean(ro.boxed)) if ro.boxed else None}
        lr = self.sched.get_last_lr()[0]  # the rate this step's updates use
        skip = None
        if ro.short:
            skip = (f"short batch: {len(ro.kept)} of {ro.target} groups with a learning signal after {ro.gen_rounds} "
                    "generation batches")
            if self.cfg.short_batch == "error":
                raise TrainError(f"step {self.step + 1}: {skip} (max_gen_batches {self.cfg.max_gen_batches}): the prompts "
                                 "are too easy or too hard for the model. Raise max_gen_batches (0: no limit), or set "
                                 "short_batch = 'skip' to skip such steps")
        elif not ro.kept:
            skip = "no group with a learning signal"
        if skip:
            metrics.update({"skipped": skip, "lr": lr, "time/generate_s": round(ro.gen_s, 3),
                            "time/reward_s": round(ro.reward_s, 3), "time/step_s": round(time.perf_counter() - t0, 3)})
            self._advance_schedule()
            return metrics
        seqs, (R, adv) = self._sequences(ro.kept)
        tt = time.perf_counter()
        vllm = self.engine if isinstance(self.engine, VLLMSampler) else None
        slept = vllm is not None and vllm.sleep_mode
        if vllm is not None and slept:
            vllm.sleep()  # free the engine's weights and KV cache for the update
        st = self._update(seqs)
        train_s = time.perf_counter() - tt
        self._advance_schedule()
        # weights changed (or were freed by sleep): the engine must sample from the new ones
        push_s = self._push() if (st.updates or slept) else 0.0
        tok = max(1.0, st.tokens)
        adv_flat = adv.flatten()
        lengths = [q.n_tokens for q in seqs]
        metrics.update({
            "reward": float(R.mean()), "reward_std": float(R.std()) if R.numel() > 1 else 0.0,
            "accuracy_kept": float(np.mean([sum(c) / len(c) for _, _, c in ro.kept])),
            "adv_mean": float(adv_flat.mean()), "adv_std": float(adv_flat.std()) if adv_flat.numel() > 1 else 0.0,
            "adv_abs_max": float(adv_flat.abs().max()),
            "loss": st.loss, "grad_norm": st.grad_norm, "lr": lr, "updates": st.updates,
            "clip_frac_low": st.clip_low / tok, "clip_frac_high": st.clip_high / tok,
            "ratio_abs_dev_max": st.ratio_dev_max,
            "kl": st.kl / tok if self.ref is not None else None, "entropy": st.entropy / tok,
            "response_length": float(np.mean(lengths)), "truncation_rate": float(np.mean([q.truncated for q in seqs])),
            "rollout_logp_abs_diff": float(np.mean(st.mismatch)) if st.mismatch else None,
            "time/generate_s": round(ro.gen_s, 3), "time/reward_s": round(ro.reward_s, 3), "time/train_s": round(train_s, 3),
            "time/push_s": round(push_s, 3), "time/step_s": round(time.perf_counter() - t0, 3),
            "tokens_generated": int(sum(lengths)),
        })
        if self.device == "cuda":
            metrics["memory/max_allocated_gb"] = round(self.torch.cuda.max_memory_allocated() / 2**30, 3)
        if st.skipped:
            metrics["skipped"] = st.skipped
        return metrics

    # ---- evaluation --------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Greedy pass@1 and mean@k at the rollout temperature on the held-out prompts; one line per prompt in
        ``eval.jsonl`` (step, id, greedy correct, mean@k), so runs (seeds, arms) compare prompt by prompt."""
        if not self.eval_prompts:
            return {}
        k = self.cfg.eval_k
        greedy = replace(self.scfg, k=1, temperature=0.0)
        sampled = replace(self.scfg, k=k)
        g_groups, _, _, _ = self._round(self.eval_prompts, "eval-greedy", cfg=greedy)
        s_groups, _, _, _ = self._round(self.eval_prompts, "eval", cfg=sampled)
        by_pos = {pos: (g[2], c) for pos, g, _, c in s_groups}  # sampled completions and correctness by position
        rows = []
        for pos, g, _, c in g_groups:
            if pos in by_pos:
                comps, s_c = by_pos[pos]
                rows.append({"step": self.step, "completions": self.completions, "id": g[0].id, "greedy_correct": bool(c[0]),
                             f"mean@{k}": sum(s_c) / len(s_c), "k": k,
                             "boxed": sum(_explicit(x.text) for x in comps) / k})
        if self.main:
            with open(self.out / "eval.jsonl", "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        return {"eval/pass@1_greedy": float(np.mean([r["greedy_correct"] for r in rows])) if rows else None,
                f"eval/mean@{k}": float(np.mean([r[f"mean@{k}"] for r in rows])) if rows else None,
                "eval/boxed_rate": float(np.mean([r["boxed"] for r in rows])) if rows else None,
                "eval/prompts": len(rows)}

    # ---- checkpoints (rl_stage.checkpoint) ------------------------------------------------------------
    def _latest_checkpoint(self) -> Path | None:
        return checkpoint.latest(self.out)

    def save(self) -> Path:
        return checkpoint.save(self)

    def _load_state(self, ckpt: Path) -> None:
        checkpoint.load(self, ckpt)

    # ---- the loop ----------------------------------------------------------------------------------
    def _log(self, m: dict) -> None:
        if not self.main:
            return
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(m) + "\n")
        if self._tb is not None:
            for k, v in m.items():
                if isinstance(v, int | float) and v is not None:
                    self._tb.add_scalar(k, v, m.get("step", self.step))

    def run(self, stop_after: int | None = None, progress: bool = True) -> list[dict]:
        """Train until ``cfg.steps`` (or ``stop_after`` more steps, for tests); returns this call's metrics."""
        out: list[dict] = []
        try:
            self.setup()
            progress = progress and self.main
            if self.step == 0 and self.eval_prompts and self.cfg.eval_at_start:
                m = {"step": 0, "completions_total": 0, **self.evaluate()}
                self._log(m)
                out.append(m)
            end = self.cfg.steps if stop_after is None else min(self.cfg.steps, self.step + stop_after)
            from curate.core.stop import check

            while self.step < end and not self._budget_spent():
                check()  # a stop asked for: the last checkpoint stands, --resume continues from it
                before = self.completions
                m = self.train_step()
                self.step += 1
                if m.get("skipped") and m["skipped"].startswith("non-finite"):
                    self.bad_in_row += 1
                    log.warning("step %d skipped: %s", self.step, m["skipped"])
                    if self.bad_in_row >= self.cfg.max_bad_steps:
                        self._log(m)
                        raise TrainError(f"{self.bad_in_row} steps in a row with {m['skipped']}: stopping "
                                         f"(last checkpoint: {self._latest_checkpoint()})")
                else:
                    self.bad_in_row = 0
                if self.sampler.end_step():
                    m["stage_advanced_to"] = self.sampler.stage_name
                last = self.step == self.cfg.steps or self._budget_spent()
                periodic = self.cfg.eval_every and self.step % self.cfg.eval_every == 0
                every = self.cfg.eval_every_completions
                crossed = every and self.completions // every > before // every
                if self.eval_prompts and (periodic or crossed or last):
                    m.update(self.evaluate())
                self._log(m)
                out.append(m)
                if progress:
                    print(_line(m), flush=True)
                if self.step % self.cfg.save_every == 0 or self.step == end or last:
                    self.save()
        finally:
            for part in (getattr(self, "grader", None), getattr(self, "_tb", None)):
                if part is not None:
                    part.close()
            lock = getattr(self, "_lock", None)
            if lock is not None:
                lock.release()
        return out

    def _budget_spent(self) -> bool:
        return self.cfg.budget_completions is not None and self.completions >= self.cfg.budget_completions

    def close(self) -> None:
        """End the process group this trainer started under torchrun (NCCL warns, and some versions hang, at the exit
        of a process that left it); a no-op in one process."""
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _line(m: dict) -> str:
    keys = ["reward", "accuracy", "dropped_groups", "loss", "clip_frac_high", "entropy", "response_length", "time/step_s"]
    parts = [f"step {m['step']}", f"stage {m.get('stage')}"]
    for k in keys:
        v = m.get(k)
        if v is not None:
            parts.append(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}")
    for k, v in m.items():
        if k.startswith("eval/") and v is not None:
            parts.append(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}")
    if m.get("skipped"):
        parts.append(f"SKIPPED: {m['skipped']}")
    return "  ".join(parts)
