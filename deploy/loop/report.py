"""The cycle report: one directory per cycle, `<data_dir>/reports/cycle-<id>/`, with
`report.json` (everything the cycle recorded), `report.md` and `report.html` (the same for people)
and one SVG plot per gate axis showing that metric across releases.

Design choices:
- Plots are hand-written inline SVG, not matplotlib: matplotlib is not a dependency of the app,
  and a polyline per axis needs none. The HTML page embeds them, so it is one self-contained
  file an operator can open or mail; the Markdown links the `.svg` files next to it.
- The metrics of a release come from what the gate stored: the candidate values of its decision
  (`axes[*].candidate`), and for the release that was live during this cycle, the live values the
  gate measured beside the candidate. Nothing is re-evaluated here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.release.gate import AXES
from store import Release, Store

LABELS = {"helpfulness": "Helpfulness", "harmlessness": "Harmlessness (model alone)",
          "served_harmlessness": "Harmlessness as served (guard and safety policy)", "hh_accuracy": "HH accuracy",
          "self_bleu": "Self-BLEU (lower is more diverse)", "steerability": "Steerability (Spearman rho)"}
MAX_RELEASES = 30  # the plots stay readable; older releases are in the registry


def report_dir(data_dir: Path, cycle_id: str) -> Path:
    return Path(data_dir) / "reports" / f"cycle-{cycle_id}"


def _axis_values(decision: dict, side: str) -> dict[str, float]:
    """Metric values of one side ("candidate" / "live") of a stored gate decision."""
    out: dict[str, float] = {}
    for axis in decision.get("axes") or []:
        if isinstance(axis, dict) and axis.get(side) is not None and axis.get("axis") in AXES:
            out[axis["axis"]] = float(axis[side])
    flat = decision.get(side)
    if isinstance(flat, dict):
        out.update({k: float(v) for k, v in flat.items() if k in AXES and isinstance(v, (int, float))})
    return out


def release_metrics(store: Store, current: dict | None = None) -> list[dict[str, Any]]:
    """Releases oldest first, each with the gate axes measured for it (possibly none).

    `current`: this cycle's gate outcome (`{"release_id", "candidate", "live", "live_release_id"}`),
    whose live values belong to the release that was live while it ran."""
    releases: list[Release] = list(reversed(store.releases.list(limit=MAX_RELEASES)))
    rows = [{"id": r.id, "status": r.status, "created_at": r.created_at.isoformat() if r.created_at else None,
             "metrics": _axis_values(r.decision or {}, "candidate")} for r in releases]
    if current:
        by_id = {row["id"]: row for row in rows}
        cand = by_id.get(current.get("release_id"))
        if cand is not None:
            cand["metrics"] = {**_axis_values(current, "candidate"), **cand["metrics"]}
        live = by_id.get(current.get("live_release_id"))
        if live is not None:
            live["metrics"] = {**_axis_values(current, "live"), **live["metrics"]}
    return rows


def svg_line(title: str, labels: Sequence[str], values: Sequence[float | None], *, width: int = 420,
             height: int = 220) -> str:
    """A small line chart; missing values leave a gap in the line."""
    pad_l, pad_r, pad_t, pad_b = 46, 12, 26, 40
    known = [v for v in values if v is not None]
    esc = html.escape
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
            f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{esc(title)}</text>')
    if not known:
        return head + f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">not measured yet</text></svg>'
    lo, hi = min(known), max(known)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    n = len(values)

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad_l + (plot_w * (i / (n - 1)) if n > 1 else plot_w / 2)
        return x, pad_t + plot_h * (1 - (v - lo) / (hi - lo))

    parts = [head, f'<rect x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
             f'<text x="{pad_l - 4}" y="{pad_t + 4}" text-anchor="end">{hi:.3f}</text>',
             f'<text x="{pad_l - 4}" y="{pad_t + plot_h}" text-anchor="end">{lo:.3f}</text>']
    segment: list[str] = []
    for i, v in enumerate(list(values) + [None]):
        if v is None:
            if len(segment) > 1:
                parts.append(f'<polyline fill="none" stroke="#2563eb" stroke-width="2" points="{" ".join(segment)}"/>')
            segment = []
            continue
        x, y = xy(i, v)
        segment.append(f"{x:.1f},{y:.1f}")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#2563eb"><title>{esc(labels[i])}: {v:.4f}'
                     "</title></circle>")
    for i, label in enumerate(labels):
        x, _ = xy(i, lo)
        parts.append(f'<text x="{x:.1f}" y="{height - pad_b + 14}" text-anchor="middle">{esc(label[:10])}</text>')
    return "".join(parts) + "</svg>"


def _steps_markdown(steps: list[dict]) -> list[str]:
    lines = ["| step | status | note |", "|---|---|---|"]
    for s in steps:
        note = (s.get("error") or s.get("note") or "").replace("|", "/").replace("\n", " ")
        lines.append(f"| {s['step']} | {s['status']} | {note[:200]} |")
    return lines


def _num(x: Any, signed: bool = False) -> str:
    return "-" if x is None else (f"{x:+.3f}" if signed else f"{x:.3f}")


def _axes_markdown(axes: list[dict]) -> list[str]:
    """One row per gate axis: the numbers the decision rule read (gate.py's non-inferiority)."""
    lines = ["| axis | candidate | live | Δ | 95% CI | n | tolerance | floor | result |", "|---|---|---|---|---|---|---|---|---|"]
    for a in axes:
        ci = f"[{_num(a.get('low'), True)}, {_num(a.get('high'), True)}]" if a.get("low") is not None else "-"
        lines.append(f"| {a.get('axis')} | {_num(a.get('candidate'))} | {_num(a.get('live'))} | "
                     f"{_num(a.get('diff'), True)} | {ci} | {a.get('n') or '-'} | {_num(a.get('tolerance'))} | "
                     f"{_num(a.get('floor'))} | {'pass' if a.get('passed') else 'FAIL'} |")
    return lines


def write_report(data_dir: Path, cycle: dict[str, Any], store: Store) -> Path:
    """Write the cycle's report files; returns the directory. `cycle` is `CycleResult.as_dict()`."""
    out = report_dir(data_dir, cycle["cycle_id"])
    out.mkdir(parents=True, exist_ok=True)
    gate = cycle.get("gate") or {}
    releases = release_metrics(store, gate)
    labels = [r["id"][:10] for r in releases]
    plots = {axis: svg_line(LABELS[axis], labels, [r["metrics"].get(axis) for r in releases]) for axis in AXES}
    for axis, svg in plots.items():
        (out / f"{axis}.svg").write_text(svg)
    report = {**cycle, "releases": releases, "plots": {axis: f"{axis}.svg" for axis in AXES}}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")

    reasons = gate.get("reasons") or []
    md = [f"# Cycle {cycle['cycle_id']}: {cycle['status']}", "", cycle.get("message", ""), "",
          f"Method **{cycle.get('method')}**, training run `{cycle.get('run_id') or '-'}`, "
          f"candidate release `{cycle.get('release_id') or '-'}`.", "", "## Steps", "", *_steps_markdown(cycle["steps"])]
    if reasons:
        md += ["", "## Gate decision", "", *[f"- {r}" for r in reasons]]
    axes = (gate.get("decision") or {}).get("axes") or []
    if axes:
        md += ["", "## Gate axes: candidate, live, and the 95% paired bootstrap interval of candidate − live", "",
               *_axes_markdown(axes)]
    card = cycle.get("dataset") or {}
    if card:
        md += ["", "## Training set", "", f"{card.get('n_train', 0)} train + {card.get('n_eval', 0)} eval rows; "
               f"safety filter `{card.get('safety_filter')}` removed {card.get('removed_by_filter', 0)}."]
    md += ["", "## Metrics across releases", "", *[f"![{LABELS[a]}]({a}.svg)" for a in AXES], "",
           "| release | status | " + " | ".join(AXES) + " |", "|---|---|" + "---|" * len(AXES)]
    for r in releases:
        vals = [f"{r['metrics'][a]:.3f}" if a in r["metrics"] else "-" for a in AXES]
        md.append(f"| {r['id'][:12]} | {r['status']} | " + " | ".join(vals) + " |")
    (out / "report.md").write_text("\n".join(md) + "\n")

    body = "\n".join(md[: md.index("## Metrics across releases")])
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Cycle {html.escape(cycle['cycle_id'])}"
            "</title></head><body style='font-family:sans-serif;max-width:60em;margin:auto'>"
            f"<pre style='white-space:pre-wrap'>{html.escape(body)}</pre><h2>Metrics across releases</h2>"
            + "".join(plots.values()) + "</body></html>")
    (out / "report.html").write_text(page)
    return out


def read_report(path: str | Path | None) -> dict[str, Any]:
    """A report.json from its directory; {} when there is none (yet)."""
    if not path:
        return {}
    try:
        return json.loads((Path(path) / "report.json").read_text())
    except (OSError, ValueError):
        return {}
