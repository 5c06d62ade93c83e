"""The headroom chart of traces, written next to a run's evidence (matplotlib, SVG or PNG by suffix)."""

from __future__ import annotations

from pathlib import Path

from harness.explain.trace import TraceResult


def headroom_chart(result: TraceResult | list[TraceResult], path: Path) -> Path:
    """Per-layer residual headroom (max |x| / 65504) as SVG or PNG (by suffix).

    Several traces (e.g. the two sides of a diff) are drawn on one chart.
    Non-finite layers are drawn at the top edge with an x. Without
    `/model/layers.<i>/` residual Adds, every fp16 tensor is drawn by
    topological position instead.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = result if isinstance(result, list) else [result]
    fig, ax = plt.subplots(figsize=(8, 4))
    top = 1.2
    per_layer = any(r.residual for r in results)
    for r in results:
        if per_layer:
            xs = [d["layer"] for d in r.residual]
            ys = [top if d["nonfinite"] else (d["headroom"] or 0.0) for d in r.residual]
            bad = [(x, y) for x, y, d in zip(xs, ys, r.residual) if d["nonfinite"]]
        else:
            pts = [(i, top if t.nonfinite else t.headroom) for i, n in enumerate(r.nodes) for t in n.outputs
                   if t.available and t.dtype == "float16" and (t.headroom is not None or t.nonfinite)]
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            bad = [p for p in pts if p[1] == top]
        line, = ax.plot(xs, [min(y, top) for y in ys], marker="o", label=f"onnxruntime {r.version} ({r.verdict})")
        if bad:
            ax.scatter([p[0] for p in bad], [top for _ in bad], marker="x", s=80, color=line.get_color())
    for level, style in ((0.5, ":"), (0.9, "--"), (1.0, "-")):
        ax.axhline(level, color="grey", linestyle=style, linewidth=0.8)
    ax.set_ylim(0, top + 0.05)
    ax.set_xlabel("layer" if per_layer else "node (topological order)")
    ax.set_ylabel("max |x| / 65504")
    ax.set_title("fp16 headroom of the residual stream" if per_layer else "fp16 headroom per tensor")
    ax.legend(loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
