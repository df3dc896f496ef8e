"""The policy update of one rollout step: group advantages, then ``num_iterations`` epochs of one optimizer step per
mini-batch, micro-batches accumulated, on one process or on FSDP2 shards (``rl_stage.distributed``).

Loss, advantages, clipping, KL and aggregation are ``rl_stage.algorithms``; log-probs are the trainer's own
(``rl_stage.policy``), the engine's kept only to report the rollout/trainer mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rl_stage.distributed import ProcessGroup

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from rl_stage.algorithms import Algorithm
    from rl_stage.rollout import Group


@dataclass
class Seq:
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
class UpdateStats:
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


class Updater:
    """Updates ``policy`` with ``opt`` on the groups a step keeps (``ref_policy``: the frozen reference for KL)."""

    def __init__(self, torch, cfg, alg: Algorithm, pg: ProcessGroup, *, policy, ref_policy, opt, pad_id: int,
                 device: str):
        self.torch, self.cfg, self.alg, self.pg = torch, cfg, alg, pg
        self.policy, self.ref_policy, self.opt = policy, ref_policy, opt
        self.pad_id, self.device = pad_id, device

    def batch(self, seqs: list[Seq]):
        """Right-padded input ids, attention and completion masks (aligned to next-token targets)."""
        torch = self.torch
        L = max(len(q.prompt) + len(q.completion) for q in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), L), dtype=torch.long)
        cm = torch.zeros((len(seqs), L - 1), dtype=torch.float32)
        for i, q in enumerate(seqs):
            n = len(q.prompt) + len(q.completion)
            ids[i, :n] = torch.tensor(q.prompt + q.completion)
            attn[i, :n] = 1
            if q.use:
                cm[i, len(q.prompt) - 1 : n - 1] = 1.0
        return ids.to(self.device), attn.to(self.device), cm.to(self.device)

    def sequences(self, kept: list[Group]) -> tuple[list[Seq], tuple[Any, Any]]:
        """Group advantages, then one ``Seq`` per completion (groups stay contiguous)."""
        from rl_stage import algorithms

        R = self.torch.tensor([g.rewards for g in kept], dtype=self.torch.float32)
        adv = algorithms.ADVANTAGES[self.alg.advantage](R)
        seqs = []
        for gi, g in enumerate(kept):
            for j, c in enumerate(g.completions):
                seqs.append(Seq(gi, list(g.prompt_ids), list(c.token_ids), float(adv[gi, j]),
                                not (self.alg.mask_truncated and c.truncated), c.logprobs, c.n_tokens, c.truncated))
        return seqs, (R, adv)

    def mini_batches(self, seqs: list[Seq]) -> list[list[int]]:
        """Sequence positions of each mini-batch: ``mini_batches`` slices of whole groups (at most one per group)."""
        n_groups = seqs[-1].group + 1
        n = max(1, min(self.alg.mini_batches, n_groups))
        bounds = np.array_split(np.arange(n_groups), n)
        return [[i for i, q in enumerate(seqs) if q.group in set(b.tolist())] for b in bounds]

    def micro(self, seqs: list[Seq], minis: list[list[int]]):
        """(mini-batch index, micro-batch index, sequences) of this rank, in update order: the same grid for every
        pass. A rank takes every world-th sequence of a mini-batch; every rank runs the same number of
        micro-batches (FSDP's collectives need it), a rank with nothing left runs one sequence with an empty mask."""
        mb = self.cfg.micro_batch_size
        for m, mini in enumerate(minis):
            share = mini[self.pg.rank :: self.pg.world]
            n_micro = math.ceil(math.ceil(len(mini) / self.pg.world) / mb)
            for s in range(n_micro):
                part = [seqs[i] for i in share[s * mb : (s + 1) * mb]]
                if not part:
                    part = [replace(seqs[mini[0]], use=False)]
                yield m, s, part

    def reference_passes(self, seqs: list[Seq], minis: list[list[int]], need_old: bool) -> tuple[dict, dict, list[float]]:
        """Log-probs before any update: the sampling policy's (when a later update needs a ratio against it)
        and the reference model's (KL); and the rollout/trainer mismatch on unmasked sequences."""
        torch = self.torch
        old: dict[tuple[int, int], Any] = {}
        ref: dict[tuple[int, int], Any] = {}
        mismatch: list[float] = []
        if not need_old and self.ref_policy is None:
            return old, ref, mismatch
        with torch.no_grad():
            for m, s, part in self.micro(seqs, minis):
                ids, attn, cm = self.batch(part)
                plens = [len(q.prompt) for q in part]
                if need_old:
                    old[m, s] = self.policy(ids, attn, cm, prompt_lens=plens)[0]
                    mismatch += self.mismatch(part, old[m, s])
                if self.ref_policy is not None:
                    ref[m, s] = self.ref_policy(ids, attn, cm, prompt_lens=plens)[0]
        return old, ref, mismatch

    def mismatch(self, part: list[Seq], lp) -> list[float]:
        out = []
        for i, q in enumerate(part):
            if q.engine_logp and q.use:
                p0 = len(q.prompt) - 1
                t = lp[i, p0 : p0 + len(q.engine_logp)].detach().float().cpu()
                out.append(float((t - self.torch.tensor(q.engine_logp)).abs().mean()))
        return out

    def update(self, seqs: list[Seq]) -> UpdateStats:
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

        minis = self.mini_batches(seqs)
        need_old = len(minis) > 1 or cfg.num_iterations > 1
        old, ref, mismatch = self.reference_passes(seqs, minis, need_old)
        st = UpdateStats()
        self.policy.train()
        sums = np.zeros(5)  # clip_low, clip_high, kl, entropy, tokens: this rank's
        for epoch in range(cfg.num_iterations):
            for m, mini in enumerate(minis):
                n_seqs = len(mini)
                n_tokens = max(1, sum(len(seqs[i].completion) for i in mini if seqs[i].use))
                self.opt.zero_grad(set_to_none=True)
                loss_total, bad = 0.0, False
                for _, s, part in self.micro(seqs, [mini]):
                    ids, attn, cm = self.batch(part)
                    lp, ent = self.policy(ids, attn, cm, want_entropy=True, prompt_lens=[len(q.prompt) for q in part])
                    if need_old:
                        old_lp = old[m, s]
                    else:  # one update per batch: the policy that sampled is this one
                        old_lp = lp.detach()
                        if epoch == 0:
                            mismatch += self.mismatch(part, old_lp)
                    a = torch.tensor([q.advantage for q in part], device=self.device)
                    pl, info = algorithms.clipped_policy_loss(lp, old_lp, a, alg.eps_low, alg.eps_high, alg.dual_clip)
                    tok_loss = pl
                    if self.ref_policy is not None:
                        kl = algorithms.kl_k3(lp, ref[m, s])
                        tok_loss = tok_loss + alg.kl_coef * kl
                        sums[2] += float((kl * cm).sum())
                    loss = algorithms.aggregate(alg.aggregation, tok_loss, cm, n_seqs=n_seqs, n_tokens=n_tokens,
                                                max_len=cfg.max_tokens)
                    if not torch.isfinite(loss):
                        bad = True
                        if self.pg.world == 1:
                            break
                    (loss * self.pg.world).backward()
                    loss_total += loss.item()
                    with torch.no_grad():
                        dev = ((lp - old_lp).exp() - 1).abs() * cm
                        st.ratio_dev_max = max(st.ratio_dev_max, float(dev.max()) if dev.numel() else 0.0)
                    sums[0] += float((info["clip_low"] * cm).sum())
                    sums[1] += float((info["clip_high"] * cm).sum())
                    sums[3] += float((ent * cm).sum())
                    sums[4] += float(cm.sum())
                bad_any, loss_total = self.pg.reduce([float(bad), loss_total])
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
        st.clip_low, st.clip_high, st.kl, st.entropy, st.tokens = self.pg.reduce(sums.tolist())
        st.ratio_dev_max = self.pg.reduce([st.ratio_dev_max], op="max")[0]
        st.mismatch = [x for part in self.pg.gather(mismatch) for x in part]
        return st
