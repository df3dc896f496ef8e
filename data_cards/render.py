"""Rendering a card: README.md with the Hugging Face YAML header and card.json, beside its plots
(``data_cards.plots``); its terminal view and diff are ``data_cards.view``.

    write_card("runs/demo")                 # README.md, card.json, plots/*.png into the folder
    load_card("runs/demo")                  # the card.json written there, or built from the folder

One job, in one module of more than 500 lines: the card's text and its figures from recorded stats (plots:
``data_cards.plots``; terminal view and diff: ``data_cards.view``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from curate.core.manifest import ManifestError
from curate.core.shards import write_json_atomic
from data_cards.card import build_card, size_category
from data_cards.plots import make_plots

CARD_JSON = "card.json"
README = "README.md"
PLOTS = "plots"


# --------------------------------------------------------------------------------------------- README
def _card_data(card: dict, folder: Path):
    """The YAML header: license, task, size, tags, ``configs`` pointing at the data files that exist below the card's
    folder, and ``dataset_info`` per config as ``datasets`` writes it (features as the files hold them). A card
    written away from its data (a flow's run card) has neither: the export's own card is the one to publish."""
    from huggingface_hub import DatasetCardData

    licenses = sorted({v["license"] for v in card.get("sources", {}).values()})
    known = [x for x in licenses if not x.startswith("unknown")]
    license_ = known[0] if len(licenses) == 1 and known else "other"
    rows = card.get("curriculum", {}).get("rows") or card.get("final_set", {}).get("rows") or 0
    configs, sizes = [], {}
    cur = card.get("curriculum")
    fmt = (cur or {}).get("format") or "parquet"
    ext = {"parquet": "parquet", "jsonl": "jsonl", "hf": "arrow", "trl": "parquet", "verl": "parquet",
           "openrlhf": "jsonl"}[fmt]
    if cur and not _rel(Path(cur["folder"]), folder).startswith("../"):
        base = _rel(Path(cur["folder"]), folder)
        parts = [s for s in cur["stages"] if s["folder"] != "."]
        if parts:
            configs.append({"config_name": "all", "default": True,
                            "data_files": [{"split": "train", "path": f"{base}stage_*/data/*.{ext}"}]})
            configs += [{"config_name": s["folder"],
                         "data_files": [{"split": "train", "path": f"{base}{s['folder']}/data/*.{ext}"}]} for s in parts]
            sizes = {"all": cur["rows"], **{s["folder"]: s["rows"] for s in parts}}
        else:
            configs.append({"config_name": "default", "data_files": [{"split": "train", "path": f"{base}data/*.{ext}"}]})
            sizes = {"default": cur["rows"]}
    elif card.get("final_set") and not cur and not _rel(Path(card["final_set"]["folder"]), folder).startswith("../"):
        base = _rel(Path(card["final_set"]["folder"]), folder)
        configs.append({"config_name": "default", "data_files": [{"split": "train", "path": f"{base}kept/*.parquet"}]})
        sizes = {"default": card["final_set"]["rows"]}
    data = DatasetCardData(
        license=license_, language=["en"], task_categories=["text-generation"], size_categories=[size_category(rows)],
        pretty_name=card["name"], tags=["math", "reasoning", "reinforcement-learning", "gradus"],
        configs=configs or None,
    )
    if license_ == "other" and licenses:
        data["license_name"] = ("mixed: " if len(licenses) > 1 else "") + ", ".join(licenses)  # the Hub asks for one
    infos = _dataset_infos(configs, sizes, folder)
    if infos:
        infos.to_dataset_card_data(data)
    return data


def _dataset_infos(configs: list[dict], sizes: dict[str, int], folder: Path):
    """``datasets.DatasetInfosDict`` of the configs: each config's features read from its first data file the way
    ``datasets`` reads that format (Parquet and Arrow schemas as written, JSON lines as pyarrow's JSON reader types
    them: int64, double), and its train split's rows."""
    import datasets

    infos = {}
    for c in configs:
        files = sorted(folder.glob(c["data_files"][0]["path"]))
        if not files:
            continue
        feats = datasets.Features.from_arrow_schema(_file_schema(files[0]))
        split = datasets.SplitInfo(name="train", num_examples=sizes.get(c["config_name"], 0),
                                   num_bytes=sum(f.stat().st_size for f in files))
        infos[c["config_name"]] = datasets.DatasetInfo(features=feats, splits=datasets.SplitDict({"train": split}))
    from datasets.info import DatasetInfosDict

    return DatasetInfosDict(infos) if infos else None


def _file_schema(path: Path):
    import pyarrow as pa
    import pyarrow.json as paj
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        return pq.read_schema(path)
    if path.suffix == ".arrow":
        with pa.memory_map(str(path)) as f:
            try:
                return pa.ipc.open_stream(f).schema
            except pa.ArrowInvalid:
                return pa.ipc.open_file(f).schema
    return paj.read_json(path).schema


def _rel(target: Path, folder: Path) -> str:
    """``target`` relative to the card's folder, as a prefix ending in ``/`` ("" for the folder itself); a card
    written elsewhere (``--out``) points back with ``../`` (fine locally; the Hub wants the card beside its data)."""
    import os

    t, f = target.resolve(), folder.resolve()
    if t == f:
        return ""
    return Path(os.path.relpath(t, f)).as_posix() + "/"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _kv(d: dict) -> str:
    """``{"a": 1, "b": 2}`` as prose: ``a 1, b 2``."""
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in d.items()) or "none"


