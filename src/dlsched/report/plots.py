"""Figures as inline SVG (matplotlib, headless), for self-contained HTML pages."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
# the same runs give the same page: SVG ids from a fixed salt, not a random one
matplotlib.rcParams["svg.hashsalt"] = "dlsched"
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..perf.measurements import pollux_apps  # noqa: E402
from ..perf.scaling import scaling_model  # noqa: E402
from ..perf.validation import consolidated_curve  # noqa: E402


def svg_of(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def scaling_figure_svg() -> str:
    """Measured vs modelled throughput by GPU count, one panel per application."""
    apps = pollux_apps()
    fig, axes = plt.subplots(2, 3, figsize=(10, 5.5))
    for ax, app in zip(axes.flat, apps):
        fit = scaling_model(app)
        batch, measured = consolidated_curve(app)
        gpus = [g for g, _, _ in measured]
        ax.plot(gpus, [t for _, _, t in measured], "o", markersize=3, label="measured")
        ax.plot(
            gpus, [fit.throughput(batch, g, nodes) for g, nodes, _ in measured], "-", label="model"
        )
        ax.set_title(f"{app} (per-GPU batch {batch:g})", fontsize=9)
        ax.set_xlabel("GPUs", fontsize=8)
        ax.set_ylabel("samples/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(
        "Performance model: measured (Pollux) vs modelled scaling, fewest nodes per GPU count",
        fontsize=10,
    )
    fig.tight_layout()
    return svg_of(fig)
