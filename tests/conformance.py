"""One assertion over a finished run: every artifact the tool makes from it agrees with the run.

The run's JSON (`bisect run --json`) is the truth. From it: the mode, the boundary (regression: last good and first
bad; fix: last bad and first good, the bad side the older release), the question (predicate and reference) and
each probed release's verdict. Each artifact is made as a user makes it (the CLI, a subprocess) and read back:

- the run's JSON itself: a boundary exactly when it says `found`, with the verdicts its own probes give;
- `report --format json` and report.md: the question and its mode, the boundary, the commit range, a title that
  names the boundary in the run's mode, every suggested command parseable and naming the right releases, and
  "What changed" giving the run's verdicts;
- repro.py, by default and with --full, in a fresh environment of each side: exit 0 where the run says good,
  1 where it says bad; for a run of the node or web binding, repro.mjs so on the npm package of each side (its
  repro.py runs the Python wheel, another package, and its blame has no session log to read: neither is checked);
- `reduce`: the reduced pair flips on the same question, or it says it reduced nothing with its own exit status;
- `diff` (the trace of the pair): the run's verdicts, never *error* for a release that ran;
- `blame`: the run's pair, the run's verdicts on it unmodified, exit 0 exactly when something is named;
- `drift`: the run's verdicts, and a release the question never compared is blank, never *error* nor *good*;
- the `dashboard` row of the question: the run's verdicts and boundary.

`check_agrees` collects every disagreement and fails once, naming each artifact, so one failing artifact does not
hide the others.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import builders

VERDICT_EXIT = {"good": 0, "bad": 1}


@dataclass
class Truth:
    """What the run's JSON says, in the run's own mode."""

    run_id: str
    mode: str
    found: bool
    older: str | None  # the boundary's older release: last good (regression), last bad (fix)
    newer: str | None  # its newer release: first bad (regression), first good (fix)
    verdicts: dict[str, str]
    predicate: str
    reference_id: str | None
    commits: dict | None
    releases: list[str]
    elsewhere: dict[str, str] = field(default_factory=dict)  # verdicts given under the question after the run

    @property
    def names(self) -> tuple[str, str]:
        """The boundary's keys as the run's JSON spells them in this mode."""
        return ("last_good", "first_bad") if self.mode == "regression" else ("last_bad", "first_good")

    @property
    def bad_side(self) -> str | None:
        return self.newer if self.mode == "regression" else self.older

    @property
    def good_side(self) -> str | None:
        return self.older if self.mode == "regression" else self.newer

    @property
    def sides(self) -> list[str]:
        """The releases whose verdicts every artifact must repeat: the boundary, else the range's two ends."""
        if self.found:
            return [self.older, self.newer]
        return [v for v in (self.releases[:1] + self.releases[-1:]) if v in self.verdicts]

    @property
    def timed(self) -> bool:
        return any(self.predicate.startswith(k) for k in ("slower", "rss")) or ",slower" in self.predicate


def truth_of(run_doc: dict) -> Truth:
    mode = run_doc.get("mode", "regression")
    older_key, newer_key = ("last_good", "first_bad") if mode == "regression" else ("last_bad", "first_good")
    older, newer = run_doc.get(older_key), run_doc.get(newer_key)
    question = run_doc.get("question") or {}
    reference = run_doc.get("reference") or question.get("reference")
    return Truth(run_doc["run_id"], mode, run_doc.get("status") == "found" and bool(older and newer), older, newer,
                 {p["version"]: p["verdict"] for p in run_doc.get("probes", [])},
                 run_doc.get("predicate") or question.get("predicate") or "nan-or-inf",
                 reference.get("id") if reference else None, run_doc.get("commits"), list(run_doc.get("releases", [])))


