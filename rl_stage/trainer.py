"""The built-in GRPO trainer: vLLM (or transformers) rollouts, math-verify rewards, exact resume.

One step:

1. draw ``prompts_per_step`` prompts from the curriculum sampler (``rl_stage.data``);
2. roll out ``group_size`` completions each with the rollout engine (vLLM in process, weights pushed
   after every update; or transformers ``generate`` on the trained model itself), every sample seeded
   from (seed, step, prompt id, index) so runs repeat;
3. reward: math-verify correctness in worker processes with hard timeouts (``curate.grading``), plus an
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

Defaults cite their source in ``TrainConfig``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import tomllib

from curate.errors import GradusError

log = logging.getLogger(__name__)


class TrainError(GradusError):
    pass


@dataclass
class TrainConfig:
    data: list[str] = field(default_factory=list)  # gradus export folders (parquet) or scored shard folders
    out: str = "runs/train"
    model: str | None = None  # None: the bundled SmolLM2-135M-Instruct
    preset: str = "dapo"  # grpo | dr_grpo | dapo | rloo (rl_stage.algorithms.PRESETS)
    # algorithm overrides (None: the preset's value)
    advantage: str | None = None
    aggregation: str | None = None
    eps_low: float | None = None
    eps_high: float | None = None
    dual_clip: float | None = None
    kl_coef: float | None = None
    dynamic_sampling: bool | None = None
    overlong_shaping: bool | None = None
    overlong_buffer: int | None = None  # None: max_tokens // 5 (DAPO: 4096 of 20480)
    mask_truncated: bool | None = None
    format_reward: float = 0.0  # added when the completion has a \boxed{} answer
    # rollouts
    rollout_backend: str = "vllm"  # vllm | hf
    template: str = "chat"
    prompts_per_step: int = 8
    group_size: int = 8  # completions per prompt (Dr. GRPO: 8)
    max_tokens: int = 256
    max_prompt_tokens: int = 512
    temperature: float = 1.0  # DAPO and Dr. GRPO sample at 1.0
    top_p: float = 1.0
    max_gen_batches: int = 3  # dynamic sampling: generation rounds per step at most
    # optimization
    steps: int = 100
    lr: float = 1e-6  # DAPO: constant 1e-6 after warm-up
    warmup_steps: int = 0
    weight_decay: float = 0.1  # DAPO
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0  # DAPO
    micro_batch_size: int = 8  # sequences per forward/backward
    num_iterations: int = 1  # optimizer steps per rollout batch (mu in GRPO)
    seed: int = 0
    bf16: bool | None = None  # None: on GPU only
    gradient_checkpointing: bool | None = None  # None: on GPU only
    max_bad_steps: int = 3
    # curriculum
    stage_steps: int | None = None  # steps per curriculum stage (None: split steps evenly over stages)
    advance_at: float | None = None  # or advance once the stage's running accuracy reaches this
    prioritized: bool = True  # Kimi k1.5: p_i ~ max(floor, 1 - s_i), s_i tracked online
    weight_floor: float = 0.05
    # evaluation, logging, checkpoints
    eval_data: list[str] = field(default_factory=list)
    eval_every: int = 0  # 0: only before the first and after the last step
    eval_prompts: int = 32
    eval_k: int = 4  # mean@k at the rollout temperature, next to greedy pass@1
    save_every: int = 10
    keep_checkpoints: int = 2
    tensorboard: bool = False

    @classmethod
    def load(cls, path: Path, **overrides) -> TrainConfig:
        text = Path(path).read_text()
        raw = tomllib.loads(text) if str(path).endswith(".toml") else json.loads(text)
        raw.update({k: v for k, v in overrides.items() if v is not None})
        names = {f.name for f in fields(cls)}
        unknown = set(raw) - names
        if unknown:
            raise TrainError(f"{path}: unknown setting(s) {sorted(unknown)}")
        if "adam_betas" in raw:
            raw["adam_betas"] = tuple(raw["adam_betas"])
        return cls(**raw)

    def resolved(self):
        """The algorithm settings after applying the preset, as a dict."""
        from rl_stage.algorithms import ADVANTAGES, AGGREGATIONS, lookup, preset

        p = preset(self.preset)
        d = {
            "advantage": self.advantage or p.advantage, "aggregation": self.aggregation or p.aggregation,
            "eps_low": p.eps_low if self.eps_low is None else self.eps_low,
            "eps_high": p.eps_high if self.eps_high is None else self.eps_high,
            "dual_clip": self.dual_clip, "kl_coef": p.kl_coef if self.kl_coef is None else self.kl_coef,
            "dynamic_sampling": p.dynamic_sampling if self.dynamic_sampling is None else self.dynamic_sampling,
            "overlong_shaping": p.overlong_shaping if self.overlong_shaping is None else self.overlong_shaping,
            "overlong_buffer": self.overlong_buffer if self.overlong_buffer is not None else max(1, self.max_tokens // 5),
            "mask_truncated": p.mask_truncated if self.mask_truncated is None else self.mask_truncated,
            "cite": p.cite,
        }
        lookup(ADVANTAGES, d["advantage"], "advantage estimator")
        lookup(AGGREGATIONS, d["aggregation"], "loss aggregation")
        return d

    def check(self) -> None:
        if not self.data:
            raise TrainError("no training data: set `data` to gradus export folders")
        if self.rollout_backend not in ("vllm", "hf"):
            raise TrainError(f"rollout_backend must be vllm or hf, not {self.rollout_backend!r}")
        for name in ("prompts_per_step", "group_size", "max_tokens", "steps", "micro_batch_size", "num_iterations"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1")
        if self.group_size < 2:
            raise TrainError("group_size must be >= 2: group baselines need at least two completions")


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False):
        cfg.check()
        self.cfg = cfg
        self.alg = cfg.resolved()
        self.out = Path(cfg.out)
        self.resume = resume
        self.step = 0
        self.bad_in_row = 0

    # ---- setup -------------------------------------------------------------------------------------
    def setup(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from curate.engines import SamplingConfig
        from curate.grading import GradingPool
        from curate.models import ModelError, resolve_model
        from rl_stage.data import CurriculumSampler

        cfg = self.cfg
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else self.device == "cuda"
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.out.mkdir(parents=True, exist_ok=True)
        ckpt = self._latest_checkpoint() if self.resume else None
        if self.resume and ckpt is None:
            log.warning("no complete checkpoint in %s: starting from step 0", self.out / "checkpoints")
        if not self.resume and (self.out / "metrics.jsonl").exists():
            raise TrainError(f"{self.out} already holds a run: use --resume to continue it, or another out folder")
        path, self.model_name = resolve_model(cfg.model)
        load_from = str(ckpt) if ckpt else path
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(load_from, dtype=dtype).to(self.device)
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot load model {load_from}: {e}") from e
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if cfg.gradient_checkpointing or (cfg.gradient_checkpointing is None and self.device == "cuda"):
            self.model.gradient_checkpointing_enable()
        self.ref = None
        if self.alg["kl_coef"] > 0:
            self.ref = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
        warm = max(0, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        stage_steps = cfg.stage_steps
        self.sampler = CurriculumSampler(cfg.data, seed=cfg.seed, stage_steps=None, advance_at=cfg.advance_at,
                                         prioritized=cfg.prioritized, floor=cfg.weight_floor)
        if stage_steps is None and len(self.sampler.stages) > 1:
            stage_steps = max(1, cfg.steps // len(self.sampler.stages))
        self.sampler.stage_steps = stage_steps
        self.eval_prompts = []
        if cfg.eval_data:
            ev = CurriculumSampler(cfg.eval_data, seed=cfg.seed + 1, prioritized=False)
            self.eval_prompts = ev.sample(min(cfg.eval_prompts, len(ev.rows["id"])))
        self.scfg = SamplingConfig(k=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                   seed=cfg.seed, max_prompt_tokens=cfg.max_prompt_tokens)
        self.grader = GradingPool().start()
        self._engine(path)
        if ckpt:
            self._load_state(ckpt)
        self._tb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.out / "tensorboard"))
        (self.out / "config.json").write_text(json.dumps({**asdict(cfg), "resolved": self.alg}, indent=2, default=str))

    def _engine(self, path: str) -> None:
        from curate.engines import HFSampler, VLLMSampler

        if self.cfg.rollout_backend == "vllm":
            self.engine = VLLMSampler(path, self.scfg, model_name=self.model_name, dtype="bfloat16" if self.bf16 else None)
        else:
            self.engine = HFSampler(path, self.scfg, model_name=self.model_name, model=self.model, tokenizer=self.tokenizer,
                                    batch_prompts=self.cfg.prompts_per_step)

    def _push(self) -> float:
        if self.cfg.rollout_backend != "vllm":
            return 0.0
        return self.engine.push_weights((k, v.detach()) for k, v in self.model.state_dict().items())

    # ---- rollouts and rewards ----------------------------------------------------------------------
    def _requests(self, prompts, tag: str):
        from curate import templates

        reqs, ok = [], []
        special = templates.adds_special_tokens(self.cfg.template)
        for i, p in enumerate(prompts):
            text = templates.render(self.cfg.template, p.problem, self.tokenizer)
            ids = self.tokenizer(text, add_special_tokens=special)["input_ids"]
            if len(ids) > self.cfg.max_prompt_tokens:
                continue
            # request ids are positional: two rows may share a problem id (the same text in two sources)
            reqs.append(self._gen_request(f"{i}:{p.id}", text, ids, f"{tag}/{i}/{p.id}"))
            ok.append(p)
        return reqs, ok

    @staticmethod
    def _gen_request(pid, text, ids, key):
        from curate.engines import GenRequest

        return GenRequest(pid, text, ids, None, key)

    def _generate(self, prompts, tag: str, cfg=None):
        reqs, ok = self._requests(prompts, tag)
        self.model.eval()
        res = dict(self.engine.stream(reqs, logprobs=self.cfg.rollout_backend == "vllm", cfg=cfg))
        return [(p, r.prompt_ids, res[r.id]) for p, r in zip(ok, reqs, strict=True)], len(prompts) - len(ok)

    def _rewards(self, groups) -> tuple[list[list[float]], list[list[bool]]]:
        from curate.grading import extract_prediction

        golds, texts, slots = [], [], []
        correct = [[False] * len(c) for _, _, c in groups]
        for gi, (p, _, comps) in enumerate(groups):
            for j, c in enumerate(comps):
                if c.truncated and extract_prediction(c.text)[1] == "tail":
                    continue  # cut off before any answer
                golds.append(p.answer)
                texts.append(c.text)
                slots.append((gi, j))
        for (gi, j), o in zip(slots, self.grader.grade(golds, texts), strict=True):
            correct[gi][j] = o == "correct"
        rewards = []
        for gi, (_, _, comps) in enumerate(groups):
            r = []
            for j, c in enumerate(comps):
                v = 1.0 if correct[gi][j] else 0.0
                if self.cfg.format_reward and extract_prediction(c.text)[1] == "boxed":
                    v += self.cfg.format_reward
                if self.alg["overlong_shaping"]:
                    import torch

                    from rl_stage.algorithms import overlong_penalty

                    v += float(overlong_penalty(torch.tensor([c.n_tokens]), self.cfg.max_tokens, self.alg["overlong_buffer"])[0])
                r.append(v)
            rewards.append(r)
        return rewards, correct

    # ---- the step ----------------------------------------------------------------------------------
    def _logps(self, model, input_ids, attn, comp_mask, want_entropy=False):
        """Per-token log-probs [B, L-1] of the next tokens, computed on completion positions only.

        The vocabulary projection and softmax (49k wide for SmolLM2) run only where ``comp_mask`` is set:
        the prompt positions need no log-probs. Models that post-process logits (soft-capping) take the
        full path.
        """
        torch = self.torch
        tgt = input_ids[:, 1:]
        sel = comp_mask > 0
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
            if getattr(model.config, "final_logit_softcapping", None):
                logits = model(input_ids=input_ids, attention_mask=attn).logits[:, :-1][sel].float()
            else:
                hidden = model.base_model(input_ids=input_ids, attention_mask=attn).last_hidden_state[:, :-1]
                logits = model.get_output_embeddings()(hidden[sel]).float()
        logp_all = torch.log_softmax(logits, -1)
        picked = logp_all.gather(-1, tgt[sel][:, None]).squeeze(-1)
        logp = torch.zeros(tgt.shape, dtype=picked.dtype, device=picked.device).masked_scatter(sel, picked)
        ent = None
        if want_entropy:
            with torch.no_grad():
                e = -(logp_all.exp() * logp_all).sum(-1)
                ent = torch.zeros(tgt.shape, dtype=e.dtype, device=e.device).masked_scatter(sel, e)
        return logp, ent

    def _batch(self, seqs):
        """Right-padded input ids, attention and completion masks (aligned to next-token targets)."""
        torch = self.torch
        L = max(len(p) + len(c) for p, c, _ in seqs)
        ids = torch.full((len(seqs), L), self.tokenizer.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), L), dtype=torch.long)
        cm = torch.zeros((len(seqs), L - 1), dtype=torch.float32)
        for i, (p, c, use) in enumerate(seqs):
            n = len(p) + len(c)
            ids[i, :n] = torch.tensor(p + c)
            attn[i, :n] = 1
            if use:
                cm[i, len(p) - 1 : n - 1] = 1.0
        return ids.to(self.device), attn.to(self.device), cm.to(self.device)

    def train_step(self) -> dict:
        torch, cfg, alg = self.torch, self.cfg, self.alg
        from rl_stage.algorithms import ADVANTAGES, aggregate, clipped_policy_loss, dynamic_sampling_keep, kl_k3

        t0 = time.perf_counter()
        kept, dropped_groups, too_long, gen_rounds, all_groups = [], 0, 0, 0, 0
        gen_s = reward_s = 0.0
        acc_all = []
        while len(kept) < cfg.prompts_per_step and gen_rounds < (cfg.max_gen_batches if alg["dynamic_sampling"] else 1):
            need = cfg.prompts_per_step - len(kept)
            prompts = self.sampler.sample(need)
            tg = time.perf_counter()
            groups, n_long = self._generate(prompts, f"{self.step}/{gen_rounds}")
            gen_s += time.perf_counter() - tg
            too_long += n_long
            tr = time.perf_counter()
            rewards, correct = self._rewards(groups)
            reward_s += time.perf_counter() - tr
            gen_rounds += 1
            all_groups += len(groups)
            for g, r, c in zip(groups, rewards, correct, strict=True):
                self.sampler.update(g[0].id, sum(c), len(c))
                acc_all.append(sum(c) / len(c))
                rt = torch.tensor([r])
                if alg["dynamic_sampling"] and not bool(dynamic_sampling_keep(rt)[0]):
                    dropped_groups += 1
                    continue
                kept.append((g, r, c))
        kept = kept[: cfg.prompts_per_step]
        metrics = {"step": self.step + 1, "stage": self.sampler.stage_name, "groups": len(kept), "groups_generated": all_groups,
                   "dropped_groups": dropped_groups, "gen_rounds": gen_rounds, "prompts_too_long": too_long,
                   "accuracy": float(np.mean(acc_all)) if acc_all else None}
        if not kept:
            metrics.update({"skipped": "no group with a learning signal", "time/generate_s": round(gen_s, 3),
                            "time/reward_s": round(reward_s, 3)})
            return metrics
        R = torch.tensor([r for _, r, _ in kept], dtype=torch.float32)
        adv = ADVANTAGES[alg["advantage"]](R)
        seqs, seq_adv, eng_lp, lengths, truncs = [], [], [], [], []
        for gi, ((_, pids, comps), _, _) in enumerate(kept):
            for j, c in enumerate(comps):
                use = not (alg["mask_truncated"] and c.truncated)
                seqs.append((list(pids), list(c.token_ids), use))
                seq_adv.append(float(adv[gi, j]))
                eng_lp.append(c.logprobs)
                lengths.append(c.n_tokens)
                truncs.append(c.truncated)
        n_seqs = len(seqs)
        n_tokens = sum(len(c) for _, c, u in seqs if u)
        mb = cfg.micro_batch_size
        tt = time.perf_counter()
        self.model.train()
        # old (rollout-time) log-probs from the trainer, needed only for several updates per batch (with one,
        # the ratio is 1 and the first pass's detached log-probs serve); the reference's when KL is on
        old, ref, mismatch = [None] * len(range(0, n_seqs, mb)), [], []

        def track_mismatch(s, lp):
            for i, e in enumerate(eng_lp[s : s + mb]):
                if e:
                    p0 = len(seqs[s + i][0]) - 1
                    t = lp[i, p0 : p0 + len(e)].detach().cpu()
                    mismatch.append(float((t - torch.tensor(e)).abs().mean()))

        with torch.no_grad():
            for bi, s in enumerate(range(0, n_seqs, mb)):
                if cfg.num_iterations == 1 and self.ref is None:
                    break
                ids, attn, cm = self._batch(seqs[s : s + mb])
                if cfg.num_iterations > 1:
                    old[bi], _ = self._logps(self.model, ids, attn, cm)
                    track_mismatch(s, old[bi])
                if self.ref is not None:
                    ref.append(self._logps(self.ref, ids, attn, cm)[0])
        stats = {"loss": 0.0, "clip_low": 0.0, "clip_high": 0.0, "kl": 0.0, "entropy": 0.0, "tokens": 0.0}
        skipped = None
        grad_norm = None
        for it in range(cfg.num_iterations):
            self.opt.zero_grad(set_to_none=True)
            loss_total = 0.0
            for bi, s in enumerate(range(0, n_seqs, mb)):
                ids, attn, cm = self._batch(seqs[s : s + mb])
                lp, ent = self._logps(self.model, ids, attn, cm, want_entropy=True)
                if old[bi] is None:  # one update per batch: the policy that sampled is this one
                    old[bi] = lp.detach()
                    if it == 0:
                        track_mismatch(s, old[bi])
                a = torch.tensor(seq_adv[s : s + mb], device=self.device)
                pl, info = clipped_policy_loss(lp, old[bi], a, alg["eps_low"], alg["eps_high"], alg["dual_clip"])
                tok_loss = pl
                if self.ref is not None:
                    kl = kl_k3(lp, ref[bi])
                    tok_loss = tok_loss + alg["kl_coef"] * kl
                    stats["kl"] += float((kl * cm).sum())
                loss = aggregate(alg["aggregation"], tok_loss, cm, n_seqs=n_seqs, n_tokens=max(1, n_tokens),
                                 max_len=cfg.max_tokens)
                if not torch.isfinite(loss):
                    skipped = "non-finite loss"
                    break
                loss.backward()
                loss_total += loss.item()
                stats["clip_low"] += float((info["clip_low"] * cm).sum())
                stats["clip_high"] += float((info["clip_high"] * cm).sum())
                stats["entropy"] += float((ent * cm).sum())
                stats["tokens"] += float(cm.sum())
            if skipped is None:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
                if not math.isfinite(grad_norm):
                    skipped = "non-finite gradient"
            if skipped is not None:
                self.opt.zero_grad(set_to_none=True)
                break
            self.opt.step()
            self.sched.step()
            stats["loss"] = loss_total
        train_s = time.perf_counter() - tt
        push_s = self._push() if skipped is None else 0.0
        tok = max(1.0, stats["tokens"])
        adv_flat = adv.flatten()
        metrics.update({
            "reward": float(R.mean()), "reward_std": float(R.std()) if R.numel() > 1 else 0.0,
            "accuracy_kept": float(np.mean([sum(c) / len(c) for _, _, c in kept])),
            "adv_mean": float(adv_flat.mean()), "adv_std": float(adv_flat.std()) if adv_flat.numel() > 1 else 0.0,
            "adv_abs_max": float(adv_flat.abs().max()),
            "loss": stats["loss"], "grad_norm": grad_norm, "lr": self.sched.get_last_lr()[0],
            "clip_frac_low": stats["clip_low"] / tok, "clip_frac_high": stats["clip_high"] / tok,
            "kl": stats["kl"] / tok if self.ref is not None else None, "entropy": stats["entropy"] / tok,
            "response_length": float(np.mean(lengths)), "truncation_rate": float(np.mean(truncs)),
            "rollout_logp_abs_diff": float(np.mean(mismatch)) if mismatch else None,
            "time/generate_s": round(gen_s, 3), "time/reward_s": round(reward_s, 3), "time/train_s": round(train_s, 3),
            "time/push_s": round(push_s, 3), "time/step_s": round(time.perf_counter() - t0, 3),
            "tokens_generated": int(sum(lengths)),
        })
        if skipped:
            metrics["skipped"] = skipped
        return metrics

    # ---- evaluation --------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        if not self.eval_prompts:
            return {}
        from dataclasses import replace

        greedy = replace(self.scfg, k=1, temperature=0.0)
        sampled = replace(self.scfg, k=self.cfg.eval_k)
        g_groups, _ = self._generate(self.eval_prompts, "eval-greedy", cfg=greedy)
        s_groups, _ = self._generate(self.eval_prompts, "eval", cfg=sampled)
        _, g_c = self._rewards(g_groups)
        _, s_c = self._rewards(s_groups)
        return {"eval/pass@1_greedy": float(np.mean([c[0] for c in g_c])) if g_c else None,
                f"eval/mean@{self.cfg.eval_k}": float(np.mean([np.mean(c) for c in s_c])) if s_c else None,
                "eval/prompts": len(g_c)}

    # ---- checkpoints -------------------------------------------------------------------------------
    def _latest_checkpoint(self) -> Path | None:
        root = self.out / "checkpoints"
        done = sorted(p for p in root.glob("step_*") if (p / "trainer_state.pt").exists()) if root.exists() else []
        return done[-1] if done else None

    def save(self) -> Path:
        torch = self.torch
        root = self.out / "checkpoints"
        final = root / f"step_{self.step:06d}"
        tmp = root / f".tmp_step_{self.step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        state = {"step": self.step, "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                 "sampler": self.sampler.state_dict(), "python_rng": random.getstate(), "numpy_rng": np.random.get_state(),
                 "torch_rng": torch.get_rng_state(), "bad_in_row": self.bad_in_row,
                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        torch.save(state, tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in sorted(p for p in root.glob("step_*"))[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _load_state(self, ckpt: Path) -> None:
        torch = self.torch
        st = torch.load(ckpt / "trainer_state.pt", weights_only=False)
        self.step = st["step"]
        self.opt.load_state_dict(st["optimizer"])
        self.sched.load_state_dict(st["scheduler"])
        self.sampler.load_state_dict(st["sampler"])
        random.setstate(st["python_rng"])
        np.random.set_state(st["numpy_rng"])
        torch.set_rng_state(st["torch_rng"])
        if st.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(st["cuda_rng"])
        self.bad_in_row = st["bad_in_row"]
        # metrics written after this checkpoint belong to steps that will be run again
        mpath = self.out / "metrics.jsonl"
        if mpath.exists():
            lines = [ln for ln in mpath.read_text().splitlines() if ln and json.loads(ln).get("step", 0) <= self.step]
            mpath.write_text("".join(ln + "\n" for ln in lines))
        self._push()
        log.info("resumed from %s (step %d)", ckpt, self.step)

    # ---- the loop ----------------------------------------------------------------------------------
    def _log(self, m: dict) -> None:
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(m) + "\n")
        if self._tb is not None:
            for k, v in m.items():
                if isinstance(v, int | float) and v is not None:
                    self._tb.add_scalar(k, v, m.get("step", self.step))

    def run(self, stop_after: int | None = None, progress: bool = True) -> list[dict]:
        """Train until ``cfg.steps`` (or ``stop_after`` more steps, for tests); returns this call's metrics."""
        self.setup()
        out = []
        try:
            if self.step == 0 and self.eval_prompts:
                m = {"step": 0, **self.evaluate()}
                self._log(m)
                out.append(m)
            end = self.cfg.steps if stop_after is None else min(self.cfg.steps, self.step + stop_after)
            while self.step < end:
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
                periodic = self.cfg.eval_every and self.step % self.cfg.eval_every == 0
                if self.eval_prompts and (periodic or self.step == self.cfg.steps):
                    m.update(self.evaluate())
                self._log(m)
                out.append(m)
                if progress:
                    print(_line(m), flush=True)
                if self.step % self.cfg.save_every == 0 or self.step == end:
                    self.save()
        finally:
            self.grader.close()
            if self._tb is not None:
                self._tb.close()
        return out


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
