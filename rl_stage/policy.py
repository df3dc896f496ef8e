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
    logits = head(hidden).float()
    if temperature != 1.0:  # x / 1.0 is x: a pass (and its backward) over [tokens x vocabulary] saved
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, -1)
    picked = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    if not want_entropy:
        return picked, None
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return picked, ent


# bytes the fp32 [tokens x vocabulary] tensors of one log-prob pass may take (logits, log-softmax, its gradient: about
# three copies) before the pass is cut into checkpointed chunks (``logprob_chunk=None``)
LOGPROB_BUDGET = 1 << 30
COPIES = 3


def chunk_for(tokens: int, vocab: int, chunk: int | None) -> int:
    """The chunk a pass over ``tokens`` completion tokens uses: ``chunk`` when given; else 0 (one pass) while the pass
    fits ``LOGPROB_BUDGET``, and the largest chunk that fits it otherwise (at least 128 tokens). Chunking recomputes
    the projection in backward: paid only where the memory is needed (a 152k vocabulary, long completions)."""
    if chunk is not None:
        return chunk
    per_token = vocab * 4 * COPIES
    return 0 if tokens * per_token <= LOGPROB_BUDGET else max(128, LOGPROB_BUDGET // per_token)


def _chunked_head_logps(head, hidden, targets, temperature: float, want_entropy: bool, chunk: int | None):
    """``_head_logps`` over ``chunk`` rows at a time (``chunk_for``). With gradients on, each chunk is checkpointed:
    only its hidden rows are kept for the backward pass, which recomputes that chunk's [chunk x vocab] logits, so peak
    memory holds one chunk's logits instead of every token's (several fp32 copies of [tokens x vocab])."""
    vocab = getattr(head, "out_features", None) or (hidden.shape[-1] if isinstance(head, torch.nn.Identity) else 0)
    chunk = chunk_for(hidden.shape[0], vocab, chunk)
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


def ranks(torch) -> int:
    """The number of processes training together (1 outside torch.distributed, or in a one-rank group)."""
    d = torch.distributed
    return d.get_world_size() if d.is_available() and d.is_initialized() else 1


def shared_prefix_hidden(model, input_ids, attn, prompt_lens: list[int]):
    """``model.base_model(input_ids, attn).last_hidden_state[:, :-1]`` where it predicts a completion token (positions
    from each row's last prompt token on; zeros before), with each distinct prompt run through the model once.

    A GRPO group is G completions of one prompt, and a long prompt (a few-shot template) is most of each sequence:
    the distinct prompts go through the model once, in one batch (left-padded, each keeping its own positions), their
    key/value cache is gathered for every row of their group, and the completions of every row run on top of it in a
    second batch. Gradients flow into the prompt pass from every row, so the result and its gradients are those of the
    full pass, up to rounding. Two forwards, whatever the number of groups: large matrix products and one embedding
    gradient. None when no two rows share a prompt (in one process)."""
    B, L = input_ids.shape
    groups: dict[tuple, list[int]] = {}
    for i, P in enumerate(prompt_lens):
        groups.setdefault((P, tuple(input_ids[i, :P].tolist())), []).append(i)
    # nothing shared: one batched pass is cheaper, but not across ranks: every rank must run as many forwards (FSDP
    # gathers a layer's weights in each), and another rank's micro-batch may share its prompts
    spread = ranks(torch) > 1  # the trainer's ranks: a one-rank group (vLLM's, in process) is one process
    if len(groups) == B and not spread:
        return None
    dev = input_ids.device
    keys = list(groups)
    Pm = max(P for P, _ in keys)
    plens = torch.tensor(prompt_lens, device=dev)
    of_row = torch.empty(B, dtype=torch.long, device=dev)  # each row's distinct prompt
    pre_ids = input_ids.new_zeros((len(keys), Pm))
    pre_attn = attn.new_zeros((len(keys), Pm))
    for g, key in enumerate(keys):
        P, r0 = key[0], groups[key][0]
        pre_ids[g, Pm - P :] = input_ids[r0, :P]  # left-padded: every prompt ends at Pm - 1
        pre_attn[g, Pm - P :] = 1
        of_row[groups[key]] = g
    pre = model.base_model(input_ids=pre_ids, attention_mask=pre_attn, position_ids=(pre_attn.cumsum(1) - 1).clamp(min=0),
                           use_cache=True)
    h = pre.last_hidden_state
    out = h.new_zeros((B, L - 1, h.shape[-1]))
    rows = torch.arange(B, device=dev)
    # index_select, not h[of_row]: the backward of indexing with repeated indices adds in no fixed order on CPU (runs
    # would differ in the last bits); index_select's adds in order
    out[rows, plens - 1] = h[:, Pm - 1].index_select(0, of_row)  # the last prompt token predicts the first completion
    n_comp = attn.sum(1) - plens
    # completion token j of row i predicts token P_i + j + 1, for j below its count - 1; a row's last token predicts
    # nothing and is not run. The completions, left-aligned, run on their prompt's cache, at positions that go on
    # from the prompt's
    T = int(n_comp.max()) - 1
    if T <= 0 and not spread:
        return out
    col = torch.arange(max(T, 1), device=dev)
    pos = plens[:, None] + col[None, :]
    keep = col[None, :] < (n_comp - 1)[:, None]
    suf_ids = torch.where(keep, input_ids.gather(1, pos.clamp(max=L - 1)), 0)
    cache = pre.past_key_values
    cache.reorder_cache(of_row)  # each layer's keys and values index_select-ed: a row per completion
    suf = model.base_model(input_ids=suf_ids, attention_mask=torch.cat([pre_attn[of_row], keep.to(attn.dtype)], 1),
                           position_ids=pos, past_key_values=cache, use_cache=True).last_hidden_state
    out[rows[:, None].expand(B, len(col))[keep], pos[keep]] = suf[keep]
    return out


def token_logps(model, input_ids, attn, comp_mask, temperature: float, bf16: bool, device: str, want_entropy: bool = False,
                chunk: int | None = 0, prompt_lens: list[int] | None = None):
    """Per-token log-probs [B, L-1] of the next tokens under the *sampling* distribution, on completion positions.

    The logits are divided by the sampling temperature before the softmax (as TRL and verl do): the rollouts
    were drawn from softmax(logits / T), so ratios, KL and entropy must be of that policy. The vocabulary
    projection runs only where ``comp_mask`` is set (the prompt needs no log-probs), ``chunk`` tokens at a time
    (``_chunked_head_logps``); models that post-process logits (soft-capping) take the full path. ``bf16``
    autocasts the forward; the result is fp32. ``prompt_lens`` (each row's prompt tokens): rows that share a prompt
    share its forward pass (``shared_prefix_hidden``).
    """
    tgt = input_ids[:, 1:]
    sel = comp_mask > 0
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        if getattr(model.config, "final_logit_softcapping", None):
            logits = model(input_ids=input_ids, attention_mask=attn).logits[:, :-1][sel]
            picked, e = _chunked_head_logps(torch.nn.Identity(), logits, tgt[sel], temperature, want_entropy, chunk)
        else:
            hidden = shared_prefix_hidden(model, input_ids, attn, prompt_lens) if prompt_lens else None
            if hidden is None:
                hidden = model.base_model(input_ids=input_ids, attention_mask=attn).last_hidden_state[:, :-1]
            picked, e = _chunked_head_logps(model.get_output_embeddings(), hidden[sel], tgt[sel], temperature,
                                            want_entropy, chunk)
    logp = torch.zeros(tgt.shape, dtype=picked.dtype, device=picked.device).masked_scatter(sel, picked)
    ent = None
    if want_entropy:
        ent = torch.zeros(tgt.shape, dtype=e.dtype, device=e.device).masked_scatter(sel, e)
    return logp, ent


class PolicyModule(torch.nn.Module):
    def __init__(self, lm, temperature: float, bf16: bool, device: str, chunk: int | None,
                 share_prompts: bool = True):
        super().__init__()
        self.lm = lm
        self.temperature, self.bf16, self.device, self.chunk = temperature, bf16, device, chunk
        self.share_prompts = share_prompts

    def forward(self, input_ids, attn, comp_mask, want_entropy: bool = False, prompt_lens: list[int] | None = None):
        return token_logps(self.lm, input_ids, attn, comp_mask, self.temperature, self.bf16, self.device, want_entropy,
                           self.chunk, prompt_lens if self.share_prompts else None)