@dataclass
class Problems:
    """Disagreements by artifact; `passed` lists the artifacts checked without one."""

    by_artifact: dict[str, list[str]] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def check(self, artifact: str, ok: bool, message: str) -> None:
        if artifact not in self.checked:
            self.checked.append(artifact)
        if not ok:
            self.by_artifact.setdefault(artifact, []).append(message)

    def table(self) -> dict[str, str]:
        return {a: ("FAIL: " + " | ".join(self.by_artifact[a]) if a in self.by_artifact else "pass")
                for a in self.checked}


@dataclass
class Context:
    """How to make the artifacts: the `bisect` fixture, fresh environments, the model and batch the run used."""

    bisect: object
    fresh_python: object
    model: Path
    inputs: Path
    native: bool = True  # the run's probes ran on this machine's arch: repro and traces can run here
    explain: bool = True  # trace the pair (report's "What changed", `diff`); off under emulation
    extra_run_args: tuple[str, ...] = ()
    question_args: tuple[str, ...] = ()  # the run's --bad-if and reference, as given to it: diff asks the same
    binding: str | None = None  # the run's --binding, when it is node or web (extra_run_args holds it too)


def check_agrees(run_doc: dict, results_dir: Path, ctx: Context, run_rc: int | None = None) -> Problems:
    """Every artifact of the run in `results_dir` checked against `run_doc`; fails naming every disagreement."""
    problems = collect(run_doc, results_dir, ctx, run_rc)
    print(f"conformance {run_doc.get('run_id')}: {problems.table()} seconds {problems.seconds}")
    if problems.by_artifact:
        lines = [f"{a}: {m}" for a, ms in problems.by_artifact.items() for m in ms]
        raise AssertionError(f"{len(problems.by_artifact)} artifact(s) disagree with run {run_doc.get('run_id')} "
                             f"({run_doc.get('mode')}, {run_doc.get('predicate')}):\n  " + "\n  ".join(lines))
    return problems


def collect(run_doc: dict, results_dir: Path, ctx: Context, run_rc: int | None = None) -> Problems:
    t, p = truth_of(run_doc), Problems()

    def timed(step, *args):
        start = time.monotonic()
        out = step(*args)
        p.seconds[step.__name__.strip("_")] = round(time.monotonic() - start, 1)
        return out

    _run_json(t, run_doc, run_rc, p)
    reduced = timed(_reduce, t, results_dir, ctx, p)  # before the report: the report embeds a verified reduction
    if ctx.native and ctx.explain and not t.timed:
        timed(_diff, t, results_dir, ctx, p)  # before the report too: its "What changed" reads the pair's traces
    report = timed(_report, t, results_dir, ctx, p, reduced)
    if report is not None and ctx.native:
        timed(_repro, t, results_dir, ctx, p, report, reduced)
    if ctx.binding is None:  # the JavaScript API writes no session log: blame's looks cannot run there
        timed(_blame, t, results_dir, ctx, p)
    timed(_drift, t, results_dir, ctx, p)
    timed(_dashboard, t, results_dir, ctx, p)
    return p


def _cli(ctx: Context, *args: str):
    return ctx.bisect(*args)


def _json_of(proc) -> dict | None:
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _said(proc) -> str:
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else proc.stdout.strip()[-200:])[:300]


# -- the run's JSON ------------------------------------------------------------------------------------------


def _run_json(t: Truth, doc: dict, rc: int | None, p: Problems) -> None:
    a = "run json"
    p.check(a, t.mode in ("regression", "fix"), f"mode {t.mode!r}")
    if rc is not None:
        p.check(a, (rc == 0) == t.found, f"exit status {rc} for status {doc.get('status')!r}")
    if t.found:
        older_want, newer_want = ("good", "bad") if t.mode == "regression" else ("bad", "good")
        p.check(a, (t.verdicts.get(t.older), t.verdicts.get(t.newer)) == (older_want, newer_want),
                f"its own probes give {t.older}={t.verdicts.get(t.older)}, {t.newer}={t.verdicts.get(t.newer)}")
        p.check(a, t.older in doc.get("message", "") and t.newer in doc.get("message", ""),
                f"message {doc.get('message')!r} does not name {t.older} and {t.newer}")
        p.check(a, t.releases.index(t.older) + 1 == t.releases.index(t.newer), "the boundary is not adjacent")
    else:
        older_key, newer_key = t.names
        p.check(a, doc.get(older_key) is None and doc.get(newer_key) is None, "a boundary without status found")


