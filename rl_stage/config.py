"""The trainer's settings: ``TrainConfig`` (every default cites its source), its checks, and the algorithm it resolves
to (``resolved``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curate.core.errors import GradusError

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from rl_stage.algorithms import Algorithm


class TrainError(GradusError):
    pass


SAMPLERS = ("signal", "uniform", "kimi", "stages")


@dataclass(frozen=True)
class TrainConfig:
    data: list[str] = field(default_factory=list, metadata={"path": True})  # gradus export folders (parquet) or scored shards
    out: str = "runs/train"  # run folder: metrics.jsonl, checkpoints/, config.json
    model: str | None = None  # None: the bundled SmolLM2-135M-Instruct
    preset: str = "dapo"  # grpo | dr_grpo | dapo | rloo (rl_stage.algorithms.PRESETS)
    # algorithm overrides (None: the preset's value)
    advantage: str | None = None
    aggregation: str | None = None  # loss aggregation; None: the preset's (gradus list presets)
    eps_low: float | None = None  # PPO clip below 1 - eps_low; None: the preset's (0.2, PPO)
    eps_high: float | None = None  # PPO clip above 1 + eps_high; None: the preset's (DAPO clip-higher: 0.28)
    dual_clip: float | None = None  # dual-clip bound c > 1 on negative advantages (Ye et al. 2020); None: the preset's
    # (dapo: 10, verl's DAPO recipe clip_ratio_c; others off)
    kl_coef: float | None = None  # k3 KL weight to the reference model; None: the preset's (grpo 0.04, others 0)
    dynamic_sampling: bool | None = None  # DAPO's dynamic sampling; None: the preset's
    overlong_shaping: bool | None = None  # DAPO's soft overlong penalty; None: the preset's
    overlong_buffer: int | None = None  # None: max_tokens // 5 (DAPO: 4096 of 20480)
    mask_truncated: bool | None = None  # drop truncated completions from the loss; None: the preset's (off)
    wrong_reward: float | None = None  # reward of a wrong completion (a right one gets 1); DAPO: -1, others 0
    format_reward: float = 0.0  # added when the completion has a \boxed{} answer
    dynamic_sampling_metric: str = "acc"  # acc | reward: what must differ inside a group (DAPO and verl: acc)
    # rollouts
    rollout_backend: str = "vllm"  # vllm | hf
    template: str | None = None  # chat | qwen_math | r1 | none | fewshot (unset: the template the rows were scored with)
    # as gradus estimate and export record it; chat where nothing records one
    prompts_per_step: int = 8  # prompts (groups) per rollout step (our default for small machines; DAPO: 512)
    group_size: int = 8  # completions per prompt (Dr. GRPO: 8)
    max_tokens: int = 256  # completion budget per rollout (our default; DAPO: 20480)
    max_prompt_tokens: int = 512  # longer prompts are skipped (counted as prompts_too_long)
    temperature: float = 1.0  # DAPO and Dr. GRPO sample at 1.0
    top_p: float = 1.0  # nucleus for rollouts (DAPO, Dr. GRPO: 1.0)
    max_gen_batches: int = 10  # dynamic sampling: full generation batches per step at most (verl's DAPO recipe: 10);
    # 0: no limit. Kept groups past prompts_per_step are dropped; a step never trains on fewer
    screen: int = 0  # screened groups (rl_stage.screening): completions per candidate prompt first, the rest of the
    # group only where it will likely carry a signal; 0: off (every drawn prompt gets its whole group). SPEED-RL: 4 of 16
    screen_min_chance: float = 0.5  # screen: go on when the chance that the whole group is not all equal is at least this
    screen_candidates: float = 2.0  # screen: candidates drawn per group still missing in a round, at most (the signal
    # sampler draws fewer: its refill rule stops where the candidates' chances cover the groups missing); our choice
    screen_carry: int = 1  # screen: steps a screened candidate that was not needed may wait for a later step; 0: none
    short_batch: str = "error"  # still short after max_gen_batches: error (verl raises) | skip (no update, logged)
    rollout_batch_prompts: int | None = None  # hf rollouts: prompts per generate call; None: a rank's whole round
    vllm_gpu_memory_utilization: float = 0.3  # GPU memory share of the colocated vLLM (TRL colocate 0.3, verl 0.5)
    vllm_sleep: bool | None = None  # vLLM sleep mode: free its weights and KV cache while updating; None: on GPU
    # vLLM's own engine arguments for the rollout engine (e.g. {max_model_len = 4096, enforce_eager = true}), over
    # gradus's; --vllm-engine-args KEY=VALUE (repeatable). Checked against vLLM's names when the engine starts
    vllm_engine_args: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"  # auto | cuda | cpu. auto: CUDA when torch sees a GPU (said in one line when not); cuda without
    # one, or a GPU-only setting (vllm_sleep, tensor_parallel_size, ...) without one, is an error, never a CPU run
    logprob_chunk: int | None = None  # completion tokens per vocabulary projection (recomputed in backward); 0: all at
    # once; None: a memory budget decides (rl_stage.policy.LOGPROB_BUDGET: one pass while [tokens x vocab] fits it)
    # optimization
    steps: int = 100
    lr: float = 1e-6  # DAPO: constant 1e-6 after warm-up
    warmup_steps: int = 0  # rollout steps of linear warm-up; our default none (short runs); DAPO warms up over 20
    weight_decay: float = 0.1  # DAPO
    adam_betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas (torch's defaults)
    max_grad_norm: float = 1.0  # DAPO
    micro_batch_size: int = 8  # sequences per forward/backward
    mini_batches: int | None = None  # optimizer updates per rollout batch (TRL steps_per_generation, verl
    # ppo_mini_batch_size); None: the preset's; at most one per group. Updates after the first see ratio != 1.
    num_iterations: int = 1  # epochs over the rollout batch (mu in GRPO)
    seed: int = 0  # seed of sampling, prompt order and initialization
    bf16: bool | None = None  # None: on GPUs that compute bf16 (compute capability 8.0+), fp32 elsewhere. bf16 compute
    # (autocast; FSDP2 bf16 all-gathers, fp32 reduction); master weights and AdamW stay fp32
    gradient_checkpointing: bool | None = None  # None: on GPU only
    max_bad_steps: int = 3  # steps with a non-finite loss or gradient in a row that stop the run (our choice)
    # prompt sampling (rl_stage.samplers)
    sampler: str = "signal"  # prompt sampler: signal | uniform | kimi | stages (docs/trainer.md: prompt sampling)
    # signal: Thompson draws where a group carries a learning signal, the offline estimate as prior (rl_stage.samplers);
    # uniform: one pool, every prompt alike; kimi: Kimi k1.5's easy-to-hard stages with weights max(floor, 1 - s);
    # stages: the export's stages easy to hard, uniform inside each
    prior_strength: float = 4.0  # signal: samples an offline estimate is worth at most (our choice)
    offline_prior: bool = True  # signal: start from the offline estimates (False: every prompt flat, Beta(1, 1))
    forget_sd: float = 0.1  # signal: per-step sd of each prompt's own drift in log-odds (evidence fades; our choice)
    drift_sd: float = 0.2  # signal: per-step sd of the policy's ability, shared by every prompt (0: fixed; our choice)
    sharpen_sd: float = 0.1  # signal: per-step sd of the policy's log sharpness (pass rates going to 0 or 1; our choice)
    signal: str = "auto"  # signal: survival (1 - p^G - (1-p)^G) | variance (p(1-p)) | auto: survival under dynamic
    # sampling, variance otherwise
    stage_steps: int | None = None  # kimi, stages: steps per stage (None: split steps evenly over stages)
    advance_at: float | None = None  # kimi, stages: or advance once the stage's running accuracy reaches this
    curriculum_sampling: str = "weighted"  # kimi, stages, uniform: weighted: batches drawn with the weights (Kimi's
    # sampling) | epoch: each prompt once an epoch, the weights deciding only the order
    weight_floor: float = 0.05  # kimi: floor of the max(floor, 1 - s) sampling weight (our choice)
    budget_completions: int | None = None  # stop once this many completions were generated (dropped groups counted);
    # steps stays an upper bound
    # evaluation, logging, checkpoints
    eval_data: list[str] = field(default_factory=list, metadata={"path": True})  # held-out export folders
    eval_every: int = 0  # 0: only before the first and after the last step
    eval_every_completions: int = 0  # also evaluate after the step that crosses each multiple of this many completions
    eval_at_start: bool = True  # evaluate before the first step
    eval_prompts: int = 32  # held-out prompts evaluated (drawn from every eval_data folder)
    eval_k: int = 4  # mean@k at the rollout temperature, next to greedy pass@1
    save_every: int = 10  # steps between checkpoints
    keep_checkpoints: int = 2  # checkpoints kept (older ones are deleted)
    tensorboard: bool = False  # also write TensorBoard event files (pip install tensorboard)

    @classmethod
    def load(cls, path: Path, **overrides) -> TrainConfig:
        """From a JSON/TOML file (names and types checked, paths relative to the file), then ``overrides``."""
        from dataclasses import asdict

        from curate.core.config import from_dict, load_file

        from_file = from_dict(cls, load_file(path), where=str(path), base_dir=Path(path).resolve().parent)
        given = {k: v for k, v in overrides.items() if v is not None}  # command-line paths: relative to the cwd
        return from_dict(cls, {**asdict(from_file), **given}, where="options") if given else from_file

    def resolved(self) -> Algorithm:
        """The algorithm after applying the preset: each override given here, else the preset's value."""
        from rl_stage.algorithms import Algorithm, preset

        p = preset(self.preset)
        return Algorithm(
            advantage=self.advantage or p.advantage, aggregation=self.aggregation or p.aggregation,
            eps_low=p.eps_low if self.eps_low is None else self.eps_low,
            eps_high=p.eps_high if self.eps_high is None else self.eps_high,
            dual_clip=p.dual_clip if self.dual_clip is None else self.dual_clip,
            kl_coef=p.kl_coef if self.kl_coef is None else self.kl_coef,
            dynamic_sampling=p.dynamic_sampling if self.dynamic_sampling is None else self.dynamic_sampling,
            overlong_shaping=p.overlong_shaping if self.overlong_shaping is None else self.overlong_shaping,
            overlong_buffer=self.overlong_buffer if self.overlong_buffer is not None else max(1, self.max_tokens // 5),
            mask_truncated=p.mask_truncated if self.mask_truncated is None else self.mask_truncated,
            wrong_reward=p.wrong_reward if self.wrong_reward is None else self.wrong_reward,
            mini_batches=p.mini_batches if self.mini_batches is None else self.mini_batches,
            dynamic_sampling_metric=self.dynamic_sampling_metric, cite=p.cite)

    def __post_init__(self) -> None:
        self._validate()

    def check(self) -> None:
        """Ready to train: the settings were checked at construction; a run needs data too (a flow sets it)."""
        if not self.data:
            raise TrainError("no training data: set `data` to gradus export folders")

    def _validate(self) -> None:
        """Every setting in its range, checked at construction (``data`` may still be empty: see ``check``)."""
        import math

        for name in ("lr", "max_grad_norm", "temperature", "weight_decay", "format_reward", "prior_strength"):
            if not math.isfinite(getattr(self, name)):
                raise TrainError(f"{name} must be a finite number, got {getattr(self, name)}")
        for name in ("lr", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise TrainError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("weight_decay", "warmup_steps", "format_reward"):
            if getattr(self, name) < 0:
                raise TrainError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.top_p <= 1:
            raise TrainError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.rollout_backend not in ("vllm", "hf"):
            raise TrainError(f"rollout_backend must be vllm or hf, not {self.rollout_backend!r}")
        for name in ("prompts_per_step", "group_size", "max_tokens", "steps", "micro_batch_size", "num_iterations"):
            if getattr(self, name) < 1:
                raise TrainError(f"{name} must be >= 1")
        if self.dynamic_sampling_metric not in ("acc", "reward"):
            raise TrainError(f"dynamic_sampling_metric must be acc or reward, not {self.dynamic_sampling_metric!r}")
        if self.mini_batches is not None and self.mini_batches < 1:
            raise TrainError("mini_batches must be >= 1")
        if self.temperature <= 0:
            raise TrainError("temperature must be > 0: GRPO needs sampled groups (log-probs are taken at that temperature)")
        if self.group_size < 2:
            raise TrainError("group_size must be >= 2: group baselines need at least two completions")
        if self.max_gen_batches < 0:
            raise TrainError("max_gen_batches must be >= 0 (0: no limit)")
        if self.screen and not 1 <= self.screen < self.group_size:
            raise TrainError(f"screen must be 0 (off) or 1 .. group_size - 1 ({self.group_size - 1}), got {self.screen}")
        if not (math.isfinite(self.screen_min_chance) and 0 <= self.screen_min_chance <= 1):
            raise TrainError(f"screen_min_chance must be in [0, 1], got {self.screen_min_chance}")
        if not (math.isfinite(self.screen_candidates) and self.screen_candidates >= 1):
            raise TrainError(f"screen_candidates must be >= 1 (candidates per missing group), got {self.screen_candidates}")
        if self.screen_carry < 0:
            raise TrainError(f"screen_carry must be >= 0 (steps a screened candidate may wait), got {self.screen_carry}")
        if self.short_batch not in ("error", "skip"):
            raise TrainError(f"short_batch must be error or skip, not {self.short_batch!r}")
        from rl_stage.samplers import GROUP_SIGNALS, CurriculumSampler

        if self.sampler not in SAMPLERS:
            raise TrainError(f"sampler must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        if self.signal not in ("auto", *GROUP_SIGNALS):
            raise TrainError(f"signal must be auto, {' or '.join(GROUP_SIGNALS)}, not {self.signal!r}")
        if min(self.prior_strength, self.forget_sd, self.drift_sd, self.sharpen_sd) < 0:
            raise TrainError("prior_strength, forget_sd, drift_sd and sharpen_sd must be >= 0")
        if self.budget_completions is not None and self.budget_completions < 1:
            raise TrainError("budget_completions must be >= 1 (or left out)")
        if self.eval_every_completions < 0:
            raise TrainError("eval_every_completions must be >= 0 (0: off)")
        if self.curriculum_sampling not in CurriculumSampler.MODES:
            raise TrainError(f"curriculum_sampling must be one of {', '.join(CurriculumSampler.MODES)}, "
                             f"not {self.curriculum_sampling!r}")
        from curate.difficulty.devices import DEVICES

        if self.device not in DEVICES:
            raise TrainError(f"device must be one of {', '.join(DEVICES)}, not {self.device!r}")
        if "tensor_parallel_size" in self.vllm_engine_args and self.vllm_engine_args["tensor_parallel_size"] != 1:
            raise TrainError("vllm_engine_args.tensor_parallel_size: the colocated rollout engine runs one per rank "
                             "(data parallel under torchrun); tensor parallel rollouts are not supported")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise TrainError("vllm_gpu_memory_utilization must be in (0, 1]")
        if self.logprob_chunk is not None and self.logprob_chunk < 0:
            raise TrainError("logprob_chunk must be >= 0 (0: one pass)")
        if self.rollout_batch_prompts is not None and self.rollout_batch_prompts < 1:
            raise TrainError("rollout_batch_prompts must be >= 1")