def _rho_text(d: dict) -> str:
    rho = d.get("spearman_rho_pass_rate_vs_level")
    if rho is not None:
        return f"{rho} ({d['rho_pairs']} problems)"
    if d["rho_pairs"] < 3:
        return f"not defined ({d['rho_pairs']} problems with a numeric level)"
    return f"not defined: all {d['rho_pairs']} problems with a level have the same pass rate"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _cell(v: Any) -> str:
    """A table cell: pipes escaped, line breaks as spaces, control bytes as visible ``\\xNN`` (a row whose problem
    holds a NUL would make the card a binary file to grep and git)."""
    if isinstance(v, int):
        return f"{v:,}"
    text = str(v).replace("|", "\\|").replace("\n", " ").replace("\t", " ")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def reliability_sentence(rel: dict, prior: str) -> str:
    """What the card says of a run's reliability check (``curate.difficulty.adaptive.reliability_check``): whatever the
    prior, an expected calibration error above 0.05 means the stored masses are not probabilities."""
    return (f"Can the stored `bucket_masses` be read as probabilities? On a model of this run "
            f"({rel['problems']:,} problems drawn from the population fitted to its {rel['fitted_on_rows']:,} "
            f"rows' counts, through its stopping rule and its {prior} prior), the bucket chosen is the true "
            f"one for {rel['accuracy']:.1%} of problems, and the mass it was given is off by {rel['ece']} "
            "on average (expected calibration error; plot `reliability.png`)"
            + ((": they are masses, not probabilities" + ("; `--prior store` calibrates them." if prior == "jeffreys"
                                                           else "."))
               if rel["ece"] > 0.05 else "."))


def use_it(fmt: str, template: str) -> str:
    """Which trainer reads an export of ``fmt``, and how."""
    loader = {"parquet": "parquet", "jsonl": "json", "hf": "arrow", "trl": "parquet", "verl": "parquet",
              "openrlhf": "json"}[fmt]
    head = (f"Format `{fmt}`, prompts rendered with the `{template}` template; every row keeps its difficulty (pass "
            f"rate, counts, bucket, curriculum stage) and a `sample_weight` (Kimi k1.5's max(floor, 1 - pass rate)) "
            f"for a weighted sampler. Load it with `datasets.load_dataset(\"{loader}\", data_files=...)` using the "
            "`configs` above.\n")
    if fmt == "trl":
        return head + """
TRL `GRPOTrainer` reads it as it is: `prompt` is conversational, and `answer` (like every other column) reaches the
reward function, graded as gradus grades:

```python
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer
from rl_stage.rewards import math_reward
ds = load_dataset("parquet", data_files="stage_*/data/*.parquet", split="train")
GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=[math_reward], train_dataset=ds,
            args=GRPOConfig(output_dir="out")).train()
```
"""
    if fmt == "verl":
        return head + """
verl's `RLHFDataset` reads `data_source`, `prompt` (chat messages), `ability`, `reward_model.ground_truth` and
`extra_info` (index and the difficulty block). Score with gradus's grader:

```bash
python -m verl.trainer.main_ppo data.train_files=<this folder>/stage_1_easy/data/part_00000.parquet \\
    data.prompt_key=prompt custom_reward_function.path=<gradus>/rl_stage/rewards.py \\
    custom_reward_function.name=compute_score ...
```
"""
    if fmt == "openrlhf":
        return head + """
OpenRLHF reads JSON lines with an input key and a label key: `input` holds the chat messages (use
`--apply_chat_template`) and `prompt` the rendered text (without it); `label` is the gold answer:

```bash
python -m openrlhf.cli.train_ppo_ray --prompt_data <this folder>/data --input_key input --label_key label \\
    --apply_chat_template ...
```
"""
    if fmt == "parquet":
        return head + "\n`gradus train` reads it as it is (`data: [\"<this folder>\"]`).\n"
    return head


