"""Everything the commands show on a terminal: tables, progress lines, colours.

Logic modules return data; only commands call these, and only these print
through rich. Every name, reason and message read back from a run's evidence
is shown through `plain`: no markup of it is read, and no control character
(an ANSI escape sequence, a newline) reaches the terminal raw.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from harness.metrics import cosine_said, cosine_text, ratio_text
from harness.report.escape import printable
from harness.report.terminal_table import KEY, FitTable
from harness.summary import target_label

if TYPE_CHECKING:  # the trace and diff tables' types; `bisect run` needs neither module (onnx) to draw its table
    from harness.explain.diff import DiffResult
    from harness.explain.trace import TraceResult

VERDICT_STYLE = {"good": "green", "bad": "bold red", "skip": "yellow", "error": "magenta",
                 "crash": "bold magenta", "timeout": "magenta", "nondeterministic": "cyan", "inconclusive": "yellow"}


def plain(text) -> str:
    """Text of the evidence as rich markup that shows it as it is: control characters made printable
    (harness.report.escape.printable), markup escaped."""
    return escape(printable("" if text is None else text))


def verdict(v: str | None) -> str:
    """A verdict word in its colour (rich markup)."""
    return f"[{VERDICT_STYLE.get(v or '', 'dim')}]{plain(v or '-')}[/]"


def _target(prov: dict) -> str:
    return plain(target_label(prov or {}))


# --- searches ------------------------------------------------------------------------------


def eta_text(seconds: list[float], left: int) -> str:
    """"about 40 s left": `left` more steps at the median pace of `seconds`, the steps made so far (none: "")."""
    return f"about {max(left, 0) * sorted(seconds)[len(seconds) // 2]:.0f} s left" if seconds else ""


def elapsed_text(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s elapsed" if seconds >= 60 else f"{int(seconds)} s elapsed"


class ProbeLines:
    """One line per finished probe on a console, with a spinner for the probes in flight.

    The spinner is drawn on a terminal only: elsewhere rich would still rebuild it ten times a
    second in a thread of its own, for nobody, while the probes run; `starts` then gives a plain line
    as each probe begins instead (a matrix's emulated probe may take minutes with nothing else to show).
    """

    def __init__(self, console: Console, prefix: str = "", spinner: bool = True, starts: bool = False):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console, self.prefix, self.count = console, prefix, 0
        self.at_most: int | None = None  # probes in all, at most, as the search last said (Observer.expect)
        self.step: str | None = None  # what that bound is of, when it is one step's (a reduction's rows)
        self.made_s: list[float] = []  # seconds of each probe made now (not reused): the ETA's pace
        self.began = time.monotonic()
        drawn = spinner and console.is_terminal
        self.starts = starts and not drawn
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=console, transient=True, disable=not drawn)
        self.tasks = {}

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def expect(self, left: int | None, step: str | None = None) -> None:
        self.at_most, self.step = (None if left is None else self.count + left), step

    def _position(self, i: int) -> str:
        """"3 of at most 7": where the search stands (a bisection knows its bound)."""
        return f"{i} of at most {max(self.at_most, i)}" if self.at_most is not None else f"{i}"

    def _plan(self, i: int) -> str:
        """"12 s elapsed; about 40 s left", the ETA at the pace of the probes made so far, and of the step the
        bound is of (a step with no bound, as delta debugging: the time elapsed alone)."""
        eta = eta_text(self.made_s, self.at_most - i) if self.at_most is not None else ""
        eta += f" for {self.step}" if eta and self.step else ""
        return "; ".join(x for x in (elapsed_text(time.monotonic() - self.began), eta) if x)

    def probe_started(self, version: str) -> None:
        i = self.count + len(self.tasks) + 1
        plan = f"probe {self._position(i)}; {self._plan(i)}"
        self.tasks[version] = self.bar.add_task(f"probing {version} ({plan})", total=None)
        if self.starts:
            self.bar.console.print(f"{plain(self.prefix) + ' ' if self.prefix else ''}probing {plain(version)} ({plan})")

    def probe_waiting(self, version: str) -> None:
        self.bar.console.print(f"{plain(self.prefix) + ' ' if self.prefix else ''}{plain(version)}: another run is "
                               "probing it; waiting to reuse its record")

    def probe_finished(self, record: dict, reused: bool) -> None:
        self.count += 1
        task = self.tasks.pop(record["version"], None)
        if task is not None:
            self.bar.remove_task(task)
        if not reused and isinstance(record.get("seconds"), (int, float)):
            self.made_s.append(float(record["seconds"]))
        how = "; ".join(("saved" if reused else f"{record.get('seconds') or 0:.1f} s", self._plan(self.count)))
        if self.prefix:  # a matrix cell's lines: its prefix, and where its search stands in the parenthesis
            lead = f"{plain(self.prefix)} "
            how += f"; probe {self._position(self.count)}" if self.at_most is not None else ""
        else:
            lead = f"probe {self._position(self.count):>2}: "
        said = plain(record["said"]) if record.get("said") else (  # a reduction's: no verdict, not the release's error
            f"[{VERDICT_STYLE.get(record['verdict'], '')}]{plain(record['verdict']):<7}[/] {plain(record.get('why') or '')}")
        self.bar.console.print(f"{lead}{plain(record.get('package') or 'onnxruntime')} {plain(record['version']):<8} {said} ({how})")


def profile_table(doc: dict) -> Group | str:
    """The boundary pair under onnxruntime's profiler: its sentence, and the op types that changed most."""
    if doc.get("error"):
        return plain(f"No profile of {doc.get('old')} and {doc.get('new')}: {doc['error']}")
    t = FitTable(title=f"Where the time went: kernel time per run, {plain(doc['old'])} -> {plain(doc['new'])}",
              title_justify="left")
    for col, just, fit in (("op type", "left", None), (plain(doc["old"]), "right", KEY), (plain(doc["new"]), "right", KEY),
                           ("change", "right", KEY), ("ratio", "right", KEY)):
        t.add_column(col, just, fit)
    for r in doc["ops"][:8]:
        t.add_row(plain(r["op"]), f"{r['old_us'] / 1e3:.3f} ms", f"{r['new_us'] / 1e3:.3f} ms",
                  f"{r['change_us'] / 1e3:+.3f} ms", f"{r['ratio']:.2f}x" if r.get("ratio") else "new")
    return Group(plain(doc.get("message") or ""), t)


def _number(v, fmt) -> str:
    """`v` in `fmt`: a format spec, or "cosine" (metrics.cosine_text: one cosine reads the same everywhere)."""
    if fmt == "cosine":
        return cosine_text(v)
    return "-" if v is None else format(v, fmt)


def run_table(doc: dict) -> Table:
    """One row per probe; graded metrics (fp16 headroom, worst cosine with the reference) where probes have them."""
    prov = doc.get("provenance") or {}
    t = FitTable(title=f"{plain(prov.get('package') or 'onnxruntime')} probes · {_target(prov)}", title_justify="left")
    commits = any(p.get("commit") for p in doc["probes"])
    # the last number of each is its drop rank: on a narrow terminal the seconds give way first
    metric_cols = [(key, title, fmt, rank) for key, title, fmt, rank in (("headroom", "fp16 headroom", ".3f", 7),
                                                                         ("cosine_min", "worst cosine", "cosine", 6),
                                                                         ("abs_diff_max", "max |diff|", ".3g", 4))
                   if any((p.get("metrics") or {}).get(key) is not None for p in doc["probes"])]
    timed = [(key, title, rank) for key, title, rank in (("", "latency x baseline", 5), ("rss_", "memory x baseline", 2))
             if any(((p.get("metrics") or {}).get("timing") or {}).get(f"{key}ratio") is not None for p in doc["probes"])]
    for col, just, fit in (("release", "left", KEY), ("verdict", "left", KEY), ("NaN rows", "right", KEY),
                           ("Inf rows", "right", KEY), ("rows", "right", KEY),
                           *((title, "right", rank) for _, title, _, rank in metric_cols),
                           *((title, "right", rank) for _, title, rank in timed), ("seconds", "right", 1),
                           *((("commit", "left", 3),) if commits else ()), ("note", "left", None)):
        t.add_column(col, just, fit)
    for p in doc["probes"]:
        m = p.get("metrics") or {}
        kinds = {d.split("<")[0].split(">")[0] for d in p.get("decided_by") or ["nan"]}
        shown = p["verdict"] == "good" or (p["verdict"] == "bad" and kinds <= {"nan", "nan-or-inf", "cosine", "headroom"})
        note = "" if shown else (p.get("why") or "")  # the columns already say it
        counted = p["verdict"] != "skip"  # a skip's numbers are not the release's
        t.add_row(plain(p["version"]), verdict(p["verdict"]),
                  *(str(p[k] or 0) if counted else "-" for k in ("nan_rows", "inf_rows", "rows")),
                  *(cosine_said(m) if k == "cosine_min" else _number(m.get(k), fmt) for k, _, fmt, _ in metric_cols),
                  *(ratio_text(m.get("timing"), key) for key, _, _ in timed),
                  f"{p['seconds']:.2f}", *((plain(p.get("commit") or "-"),) if commits else ()),
                  ("saved; " if p["reused"] else "") + plain(note))
    return t


def compare_table(doc: dict) -> Table:
    """One row per PACKAGE:EP pair of `bisect compare`, the first the reference of the others."""
    t = FitTable(title=f"{plain(doc['model'])} · release {plain(doc['version'])} · {_target(doc.get('provenance'))}",
              title_justify="left")
    for col, just, fit in (("package:ep", "left", KEY), ("ran on", "left", 3), ("commit", "left", 1),
                           ("NaN rows", "right", KEY), ("Inf rows", "right", KEY), ("zero rows", "right", KEY),
                           ("max |x|", "right", 2), ("worst cosine vs first", "right", 5),
                           ("max |diff| vs first", "right", 4), ("", "left", None)):
        t.add_column(col, just, fit)
    for i, r in enumerate(doc["pairs"]):
        used = ", ".join(p.removesuffix("ExecutionProvider") for p in (r.get("providers") or {}).get("used") or [])
        if i == 0:
            note = "reference" if r["status"] == "ran" else f"[yellow]{plain(r['status'])}[/]: {plain(r.get('reason'))}"
        elif r.get("diverges"):
            note = f"[bold red]diverges[/]: {plain(r['why'])}"
        elif r.get("diverges") is None:
            note = f"[yellow]{plain(r['why'])}[/]"
        else:
            note = "[green]agrees[/]"
        cos = r.get("cosine_min_finite") if r.get("cosine_min_finite") is not None else r.get("cosine_min")
        t.add_row(plain(r["label"]), plain(used or "-"), plain(r.get("commit") or "-"), _number(r.get("nan_rows"), "d"),
                  _number(r.get("inf_rows"), "d"), _number(r.get("zero_rows"), "d"), _number(r.get("max_abs"), ".5g"),
                  "" if i == 0 else _number(cos, "cosine"), "" if i == 0 else _number(r.get("abs_diff_max"), ".3g"),
                  note)
    return t


def compare_range_table(doc: dict) -> Table:
    """`bisect compare --from --to`: a row per release, a column per pair; each compared pair's cell says whether
    it diverges from the reference there, with the worst cosine and the max |diff| (or why it was not compared)."""
    ref = doc["reference"]
    t = FitTable(title=f"{plain(doc['model'])} · {plain(doc['from'])} to {plain(doc['to'])} · "
                    f"{_target(doc.get('provenance'))}", title_justify="left",
              caption=f"{doc['probes']['made']} probes made, {doc['probes']['reused']} reused, "
                      f"{doc['seconds']:.1f} s; a compared cell: the worst cosine and the max |diff| against "
                      f"{plain(ref['label'])}",
              caption_justify="left")
    t.add_column("release", "left", KEY)
    t.add_column(f"{plain(ref['label'])} (reference)")
    for side in doc["pairs"]:
        t.add_column(plain(side["label"]))
    for i, v in enumerate(doc["releases"]):
        r = ref["releases"][i]
        if r.get("status") == "ran":
            first = f"NaN rows {_number(r.get('nan_rows'), 'd')}/{_number(r.get('rows'), 'd')}, max |x| " \
                    f"{_number(r.get('max_abs'), '.5g')}"
        else:
            first = f"[yellow]{plain(r.get('status') or 'not probed')}[/]: {plain(r.get('why'))}"
        cells = []
        for side in doc["pairs"]:
            e = side["releases"][i]
            numbers = f"{_number(e.get('cosine'), 'cosine')}  {_number(e.get('max_abs_diff'), '.3g')}"
            if e["diverges"]:
                cells.append(f"[bold red]diverges[/] {numbers}\n{plain(e['why'])}")
            elif e["diverges"] is None:
                cells.append(f"[yellow]{plain(e['why'])}[/]")
            else:
                cells.append(f"[green]agrees[/] {numbers}")
        t.add_row(plain(v), first, *cells)
    return t


def reduction_summary(doc: dict) -> str:
    """What `bisect reduce` kept, and how it was verified (rich markup)."""
    good, bad = doc["pair"]
    v, pos, c = doc["verified"]["verdicts"], doc["positions"], doc.get("candidates") or {}
    lines = [f"rows {doc['rows']['before']} -> {doc['rows']['after']} (kept {doc['rows']['kept']}), "
             f"nodes {doc['nodes']['before']} -> {doc['nodes']['after']}"
             + (f", positions {pos['before']} -> {pos['after']}" if pos.get("before") else "")]
    if doc["nodes"]["kept"]:
        lines.append("kept nodes: " + plain(", ".join(map(str, doc["nodes"]["kept"]))))
    if doc.get("rows", {}).get("axes"):
        lines.append("rows cut along " + plain(", ".join(f"{k} axis {a}" for k, a in doc["rows"]["axes"].items()
                                                          if a is not None)))
    lines += [f"{r['count']} candidates rejected: {plain(r['why'])}" for r in c.get("reasons") or []]  # no verdict
    probes = (f"{c['tried']} candidates tried, {c['rejected']} rejected; " if c else "") + \
        f"{doc['probes']['made']} probes ({doc['probes']['reused']} reused), {doc['seconds']:.1f} s"
    if doc.get("reduced") is False:  # nothing dropped: the full model and batch, said so rather than "verified"
        why = "; ".join(f"{k}: {w}" for k, w in (doc.get("not_reduced") or {}).items())
        lines.append(f"nothing reduced: {plain(why or 'no row and no node could be dropped')}")
    head = "the full model and batch" if doc.get("reduced") is False else "verified"
    lines.append(f"{head}: {plain(good)} {verdict(v[good])}, {plain(bad)} {verdict(v[bad])}; {probes}")
    return "\n".join(lines)


def blame_summary(doc: dict) -> str:
    """What `bisect blame` named: the transformers, the kernels, the commits (rich markup)."""
    lines = [plain(doc["text"])]
    for row in (doc.get("kernels") or {}).get("nodes") or []:
        k = row["bad"]
        lines.append(f"  {plain(k['node'])}: {plain(k['domain'])}:{plain(k['op_type'])} {plain(k['precision'])} on "
                     f"{plain(k['provider'] or '?')}, in {plain(','.join(k['inputs']))} -> {plain(','.join(k['outputs']))}")
    graphs = (doc.get("kernels") or {}).get("graphs")
    if graphs and (graphs["ops"] or graphs["inserted_casts"]["good"] != graphs["inserted_casts"]["bad"]):
        ops = ", ".join(f"{plain(o['op'])} {o['good']}->{o['bad']}" for o in graphs["ops"][:12])
        lines.append(f"optimized graphs {plain(doc['good'])} (good) -> {plain(doc['bad'])} (bad): {ops}; inserted Casts "
                     f"{graphs['inserted_casts']['good']}->{graphs['inserted_casts']['bad']}")
    commits = doc.get("commits")
    if commits:
        for c in commits["suspects"][:20]:
            pr = f" (#{c['pr']})" if c.get("pr") else ""
            lines.append(f"  {plain(c['sha'][:10])} {plain(c['date'])} {plain(c['subject'])}{'' if pr in c['subject'] else pr}")
    made = [p for p in doc["probes"] if not p["reused"]]
    lines.append(f"{len(doc['probes'])} probes ({len(made)} made now), {doc['seconds']:.1f} s")
    return "\n".join(lines)


def dev_builds_summary(doc: dict) -> str:
    """What the search into the development builds between the boundary releases found (rich markup): the
    builds' boundary and its commits, or that there was none to probe, and the builds skipped or untestable."""
    from harness.search import MODES

    old, new = MODES[doc["mode"]]
    d = doc["dev_builds"]
    lo, hi = (plain(v) for v in d["between"])
    skipped = "; ".join(f"{plain(s['version'])}: {plain(s['why'])}" for s in d["skipped"])
    counted = f"{d['probes']} probe{'s' if d['probes'] != 1 else ''} of {len(d['listed']) - len(d['skipped'])} builds; " \
              f"{len(d['skipped'])} skipped"
    if d["status"] == "none_between":
        return f"No development builds between {lo} and {hi} in the run's wheel sources: the boundary stays there."
    if d["status"] == "none_installable":
        return f"Into development builds between {lo} and {hi}: none of the {len(d['listed'])} listed can be " \
               f"installed (skipped: {skipped})."
    if d[f"first_{new}"] is None:
        return f"Into development builds between {lo} and {hi}: no boundary among them ({plain(d['status'])}; {counted})."
    lines = [f"Into development builds between {lo} and {hi}: last {old} {plain(d[f'last_{old}'])}, first {new} "
             f"{plain(d[f'first_{new}'])} ({counted})."]
    commits = d["commits"]
    if commits["compare"]:
        lines.append(f"commits {plain(commits[f'last_{old}'])} .. {plain(commits[f'first_{new}'])}: "
                     f"{plain(commits['compare'])}")
    if skipped:
        lines.append(f"skipped: {skipped}")
    if d["untestable"]:
        lines.append(f"untestable in between: {plain(', '.join(d['untestable']))}; the change is in one of them or "
                     f"at {plain(d[f'first_{new}'])}")
    return "\n".join(lines)


def rows_summary(doc: dict) -> str:
    """Which rows decided each probe of a fewest-rows search, and how the boundary was held to the full batch."""
    lines = []
    for s in doc["searches"]:
        probes = ", ".join(f"{plain(p['version'])} {verdict(p['verdict'])}" for p in s["probes"])
        lines.append(f"rows {plain(s['rows'])} of {doc['batch_rows']} ({plain(s['status'])}, run {plain(s['run_id'])}): "
                     f"{probes}")
    held = doc.get("verified_on_full_batch")
    if held:
        lg, fb = held["last_good"], held["first_bad"]
        groups = ", ".join(f"{len(g['rows'])} {verdict(g['verdict'])}" for g in lg["groups"])
        lines.append(f"{plain(lg['version'])}: every row of the batch ({lg['rows']}) ran, in {len(lg['groups'])} probes "
                     f"of similar length ({groups}); {plain(fb['version'])}: rows {plain(fb['bad_rows'])} of the batch are bad")
        same = held["rows_independent"]
        diffs = ", ".join(f"{plain(k)} {v:.3g}" for k, v in same["max_abs_diff"].items()) or "no output to compare"
        lines.append(f"rows alone and among the batch at {plain(lg['version'])}: "
                     + ("the same outputs" if same["same"] else f"largest difference {diffs}"))
    if doc.get("fallback"):
        lines.append(f"{plain(doc['fallback'])}: searched on the full batch")
    return "\n".join(lines)


# --- triage --------------------------------------------------------------------------------


def options_table(doc: dict) -> Table:
    t = FitTable(title=f"session options · onnxruntime {plain(doc['version'])} · {_target(doc['provenance'])}",
              title_justify="left")
    for col, fit in (("level", KEY), ("mode", KEY), ("threads", KEY), ("switch", None), ("verdict", KEY), ("note", None)):
        t.add_column(col, "left", fit)
    for c in doc["combos"]:
        note = "" if c["verdict"] in ("good", "bad") else (c.get("why") or "")
        if c.get("status") not in (None, "ran"):
            note = c.get("why") or c["status"]  # bad by --bad-if error: its message, not "0 NaN rows of 0"
        elif c["verdict"] in ("good", "bad") and c.get("nan_rows") is not None:
            note = f"{c['nan_rows']} NaN rows of {c['rows']}"
        t.add_row(*(plain(c[k]) for k in ("level", "mode", "threads", "switch")), verdict(c["verdict"]), plain(note))
    return t


def mitigation_table(doc: dict) -> Table:
    t = FitTable(title=f"fp32 island · {plain(doc['model'])} · {_target(doc['provenance'])}", title_justify="left")
    for col, just, fit in (("release", "left", KEY), ("original", "left", KEY), ("patched", "left", KEY),
                           ("fp32 ref", "left", KEY), ("min cosine", "right", 2), ("max |diff|", "right", 1)):
        t.add_column(col, just, fit)
    for row in doc["releases"]:
        d = next(iter((row["distance"] or {}).values()), {}) if row["distance"] else {}
        cells = [plain(row["version"]), *(verdict(row[key]) for key in ("original", "patched", "reference"))]
        cells.append(cosine_text(d.get("cosine_min")))
        cells.append(f"{d['max_abs_diff']:.3g}" if d.get("max_abs_diff") is not None else "-")
        t.add_row(*cells)
    return t


# --- traces and diffs ----------------------------------------------------------------------


def _fmt(x, spec=".5g") -> str:
    return "" if x is None else format(x, spec)


def _interesting(result: TraceResult) -> set[str]:
    keep = set(result.above_50)
    resid = {r["node"] for r in result.residual}
    for n in result.nodes:
        if n.name in resid or any(t.nonfinite for t in n.outputs if t.available) or any(t.source == "model" for t in n.outputs):
            keep.update(t.name for t in n.outputs)
    return keep


def trace_table(result: TraceResult, all_nodes: bool = False) -> Group:
    """Summary lines and one row per tensor (by default only the interesting ones:
    residual adds, past 50 % of fp16, non-finite, model outputs)."""
    keep = None if all_nodes else _interesting(result)
    # one line per tensor, its name shortened in the middle: op (its name's end) and dtype go before a name is cut
    t = FitTable(title=f"trace onnxruntime {plain(result.version)} ({plain(result.verdict)}: {plain(result.reason)})",
                 compact=True)
    for col, just, fit, short in (("#", "right", KEY, 0), ("tensor", "left", None, 24), ("op", "left", 1, 8),
                                  ("ran as", "left", 4, 11), ("dtype", "left", 2, 0), ("min", "right", 7, 0),
                                  ("max", "right", 8, 0), ("max|x|", "right", 9, 0), ("fp16 %", "right", 10, 0),
                                  ("NaN/Inf\nrows", "right", KEY, 0), ("note", "left", 3, 13)):
        t.add_column(col, just, fit, shorten=short or None, whole_over=3 if col == "tensor" else 0)
    shown = 0
    for i, n in enumerate(result.nodes):
        for ts in n.outputs:
            if keep is not None and ts.name not in keep:
                continue
            shown += 1
            ran = "" if (p := n.precision) is None else p.precision + (f" → {p.ran_as}" if p.precision == "fused" else "")
            style = "red" if ts.nonfinite and ts.visibility == "seen" else ("yellow" if ts.nonfinite else None)
            mark = "" if ts.available else ts.note or "unavailable"
            if ts.nonfinite and ts.visibility != "seen":
                mark = "observed only"
            name = ts.name if str(ts.name).startswith(str(n.name)) else f"{ts.name} ← {n.name}"
            t.add_row(str(i), plain(name), plain(n.op_type), plain(ran), plain(ts.dtype), _fmt(ts.min), _fmt(ts.max),
                      _fmt(ts.max_abs),
                      "Inf" if ts.nonfinite and ts.dtype == "float16" else ("" if ts.headroom is None else f"{100 * ts.headroom:.0f}"),
                      f"{ts.nan_rows}/{ts.inf_rows}" if ts.available else "", plain(mark), style=style)
    lines = [f"first non-finite (seen by a consumer): {result.first_nonfinite or 'none'}"
             + (f" ({result.first_nonfinite_tensor})" if result.first_nonfinite else ""),
             f"first non-finite (any, incl. observed only): {result.first_nonfinite_any or 'none'}",
             f"fp16 tensors past 50 %: {len(result.above_50)}, past 90 %: {len(result.above_90)}"]
    if result.residual:
        lines.append("residual max |x| per layer: " + ", ".join(
            f"{r['layer']}:" + (("Inf" if r["visibility"] == "seen" else "Inf (observed only)") if r["nonfinite"]
                                else _fmt(r["max_abs"], ".3g")) for r in result.residual))
    if result.unavailable:
        lines.append(f"warning: {len(result.unavailable)} tensors could not be exposed (first: {result.unavailable[0]}); "
                     "the first non-finite may be among them")
    if result.perturbed:
        lines.append("warning: a clean pass changed the model's outputs (observer effect): 'seen' values are suspect")
    if keep is not None:
        lines.append(f"{shown} of {sum(len(n.outputs) for n in result.nodes)} tensors shown")
    return Group(t, Text("\n".join(map(printable, lines))))


def diff_table(result: DiffResult) -> Group:
    """Precision changes, first divergences, the explanation."""
    from harness.explain.diff import describe

    t = FitTable(title=f"precision changes {plain(result.a)} → {plain(result.b)}", compact=True)
    for col, fit, short in (("node", None, 24), ("op", 1, None), (plain(result.a), None, None), (plain(result.b), None, None)):
        t.add_column(col, fit=fit, shorten=short, whole_over=2)  # the node on one line: its op (its end) goes first
    for c in result.precision_changes:
        t.add_row(plain(c["node"]), plain(c["op_type"]), plain(describe(c["a"])), plain(describe(c["b"])))
    if result.failed:  # the failure is the difference: no node table
        return Group(Text("\n".join(map(printable, str(result.explanation).split("\n")))))
    lines = [f"{result.a}: {result.a_verdict} ({result.a_nan_rows} NaN rows), {result.b}: {result.b_verdict} "
             f"({result.b_nan_rows} NaN rows of {result.rows})"]
    for label, d in (("first non-finite on one side only", result.first_nonfinite_flip),
                     (f"first output beyond the run's tolerance ({result.tolerance})", result.first_divergent),
                     ("first output not bit-identical (the first node that differs)", result.first_bits_differ)):
        if d:
            lines.append(f"{label}: {d['node']} ({d['tensor']})")
    lines.append("")
    lines += str(result.explanation).split("\n")
    return Group(t, Text("\n".join(map(printable, lines))))


# --- drift ---------------------------------------------------------------------------------


def drift_table(rows: list, steps: list, title: str) -> Table:
    """A run's graded numbers per release (`drift.rows`); a number where a step ends in yellow."""
    stepped = {(s.to_version, s.metric) for s in steps}
    t = FitTable(title=title, title_justify="left")
    timed = any(getattr(r, "latency", None) is not None for r in rows)
    for col, just, fit in (("release", "left", KEY), ("verdict", "left", KEY), ("max |x|", "right", 5),
                           ("headroom", "right", 6), ("worst cosine", "right", 4), ("max rel diff", "right", 3),
                           ("fp16 margin", "right", 2), *((("latency x baseline", "right", 7),) if timed else ()),
                           ("outputs changed", "left", 1)):
        t.add_column(col, just, fit)

    def cell(row, metric: str, spec: str) -> str:
        x = getattr(row, metric)
        text = _number(x, spec)
        return f"[yellow]{text}[/]" if (row.version, metric) in stepped else text

    for r in rows:
        changed = {None: "-", True: "yes", False: "no"}[r.outputs_changed]
        t.add_row(plain(r.version), verdict(r.verdict),
                  cell(r, "max_abs", ".5g"), cell(r, "headroom", ".3f"), cell(r, "cosine_min", "cosine"),
                  cell(r, "rel_diff_max", ".3g"),
                  ("[yellow]past[/]" if (r.version, "margin") in stepped else "past") if r.margin_past
                  else cell(r, "margin", ".3g"), *((cell(r, "latency", ".3f"),) if timed else ()), changed)
    return t


def drift_steps(rows: list, steps: list, threshold: float) -> str:
    """The steps `drift.steps` found, one line each, or that there is none (rich markup)."""
    limit = f"{threshold * 100:g}%"
    if not steps:
        return f"no step above {limit} between {len(rows)} probed release{'s' if len(rows) != 1 else ''}"
    lines = [f"{len(steps)} step{'s' if len(steps) != 1 else ''} above {limit}:"]
    lines += [f"  {plain(s.description)}" for s in steps]
    return "\n".join(lines)
