"""The policy's log-probs: one forward that gives per-token log-probs and entropies of the sampling policy.

``PolicyModule`` wraps a causal LM so that ``token_logps`` is the forward of one module: under FSDP2
(``fully_shard`` on each decoder layer, then on this module) the root's parameters (embeddings, final norm,
a tied head) are gathered for the whole computation, the head's projection included.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _head_logps(head, hidden, targets, temperature: float, want_entropy: bool):
    """Log-probs of ``targets`` [N] under softmax(head(hidden) / T) for hidden [N, H], and (no-grad) entropies."""
    logp_all = torch.log_softmax(head(hidden).float() / temperature, -1)
    picked = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    if not want_entropy:
        return picked, None
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return picked, ent


def _chunked_head_logps(head, hidden, targets, temperature: float, want_entropy: bool, chunk: int):
    """``_head_logps`` over ``chunk`` rows at a time. With gradients on, each chunk is checkpointed: only its
    hidden rows are kept for the backward pass, which recomputes that chunk's [chunk x vocab] logits, so peak
    memory holds one chunk's logits instead of every token's (several fp32 copies of [tokens x vocab])."""
    if chunk <= 0 or hidden.shape[0] <= chunk:
        return _head_logps(head, hidden, targets, temperature, want_entropy)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    picked, ents = [], []
    for a in range(0, hidden.shape[0], chunk):
        h, t = hidden[a : a + chunk], targets[a : a + chunk]
        if grad:
            p, e = checkpoint(_head_logps, head, h, t, temperature, want_entropy, use_reentrant=False)
        else:
            p, e = _head_logps(head, h, t, temperature, want_entropy)
        picked.append(p)
        if e is not None:
            ents.append(e)
    return torch.cat(picked), (torch.cat(ents) if want_entropy else None)


def token_logps(model, input_ids, attn, comp_mask, temperature: float, bf16: bool, device: str, want_entropy: bool = False,
                chunk: int = 0):
    """Per-token log-probs [B, L-1] of the next tokens under the *sampling* distribution, on completion positions.

    The logits are divided by the sampling temperature before the softmax (as TRL and verl do): the rollouts
    were drawn from softmax(logits / T), so ratios, KL and entropy must be of that policy. The vocabulary
    projection runs only where ``comp_mask`` is set (the prompt needs no log-probs), ``chunk`` tokens at a time
    (``_chunked_head_logps``); models that post-process logits (soft-capping) take the full path. ``bf16``
    autocasts the forward; the result is fp32.
    """
    tgt = input_ids[:, 1:]
    sel = comp_mask > 0
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        if getattr(model.config, "final_logit_softcapping", None):
            logits = model(input_ids=input_ids, attention_mask=attn).logits[:, :-1][sel]
            picked, e = _chunked_head_logps(torch.nn.Identity(), logits, tgt[sel], temperature, want_entropy, chunk)
        else:
            hidden = model.base_model(input_ids=input_ids, attention_mask=attn).last_hidden_state[:, :-1]
            picked, e = _chunked_head_logps(model.get_output_embeddings(), hidden[sel], tgt[sel], temperature,
                                            want_entropy, chunk)
    logp = torch.zeros(tgt.shape, dtype=picked.dtype, device=picked.device).masked_scatter(sel, picked)
    ent = None
    if want_entropy:
        ent = torch.zeros(tgt.shape, dtype=e.dtype, device=e.device).masked_scatter(sel, e)
    return logp, ent


class PolicyModule(torch.nn.Module):
    def __init__(self, lm, temperature: float, bf16: bool, device: str, chunk: int):
        super().__init__()
        self.lm = lm
        self.temperature, self.bf16, self.device, self.chunk = temperature, bf16, device, chunk

    def forward(self, input_ids, attn, comp_mask, want_entropy: bool = False):
        return token_logps(self.lm, input_ids, attn, comp_mask, self.temperature, self.bf16, self.device, want_entropy,
                           self.chunk)
