"""The built-in GRPO trainer: vLLM (or transformers) rollouts, math-verify rewards, exact resume.

One step:

1. draw ``prompts_per_step`` prompts from the prompt sampler (``rl_stage.samplers``);
2. roll out ``group_size`` completions each with the rollout engine (``rl_stage.rollout``: vLLM in process, weights
   pushed after every update; or transformers ``generate`` on the trained model itself), every sample seeded
   from (seed, step, prompt id, index) so runs repeat;
3. reward: math-verify correctness in worker processes with hard timeouts (``curate.difficulty.grading``), plus an
   optional format reward and DAPO's overlong shaping; truncated completions are optionally masked;
4. dynamic sampling (DAPO): groups whose rewards are all equal are dropped and more prompts are drawn,
   up to ``max_gen_batches`` generation rounds; how many were dropped is logged;
5. the update (``rl_stage.update``): advantages, clipped surrogate, aggregation and optional k3 KL from
   ``rl_stage.algorithms``; log-probs
   recomputed by the trainer (the engine's own are kept only to report the rollout/trainer mismatch);
   ``num_iterations`` optimizer steps per rollout batch, micro-batches with gradient accumulation,
   AdamW, gradient clipping; a step with a non-finite loss or gradient is skipped and logged, and
   ``max_bad_steps`` of them in a row stop the run;
6. metrics to ``OUT/metrics.jsonl`` (and TensorBoard when asked); every ``save_every`` steps a checkpoint
   in Hugging Face format plus optimizer, scheduler, sampler and RNG state, written under a temporary
   name and renamed. ``resume=True`` continues from the newest complete checkpoint exactly.

Settings and their sources: ``rl_stage.config.TrainConfig``; the run folder's rules: ``rl_stage.run_folder``;
several ranks under torchrun: ``rl_stage.distributed``; checkpoints: ``rl_stage.checkpoint``.

One job, in one module of more than 500 lines: the step loop and what it counts (rollouts: ``rl_stage.rollout``;
the update: ``rl_stage.update``; screening: ``rl_stage.screening``; checkpoints: ``rl_stage.checkpoint``).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from curate.difficulty import VLLMEngine
from rl_stage import checkpoint, screening
from rl_stage.config import SAMPLERS, TrainConfig, TrainError
from rl_stage.distributed import ProcessGroup
from rl_stage.rollout import Group, Rollout, Rollouts, explicit, request_key
from rl_stage.samplers import make_sampler
from rl_stage.update import Updater

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from rl_stage.algorithms import Algorithm

__all__ = ["SAMPLERS", "TrainConfig", "TrainError", "Trainer"]

log = logging.getLogger(__name__)


def where(torch, cfg: TrainConfig) -> tuple[str, bool]:
    """The trainer's device and whether it computes in bf16 (``curate.difficulty.devices``): a GPU setting without a
    GPU, or bf16 asked for on a GPU without it, is a ``TrainError``; a CPU run is said in one line."""
    from curate.difficulty.devices import GPU_ENGINE_ARGS, DeviceError, pick_device, train_bf16

    named = {"vllm_sleep": True if cfg.vllm_sleep else None,
             **{f"vllm_engine_args.{k}": v for k, v in cfg.vllm_engine_args.items() if k in GPU_ENGINE_ARGS}}
    try:
        device = pick_device(torch, cfg.device, "gradus train", named)
        return device, train_bf16(torch, device, cfg.bf16)
    except DeviceError as e:
        raise TrainError(str(e)) from e


class Trainer:
    rollouts: Rollouts  # the engine and the grader (setup)
    updater: Updater  # the policy update (setup)

    def __init__(self, cfg: TrainConfig, resume: bool = False):
        cfg.check()
        import torch

        self.device, self.bf16 = where(torch, cfg)  # before any work: a GPU asked for and not there stops here
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
        self.completions_trained = 0  # of those, the ones in groups the run trained on
        self.online: dict[str, list] = {}  # prompt id -> [last correct, last graded, last step, total correct, total graded]
        self.pg = ProcessGroup()
        self._data_fp: str | None = None
        self.screens: screening.Queue | None = None  # screened candidates held for a later round (cfg.screen)

    # ---- setup -------------------------------------------------------------------------------------
    def setup(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from curate.difficulty import ModelError, SamplingConfig, resolve_model
        from rl_stage.data import held_out_prompts
        from rl_stage.policy import PolicyModule

        cfg = self.cfg
        self.torch = torch
        self.pg.start(torch, self.device)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        from rl_stage import run_folder

        self._lock = None
        if self.pg.main:  # the folder's rules (rl_stage.run_folder): checked and held before anything is written
            run_folder.check(self.out, self.resume)
            if self.resume:
                diff = run_folder.changed(self.out, {**asdict(cfg), "data_fingerprint": self._data_fingerprint()})
                if diff:
                    raise TrainError(f"--resume with other settings than the run in {self.out} ({'; '.join(diff)}): they "
                                     "would change what its checkpoint continues; use another out folder")
            self._lock = run_folder.claim(self.out)
        self.pg.barrier()  # rank 0 has checked and claimed the folder
        ckpt = self._latest_checkpoint() if self.resume else None
        if self.resume and ckpt is None:
            log.warning("no complete checkpoint in %s: starting from step 0", self.out / "checkpoints")
            if self.pg.main:  # what the run logged before it died belongs to steps that run again
                for name in ("metrics.jsonl", "eval.jsonl"):
                    (self.out / name).unlink(missing_ok=True)
        self.pg.barrier()  # every rank has looked before rank 0 writes
        # the default model is converted once, by rank 0; the others wait and find it (no ranks writing one folder)
        path, self.model_name = self.pg.main_first(lambda: resolve_model(cfg.model))
        load_from = str(ckpt) if ckpt else path
        # Precision: the policy's weights and AdamW's state are fp32 whatever ``bf16`` says; bf16 is used for
        # compute only (autocast in the forward pass), as verl keeps its actor. A bf16 policy loses almost
        # every update at lr 1e-6 (a bf16 weight near 0.05 moves in steps of 2e-4).
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(load_from, dtype=torch.float32)
            if self.pg.world == 1:  # several ranks: FSDP2 places each rank's shards (rl_stage.distributed.shard)
                self.model.to(self.device)
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
        if self.pg.world > 1:
            from rl_stage.distributed import shard

            shard(self.model, self.policy, self.bf16)
        self.ref = self.ref_policy = None
        if self.alg.kl_coef > 0:  # frozen: bf16 storage is fine; a whole copy on every rank
            ref_dtype = torch.bfloat16 if self.bf16 else torch.float32
            self.ref = AutoModelForCausalLM.from_pretrained(path, dtype=ref_dtype).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            self.ref_policy = PolicyModule(self.ref, cfg.temperature, self.bf16, self.device, cfg.logprob_chunk)
        # fused: one pass over each parameter's state (the per-tensor loop, torch's default on CPU, takes ~25x longer
        # on SmolLM2-135M); transformers' Trainer, and so TRL, defaults to it too
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay,
                                     fused=True)
        # the schedule advances once per rollout step (the unit DAPO's 20-step warm-up counts in), not per update
        warm = max(0, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        # every rank holds the same sampler (same seed, same updates from every rank's groups): the global batch
        # is the one a single process would draw, and each rank rolls out its share of it
        self.sampler = make_sampler(cfg, self.alg)
        self.screens = (screening.Queue(cfg.screen, cfg.group_size, cfg.screen_min_chance, cfg.screen_candidates,
                                        cfg.screen_carry) if cfg.screen else None)
        log.info("%s", updates_line(cfg, self.alg))
        if cfg.top_p < 1 and cfg.rollout_backend == "vllm":
            log.warning("top_p < 1: vLLM's log-probs are of the renormalized nucleus, the trainer's of the full "
                        "tempered distribution (as TRL and verl); rollout_logp_abs_diff is biased upward")
        self.eval_prompts = held_out_prompts(cfg.eval_data, cfg.eval_prompts) if cfg.eval_data else []
        self.scfg = SamplingConfig(k=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                   seed=cfg.seed, max_prompt_tokens=cfg.max_prompt_tokens)
        self.updater = Updater(torch, cfg, self.alg, self.pg, policy=self.policy, ref_policy=self.ref_policy,
                               opt=self.opt, pad_id=self.tokenizer.pad_token_id, device=self.device)
        self.rollouts = Rollouts(torch, cfg, self.alg, self.pg, self.scfg, template=self.template,
                                 tokenizer=self.tokenizer, model=self.model, device=self.device, bf16=self.bf16, path=path,
                                 model_name=self.model_name)
        if ckpt:
            self._load_state(ckpt)
        self._tb = None
        if cfg.tensorboard and self.pg.main:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.out / "tensorboard"))
        if self.pg.main:
            (self.out / "config.json").write_text(json.dumps({**asdict(cfg), "data_fingerprint": self._data_fingerprint(),
                                                             "resolved": asdict(self.alg), "world_size": self.pg.world},
                                                             indent=2, default=str))

    def _data_fingerprint(self) -> str:
        """What the training data is, not where it lies: the content hashes of its shards (each export's shards checked
        against its manifest), so a resume on an export replaced by other problems, even as many, is refused."""
        if self._data_fp is None:
            from curate.core.runner import identity_hash, input_entries

            self._data_fp = identity_hash(input_entries([Path(d) for d in self.cfg.data]))
        return self._data_fp

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
    def _rollout(self) -> Rollout:
        """Generate and reward groups until ``prompts_per_step`` carry a learning signal, or one round without
        dynamic sampling. DAPO's dynamic sampling as verl's recipe runs it: each round draws a *full* generation
        batch, rounds go on until enough groups are kept (at most ``max_gen_batches``; 0: no limit), the kept
        groups past the batch are dropped, and a batch still short is never trained on (``short_batch``)."""
        import torch

        from rl_stage import algorithms

        cfg, alg = self.cfg, self.alg
        ro = Rollout()
        dynamic = alg.dynamic_sampling
        limit = (cfg.max_gen_batches or None) if dynamic else 1
        ro.target = target = min(cfg.prompts_per_step, self.sampler.size)
        kept_ids: set[str] = set()
        drawn: set[int] = set()  # the pool's rows drawn in this step
        screens = self.screens
        if screens is not None:
            for x in screens.begin_step():
                self._screened_out(ro, x)
            ro.screens_carried = len(screens.held)
            drawn.update(x.prompt.index for x in screens.held)
        while len(ro.kept) < target and (limit is None or ro.gen_rounds < limit):
            missing = target - len(ro.kept)
            if screens is not None:  # the screen is the filter (rl_stage.screening): candidates for the groups missing
                prompts = screens.draw(self.sampler, missing)
            else:
                prompts = self.sampler.sample(cfg.prompts_per_step, need=missing if dynamic else None)
            if not prompts and not (screens is not None and screens.held):  # the pool was drawn in this step already
                break
            drawn.update(x.index for x in prompts)
            tag = f"{self.step}/{ro.gen_rounds}"
            if screens is not None:
                groups = self._screened(screens, prompts, tag, missing, ro)
            else:
                groups = self._round(ro, prompts, tag)
                self.sampler.observe([(g.prompt.index, sum(g.correct), len(g.correct)) for g in groups])
                for g in groups:
                    self._count(ro, g)
                ro.groups_generated += len(groups)
            ro.gen_rounds += 1
            for g in groups:
                signal = [float(x) for x in g.correct] if alg.dynamic_sampling_metric == "acc" else g.rewards
                if dynamic and (not bool(algorithms.dynamic_sampling_keep(torch.tensor([signal]))[0])
                                or g.prompt.id in kept_ids):
                    ro.dropped += 1
                    continue
                kept_ids.add(g.prompt.id)
                ro.kept.append(g)
            if dynamic and len(ro.kept) < target:
                log.info("step %d: %d of %d groups with a learning signal after %d generation batch(es)%s",
                         self.step + 1, len(ro.kept), target, ro.gen_rounds,
                         "" if limit is None or ro.gen_rounds < limit else "; max_gen_batches reached")
        ro.short = dynamic and len(ro.kept) < target
        ro.pool_drawn = ro.short and len(drawn) >= self.sampler.size
        ro.kept = ro.kept[:target]
        return ro

    def _round(self, ro: Rollout, prompts, tag: str, **kw) -> list[Group]:
        """``Rollouts.round``, its seconds and prompts too long added to ``ro``."""
        groups, n_long, gen_s, reward_s = self.rollouts.round(prompts, tag, **kw)
        ro.gen_s += gen_s
        ro.reward_s += reward_s
        ro.too_long += n_long
        return groups

    def _count(self, ro: Rollout, g: Group, generated: bool = True) -> None:
        """A graded group (a whole one, or a screen that went no further) into the step's counts and the online table;
        ``generated``: its completions are added to the step's (a screened round counts them as it generates them)."""
        c = g.correct
        self._record(g.prompt, sum(c), len(c))
        if generated:
            ro.completions += len(c)
        ro.accuracy.append(sum(c) / len(c))
        by = ro.by_bucket.setdefault(g.prompt.bucket or "unscored", [0, 0])
        by[0] += sum(c)
        by[1] += len(c)
        ro.boxed += [explicit(x.text) for x in g.completions]

    def _screened(self, screens: screening.Queue, prompts, tag: str, missing: int, ro: Rollout) -> list[Group]:
        """One screened round (``rl_stage.screening``): ``screen`` completions of every new candidate, observed by the
        sampler; the queue then picks, among the held candidates and the new ones, those whose rest of the group
        (samples ``screen .. G-1`` of the same request key) is generated. Returns the continued groups, whole, as
        ``Rollouts.round`` gives groups; the candidates below the bar count as screened out, the others stay held."""
        cfg = self.cfg
        s, rest = cfg.screen, cfg.group_size - cfg.screen
        first = self._round(ro, prompts, tag, n=s) if prompts else []
        ro.groups_generated += len(first)
        ro.completions += sum(len(g.completions) for g in first)
        ro.screen_completions += sum(len(g.completions) for g in first)
        self.sampler.observe([(g.prompt.index, sum(g.correct), len(g.correct)) for g in first])
        new = [screening.Screened(g.prompt, sum(g.correct), request_key(tag, g.position, g.prompt), g) for g in first]
        go, out = screens.decide(self.sampler, new, missing)
        for x in out:
            self._screened_out(ro, x)
        if not go:
            return []
        done = self._round(ro, [x.prompt for x in go], tag, keys=[x.key for x in go], first=s, n=rest)
        ro.completions += sum(len(g.completions) for g in done)
        self.sampler.observe([(g.prompt.index, sum(g.correct), len(g.correct)) for g in done])
        groups = [go[rest.position].data.then(rest) for rest in done]
        for g in groups:
            self._count(ro, g, generated=False)
        return groups

    def _screened_out(self, ro: Rollout, x: screening.Screened) -> None:
        ro.screened_out += 1
        self._count(ro, x.data, generated=False)

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
        kept_prompts = [g.prompt for g in ro.kept[: ro.target]] if not ro.short else []
        priors = [p.prior for p in kept_prompts if p.prior is not None]
        expected = [p.expected for p in kept_prompts if p.expected is not None]
        with_signal = sum(1 for g in (ro.kept[: ro.target] if not ro.short else []) if max(g.rewards) != min(g.rewards))
        trained = sum(len(g.completions) for g in ro.kept[: ro.target]) if kept_prompts else 0
        self.completions_trained += trained
        metrics = {"step": self.step + 1, "stage": self.sampler.stage_name, "groups": len(kept_prompts),
                   "groups_with_signal": with_signal,
                   "groups_generated": ro.groups_generated, "dropped_groups": ro.dropped, "gen_rounds": ro.gen_rounds,
                   "completions": ro.completions, "completions_total": self.completions,
                   "completions_per_group": round(ro.completions / len(kept_prompts), 3) if kept_prompts else None,
                   "completions_trained": trained,
                   "trained_share": round(self.completions_trained / self.completions, 4) if self.completions else None,
                   "screened_out": ro.screened_out, "screen_completions": ro.screen_completions,
                   "screens_carried": ro.screens_carried,
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
            if ro.pool_drawn:  # raising max_gen_batches cannot help: there is nothing left to draw
                skip += f": every one of the {self.sampler.size} prompts in the pool was drawn in this step"
            if self.cfg.short_batch == "error" and ro.pool_drawn:
                raise TrainError(f"step {self.step + 1}: {skip}, and only {len(ro.kept)} carried a learning signal. Use "
                                 f"a larger pool (more prompts, or prompts nearer the model's level), a prompts_per_step "
                                 f"of at most {len(ro.kept) or 1}, or short_batch = 'skip' to skip such steps")
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
        seqs, (R, adv) = self.updater.sequences(ro.kept)
        tt = time.perf_counter()
        engine = self.rollouts.engine
        vllm = engine if isinstance(engine, VLLMEngine) else None
        slept = vllm is not None and vllm.sleep_mode
        if vllm is not None and slept:
            vllm.sleep()  # free the engine's weights and KV cache for the update
        st = self.updater.update(seqs)
        train_s = time.perf_counter() - tt
        self._advance_schedule()
        # weights changed (or were freed by sleep): the engine must sample from the new ones
        push_s = self.rollouts.push() if (st.updates or slept) else 0.0
        tok = max(1.0, st.tokens)
        adv_flat = adv.flatten()
        lengths = [q.n_tokens for q in seqs]
        metrics.update({
            "reward": float(R.mean()), "reward_std": float(R.std()) if R.numel() > 1 else 0.0,
            "accuracy_kept": float(np.mean([sum(g.correct) / len(g.correct) for g in ro.kept])),
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
        g_groups, _, _, _ = self.rollouts.round(self.eval_prompts, "eval-greedy", cfg=greedy)
        s_groups, _, _, _ = self.rollouts.round(self.eval_prompts, "eval", cfg=sampled)
        sampled_at = {g.position: g for g in s_groups}
        rows = []
        for g in g_groups:
            if g.position in sampled_at:
                s = sampled_at[g.position]
                rows.append({"step": self.step, "completions": self.completions, "id": g.prompt.id,
                             "greedy_correct": bool(g.correct[0]), f"mean@{k}": sum(s.correct) / len(s.correct), "k": k,
                             "boxed": sum(explicit(x.text) for x in s.completions) / k})
        if self.pg.main:
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
        if not self.pg.main:
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
            progress = progress and self.pg.main
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
                advanced = self.sampler.end_step()
                if advanced:
                    m["stage_advanced_to"] = self.sampler.stage_name
                if self.screens is not None:
                    self.screens.end_step(stage_changed=advanced)
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
            for part in (getattr(self, "rollouts", None), getattr(self, "_tb", None)):
                if part is not None:
                    part.close()
            lock = getattr(self, "_lock", None)
            if lock is not None:
                lock.release()
        return out

    def _budget_spent(self) -> bool:
        return self.cfg.budget_completions is not None and self.completions >= self.cfg.budget_completions

    def close(self) -> None:
        """End the process group this trainer started under torchrun; a no-op in one process."""
        self.pg.close()



def updates_line(cfg: TrainConfig, alg: Algorithm) -> str:
    """What one rollout step trains: its optimizer updates (the preset's mini-batches, at most one per group)."""
    m, n = alg.mini_batches, min(alg.mini_batches, cfg.prompts_per_step)
    why = f" (the preset's {m} mini-batches, at most one group each)" if m > n else ""
    return f"{cfg.prompts_per_step} groups of {cfg.group_size} a step, {n} optimizer update{'s' * (n != 1)} each{why}"


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