# -- report --------------------------------------------------------------------------------------------------


def _report(t: Truth, results: Path, ctx: Context, p: Problems, reduced: dict | None) -> dict | None:
    a = "report json"
    args = ["report", t.run_id, "--results-dir", str(results), "--cache-dir", str(ctx.bisect.cache_dir),
            "--format", "json"]
    if not (ctx.native and ctx.explain) or t.timed:
        args.append("--no-probe")
    proc = _cli(ctx, *args)
    doc = _json_of(proc)
    p.check(a, proc.returncode == 0 and doc is not None, f"exit {proc.returncode}: {_said(proc)}")
    if doc is None:
        return None
    q = doc.get("question") or {}
    p.check(a, q.get("mode", "regression") == t.mode, f"answers a {q.get('mode')} question, the run is {t.mode}")
    p.check(a, doc.get("predicate") == t.predicate, f"predicate {doc.get('predicate')!r}, the run's {t.predicate!r}")
    ref = (q.get("reference") or {}).get("id") if isinstance(q.get("reference"), dict) else None
    p.check(a, ref == t.reference_id, f"reference {ref!r}, the run's {t.reference_id!r}")
    older_key, newer_key = t.names
    got = (doc.get(older_key), doc.get(newer_key))
    p.check(a, got == ((t.older, t.newer) if t.found else (None, None)),
            f"{older_key}/{newer_key} {got}, the run's {(t.older, t.newer)}")
    if t.mode == "fix":  # nor a regression boundary the run never found
        p.check(a, doc.get("first_bad") is None, f"a first bad {doc.get('first_bad')} in a fix run")
    if t.found and t.commits:
        got_commits = doc.get("commits") or {}
        p.check(a, got_commits.get("compare") == t.commits.get("compare"),
                f"commit range {got_commits.get('compare')!r}, the run's {t.commits.get('compare')!r}")
    verdicts = {x.get("version"): x.get("verdict") for x in doc.get("probes", [])}
    for v in t.sides:
        p.check(a, verdicts.get(v) == t.verdicts[v], f"{v} is {verdicts.get(v)!r}, the run says {t.verdicts[v]!r}")
    if reduced is not None:
        repro = doc.get("repro") or {}
        p.check(a, bool(repro.get("reduced")), "reduce verified a reduction, the repro does not carry it")
    newest = doc.get("newest") or {}
    if newest.get("version") and newest.get("verdict") in ("good", "bad"):  # the report probed it itself
        t.elsewhere[newest["version"]] = newest["verdict"]
    _markdown(t, results / t.run_id / "report.md", p)
    return doc


def _markdown(t: Truth, path: Path, p: Problems) -> None:
    a = "report.md"
    if not path.is_file():
        p.check(a, False, "no report.md")
        return
    md = path.read_text()
    title = next((ln for ln in md.splitlines() if ln.startswith("## ")), "")
    low = title.lower()
    if t.found:
        p.check(a, t.older in title and t.newer in title, f"title {title!r} does not name {t.older} and {t.newer}")
        if t.mode == "fix":
            p.check(a, "fix" in low and t.newer in title, f"title {title!r} does not say fixed in {t.newer}")
            p.check(a, "last bad" in low or "fixed" in low, f"title {title!r} does not name the last bad release")
        else:
            p.check(a, "fix" not in low, f"a regression titled {title!r}")
        if t.commits and t.commits.get("compare"):
            p.check(a, "### Commit range" in md and t.commits["compare"] in md, "no commit range")
    else:
        p.check(a, not re.search(r"last good \*\*|first bad: \*\*|first good: \*\*|fixed in", md),
                "names a boundary the run did not find")
        p.check(a, "### Commit range" not in md, "a commit range without a boundary")
    _commands(t, md, p)
    _what_changed(t, md, p, a)


