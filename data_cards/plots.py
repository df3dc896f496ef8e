"""A card's figures as PNG files (matplotlib, headless): the waterfall, pass-rate histograms, the sequential
estimator's reliability."""

from __future__ import annotations

from pathlib import Path

from curate.core.plotting import pyplot
from data_cards.card import level_number


# ---------------------------------------------------------------------------------------------- plots
def make_plots(card: dict, out: Path) -> list[str]:
    """The card's figures as PNGs under ``out``; returns their file names (relative to ``out``'s parent)."""
    plt = pyplot()
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
    v = level_number(x)
    return v if v is not None else float("inf")


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name
