"""Rendering a card: PNG plots (matplotlib, headless), README.md with the Hugging Face YAML header, terminal view, diff.

    write_card("runs/demo")                 # README.md, card.json, plots/*.png into the folder
    print(show_text(load_card("runs/demo")))
    print(diff_text(diff_cards("runs/old", "runs/new")))
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from curate.core.manifest import ManifestError
from curate.core.shards import write_json_atomic
from data_cards.card import _level_number, build_card, size_category

CARD_JSON = "card.json"
README = "README.md"
PLOTS = "plots"


# ---------------------------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def make_plots(card: dict, out: Path) -> list[str]:
    """The card's figures as PNGs under ``out``; returns their file names (relative to ``out``'s parent)."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    made = []

    wf = card.get("waterfall", [])
    if wf:
        fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * (len(wf) + 1)))
        labels = ["rows read"] + [f"after {s['stage']}" for s in wf]
        values = [wf[0]["rows_in"]] + [s["rows_out"] for s in wf]
        ax.barh(labels[::-1], values[::-1], color="#4c72b0")
        for y, v in enumerate(values[::-1]):
            ax.text(v, y, f" {v:,}", va="center", fontsize=9)
        ax.set_xlabel("rows")
        ax.set_title("Rows through the pipeline")
        ax.set_xlim(0, max(values) * 1.15 or 1)
        made.append(_save(fig, out / "waterfall.png"))

    diff = card.get("difficulty")
    if diff:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ks = list(diff["histogram"])
        ax.bar(ks, [diff["histogram"][k] for k in ks], color="#55a868")
        ax.set_xlabel(f"correct samples of k = {diff['k']}")
        ax.set_ylabel("problems")
        ax.set_title(f"Pass counts ({diff['model']}, T = {diff['temperature']})")
        made.append(_save(fig, out / "pass_counts.png"))
        levels = {lv: v for lv, v in diff["pass_rate_by_level"].items() if v}
        if len(levels) >= 2 and diff.get("spearman_rho_pass_rate_vs_level") is not None:
            order = sorted(levels, key=lambda x: (_num(x), x))
            fig, ax = plt.subplots(figsize=(7, 3.2))
            ax.boxplot([levels[lv] for lv in order], tick_labels=order)
            rho = diff.get("spearman_rho_pass_rate_vs_level")
            ax.set_title(f"Pass rate by declared level (Spearman rho = {rho})")
            ax.set_ylabel("pass rate")
            ax.set_ylim(-0.05, 1.05)
            made.append(_save(fig, out / "pass_rate_by_level.png"))
        rel = (diff.get("sequential") or {}).get("reliability")
        if rel and rel.get("bins"):
            fig, ax = plt.subplots(figsize=(4.6, 4.2))
            ax.plot([0, 1], [0, 1], color="#999999", lw=1, ls="--", label="calibrated")
            xs, ys = [b["mean_mass"] for b in rel["bins"]], [b["share_right"] for b in rel["bins"]]
            ax.plot(xs, ys, marker="o", color="#c44e52", label=f"this run's rule (ECE {rel['ece']})")
            for b in rel["bins"]:
                ax.annotate(f"{b['problems']:,}", (b["mean_mass"], b["share_right"]), fontsize=6,
                            textcoords="offset points", xytext=(3, -9))
            ax.set_xlim(0, 1.02)
            ax.set_ylim(0, 1.02)
            ax.set_xlabel("mass given to the bucket chosen")
            ax.set_ylabel("share whose bucket is the true one")
            ax.set_title("Bucket masses: reliability (model of this run)", fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
            made.append(_save(fig, out / "reliability.png"))

    src = card.get("sources", {})
    if src:
        fig, ax = plt.subplots(figsize=(8.5, 1.1 + 0.45 * len(src)))
        names = list(src)[::-1]
        ax.barh(names, [src[n]["in"] for n in names], color="#c4c4c4", label="rows in")
        ax.barh(names, [src[n]["final"] for n in names], color="#4c72b0", label="in the clean set")
        for y, n in enumerate(names):
            ax.text(src[n]["in"], y, f" {src[n]['final']:,} / {src[n]['in']:,}", va="center", fontsize=8)
        ax.set_xlabel("rows")
        ax.set_xlim(0, max(src[n]["in"] for n in names) * 1.3 or 1)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
        ax.set_title("Sources: rows in and in the clean set")
        made.append(_save(fig, out / "sources.png"))

    cur = card.get("curriculum")
    if cur and cur.get("by_bucket"):
        fig, ax = plt.subplots(figsize=(7, 3))
        b = list(cur["by_bucket"])
        x = range(len(b))
        ax.bar([i - 0.2 for i in x], [cur["by_bucket"][k]["asked"] for k in b], width=0.4, label="asked", color="#c4c4c4")
        ax.bar([i + 0.2 for i in x], [cur["by_bucket"][k]["taken"] for k in b], width=0.4, label="taken", color="#4c72b0")
        ax.set_xticks(list(x), b)
        ax.set_ylabel("rows")
        ax.legend(fontsize=8)
        ax.set_title(f"Target vs achieved ({cur['target']})")
        made.append(_save(fig, out / "buckets.png"))
    return [f"{out.name}/{m}" for m in made]


def _num(x: str) -> float:
    v = _level_number(x)
    return v if v is not None else float("inf")


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


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
    p = []
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
    if card.get("sources"):
        p.append("## Sources\n")
        p.append(_table(["source", "rows in", "after ingest", "in the clean set", "license"],
                        [[s, v["in"], v["after_ingest"], v["final"], v["license"]] for s, v in card["sources"].items()]))
        pins = [r for v in card["sources"].values() for r in v.get("revisions", [])]
        if pins:
            p.append("\nRead from the Hub at these commits: " + "; ".join(f"`{r['source']}` at `{r['commit']}`"
                                                                         for r in pins) + ".")
        p.append("")
    if card.get("waterfall"):
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
    if card.get("duplicates"):
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
    if card.get("contamination"):
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
    if card.get("final_set"):
        f = card["final_set"]
        p.append("## The clean set\n")
        p.append(f"{f['rows']:,} rows. Answer types: {_kv(f['answer_types'])}. Declared levels: {_kv(f['declared_levels'])}.\n")
    if card.get("difficulty"):
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
    if card.get("curriculum"):
        c = card["curriculum"]
        p.append("## Selection and curriculum\n")
        p.append(f"Target: {c['target']}.\n")
        p.append(_table(["bucket", "available", "asked", "taken", "short"],
                        [[b, v["available"], v["asked"], v["taken"], v["short"]] for b, v in c["by_bucket"].items()]))
        p.append(f"\nLeft out: {_kv(c['excluded'])}; asked but unfilled: {c['unfilled']}. Stages: "
                 + ", ".join(f"{s['folder']} ({s['rows']} rows, mean pass rate {s['pass_rate_mean']})" for s in c["stages"])
                 + ".\n")
    if plots:
        p.append("## Plots\n")
        p += [f"![{Path(x).stem}]({x})\n" for x in plots]
    p.append("## Provenance\n")
    p.append(_table(["stage", "folder", "created", "gradus", "config", "inputs"],
                    [[s["stage"], s["folder"], s["created"], s["code_version"], s["config_hash"], s["input_hash"]]
                     for s in card["provenance"]]))
    p.append("\nConfigs, input fingerprints and the sha256 of every shard are in `card.json` and each stage's manifest.\n")
    return "\n".join(p)


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
    _check_target(out)
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


def _rows_of(card: dict) -> dict[str, tuple[bool, int | None, int | None]]:
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
    """``_rows_of(card)`` as ``card_rows.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows_of(card)
    table = pa.table({"id": pa.array(list(rows), pa.string()), "final": pa.array([r[0] for r in rows.values()]),
                      "n_correct": pa.array([r[1] for r in rows.values()], pa.int64()),
                      "k": pa.array([r[2] for r in rows.values()], pa.int64())})
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def _check_target(out: Path) -> None:
    """Never overwrite a README.md or plots/ that is not a gradus card's (``card.json`` beside it says it is)."""
    if (out / CARD_JSON).is_file():
        try:
            if json.loads((out / CARD_JSON).read_text()).get("card_version") is not None:
                return
        except (json.JSONDecodeError, AttributeError):
            pass
    mine = [n for n in (README, PLOTS) if (out / n).exists()]
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


# ------------------------------------------------------------------------------------------ terminal
def show_text(card: dict) -> str:
    """The card for a terminal: the waterfall, sources, contamination, difficulty histogram as bars."""
    lines = [f"{card['name']}  ({card['folder']})"]
    for s in card.get("waterfall", []):
        removed = ", ".join(f"{r} {n:,}" for r, n in sorted(s["removed"].items(), key=lambda kv: -kv[1])) or "nothing"
        lines.append(f"  {s['stage']:<9} {s['rows_in']:>9,} -> {s['rows_out']:>9,}   removed: {removed}")
    for src, v in card.get("sources", {}).items():
        lines.append(f"  source {src}: {v['in']:,} in, {v['final']:,} in the clean set ({v['license']})")
    if card.get("duplicates"):
        d = card["duplicates"]
        lines.append(f"  duplicates: {d['exact']:,} exact, {d['near']:,} near, {d['clusters']:,} clusters")
        if (d.get("gold_conflicts") or {}).get("clusters"):
            g = d["gold_conflicts"]
            lines.append(f"  gold conflicts: {g['clusters']:,} problems with two golds ({g['rows']:,} rows, {g['policy']})")
    if card.get("contamination"):
        lines.append(f"  contamination: {card['contamination']['by_benchmark'] or 'none found'}")
    if card.get("difficulty"):
        d = card["difficulty"]
        lines.append(f"  difficulty: {d['rows']} problems, k={d['k']}, {d['model']}, T={d['temperature']}; "
                     f"rho vs level {d['spearman_rho_pass_rate_vs_level']}")
        top = max(d["histogram"].values()) or 1
        for k, n in d["histogram"].items():
            lines.append(f"    {k:>3} correct | {'#' * round(30 * n / top):<30} {n}")
    if card.get("curriculum"):
        c = card["curriculum"]
        lines.append(f"  export: {c['rows']} rows ({c['target']}); "
                     + ", ".join(f"{b} {v['taken']}/{v['asked']}" for b, v in c["by_bucket"].items()))
    return "\n".join(lines)


def _card_folder(p: Path) -> Path:
    """A flow's run folder (``OUT/runs/<t>``, ``OUT/latest``) is described by its ``card/``."""
    p = Path(p)
    return p / "card" if (p / "card" / CARD_JSON).is_file() and not (p / "manifest.json").exists() else p


def card_rows(folder: str | Path) -> dict[str, tuple[bool, int | None, int | None]]:
    """id -> (in the card's result, n_correct, k) for the rows a card describes: its ``card_rows.parquet`` (a card
    written away from its data), else ``_rows_of`` the card built from the folder's stage outputs (a folder with
    neither raises ``ManifestError``: a saved ``card.json``'s paths are not this machine's to read)."""
    import pyarrow.parquet as pq

    folder = _card_folder(Path(folder))
    if (folder / ROWS).is_file():
        return {r["id"]: (r["final"], r["n_correct"], r["k"]) for r in pq.read_table(folder / ROWS).to_pylist()}
    return _rows_of(build_card(folder))


def diff_cards(old: str | Path, new: str | Path) -> dict:
    """What changed from the run ``old`` to ``new``, in pipeline order: rows per source, rows and reasons per stage,
    contamination, the rows added and removed by id, how many rows each side scored, and the difficulty compared
    only over the problems scored on both sides (a changed sample is not a change of difficulty). Figures that did
    not change are left out. ``old``/``new``: run folders, stage outputs, exports, or a flow's run folders."""
    old, new = _card_folder(Path(old)), _card_folder(Path(new))
    a, b = load_card(old), load_card(new)
    out: dict[str, Any] = {"old": str(old), "new": str(new)}

    def changed(x: dict, y: dict) -> dict:
        keys = list(dict.fromkeys([*x, *y]))  # the order the cards list them in: pipeline order, then new keys
        return {k: [x.get(k, 0), y.get(k, 0)] for k in keys if x.get(k, 0) != y.get(k, 0)}

    sa, sb = a.get("sources", {}), b.get("sources", {})
    src = {s: changed({k: v for k, v in sa.get(s, {}).items() if isinstance(v, int)},
                      {k: v for k, v in sb.get(s, {}).items() if isinstance(v, int)}) for s in dict.fromkeys([*sa, *sb])}
    out["sources"] = {s: v for s, v in src.items() if v}
    wa = {s["stage"]: s for s in a.get("waterfall", [])}
    wb = {s["stage"]: s for s in b.get("waterfall", [])}
    stages = {}
    for st in dict.fromkeys([*wa, *wb]):
        x, y = wa.get(st, {}), wb.get(st, {})
        d = changed({"rows_in": x.get("rows_in", 0), "rows_out": x.get("rows_out", 0), **x.get("removed", {})},
                    {"rows_in": y.get("rows_in", 0), "rows_out": y.get("rows_out", 0), **y.get("removed", {})})
        if d:
            stages[st] = d
    out["stages"] = stages
    out["contamination"] = changed(a.get("contamination", {}).get("by_benchmark", {}),
                                   b.get("contamination", {}).get("by_benchmark", {}))
    da, db = a.get("difficulty", {}), b.get("difficulty", {})
    out["difficulty"] = {k: [da.get(k), db.get(k)] for k in ("model", "model_revision", "template", "k", "temperature",
                                                              "max_tokens") if da.get(k) != db.get(k)}
    ca, cb = a.get("curriculum", {}), b.get("curriculum", {})
    out["export"] = {k: [ca.get(k), cb.get(k)] for k in ("format", "template", "target", "rows") if ca.get(k) != cb.get(k)}
    out["export_buckets"] = changed({k: v["taken"] for k, v in ca.get("by_bucket", {}).items()},
                                    {k: v["taken"] for k, v in cb.get("by_bucket", {}).items()})
    try:
        ra, rb = card_rows(old), card_rows(new)
        have_rows = True
    except (ManifestError, FileNotFoundError):
        ra, rb, have_rows = {}, {}, False
    if have_rows:
        fa, fb = {i for i, r in ra.items() if r[0]}, {i for i, r in rb.items() if r[0]}
        out["rows_added"], out["rows_removed"] = sorted(fb - fa), sorted(fa - fb)
        ka, kb = {i: r for i, r in ra.items() if r[1] is not None}, {i: r for i, r in rb.items() if r[1] is not None}
        both = sorted(set(ka) & set(kb))
        out["scored"] = {"old": len(ka), "new": len(kb), "both": len(both), "added": len(set(kb) - set(ka)),
                         "removed": len(set(ka) - set(kb))}
        from collections import Counter

        ha = Counter(str(ka[i][1]) for i in both)
        hb = Counter(str(kb[i][1]) for i in both)
        order = sorted(set(ha) | set(hb), key=int)
        out["difficulty_histogram"] = changed({k: ha.get(k, 0) for k in order}, {k: hb.get(k, 0) for k in order})
        out["pass_count_changed"] = sum(1 for i in both if ka[i][1:] != kb[i][1:])
    return {k: v for k, v in out.items() if v not in ({}, None) or k in ("old", "new", "rows_added", "rows_removed")}


def diff_text(d: dict, show_ids: int = 5) -> str:
    lines = [f"{d['old']} -> {d['new']}"]
    for s, v in d.get("sources", {}).items():
        lines.append(f"  source {s}: " + ", ".join(f"{k} {x:,} -> {y:,}" for k, (x, y) in v.items()))
    for st, v in d.get("stages", {}).items():
        lines.append(f"  {st}: " + ", ".join(f"{k} {x:,} -> {y:,}" for k, (x, y) in v.items()))
    if d.get("contamination"):
        lines.append("  contamination: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d["contamination"].items()))
    for key in ("difficulty", "export"):
        if d.get(key):
            lines.append(f"  {key}: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d[key].items()))
    if d.get("export_buckets"):
        lines.append("  export rows by bucket: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d["export_buckets"].items()))
    for what in ("added", "removed"):
        ids = d.get(f"rows_{what}")
        if ids:
            lines.append(f"  rows {what} {len(ids):,}: " + ", ".join(ids[:show_ids]) + (", ..." if len(ids) > show_ids else ""))
    sc = d.get("scored")
    if sc and (sc["added"] or sc["removed"] or d.get("difficulty_histogram")):
        lines.append(f"  scored {sc['old']:,} -> {sc['new']:,} rows ({sc['both']:,} in both, {sc['added']:,} newly scored, "
                     f"{sc['removed']:,} no longer)")
    if d.get("difficulty_histogram"):
        lines.append(f"  pass counts over the {d['scored']['both']:,} problems scored in both ({d['pass_count_changed']:,} "
                     "changed): " + ", ".join(f"{k} correct {x} -> {y}" for k, (x, y) in d["difficulty_histogram"].items()))
    if len(lines) == 1:
        lines.append("  no change")
    return "\n".join(lines)


__all__ = ["build_card", "diff_cards", "diff_text", "load_card", "make_plots", "show_text", "write_card"]