def render_body(card: dict, plots: list[str], with_data: bool = True) -> str:
    """The Markdown body: every number comes from ``card``. ``with_data``: the card lies with its data (its header
    points at the files); else it says where the data and the card to publish are."""
    p = _head(card, with_data)
    for key, section in SECTIONS:
        if card.get(key):
            p += section(card)
    if plots:
        p.append("## Plots\n")
        p += [f"![{Path(x).stem}]({x})\n" for x in plots]
    p += _provenance(card)
    return "\n".join(p)


def _head(card: dict, with_data: bool) -> list[str]:
    """The title, where the figures come from, and (with the data) how to use it, or where the data lies."""
    p: list[str] = []
    name = card["name"]
    rows = card.get("curriculum", {}).get("rows") or card.get("final_set", {}).get("rows")
    p.append(f"# {name}\n")
    p.append(f"Built by gradus from the manifests of `{card['folder']}` on {card['built']}; every figure below "
             f"comes from recorded stage outputs (see `card.json`).{f' Rows: **{rows:,}**.' if rows else ''}\n")
    if not with_data:
        where = (card.get("curriculum") or card.get("final_set") or {}).get("folder")
        if where:
            p.append(f"This card describes a run; the data lies in `{where}` (relative to the pipeline's folder)"
                     + (f", with its own card (`{where}/README.md`): that folder is the one to upload."
                        if card.get("curriculum") else ".") + "\n")
    if card.get("curriculum") and with_data:
        c = card["curriculum"]
        p.append("## Use it\n")
        p.append(use_it(c["format"] or "parquet", c["template"]))
    return p


def _sources(card: dict) -> list[str]:
    """Each source's rows through the pipeline, its license and the commit it was read at."""
    p: list[str] = []
    p.append("## Sources\n")
    p.append(_table(["source", "rows in", "after ingest", "in the clean set", "license"],
                    [[s, v["in"], v["after_ingest"], v["final"], v["license"]] for s, v in card["sources"].items()]))
    pins = [r for v in card["sources"].values() for r in v.get("revisions", [])]
    if pins:
        p.append("\nRead from the Hub at these commits: " + "; ".join(f"`{r['source']}` at `{r['commit']}`"
                                                                     for r in pins) + ".")
    p.append("")
    return p


def _waterfall(card: dict) -> list[str]:
    """The rows each stage removed, by reason, with two examples of each."""
    p: list[str] = []
    p.append("## Filter waterfall\n")
    p.append("Rows removed by each stage, in pipeline order; every removed row is kept in that stage's `rejected/` "
             "shards with its reason. In = out + removed holds at every step.\n")
    rows_ = []
    for s in card["waterfall"]:
        rows_.append([f"**{s['stage']}**", s["rows_in"], "", s["rows_out"]])
        for r, n in sorted(s["removed"].items(), key=lambda kv: -kv[1]):
            rows_.append(["", "", f"{r}: {n:,}", ""])
    p.append(_table(["stage", "rows in", "removed", "rows out"], rows_))
    p.append("")
    ex = [(s["stage"], r, e) for s in card["waterfall"] for r, es in s["examples"].items() for e in es]
    if ex:
        p.append("<details><summary>Two examples of each reason</summary>\n")
        p.append(_table(["stage", "reason", "source", "problem (start)", "gold", "detail"],
                        [[st, r, e["source"], e["problem"][:160], e["answer"], e["detail"] or ""] for st, r, e in ex]))
        p.append("\n</details>\n")
    return p


