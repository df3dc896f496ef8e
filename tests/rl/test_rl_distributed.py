"""Data parallel GRPO on torch.distributed: FSDP2 over 2 ranks (gloo on CPU, under torchrun through
``gradus train --nproc-per-node 2``) against one process on the same global batch, and a sharded resume.

Each rank draws the same global batch, rolls out its share with its own copy of the model (transformers,
one prompt per generate call, samples seeded by the prompt's place in the global batch), and every rank
gets every group; the loss of a mini-batch is normalized by the global token count and FSDP averages the
ranks' gradients, so the weights after 2 steps must equal one process's to fp32 round-off."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_easy_sums

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="engines extra not installed")]

GRADUS = str(Path(sys.executable).parent / "gradus")


def _train(config: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    p = subprocess.run([GRADUS, "train", str(config), "--quiet", *args], capture_output=True, text=True, env=env,
                       cwd=config.parent)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]


def _weights(out: Path, step: int = 2):
    from safetensors.torch import load_file

    return load_file(out / "checkpoints" / f"step_{step:06d}" / "model.safetensors")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _device() -> str:
    """Two ranks need two GPUs (one each); on a machine with fewer both runs compute on the CPU (gloo)."""
    import torch

    return "cuda" if torch.cuda.device_count() >= 2 else "cpu"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from curate.select.export import ExportConfig, export

    d = tmp_path_factory.mktemp("dist")
    export([write_easy_sums(d / "scored")], d / "export", ExportConfig())
    base = dict(data=[str(d / "export")], eval_data=[str(d / "export")], eval_prompts=4, eval_k=2, rollout_backend="hf",
                template="fewshot", preset="dapo", dynamic_sampling=False, mini_batches=2, prompts_per_step=4, group_size=4,
                max_tokens=32, steps=2, save_every=1, keep_checkpoints=1, lr=1e-5, micro_batch_size=3, seed=1,
                rollout_batch_prompts=1, bf16=False, device=_device())
    for name in ("one", "two", "half"):
        (d / f"{name}.json").write_text(json.dumps({**base, "out": str(d / name), **({"steps": 1} if name == "half" else {})}))
    _train(d / "one.json")
    _train(d / "two.json", "--nproc-per-node", "2")
    return d


def test_two_ranks_screen_as_one_process_does(runs):
    """Screened groups under torchrun: every rank gets every screen back, so every rank continues the same candidates,
    and the run makes the decisions, counts and updates of one process."""
    base = json.loads((runs / "one.json").read_text())
    for name in ("screen_one", "screen_two"):
        (runs / f"{name}.json").write_text(json.dumps({**base, "out": str(runs / name), "dynamic_sampling": True,
                                                       "screen": 2, "short_batch": "skip", "max_gen_batches": 2,
                                                       "eval_prompts": 0}))
    _train(runs / "screen_one.json")
    _train(runs / "screen_two.json", "--nproc-per-node", "2")
    keys = ("groups_generated", "screened_out", "screens_carried", "screen_completions", "completions",
            "completions_trained", "groups", "dropped_groups", "reward", "tokens_generated", "skipped")
    m1, m2 = _lines(runs / "screen_one" / "metrics.jsonl"), _lines(runs / "screen_two" / "metrics.jsonl")
    assert [[m.get(k) for k in keys] for m in m1] == [[m.get(k) for k in keys] for m in m2]
    assert sum(m["screen_completions"] for m in m1) > 0
    for a, b in zip(m1, m2, strict=True):
        if a.get("loss") is not None:
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-7)


def test_two_ranks_train_the_weights_of_one_process_on_the_same_global_batch(runs):
    from safetensors.torch import load_file

    from curate.difficulty.models import resolve_model

    one, two = _weights(runs / "one"), _weights(runs / "two")
    assert one.keys() == two.keys()  # a plain model folder (the tied head saved once)
    base = load_file(Path(resolve_model(None)[0]) / "model.safetensors")
    moved = max(float((one[k] - base[k]).abs().max()) for k in one)
    apart = max(float((one[k] - two[k]).abs().max()) for k in one)
    assert moved > 1e-5  # it trained: two steps of AdamW at lr 1e-5
    assert apart < 0.05 * moved, (apart, moved)  # fp32 round-off of other micro-batch shapes, not another batch
    m1, m2 = _lines(runs / "one" / "metrics.jsonl"), _lines(runs / "two" / "metrics.jsonl")
    assert [m["step"] for m in m2] == [0, 1, 2]
    for a, b in zip(m1[1:], m2[1:], strict=True):  # the same groups, rewards and losses
        assert (a["reward"], a["groups"], a["tokens_generated"]) == (b["reward"], b["groups"], b["tokens_generated"])
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-7)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    assert any(m["grad_norm"] for m in m1[1:])
    # evaluation split over the ranks: the same prompts and the same verdicts, one line each, written once
    e1, e2 = _lines(runs / "one" / "eval.jsonl"), _lines(runs / "two" / "eval.jsonl")
    assert len(e1) == 8 and e1 == e2
    assert json.loads((runs / "two" / "config.json").read_text())["world_size"] == 2


def test_a_two_rank_run_resumes_from_its_sharded_checkpoint_exactly(runs):
    _train(runs / "half.json", "--nproc-per-node", "2")
    ck = runs / "half" / "checkpoints" / "step_000001"
    assert (ck / "optimizer").is_dir() and (ck / "rng_rank1.pt").exists()  # AdamW's state as DCP shards
    _train(runs / "half.json", "--nproc-per-node", "2", "--resume", "--steps", "2")
    a, b = _weights(runs / "two"), _weights(runs / "half")
    assert all((a[k] == b[k]).all() for k in a)

    def strip(name):  # the first half's last step also evaluated (its run ended there): compare the training figures
        rows = _lines(runs / name / "metrics.jsonl")
        return [{k: v for k, v in m.items() if not k.startswith(("time/", "eval/"))} for m in rows]

    assert strip("two") == strip("half")
