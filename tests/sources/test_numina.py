"""NuminaMath-CoT and -1.5 schemas (from their published cards) on hand-written rows."""

from __future__ import annotations

import json

from curate.clean.filters import FilterConfig
from curate.core.shards import read_table
from curate.pipeline import filter_stage, ingest


def test_numina_15_and_cot(tmp_path):
    rows15 = [
        {"problem": "Find $x$ if $2x=6$.", "solution": "x=3", "answer": "3", "problem_type": "Algebra",
         "question_type": "math-word-problem", "problem_is_valid": "Yes", "solution_is_valid": "Yes",
         "source": "olympiads", "synthetic": False},
        # tagged math-word-problem but the answer is the "proof" sentinel: the filter must look at both
        {"problem": "Let $n>1$. Find all such $n$.", "solution": "...", "answer": "proof", "problem_type": "NT",
         "question_type": "math-word-problem", "problem_is_valid": "Yes", "solution_is_valid": "Yes",
         "source": "olympiads", "synthetic": False},
        {"problem": "How many?", "solution": "...", "answer": "4", "problem_type": "Comb",
         "question_type": "MCQ", "problem_is_valid": "Yes", "solution_is_valid": "Yes", "source": "amc", "synthetic": False},
        {"problem": "What is $3+4$?", "solution": "7", "answer": "7", "problem_type": "Algebra",
         "question_type": "math-word-problem", "problem_is_valid": "Yes", "solution_is_valid": "No",
         "source": "cn_k12", "synthetic": True},
    ]
    p = tmp_path / "n15.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows15))
    m = ingest(str(p), tmp_path / "i15")
    assert m.stats["adapter"] == "numina_1.5"
    f = filter_stage([tmp_path / "i15"], tmp_path / "f15", FilterConfig())
    reasons = {r["answer"]: r["reject_reason"] for r in read_table(tmp_path / "f15" / "rejected").to_pylist()}
    assert reasons == {"proof": "proof", "4": "mcq", "7": "declared_invalid"}
    assert f.rows_kept == 1

    cot = tmp_path / "cot.jsonl"
    cot.write_text(json.dumps({"source": "aops_forum", "problem": "Compute $\\frac{1}{2}+\\frac{1}{2}$.",
                               "solution": "It is $\\boxed{1}$.", "messages": [{"role": "user", "content": "x"}]}) + "\n")
    m = ingest(str(cot), tmp_path / "icot")
    row = read_table(tmp_path / "icot" / "kept").to_pylist()[0]
    assert m.stats["adapter"] == "numina_cot" and row["answer"] == "1" and row["source_detail"] == "aops_forum"
