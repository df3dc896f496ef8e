"""Data cards: a Hugging Face dataset card for a run folder, a stage output or an export, built from manifests and
shards alone (``card.py`` gathers the figures, ``render.py`` writes README.md and card.json, ``plots.py`` the figures,
``view.py`` shows and diffs cards)."""