def _commands(t: Truth, md: str, p: Problems) -> None:
    """Every command the report suggests (its code blocks outside the pasted script) parses and names releases of
    the run's boundary; the bad side's release is the one to install."""
    a = "report.md commands"
    outside = re.sub(r"<details>.*?</details>", "", md, flags=re.DOTALL)
    blocks = re.findall(r"```[a-z]*\n(.*?)```", outside, flags=re.DOTALL)
    installs, npm_installs = [], []
    for block in blocks:
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError as exc:
                p.check(a, False, f"{line!r} does not parse ({exc})")
                continue
            for w in words:
                m = re.fullmatch(r"onnxruntime[a-z-]*==(.+)", w)
                if m:
                    installs.append(m.group(1))
                m = re.fullmatch(r"onnxruntime-(?:node|web)@(.+)", w)
                if m and words[:2] == ["npm", "install"]:
                    npm_installs.append(m.group(1))
            if words[:1] == ["python"] and len(words) > 1 and words[1] != "-m":  # -m venv: making an environment
                p.check(a, words[1].endswith("repro.py"), f"{line!r} runs something other than repro.py")
            if words[:1] == ["node"]:
                p.check(a, len(words) > 1 and words[1] == "repro.mjs", f"{line!r} runs something other than repro.mjs")
            if words[:2] == ["bisect", "compare"]:  # core or binding: over the run's own boundary
                p.check(a, t.found and words[words.index("--from") + 1:words.index("--from") + 4:2] == [t.older, t.newer],
                        f"{line!r} compares another range than the boundary {t.older}..{t.newer}")
    if t.found:
        named = {t.older, t.newer}
        p.check(a, set(installs) <= named, f"installs {installs}, the boundary is {sorted(named)}")
        p.check(a, t.bad_side in installs, f"installs {installs}, not the bad side {t.bad_side}")
        p.check(a, set(npm_installs) <= named, f"npm installs {npm_installs}, the boundary is {sorted(named)}")
    else:
        in_range = set(t.releases) | set(t.verdicts) | set(t.elsewhere)
        p.check(a, set(installs) <= in_range, f"installs {installs}, outside the run's releases")


def _what_changed(t: Truth, md: str, p: Problems, artifact: str) -> None:
    """ "What changed" gives each release of the pair the run's verdict, under the run's question."""
    section = re.search(r"### What changed\n(.*?)(?=\n### |\Z)", md, flags=re.DOTALL)
    if not section:
        return
    text = section.group(1)
    for v in t.sides:
        for said in re.findall(rf"(?<![\d.]){re.escape(v)}(?:\*\*)?: (?:\*\*)?(\w+)", text):
            if said in ("good", "bad", "error", "crash", "skip", "inconclusive"):
                p.check(artifact, said == t.verdicts[v], f"What changed: {v} is {said!r}, the run says "
                                                          f"{t.verdicts[v]!r}")
    if t.found and t.verdicts.get(t.older) != t.verdicts.get(t.newer):
        p.check(artifact, "agree within tolerance" not in text,
                "What changed says the traces agree within tolerance, the run judges the pair apart")


# -- repro.py ------------------------------------------------------------------------------------------------


