"""Source adapters: map each known source's real schema onto the record's columns.

An adapter takes one raw batch (all-string columns from ``curate.sources.readers``) and returns the record's
source-level columns plus ``_reject``: per row, None or why the row cannot become a record. The
format is detected from the column names (most specific first) unless named with ``--adapter``; any
other table can be read with an explicit column mapping (``--map problem=question,answer=final``).

| adapter | columns it expects | answer |
|---|---|---|
| aime_kaggle | ID, Year, Problem Number, Question, Answer, Part | Answer |
| numina_1.5 | problem, solution, answer, problem_type, question_type, problem_is_valid, ... | answer |
| numina_cot | source, problem, solution, messages | last \\boxed{} of solution |
| math500 | problem, solution, answer, subject, level, unique_id | answer |
| math | problem, level, type, solution | last \\boxed{} of solution |
| omni_math | domain, difficulty, problem, solution, answer, source | answer |
| deepmath | prompt, messages, ground_truth, difficulty | ground_truth |
| orz | [{"from": "human", "value"}, {"from": "assistant", "ground_truth": {"value"}}] | ground_truth.value |
| orz_eval | prompt (repr of a message list), final_answer | final_answer |
| deepscaler | problem, answer, difficulty (+ solution, year, type) | answer |
| aime_csv | id, problem, answer (ids like 1983_AIME_1) | answer |
| generic | problem, answer (+ solution, id) or an explicit --map | mapped |
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curate.core.errors import SourceError
from curate.sources.answers import clean_answer, distinct_boxes, last_boxed

Cols = dict[str, list | pa.Array]

# Record columns a mapping may fill, and the raw column names reserved by the readers.
MAPPABLE = ("problem", "answer", "solution", "id", "question_type", "year", "level", "subject", "difficulty")
_BOOKKEEPING = ("_value", "_nonscalar", "_row", "_bad", "_file")  # _file: a multi-file source's file of the row


def _col(t: pa.Table, name: str) -> list:
    return t.column(name).to_pylist() if name in t.column_names else [None] * t.num_rows


def _year(values: list, pattern: str = r"^(\d{4})") -> list[int | None]:
    def one(v):
        m = re.match(pattern, v or "")
        return int(m.group(1)) if m else None

    return _each_distinct(values, one)


def _float(values: list) -> list[float | None]:
    def one(v):
        m = re.search(r"-?\d+(?:\.\d+)?", v or "")
        return float(m.group(0)) if m else None

    return _each_distinct(values, one)


def _each_distinct(values: list, fn: Callable) -> list:
    """``[fn(v) for v in values]``, ``fn`` called once per distinct value (a level or difficulty column holds a
    handful of them)."""
    seen: dict = {}
    try:
        return [seen[v] if v in seen else seen.setdefault(v, fn(v)) for v in values]
    except TypeError:  # an unhashable value: each one on its own
        return [fn(v) for v in values]


def _boxed(solutions: list) -> list[str | None]:
    return [last_boxed(s) for s in solutions]


def _several_boxes(solutions: list) -> list[list[str] | None]:
    """Per solution, its distinct boxes when there are several (the gold is then checked at ingest)."""
    out: list[list[str] | None] = []
    for s in solutions:
        boxes = distinct_boxes(s) if s else []
        out.append(boxes if len(boxes) > 1 else None)
    return out


@dataclass(frozen=True)
class Adapter:
    name: str  # also the default ``source`` value
    detect: frozenset[str]  # raw columns that identify the format
    fn: Callable[[pa.Table], Cols]
    problem_col: str | None = "problem"  # raw column holding the statement (must be a string)
    accept: Callable[[pa.Table], bool] | None = None  # extra check on the first batch
    answer_col: str | None = "answer"  # raw column holding the gold answer (may not be an object)


def _aime_kaggle(t: pa.Table) -> Cols:
    return {
        "source_id": _col(t, "ID"),
        "problem": _col(t, "Question"),
        "answer": _col(t, "Answer"),
        "year": _year(_col(t, "Year")),
    }


def _numina_15(t: pa.Table) -> Cols:
    return {
        "problem": _col(t, "problem"),
        "answer": _col(t, "answer"),
        "solution": _col(t, "solution"),
        "question_type": _col(t, "question_type"),
        "subject": _col(t, "problem_type"),
        "declared_valid": [
            None if (p is None and s is None) else (p != "No" and s != "No" and p != "false" and s != "false")
            for p, s in zip(_col(t, "problem_is_valid"), _col(t, "solution_is_valid"), strict=False)
        ],
        "source_detail": _col(t, "source"),
    }


def _numina_cot(t: pa.Table) -> Cols:
    sol = _col(t, "solution")
    return {"problem": _col(t, "problem"), "answer": _boxed(sol), "_boxes": _several_boxes(sol), "solution": sol,
            "source_detail": _col(t, "source")}


def _math500(t: pa.Table) -> Cols:
    lv = _col(t, "level")
    return {
        "source_id": _col(t, "unique_id"),
        "problem": _col(t, "problem"),
        "answer": _col(t, "answer"),
        "solution": _col(t, "solution"),
        "subject": _col(t, "subject"),
        "level": lv,
        "declared_difficulty": _float(lv),
    }


def _math(t: pa.Table) -> Cols:
    sol, lv = _col(t, "solution"), _col(t, "level")
    return {
        "source_id": _col(t, "idx") if "idx" in t.column_names else None,
        "problem": _col(t, "problem"),
        "answer": _boxed(sol),
        "_boxes": _several_boxes(sol),
        "solution": sol,
        "subject": _col(t, "type"),
        "level": lv,
        "declared_difficulty": _float(lv),  # "Level 3" -> 3.0; "Level ?" -> null
    }


def _omni(t: pa.Table) -> Cols:
    subjects = []
    for d in _col(t, "domain"):
        m = re.search(r"Mathematics\s*->\s*([^'\"\]>-]+?)\s*(?:->|['\"\]])", d or "")
        subjects.append(m.group(1).strip() if m else None)
    return {
        "problem": _col(t, "problem"),
        "answer": _col(t, "answer"),
        "solution": _col(t, "solution"),
        "subject": subjects,
        "declared_difficulty": _float(_col(t, "difficulty")),
        "source_detail": _col(t, "source"),
    }


def _deepmath(t: pa.Table) -> Cols:
    problems = _col(t, "prompt")
    if all(p is None for p in problems):
        problems = _col(t, "question")
    return {
        "source_id": _col(t, "id"),
        "problem": problems,
        "answer": _col(t, "ground_truth") if "ground_truth" in t.column_names else _col(t, "final_answer"),
        "declared_difficulty": _float(_col(t, "difficulty")),
    }


def _orz(t: pa.Table) -> Cols:
    problems, answers, rejects = [], [], []
    for raw in _col(t, "_value"):
        p = a = why = None
        try:
            turns = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            turns, why = None, "orz_malformed_turns"
        if isinstance(turns, list):
            for turn in turns:
                if not isinstance(turn, dict):
                    continue
                if turn.get("from") in ("human", "user") and p is None:
                    p = turn.get("value")
                gt = turn.get("ground_truth")
                if isinstance(gt, dict):
                    a = gt.get("value")
            if not isinstance(p, str):
                why = why or "orz_no_human_turn"
            if a is not None and not isinstance(a, str):
                a = json.dumps(a) if isinstance(a, list | dict) else str(a)
        else:
            why = why or "orz_not_a_turn_list"
        problems.append(p if isinstance(p, str) else None)
        answers.append(a)
        rejects.append(why)
    return {"problem": problems, "answer": answers, "_reject": rejects}


def _orz_eval(t: pa.Table) -> Cols:
    problems = []
    for raw in _col(t, "prompt"):
        p = None
        turns = None
        if raw and raw.lstrip().startswith("["):
            try:
                turns = json.loads(raw)  # the reader turns a list into JSON text
            except json.JSONDecodeError:
                try:
                    turns = ast.literal_eval(raw)  # a Python repr of the list: literals only, never eval
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    turns = None
        if isinstance(turns, list) and turns and isinstance(turns[0], dict):
            p = turns[0].get("value")
        problems.append(p if isinstance(p, str) else raw)
    return {"problem": problems, "answer": _col(t, "final_answer")}


def _deepscaler(t: pa.Table) -> Cols:
    out: Cols = {
        "problem": _col(t, "problem"),
        "answer": _col(t, "answer"),
        "solution": _col(t, "solution"),
        "declared_difficulty": _float(_col(t, "difficulty")),
        "year": _year(_col(t, "year")),
        "subject": _col(t, "type"),
    }
    return out


def _synthetic(t: pa.Table) -> Cols:
    return {
        "source_id": _col(t, "id"),
        "problem": _col(t, "problem"),
        "answer": _col(t, "answer"),
        "subject": _col(t, "subject"),
        "level": _col(t, "level"),
        "question_type": _col(t, "question_type"),
        "declared_difficulty": _float(_col(t, "difficulty")),
    }


def _aime_ids(t: pa.Table) -> bool:
    ids = [i for i in _col(t, "id")[:50] if i]
    return bool(ids) and all(re.match(r"^\d{4}_AIM", i) for i in ids)


def _aime_csv(t: pa.Table) -> Cols:
    ids = _col(t, "id")
    return {"source_id": ids, "problem": _col(t, "problem"), "answer": _col(t, "answer"), "year": _year(ids)}


def _generic(t: pa.Table) -> Cols:
    out: Cols = {"problem": _col(t, "problem"), "answer": _col(t, "answer"), "solution": _col(t, "solution")}
    if "id" in t.column_names:
        out["source_id"] = _col(t, "id")
    if all(a is None for a in out["answer"]) and "solution" in t.column_names:
        out["answer"] = _boxed(out["solution"])
    for k in ("level", "subject", "year"):
        if k in t.column_names:
            out[k] = _year(_col(t, k)) if k == "year" else _col(t, k)
    return out


# Most specific first: the first adapter whose columns are all present wins.
ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in [
        Adapter("synthetic", frozenset({"id", "problem", "answer", "subject", "level", "question_type"}), _synthetic),
        # the reasoning_gym: source's rows (curate.sources.reasoning_gym), in the generator's columns; never detected
        Adapter("reasoning_gym", frozenset({"id", "problem", "answer", "subject", "level", "question_type"}), _synthetic,
                accept=lambda t: False),
        Adapter("aime", frozenset({"ID", "Year", "Problem Number", "Question", "Answer"}), _aime_kaggle, "Question",
                answer_col="Answer"),
        Adapter("numina_1.5", frozenset({"problem", "solution", "answer", "problem_type", "question_type"}), _numina_15),
        Adapter("numina_cot", frozenset({"source", "problem", "solution", "messages"}), _numina_cot),
        Adapter("math500", frozenset({"problem", "solution", "answer", "subject", "level", "unique_id"}), _math500),
        Adapter("math", frozenset({"problem", "level", "type", "solution"}), _math),
        Adapter("omni_math", frozenset({"domain", "difficulty", "problem", "answer"}), _omni),
        Adapter("deepmath", frozenset({"prompt", "messages", "ground_truth"}), _deepmath, "prompt",
                answer_col="ground_truth"),
        Adapter("orz_eval", frozenset({"prompt", "final_answer"}), _orz_eval, None, answer_col="final_answer"),
        Adapter("deepscaler", frozenset({"problem", "answer", "difficulty"}), _deepscaler),
        Adapter("aime_csv", frozenset({"id", "problem", "answer"}), _aime_csv, accept=_aime_ids),
        Adapter("generic", frozenset({"problem"}), _generic),
        Adapter("orz", frozenset({"_value"}), _orz, None),
    ]
}


def detect_adapter(t: pa.Table) -> Adapter:
    """The adapter for a raw batch, from its column names."""
    names = set(t.column_names) - set(_BOOKKEEPING)
    if not names and "_value" in t.column_names:
        return ADAPTERS["orz"]
    for a in ADAPTERS.values():
        if a.name != "orz" and a.detect <= names and (a.accept is None or a.accept(t)):
            return a
    raise SourceError(
        f"cannot tell the source format from its columns {sorted(names)}; "
        f"give --adapter (one of {', '.join(ADAPTERS)}) or a mapping --map problem=COL,answer=COL"
    )


def parse_mapping(text: str) -> dict[str, str]:
    """``problem=question,answer=boxed(solution)`` -> dict, validating the record-side names."""
    mapping: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise SourceError(f"bad mapping item {part!r}: expected FIELD=COLUMN")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in MAPPABLE:
            raise SourceError(f"bad mapping field {k!r}: choose from {', '.join(MAPPABLE)}")
        if not v:
            raise SourceError(f"bad mapping item {part!r}: empty column name")
        mapping[k] = v
    if "problem" not in mapping:
        raise SourceError("a mapping must name the problem column (problem=COLUMN)")
    return mapping


def mapped_adapter(mapping: dict[str, str]) -> Adapter:
    """An adapter built from a column mapping; ``answer=boxed(COL)`` extracts the last box of COL."""
    needed = {re.sub(r"^boxed\((.*)\)$", r"\1", c) for c in mapping.values()}

    def fn(t: pa.Table) -> Cols:
        missing = sorted(needed - set(t.column_names))
        if missing:
            has = [c for c in t.column_names if c not in _BOOKKEEPING]
            raise SourceError(f"mapping names column(s) {missing} which the source lacks (has: {has})")
        out: Cols = {}
        for k, c in mapping.items():
            m = re.match(r"^boxed\((.*)\)$", c)
            vals = _boxed(_col(t, m.group(1))) if m else _col(t, c)
            if k == "year":
                vals = _year(vals)
            elif k == "difficulty":
                k, vals = "declared_difficulty", _float(vals)
            elif k == "id":
                k = "source_id"
            out[k] = vals
        return out

    return Adapter("generic", frozenset(needed), fn, re.sub(r"^boxed\((.*)\)$", r"\1", mapping["problem"]))


def row_id_prefix(spec: str) -> str:
    """What a row number is qualified with when the source has no id column: the file's name
    (``math.json``) or the hub data set's name (``NuminaMath-1.5``), so that two files read by one adapter
    (DeepScaleR's ``aime.json`` and ``math.json``) never give two rows the same ``source_id``."""
    from curate.sources.readers import source_root

    root = source_root(spec)
    if root is not None:  # a folder or a glob: the folder's name (each row's file is named after it)
        return root.resolve().name or spec
    return Path(spec.split("@", 1)[0].rstrip("/")).name or spec


def apply_adapter(adapter: Adapter, t: pa.Table, row_prefix: str | None = None) -> Cols:
    """Run an adapter, then reject rows the reader marked bad or whose problem is not a string.

    Rows without an id in the source get ``row_prefix:row`` (or the bare row number without a prefix)."""
    cols = adapter.fn(t)
    n = t.num_rows
    rejects = list(cols.pop("_reject", None) or [None] * n)
    bad, nonscalar = _col(t, "_bad"), _col(t, "_nonscalar")
    from curate.sources.readers import NUMBERS_KEY

    numbers = set((t.schema.metadata or {}).get(NUMBERS_KEY, b"").decode().split(","))
    if adapter.problem_col is not None and adapter.problem_col in numbers:  # a column of numbers as the problem
        problems = _col(t, adapter.problem_col)
        nonscalar = [(f"{ns}," if ns else "") + f"{adapter.problem_col}:number" if p is not None else ns
                     for ns, p in zip(nonscalar, problems, strict=True)]
    for i in range(n):
        if bad[i]:
            rejects[i] = "ingest_" + bad[i].split(":")[0]
        elif nonscalar[i]:
            kinds = dict(x.rpartition(":")[::2] for x in nonscalar[i].split(","))
            if adapter.problem_col in kinds:
                rejects[i] = rejects[i] or "ingest_problem_not_string"
            elif kinds.get(adapter.answer_col or "") == "dict":  # an object is no gold answer, whatever its JSON text
                rejects[i] = rejects[i] or "ingest_answer_not_scalar"
    cols["_reject"] = rejects
    cols["_reject_detail"] = [b or ns for b, ns in zip(bad, nonscalar, strict=False)]
    if "_file" in t.column_names:  # a folder or glob: the file and the row within it
        rows = [f"{row_prefix}/{f}:{r}" if row_prefix else f"{f}:{r}" for f, r in zip(_col(t, "_file"), _col(t, "_row"),
                                                                                    strict=True)]
    else:
        rows = [f"{row_prefix}:{r}" if row_prefix else str(r) for r in _col(t, "_row")]
    if cols.get("source_id") is None:
        cols["source_id"] = rows
    else:
        cols["source_id"] = [s if s else r for s, r in zip(cols["source_id"], rows, strict=False)]
    if "answer" in cols:
        ans = pa.array(cols["answer"], pa.string())
        # clean only what needs it (boxes, $, trailing dots, \text{..}); plain answers pass untouched
        needs = pc.fill_null(pc.match_substring_regex(ans, r"^\s|\s$|\$|\\boxed|\\fbox|\.$|^\\text|^\\[\[(]"), False)
        if pc.any(needs).as_py():
            vals = ans.to_pylist()
            for i in pc.indices_nonzero(needs).to_pylist():
                vals[i] = clean_answer(vals[i])
            ans = pa.array(vals, pa.string())
        cols["answer"] = ans
    return cols
