"""Exports that other trainers read as they are (TRL, verl, OpenRLHF), and the reward function that goes with them."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import write_easy_sums

from curate.select.export import ExportConfig, export
from data_cards.render import write_card
from rl_stage.rewards import compute_score, math_reward


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    d = tmp_path_factory.mktemp("tx")
    write_easy_sums(d / "scored")
    return d


def test_reward_function_grades_as_gradus_does():
    # TRL hands conversational completions as lists of messages, standard ones as strings
    got = math_reward([[{"role": "assistant", "content": "so \\boxed{42}"}], "The answer is $7$.", "3 + 4 = 7", "\\boxed{8}"],
                      answer=["42", "7", "7", "9"], prompts=None)
    assert got == [1.0, 1.0, 0.0, 0.0]  # an unboxed, unanchored last number is not an answer
    # verl calls compute_score with keywords
    assert compute_score(data_source="gradus/synthetic", solution_str="\\boxed{\\frac{1}{2}}", ground_truth="0.5",
                         extra_info={"index": 0}) == 1.0
    assert compute_score("gradus/synthetic", "no idea", "5") == 0.0


def test_verl_export_has_the_fields_rlhfdataset_and_the_reward_manager_read(scored):
    import datasets
    from transformers import AutoTokenizer

    from curate.difficulty.models import resolve_model

    m = export([scored / "scored"], scored / "verl", ExportConfig(format="verl", curriculum=True))
    write_card(scored / "verl")  # as gradus export and the flow do after the stage
    files = sorted(str(p) for p in (scored / "verl").glob("stage_*/data/*.parquet"))
    assert m.rows_kept == 12 and files
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert set(ds.column_names) >= {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    tok = AutoTokenizer.from_pretrained(resolve_model(None)[0])
    for i, row in enumerate(ds):
        assert isinstance(row["data_source"], str) and row["ability"] == "math"
        assert row["reward_model"]["style"] == "rule" and row["reward_model"]["ground_truth"]
        assert [t["role"] for t in row["prompt"]] == ["user"]
        assert isinstance(row["extra_info"]["index"], int) and 0 <= row["extra_info"]["pass_rate"] <= 1
        text = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)  # RLHFDataset does this
        assert row["extra_info"]["problem"] in text
        gold = row["reward_model"]["ground_truth"]
        score = compute_score(data_source=row["data_source"], solution_str=f"so \\boxed{{{gold}}}", ground_truth=gold,
                              extra_info=row["extra_info"])
        assert score == 1.0, i
    assert "custom_reward_function.name=compute_score" in (scored / "verl" / "README.md").read_text()


def test_openrlhf_export_is_json_lines_with_input_and_label_keys(scored):
    export([scored / "scored"], scored / "orlhf", ExportConfig(format="openrlhf"))
    write_card(scored / "orlhf")
    lines = [json.loads(x) for f in sorted((scored / "orlhf" / "data").glob("*.jsonl")) for x in open(f)]
    assert len(lines) == 12
    for r in lines:
        assert r["input"][0]["role"] == "user" and r["label"] and r["prompt"].endswith("\\boxed{}.")
        assert 0 < r["sample_weight"] <= 1 and r["bucket"] in ("hard", "medium", "easy")
    assert "--input_key input --label_key label" in (scored / "orlhf" / "README.md").read_text()


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl not installed")
def test_trl_grpo_trainer_trains_a_step_straight_from_a_trl_export(scored, tmp_path):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from curate.difficulty.models import resolve_model

    export([scored / "scored"], scored / "trl", ExportConfig(format="trl", curriculum=True))
    files = sorted(str(p) for p in (scored / "trl").glob("stage_*/data/*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert isinstance(ds[0]["prompt"], list) and ds[0]["answer"]
    path, _ = resolve_model(None)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=24, max_steps=1, learning_rate=1e-6, beta=0.0, logging_steps=1,
                      save_strategy="no", report_to="none", use_cpu=True, bf16=False, seed=0, use_vllm=False)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[math_reward], args=args,
                          train_dataset=ds, processing_class=AutoTokenizer.from_pretrained(path))
    trainer.train()
    logs = [h for h in trainer.state.log_history if any(k.startswith("rewards/math_reward") for k in h)]
    assert trainer.state.global_step == 1 and logs