def _duplicates(card: dict) -> list[str]:
    """The copies removed, the clusters, and the problems whose golds disagree."""
    p: list[str] = []
    d = card["duplicates"]
    p.append("## Duplicates\n")
    sizes = ", ".join(f"{n:,} of {k}" for k, n in d["cluster_sizes"].items()) or "none"
    p.append(f"{d['exact']:,} exact and {d['near']:,} near duplicates removed, in {d['clusters']:,} clusters "
             f"(clusters by size: {sizes}). The copy kept came from: {_kv(d['kept_copy_from_source'])}.\n")
    g = d.get("gold_conflicts") or {}
    if g.get("clusters"):
        fate = "none of their rows is kept" if g["policy"] == "drop" else "their best-ranked row is kept"
        many = g["clusters"] != 1
        p.append(f"\n**Gold conflicts.** {g['clusters']:,} problem{'s' if many else ''} appear{'' if many else 's'} "
                 "with golds that math-verify finds "
                 f"different ({g['rows']:,} rows); {fate} (`dedup.conflicts`). The first "
                 f"{min(30, len(g['list']))}:\n")
        p.append(_table(["golds", "rows (source id: gold)"],
                        [[" / ".join(c["answers"]), "; ".join(f"{r['source']} {r['source_id']}: {r['answer']}"
                                                               for r in c["rows"])] for c in g["list"][:30]]) + "\n")
    return p


def _contamination(card: dict) -> list[str]:
    """The rows removed as copies of benchmark items, with the first matches."""
    p: list[str] = []
    c = card["contamination"]
    p.append("## Contamination\n")
    p.append(f"Checked against {', '.join(f'{b} ({n} items)' for b, n in c['benchmark_items'].items())} "
             f"with {c['rule']['ngram']}-grams. Removed per benchmark: {_kv(c['by_benchmark'])}; by kind of "
             f"match: {_kv(c['by_kind'])}.\n")
    if c["matches"]:
        total = sum(c["by_kind"].values())
        p.append(f"The first {min(30, total)} of {total:,} matched pairs (up to {len(c['matches'])} are in `card.json`, "
                 "all in the decontam stage's `rejected/` shards):\n")
        p.append(_table(["row id", "source", "benchmark", "benchmark item", "match"],
                        [[m["id"], m["source"], m["benchmark"], m["benchmark_item"], m["match"]] for m in c["matches"][:30]]))
        p.append("")
    return p


def _final_set(card: dict) -> list[str]:
    """The clean set's rows, answer types and declared levels."""
    p: list[str] = []
    f = card["final_set"]
    p.append("## The clean set\n")
    p.append(f"{f['rows']:,} rows. Answer types: {_kv(f['answer_types'])}. Declared levels: {_kv(f['declared_levels'])}.\n")
    return p


def _difficulty(card: dict) -> list[str]:
    """How difficulty was estimated (model, sampling, grader) and what it found."""
    p: list[str] = []
    d = card["difficulty"]
    p.append("## Difficulty\n")
    p.append(f"{d['rows']:,} problems{' (a sample: the first ' + str(d['limit']) + ' rows)' if d.get('limit') else ''}, "
             f"{'up to ' if d.get('sequential') else ''}k = {d['k']} samples each from `{d['model']}` "
             f"(revision `{d['model_revision']}`, {d['backend']}), "
             f"template `{d['template']}`, T = {d['temperature']}, top_p = {d['top_p']}, max_tokens = "
             f"{d['max_tokens']}, seed {d['seed']}; graded by `{d['grader_version']}`.\n")
    p.append(_table(["correct of k", *d["histogram"].keys()], [["problems", *d["histogram"].values()]]))
    p.append("")
    p.append(f"Never solved: {d['never_solved']:,}; always solved: {d['always_solved']:,}. Sample outcomes: "
             f"{_kv(d['sample_outcomes'])}; truncation rate {d['truncation_rate']}; mean response "
             f"{d['mean_response_tokens']} tokens; rows with ungraded samples (timeouts count as failures): "
             f"{d['incompletely_graded_rows']}.\n")
    if len(d["by_source"]) > 1:
        p.append(_table(["source", *d["histogram"].keys()], [[s, *h.values()] for s, h in d["by_source"].items()]))
        p.append("")
    if d["by_level"]:
        p.append(_table(["declared level", "problems", "mean pass rate", *[f"{k} correct" for k in d["histogram"]]],
                        [[lv, v["rows"], v["mean_pass_rate"], *d["histogram_by_level"][lv].values()]
                         for lv, v in d["by_level"].items()]))
        p.append(f"\nSpearman's rho between pass rate and declared level: {_rho_text(d)}.\n")
    p += _sequential(d)
    p += _suspect_gold(d)
    return p