def _repro_mjs(t: Truth, results: Path, ctx: Context, p: Problems, report: dict, reduced: dict | None) -> None:
    """repro.mjs of a binding's run, by Node.js on each side's npm package (as the harness installs it), the
    reduced repro and --full: 0 where the run says good, 1 where it says bad."""
    run_dir = results / t.run_id
    repro = report.get("repro") or {}
    if not (run_dir / "repro.mjs").is_file():
        p.check("repro.mjs --full", False, "no repro.mjs")
        return
    carried = repro.get("model_embedded") or repro.get("model_attached")
    for v in t.sides:
        want = VERDICT_EXIT.get(t.verdicts[v])
        if want is None:
            continue
        prefix = builders.npm_prefix(ctx.bisect.cache_dir, ctx.binding, v)
        where = results.parent / f"repro-mjs-{t.run_id}-{v}"
        for artifact, args in (("repro.mjs --full", ["--full", *([] if carried else [str(ctx.model)])]),
                               *((("repro.mjs (reduced)", []),) if reduced is not None or repro.get("reduced") else ())):
            out = builders.run_node_repro(run_dir, prefix, where, *args)
            p.check(artifact, out.returncode == want,
                    f"on {v} (run: {t.verdicts[v]}) exits {out.returncode}: {(out.stdout + out.stderr).strip()[-200:]}")


def _repro(t: Truth, results: Path, ctx: Context, p: Problems, report: dict, reduced: dict | None) -> None:
    if ctx.binding is not None:
        return _repro_mjs(t, results, ctx, p, report, reduced)
    script = results / t.run_id / "repro.py"
    repro = report.get("repro") or {}
    if not script.is_file():
        p.check("repro.py --full", False, "no repro.py")
        return
    model_file = repro.get("model_file")
    carried = repro.get("model_embedded") or repro.get("model_attached")  # --full needs no file then
    if model_file and not carried and not (script.parent / model_file).exists():
        shutil.copyfile(ctx.model, script.parent / model_file)
    for v in t.sides:
        want = VERDICT_EXIT.get(t.verdicts[v])
        if want is None:
            continue
        python = ctx.fresh_python(v)
        extra: list[str] = []
        if t.timed:  # the script measures against the range's good end, as the run did
            extra = ["--baseline", str(ctx.fresh_python(t.good_side or t.releases[0]))]
        full = [*extra, "--full"] + ([model_file] if model_file and not carried else [])
        out = builders.run_script(python, script, *full)
        p.check("repro.py --full", out.returncode == want,
                f"on {v} (run: {t.verdicts[v]}) exits {out.returncode}: {(out.stdout + out.stderr).strip()[-200:]}")
        if reduced is not None or repro.get("reduced"):
            out = builders.run_script(python, script, *extra)
            p.check("repro.py (reduced)", out.returncode == want,
                    f"on {v} (run: {t.verdicts[v]}) exits {out.returncode}: "
                    f"{(out.stdout + out.stderr).strip()[-200:]}")


# -- reduce --------------------------------------------------------------------------------------------------


