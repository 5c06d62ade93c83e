"""Charts of the reports (matplotlib, SVG or PNG by suffix); the traces' headroom chart is harness/explain/chart.py."""

from __future__ import annotations

from pathlib import Path


def drift_chart(rows: list, steps: list, path: Path, title: str) -> Path:
    """A run's numbers release by release (`drift.rows`), as SVG or PNG (by suffix).

    Top: the fp16 headroom (max |x| / 65504) with the ceiling at 1.0. Bottom:
    1 - worst cosine on a log axis where any release was compared with a
    reference (an exact match drawn at the bottom, the noise floor dotted),
    else max |x|. A release where a step ends (`drift.steps`) gets a vertical
    line in both panels; a release that did not run, an x at the bottom of
    both; one that ran without the panel's number (no finite value), an x at
    the top edge in the line's colour.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.report.drift import ABS_FLOOR

    xs = list(range(len(rows)))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, 0.45 * len(rows) + 2), 6))

    def draw(ax, values, color, label=None):
        pts = [(x, v) for x, v in zip(xs, values) if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=label)
        lost = [x for x, v, r in zip(xs, values, rows) if v is None and r.status == "ran"]
        if pts and lost:  # the number went away where the release ran: non-finite
            ax.scatter(lost, [0.98] * len(lost), marker="x", s=60, color=color,
                       transform=ax.get_xaxis_transform(), clip_on=False)
        return pts

    rooms = [r.headroom for r in rows]
    if draw(top, rooms, "tab:blue", "fp16 headroom"):
        top.set_ylim(0, max(1.1, max(v for v in rooms if v is not None) * 1.05))
    else:
        top.text(0.5, 0.5, "no fp16 output", transform=top.transAxes, ha="center", va="center", color="grey")
        top.set_ylim(0, 1.1)
    top.axhline(1.0, color="grey", linestyle="--", linewidth=0.8, label="fp16 ceiling (65504)")
    top.set_ylabel("max |x| / 65504")
    top.legend(loc="upper left")

    if any(r.cosine_min is not None for r in rows):
        lowest = ABS_FLOOR / 1000  # an exact match (distance 0, or rounding at 1e-16) is drawn here
        draw(bottom, [None if r.cosine_min is None else max(1.0 - r.cosine_min, lowest) for r in rows], "tab:orange")
        bottom.axhline(ABS_FLOOR, color="grey", linestyle=":", linewidth=0.8)
        bottom.set_yscale("log")
        bottom.set_ylabel("1 - worst cosine")
    else:
        maxes = [r.max_abs for r in rows]
        pts = draw(bottom, maxes, "tab:orange")
        if pts and min(p[1] for p in pts) > 0 and max(p[1] for p in pts) > 100 * min(p[1] for p in pts):
            bottom.set_yscale("log")
        bottom.set_ylabel("max |x|")

    at = {r.version: x for x, r in zip(xs, rows)}
    for x in sorted({at[s.to_version] for s in steps if s.to_version in at}):
        for ax in (top, bottom):
            ax.axvline(x, color="tab:red", linestyle=":", linewidth=1.0)
    failed = [x for x, r in zip(xs, rows) if r.status != "ran"]
    for ax in (top, bottom):
        if failed:  # at the bottom edge whatever the scale
            ax.scatter(failed, [0.02] * len(failed), marker="x", s=60, color="tab:red",
                       transform=ax.get_xaxis_transform(), clip_on=False)
    bottom.set_xlim(-0.5, max(len(rows), 1) - 0.5)
    bottom.set_xticks(xs)
    bottom.set_xticklabels([r.version for r in rows], rotation=45, ha="right")
    bottom.set_xlabel("onnxruntime release" + ("  (red x: did not run; red dotted: a step)" if failed or steps else ""))
    top.set_title(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def profile_chart(prof: dict, path: Path, top: int = 8) -> Path:
    """The boundary pair's kernel time per run of the op types that changed most (harness.explain.profile), as
    paired horizontal bars, SVG or PNG by suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = prof["ops"][:top][::-1]
    ys = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.5))
    ax.barh([y + 0.2 for y in ys], [r["old_us"] / 1e3 for r in rows], height=0.4, color="#4c72b0", label=prof["old"])
    ax.barh([y - 0.2 for y in ys], [r["new_us"] / 1e3 for r in rows], height=0.4, color="#dd8452", label=prof["new"])
    ax.set_yticks(ys, [r["op"] for r in rows])
    ax.set_xlabel("kernel time per run (ms, median over warm runs)")
    ax.set_title(f"Where the time went: {prof['old']} -> {prof['new']}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