def _sequential(d: dict) -> list[str]:
    """Sequential sampling: its rule, the samples it took, why it stopped, how well its posterior was calibrated."""
    p: list[str] = []
    seq = d.get("sequential")
    if seq and seq.get("mean_samples") is not None:
        q = seq["settings"]
        how = ([f"adaptive: {q['k_first']} samples, then {q['k_step']} at a time up to {q['k_max']} until one bucket "
                f"holds {1 - q['delta']:.2f} of the posterior"] if q.get("adaptive") else [])
        how += [f"problems at 0 or all correct resampled up to {q['k_max']}"] if q.get("resample_ends") else []
        p.append(f"Sequential sampling ({'; '.join(how)}): {seq['mean_samples']} samples per problem; "
                 f"stopping reasons {_kv(seq['stop_reasons'])}"
                 + (f"; posterior buckets {_kv(seq['posterior_buckets'])}" if seq.get("posterior_buckets") else "")
                 + (f"; of {seq['ends']['none_correct_at_base']} problems with no correct sample in the first "
                    f"{seq['ends']['base_samples']}, {seq['ends']['of_them_solved_later']} were solved later"
                    if seq.get("ends") else "") + ".\n")
        rel = seq.get("reliability")
        if rel and "ece" in rel:
            p.append(reliability_sentence(rel, (seq.get("prior") or {}).get("kind", "jeffreys")) + "\n")
    return p


def _suspect_gold(d: dict) -> list[str]:
    """The rows whose gold may be wrong, and the rule's recall on this run's own samples."""
    p: list[str] = []
    sus = d.get("suspect_gold") or {}
    chk = sus.get("check") or {}
    caught = ""
    if chk.get("recall") is not None:
        checked, solved = chk.get("rows_checked", chk["rows_with_a_correct_sample"]), chk["rows_with_a_correct_sample"]
        of = (f"{checked:,} rows with a correct sample" if checked == solved else
              f"{checked:,} rows read of the {solved:,} with a correct sample")
        caught = (f"Had a gold been wrong, the rule would have caught it on {chk['caught_if_gold_wrong']:,} of the "
                  f"{of} ({chk['recall']:.0%}: this run's own samples, the correct ones graded wrong); a wrong gold "
                  "of a row the model never solves is not seen. A flag is not proof: a model's systematic slip looks "
                  "the same (false flags on exact golds are measured in the README).\n")
    if sus.get("rows"):
        p.append(f"**Suspect gold answers.** On {sus['rows']:,} rows no sample is graded correct and a clear majority "
                 "(at least 3 samples and at least half) agree on one answer that math-verify finds different from "
                 f"the gold: the gold may be wrong (`gradus export --drop-suspect-gold` leaves them out). {caught}"
                 f"The first {len(sus['list'])}:\n")
        p.append(_table(["source id", "gold", "samples' answer", "given by"],
                        [[f"{r['source']} {r['source_id']}", r["answer"], r["consensus_answer"],
                          f"{r['consensus_count']} of {r['k']}"] for r in sus["list"]]) + "\n")
    elif caught:
        p.append(f"**Suspect gold answers.** No row is flagged. {caught}")
    return p


def _selection(card: dict) -> list[str]:
    """The selection by bucket and the curriculum's stages."""
    p: list[str] = []
    c = card["curriculum"]
    p.append("## Selection and curriculum\n")
    p.append(f"Target: {c['target']}.\n")
    p.append(_table(["bucket", "available", "asked", "taken", "short"],
                    [[b, v["available"], v["asked"], v["taken"], v["short"]] for b, v in c["by_bucket"].items()]))
    p.append(f"\nLeft out: {_kv(c['excluded'])}; asked but unfilled: {c['unfilled']}. Stages: "
             + ", ".join(f"{s['folder']} ({s['rows']} rows, mean pass rate {s['pass_rate_mean']})" for s in c["stages"])
             + ".\n")
    return p