def _reduce(t: Truth, results: Path, ctx: Context, p: Problems) -> dict | None:
    """The verified reduction's document when there is one, else None."""
    a = "reduce"
    if not ctx.native:
        return None
    proc = _cli(ctx, "reduce", t.run_id, "--results-dir", str(results), "--cache-dir", str(ctx.bisect.cache_dir),
                "--json")
    doc = _json_of(proc)
    said = (proc.stdout + proc.stderr).lower()
    if not t.found:
        p.check(a, proc.returncode in (2, 3), f"exit {proc.returncode} without a boundary: {_said(proc)}")
        return None
    # documented: 0 a verified reduction, 4 nothing could be reduced (said, with why), 3 none verified
    p.check(a, proc.returncode in (0, 3, 4), f"exit {proc.returncode} on a boundary that flips: {_said(proc)}")
    if proc.returncode == 4:
        p.check(a, "nothing reduced" in said or (doc is not None and doc.get("reduced") is False
                                                 and bool(doc.get("not_reduced"))),
                f"exit 4 without saying it reduced nothing, and why: {_said(proc)}")
        return None
    if proc.returncode != 0 or doc is None:
        return None
    pair = doc.get("pair")  # good side first, as reduce.json names it: a fix's is [first good, last bad]
    p.check(a, pair == [t.good_side, t.bad_side],
            f"reduced the pair {pair}, the run's (good, bad) is {[t.good_side, t.bad_side]}")
    verified = (doc.get("verified") or {})
    got = verified.get("verdicts") or {}
    p.check(a, verified.get("flips") is True and all(got.get(v) == t.verdicts[v] for v in t.sides),
            f"verified verdicts {got}, the run's {{{t.older}: {t.verdicts[t.older]}, {t.newer}: "
            f"{t.verdicts[t.newer]}}}")
    p.check(a, doc.get("predicate") == t.predicate, f"predicate {doc.get('predicate')!r}")
    ref = (doc.get("reference") or {}).get("id")
    p.check(a, ref == t.reference_id, f"reference {ref!r}, the run's {t.reference_id!r}")
    rows, nodes = doc.get("rows") or {}, doc.get("nodes") or {}
    nothing = rows.get("after") == rows.get("before") and nodes.get("after") == nodes.get("before")
    p.check(a, not nothing, f"exit 0 and 'verified' with nothing reduced ({rows.get('after')} of "
                            f"{rows.get('before')} rows, {nodes.get('after')} of {nodes.get('before')} nodes kept)")
    if nothing:
        p.check(a, "nothing" in said, "does not say it reduced nothing")
    return doc


# -- diff / trace --------------------------------------------------------------------------------------------


def _diff(t: Truth, results: Path, ctx: Context, p: Problems) -> None:
    a = "diff"
    if len(t.sides) != 2:
        return
    old, new = t.sides
    proc = _cli(ctx, "diff", old, new, "--model", str(ctx.model), "--inputs", str(ctx.inputs), "--cache-dir",
                str(ctx.bisect.cache_dir), "--results-dir", str(results), *ctx.extra_run_args, *ctx.question_args,
                "--json")
    doc = _json_of(proc)
    if doc is None:
        p.check(a, False, f"exit {proc.returncode}: {_said(proc)}")
        return
    got = {old: doc.get("a_verdict"), new: doc.get("b_verdict")}
    for v in (old, new):
        p.check(a, got[v] == t.verdicts[v], f"{v} is {got[v]!r}, the run says {t.verdicts[v]!r}")
    if t.verdicts[old] != t.verdicts[new]:
        p.check(a, "agree within tolerance" not in (doc.get("explanation") or ""),
                f"says {doc.get('explanation')!r} of a pair the run judges apart")
    first = (doc.get("first_bits_differ") or {}).get("node")
    named = re.search(r"`([^`]+)` \([^)]*\) is the first node whose output differs", doc.get("explanation") or "")
    if first and "first node whose output differs" in (doc.get("explanation") or ""):
        p.check(a, named is not None and named.group(1) == first,
                f"the sentence names {named.group(1) if named else 'no node'}, the bit-exact comparison {first}")


# -- blame ---------------------------------------------------------------------------------------------------


def _blame(t: Truth, results: Path, ctx: Context, p: Problems) -> None:
    a = "blame"
    if not ctx.native or t.timed:
        return
    proc = _cli(ctx, "blame", t.run_id, "--results-dir", str(results), "--cache-dir", str(ctx.bisect.cache_dir),
                "--json")
    doc = _json_of(proc)
    if not t.found:
        p.check(a, proc.returncode in (2, 3), f"exit {proc.returncode} without a boundary: {_said(proc)}")
        return
    if doc is None:
        p.check(a, False, f"exit {proc.returncode}: {_said(proc)}")
        return
    older_key, newer_key = t.names
    p.check(a, (doc.get(older_key), doc.get(newer_key)) == (t.older, t.newer),
            f"{older_key}/{newer_key} {(doc.get(older_key), doc.get(newer_key))}, the run's {(t.older, t.newer)}")
    p.check(a, (doc.get("good"), doc.get("bad")) == (t.good_side, t.bad_side),
            f"good/bad {(doc.get('good'), doc.get('bad'))}, the run's {(t.good_side, t.bad_side)}")
    plain = {x["version"]: x["verdict"] for x in doc.get("probes", []) if not x.get("disabled") and not x.get("level")}
    for v in t.sides:
        p.check(a, plain.get(v) == t.verdicts[v], f"{v} unmodified is {plain.get(v)!r}, the run says {t.verdicts[v]!r}")
    named = bool(doc.get("transformers")) or bool((doc.get("kernels") or {}).get("nodes"))
    # documented: 0 something named (a transformer set that flips the bad side, or a kernel that changed), 4 the
    # pair flips and nothing is named, 3 the pair does not flip here
    flips = plain.get(t.good_side) == "good" and plain.get(t.bad_side) == "bad"
    p.check(a, proc.returncode == (0 if named else 4 if flips else 3),
            f"exit {proc.returncode} with {'something' if named else 'nothing'} named: {_said(proc)}")


