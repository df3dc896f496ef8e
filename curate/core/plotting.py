"""matplotlib without a display: what every figure gradus draws (cards, training runs) starts from."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