def _provenance(card: dict) -> list[str]:
    """Each stage's folder, date, version and fingerprints."""
    p: list[str] = []
    p.append("## Provenance\n")
    p.append(_table(["stage", "folder", "created", "gradus", "config", "inputs"],
                    [[s["stage"], s["folder"], s["created"], s["code_version"], s["config_hash"], s["input_hash"]]
                     for s in card["provenance"]]))
    p.append("\nConfigs, input fingerprints and the sha256 of every shard are in `card.json` and each stage's manifest.\n")
    return p


SECTIONS = [("sources", _sources), ("waterfall", _waterfall), ("duplicates", _duplicates),
            ("contamination", _contamination), ("final_set", _final_set), ("difficulty", _difficulty),
            ("curriculum", _selection)]  # the card's sections after its head, in order: (key in card.json, its text)


ROWS = "card_rows.parquet"  # beside a card written away from its data: the ids it describes, for card diff


def write_card(folder: str | Path, out: str | Path | None = None, only: list[str | Path] | None = None,
               name: str | None = None) -> Path:
    """Build the card of ``folder`` and write README.md, card.json and plots/ into ``out`` (default: ``folder``);
    ``only``: the stage folders to describe, ``name``: its title (``build_card``). Paths in what is written are
    relative to the pipeline's folder (``public``). A card written away from its data also gets ``card_rows.parquet``:
    the ids of the rows it describes and their pass counts, so a later ``card diff`` can say which rows changed."""
    from huggingface_hub import DatasetCard

    folder = Path(folder)
    out = Path(out) if out is not None else folder
    check_card_target(out, away=out.resolve() != folder.resolve())
    card = build_card(folder, only, name)
    plots = make_plots(card, out / PLOTS)
    data = _card_data(card, out)
    shown = public(card)
    text = f"---\n{data.to_yaml()}\n---\n\n{render_body(shown, plots, with_data=bool(data.get('configs')))}"
    DatasetCard(text)  # parses the header we wrote: a malformed card fails here, not on the Hub
    if out.resolve() != folder.resolve():
        _write_rows(card, out / ROWS)
    write_json_atomic(out / CARD_JSON, shown)
    tmp = out / (README + ".tmp")
    tmp.write_text(text)
    tmp.replace(out / README)
    return out / README


def public(card: dict) -> dict:
    """The card as it is published: every absolute path below the pipeline's folder (the common folder of its stage
    outputs, or the one above ``stages/``) made relative to it, and any other absolute path cut to its file name, so a
    card read through ``latest``, copied or uploaded names nothing of this machine."""
    import copy
    import os

    folders = [Path(s["folder"]).resolve() for s in card.get("stages", [])]
    root = Path(os.path.commonpath(folders)) if folders else Path(card["folder"]).resolve()
    if root in folders:  # one stage (or an ingest alone): its folder's parent
        root = root.parent
    if root.name == "stages":
        root = root.parent
    pattern = re.compile(r"(?<![\w:/.])/(?:[^\s\"'=,;()`]+/)*[^\s\"'=,;()`/]+")

    def rel(m: re.Match) -> str:
        p = Path(m.group(0))
        try:  # only what names a path here: "\\sqrt{2}/2" or "(n+1)/2" in a problem or gold is left as it is
            if p.resolve().is_relative_to(root):
                return Path(os.path.relpath(p.resolve(), root)).as_posix()
            return p.name if p.exists() or p.parent.exists() and p.parent != Path("/") else m.group(0)
        except (OSError, ValueError):
            return m.group(0)

    def walk(v):
        if isinstance(v, str):
            return pattern.sub(rel, v) if "/" in v else v
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    out = walk(copy.deepcopy(card))
    out["folder"] = walk(str(Path(card["folder"]).resolve())) if Path(card["folder"]).resolve() != root else "."
    return out


