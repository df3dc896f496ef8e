"""The policy's log-probs with a group's prompt run once (rl_stage.policy.shared_prefix_hidden): the same log-probs,
entropies and gradients as the full pass, on the real SmolLM2 and the few-shot template."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="engines extra not installed")]


def test_shared_prompts_give_the_full_pass_log_probs_and_gradients():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curate.difficulty import templates
    from curate.difficulty.models import resolve_model
    from rl_stage.policy import shared_prefix_hidden, token_logps

    path, _ = resolve_model(None)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows, plens = [], []
    for a in (3, 7):  # two groups of three completions of different lengths, plus one row of its own
        pid = tok(templates.render("fewshot", f"What is ${a} + {a * 3}$?", tok), add_special_tokens=False)["input_ids"]
        for j in range(3):
            rows.append(pid + tok(f" So \\boxed{{{j * 11}}}" + " x" * j, add_special_tokens=False)["input_ids"])
            plens.append(len(pid))
    alone = tok("What is 1 + 1?", add_special_tokens=False)["input_ids"]
    rows.append(alone + tok(" 2", add_special_tokens=False)["input_ids"])
    plens.append(len(alone))
    L = max(map(len, rows))
    ids = torch.zeros((len(rows), L), dtype=torch.long)
    attn, cm = torch.zeros_like(ids), torch.zeros(len(rows), L - 1)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = torch.tensor(r), 1
        cm[i, plens[i] - 1 : len(r) - 1] = 1

    def run(prompt_lens):
        model.zero_grad()
        lp, ent = token_logps(model, ids, attn, cm, 0.7, False, "cpu", True, 0, prompt_lens)
        (lp * cm).sum().backward()
        return lp.detach(), ent, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    assert len(set(plens)) == 3  # prompts of three lengths: the batched prompt pass is left-padded
    calls = []
    hook = model.base_model.register_forward_hook(lambda *a: calls.append(1))
    full, shared = run(None), run(plens)
    hook.remove()
    assert len(calls) == 3  # the full pass once; shared: every distinct prompt in one pass, every completion in one
    assert float((full[0] - shared[0]).abs().max()) < 1e-4 and float((full[1] - shared[1]).abs().max()) < 1e-4
    assert float((full[2] - shared[2]).norm() / full[2].norm()) < 1e-4
    assert float((full[0] * cm).abs().sum()) > 1  # real log-probs, not zeros
    # every prompt distinct: no sharing, the batched pass
    assert shared_prefix_hidden(model, ids[[0, 3, 6]], attn[[0, 3, 6]], [plens[0], plens[3], plens[6]]) is None