# -- drift ---------------------------------------------------------------------------------------------------


def _drift(t: Truth, results: Path, ctx: Context, p: Problems) -> None:
    a = "drift"
    proc = _cli(ctx, "drift", t.run_id, "--results-dir", str(results), "--json")
    doc = _json_of(proc)
    if doc is None:
        p.check(a, False, f"exit {proc.returncode}: {_said(proc)}")
        return
    p.check(a, proc.returncode == 0, f"exit {proc.returncode}")
    for row in doc.get("rows", []):
        v = row.get("version")
        if v in t.verdicts:
            p.check(a, row.get("verdict") == t.verdicts[v], f"{v} is {row.get('verdict')!r}, the run says "
                                                            f"{t.verdicts[v]!r}")
        else:
            p.check(a, row.get("verdict") in (None, "", t.elsewhere.get(v)),
                    f"{v}, never compared by the question, is {row.get('verdict')!r}")


# -- dashboard -----------------------------------------------------------------------------------------------


def _dashboard(t: Truth, results: Path, ctx: Context, p: Problems) -> None:
    a = "dashboard row"
    site = results.parent / f"site-{t.run_id}"
    proc = _cli(ctx, "dashboard", str(results), "-o", str(site))
    grid_file = site / "dashboard.json"
    if proc.returncode != 0 or not grid_file.is_file():
        p.check(a, False, f"exit {proc.returncode}: {_said(proc)}")
        return
    grid = json.loads(grid_file.read_text())
    ref_label = t.reference_id.split(":", 1)[1] if t.reference_id and t.reference_id.startswith("release:") else None
    rows = {k: r for k, r in grid.items() if k.startswith(f"{t.run_id}/") and k.split("/")[1] == t.predicate}
    if t.reference_id:
        rows = {k: r for k, r in rows.items() if k.endswith(f"vs-{t.reference_id}")}
    p.check(a, len(rows) == 1, f"{len(rows)} rows for the question among {sorted(grid)}")
    for row in rows.values():
        verdicts = row.get("verdicts") or {}
        for v, want in t.verdicts.items():
            p.check(a, verdicts.get(v) == want, f"{v} is {verdicts.get(v)!r}, the run says {want!r}")
        for v, got in verdicts.items():
            if v not in t.verdicts:
                p.check(a, got in (None, "", t.elsewhere.get(v)), f"{v}, never compared by the question, is {got!r}")
        older_key, newer_key = t.names
        boundary = (row.get(older_key), row.get(newer_key))
        p.check(a, boundary == ((t.older, t.newer) if t.found else (None, None)),
                f"{older_key}/{newer_key} {boundary}, the run's {(t.older, t.newer)}")
        if t.mode == "fix" or not t.found:
            p.check(a, row.get("first_bad") is None, f"a first bad {row.get('first_bad')} the run did not find")
        if ref_label:
            p.check(a, row.get("reference") == ref_label, f"reference {row.get('reference')!r}")