def rows_of(card: dict) -> dict[str, tuple[bool, int | None, int | None]]:
    """id -> (in the card's result, n_correct, k): the rows the card describes as its result (the export's, else the
    clean set's) and the pass counts of the rows it scored."""
    from curate.core.shards import iter_batches

    final: set[str] = set()
    cur, fin = card.get("curriculum"), card.get("final_set")
    if cur:
        from curate.select.export import read_export

        final = set(read_export(Path(cur["folder"]))["id"].to_pylist())
    elif fin:
        final = {x for t in iter_batches(Path(fin["folder"]) / "kept", columns=["id"]) for x in t["id"].to_pylist()}
    scored: dict[str, tuple[int, int]] = {}
    for st in card.get("stages", []):
        if st["stage"] == "estimate":
            for t in iter_batches(Path(st["folder"]) / "kept", columns=["id", "n_correct", "k"]):
                for r in t.to_pylist():
                    scored[r["id"]] = (r["n_correct"], r["k"])
    return {i: (i in final, *scored.get(i, (None, None))) for i in sorted(final | set(scored))}


def _write_rows(card: dict, path: Path) -> None:
    """``rows_of(card)`` as ``card_rows.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = rows_of(card)
    table = pa.table({"id": pa.array(list(rows), pa.string()), "final": pa.array([r[0] for r in rows.values()]),
                      "n_correct": pa.array([r[1] for r in rows.values()], pa.int64()),
                      "k": pa.array([r[2] for r in rows.values()], pa.int64())})
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def check_card_target(out: Path, away: bool = False) -> None:
    """Never overwrite a README.md, card.json, card_rows.parquet or plots/ that is not a gradus card's (``card.json``
    beside them says it is). ``away``: the card goes to a folder of its own (``--out``), which must be new, empty, or
    a card gradus wrote holding nothing else; a user's folder is refused, naming what it holds."""
    if out.is_symlink() or out.exists() and not out.is_dir():
        raise ManifestError(f"{out} is a file or a link: build the card into a folder (--out)")
    ours = False
    if (out / CARD_JSON).is_file() and not (out / CARD_JSON).is_symlink():
        try:
            ours = json.loads((out / CARD_JSON).read_text()).get("card_version") is not None
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            pass
    if away and out.is_dir():
        card_files = {README, CARD_JSON, ROWS, PLOTS} if ours else set()
        foreign = sorted(e.name for e in out.iterdir() if e.name not in card_files
                         or e.is_symlink() or e.name == PLOTS and any(not x.name.endswith(".png") for x in e.iterdir()))
        if foreign:
            raise ManifestError(f"{out} holds files gradus did not write ({', '.join(foreign[:5])}): build the card into "
                                "a new or empty folder (--out)")
    if ours:
        return
    mine = [n for n in (README, CARD_JSON, ROWS, PLOTS) if (out / n).exists() or (out / n).is_symlink()]
    if mine:
        raise ManifestError(f"{out} already holds {', '.join(mine)} that gradus did not write: build the card "
                            "elsewhere (--out)")


def load_card(folder: str | Path) -> dict:
    """The card of a folder, built fresh from its manifests (a saved ``card.json`` can predate later stages);
    a folder that holds only a card (no stage outputs) gives its ``card.json``."""
    f = Path(folder) / CARD_JSON
    try:
        return build_card(folder)
    except ManifestError:
        if f.is_file():
            return _numeric_order(json.loads(f.read_text()))
        raise


def _numeric_order(card: dict) -> dict:
    """Pass-count histograms in the order of their counts again (``card.json`` is written with its keys sorted as
    text, which puts "10" between "1" and "2")."""
    def by_count(h: dict) -> dict:
        return dict(sorted(h.items(), key=lambda kv: int(kv[0]))) if all(str(k).isdigit() for k in h) else h

    d = card.get("difficulty")
    if isinstance(d, dict):
        for key in ("histogram", "by_source", "histogram_by_level"):
            v = d.get(key)
            if isinstance(v, dict) and key == "histogram":
                d[key] = by_count(v)
            elif isinstance(v, dict):
                d[key] = {name: by_count(h) if isinstance(h, dict) else h for name, h in v.items()}
    return card


__all__ = ["CARD_JSON", "PLOTS", "README", "build_card", "load_card", "make_plots", "public", "reliability_sentence",
           "render_body", "use_it", "write_card"]
