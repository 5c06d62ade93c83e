"""repro.mjs: the repro of a run of the JavaScript bindings, in the binding the run probed.

    npm install --ignore-scripts onnxruntime-node@VERSION      (onnxruntime-web for --binding web)
    node repro.mjs [--full [MODEL.onnx]]

It carries what repro.py carries (harness.report.repro.parts: the reduced repro first, the full model and batch;
embedded as base64, or in the same attachment beside it) and runs the model as the probe's worker runs it: the
.npz reading and the session options are harness/worker.js's own functions, copied in when the script is made
(FROM_WORKER), never written a second time. It judges the conditions of the run's question that need neither a
reference nor a baseline release (JUDGED), counting rows by worker.py's rule (rows_summary: the first axis of
each output with the batch's rows, a row bad once across them) and saying what it measured in
harness.verdicts' words (tests/test_report_repro.py holds both equal on the same arrays). Exit status as
repro.py's: 0 good, 1 bad, 2 no verdict.

Every value of the run's evidence reaches the script as data: one JSON document read by JSON.parse
(escape.js_json), and comment lines made printable; never code.
"""

from __future__ import annotations

import base64
import re
import textwrap
from pathlib import Path

from harness import worker
from harness.releases.packages import Package
from harness.report import escape
from harness.results.store import REPRO_JS
from harness.verdicts import Predicate

SCRIPT_JS = REPRO_JS  # results/<run>/repro.mjs
WORKER_JS = Path(worker.__file__).with_name("worker.js")
#: worker.js's top-level declarations the script runs with, copied by name
FROM_WORKER = ("GRAPH_LEVELS", "EXEC_MODES", "EP_NAMES", "DTYPES", "readZip", "readNpy", "feedsOf", "sessionOptions")
#: the conditions the script judges from one run's outputs (the others compare with a reference or a baseline)
JUDGED = ("nan-or-inf", "nan", "zero-rows", "max-abs", "headroom", "error", "crash")
#: the session options a run sets (harness.commands.common.search_spec): the only ones the script passes on
OPTIONS = ("graph_optimization_level", "intra_op_num_threads")


def worker_source(names: tuple[str, ...] = FROM_WORKER) -> str:
    """Each declaration of worker.js named, as it is there: a function up to its closing brace at the start of a
    line, a constant up to its `;`."""
    text = WORKER_JS.read_text()
    out = []
    for name in names:
        m = re.search(rf"^(?:async )?function {name}\(.*?^\}}$|^const {name} = (?:[^\n]*;$|.*?^\}};$)", text,
                      re.M | re.S)
        if m is None:
            raise RuntimeError(f"harness/worker.js has no top-level {name}: the repro script copies it")
        out.append(m.group(0))
    return "\n\n".join(out)


def judged(predicate: Predicate) -> tuple[Predicate | None, str | None]:
    """(the question the script asks, what it leaves out in words, or None when it asks all of it): the conditions
    it can judge alone, else the default (a question that compares with a reference), else none (a slowdown)."""
    own = tuple(c for c in predicate.conditions if c.kind in JUDGED)
    if len(own) == len(predicate.conditions):
        return predicate, None
    if not own and predicate.timed:
        return None, (f"{SCRIPT_JS} times no release against another: it gives no verdict on {predicate} (the run's "
                      "own probes measured it)")
    asked = Predicate(own) if own else Predicate()
    return asked, f"{SCRIPT_JS} compares with no reference: it judges {asked}, not {predicate}."


def _chunks(data: bytes | None) -> list[str] | None:
    return None if data is None else textwrap.wrap(base64.b64encode(data).decode(), 100)


def usage(reduced: dict | None, full: dict, attached: dict | None) -> list[str]:
    """The lines that run the script, as the header and the report give them (every value one quoted word)."""
    sh, left_out = escape.sh_line, set((attached or {}).get("parts") or ())
    lines = []
    if reduced:
        how = "attached" if left_out & {"reduced_model", "reduced_inputs"} else "embedded"
        lines.append(sh(["node", SCRIPT_JS], f"the reduced model: {reduced['nodes']} of {reduced['of']} nodes, "
                        f"{reduced['rows']} row(s), {how}", 27))
    if full.get("model"):
        lines.append(sh(["node", SCRIPT_JS, "--full"], f"the full model ({full['file']}), " + (
            f"from {attached['file']}" if "full_model" in left_out else "embedded"), 27))
    elif full.get("hub"):
        hub = full["hub"]
        lines.append(sh(["node", SCRIPT_JS, "--full", hub["files"][0]], f"the full model, downloaded from the hub "
                        f"(repo {hub['repo_id']}, revision {hub['revision']}, files {', '.join(hub['files'])})"))
    else:
        lines.append(sh(["node", SCRIPT_JS, "--full", full["file"]], "the full model, given by path"))
    return lines


def script(*, title: str, package: Package, predicate: Predicate, bad_means: str, session_options: dict, where: str,
           reduced: dict | None, full: dict, blobs: dict[str, bytes], attached: dict | None) -> str:
    """The script's text: `reduced`, `full` and `attached` as harness.report.repro.script takes them, `blobs` the
    parts (harness.report.repro.parts), those named in `attached` left out of it."""
    asked, note = judged(predicate)
    if note and asked:
        predicate, bad_means = asked, asked.words()
    left_out = set((attached or {}).get("parts") or ())

    def embedded(name: str) -> list[str] | None:
        return None if name in left_out else _chunks(blobs.get(name))

    data = {
        "package": package.name,
        "providers": package.providers_request(),
        "session_options": {k: session_options[k] for k in OPTIONS if k in session_options},
        "predicate": str(asked) if asked else None,
        "conditions": [[c.kind, c.bound] for c in asked.conditions] if asked else [],
        "note": note,
        "reduced": {"model": embedded("reduced_model"), "inputs": embedded("reduced_inputs"),
                    "outputs": list(reduced["outputs"] or []), "model_is_full": reduced["model"] is None}
        if reduced else None,
        "full": {"model": embedded("full_model"), "file": full["file"], "sha256": full.get("sha256"),
                 "hub": full.get("hub"), "data": [list(d) for d in full.get("data_files") or ()],
                 "inputs": embedded("full_inputs"), "outputs": list(full["outputs"])},
        "attached": attached,
        "not_embedded": list(full.get("notes") or []),
    }
    install = escape.sh_line(["npm", "install", "--ignore-scripts", f"{package.name}@VERSION"])
    header = [f"Repro: {title}.", "", f"    {install}", *(f"    {u}" for u in usage(reduced, full, attached)), "",
              f"Exit status 0 good, 1 bad, 2 no verdict. Bad means: {bad_means} (--bad-if {predicate}).",
              *([note] if note else []), f"Where it reproduces: {where}", *(full.get("notes") or ())]
    if attached:
        header.append(f"Needs {attached['file']} beside it (sha256 {attached['sha256']}): "
                      f"{', '.join(attached['parts'])}.")
    comment = "\n".join(f"// {escape.printable(line)}".rstrip() for line in header)
    # the document line by line, so that the base64 wraps: JSON all the same
    doc = "{\n" + ",\n".join(f"{escape.js_json(k)}: {escape.js_json(v, 0 if k in ('reduced', 'full') else None)}"
                             for k, v in data.items()) + "\n}"
    return (f"{comment}\n{IMPORTS}\n// What the run's evidence gives this script: data, read by JSON.parse.\n"
            f"const R = JSON.parse(String.raw`\n{doc}\n`);\n\n"
            f"// harness/worker.js's own, as the probes ran it\n{worker_source()}\n{JUDGE}{MAIN}")


IMPORTS = """\
import crypto from 'crypto';
import fs from 'fs';
import path from 'path';
import zlib from 'zlib';
import { spawnSync } from 'child_process';
import { createRequire } from 'module';
import { fileURLToPath } from 'url';
"""

# The script's judgement: harness.worker's row counts and harness.verdicts' words, for the JUDGED conditions. Text
# of the script, not evidence: it holds no value of a run.
JUDGE = r"""
// -- the judgement: harness.worker.rows_summary's rows, harness.verdicts' words ----------------------------

const FP16_MAX = 65504;
const NUMERIC = ['float32', 'float64', 'float16', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32',
  'uint64', 'bool'];

/** An fp16 value from its bits (the bindings give float16 tensors as Uint16Array). */
function half(h) {
  const e = (h >> 10) & 31, m = h & 1023, s = h & 0x8000 ? -1 : 1;
  return e === 31 ? (m ? NaN : s * Infinity) : s * (e ? 1024 + m : m) * 2 ** (e ? e - 25 : -24);
}

/** Python's format(v, '.<p>g'). */
function g(v, p) {
  const [m, e] = v.toExponential(p - 1).split('e');
  const x = Number(e), strip = (t) => (t.includes('.') ? t.replace(/0+$/, '').replace(/\.$/, '') : t);
  if (x < -4 || x >= p) return `${strip(m)}e${x < 0 ? '-' : '+'}${String(Math.abs(x)).padStart(2, '0')}`;
  return strip(v.toFixed(p - 1 - x));
}

/** The rows of one output as worker.output_stats reads them (its first axis; a scalar is one row): each row's
 * NaN, Inf and all-zero flags, and the largest finite |x|. */
function rowFlags(t) {
  const d = t.data, n = t.dims.length ? t.dims[0] : 1, width = n ? d.length / n : 0;
  const at = t.type === 'float16' && d instanceof Uint16Array ? (i) => half(d[i]) : (i) => Number(d[i]);
  const rows = [];
  let maxAbs = null;
  for (let r = 0; r < n; r++) {
    const row = { nan: false, inf: false, zero: width > 0 };
    for (let i = r * width; i < (r + 1) * width; i++) {
      const x = at(i);
      if (Number.isNaN(x)) row.nan = true;
      else if (!Number.isFinite(x)) row.inf = true;
      else maxAbs = Math.max(maxAbs === null ? 0 : maxAbs, Math.abs(x));
      if (x !== 0) row.zero = false;
    }
    rows.push(row);
  }
  return { rows, maxAbs };
}

/** The batch's bad rows as the harness counts them: a row once across the outputs with the batch's rows (their
 * first axis: the one the inputs share, if an output has it, else the one most outputs share, the larger on a
 * tie: worker.rows_summary); an output with another first axis by itself, through the largest count
 * (verdicts.rows_summary); max |x| over every output, the fp16 headroom over the fp16 ones. */
function rowCounts(feeds, values) {
  const numeric = values.map((t) => NUMERIC.includes(t.type));
  const firsts = values.filter((t, i) => numeric[i] && t.dims.length).map((t) => t.dims[0]);
  const inputs = [...new Set(Object.values(feeds).filter((t) => t.dims.length).map((t) => t.dims[0]))];
  const count = (n) => firsts.filter((f) => f === n).length;
  const n = !firsts.length ? null : inputs.length === 1 && firsts.includes(inputs[0]) ? inputs[0]
    : firsts.reduce((a, f) => (count(f) > count(a) || (count(f) === count(a) && f > a) ? f : a));
  const union = Array.from({ length: n || 0 }, () => ({ nan: false, inf: false, zero: false }));
  const s = { rows: 0, nan_rows: 0, inf_rows: 0, nonfinite_rows: 0, zero_rows: 0, max_abs: null, headroom: null };
  const most = (key, v) => { s[key] = Math.max(s[key], v); };
  values.forEach((t, i) => {
    if (!numeric[i]) return;
    const { rows, maxAbs } = rowFlags(t);
    if (maxAbs !== null) s.max_abs = Math.max(s.max_abs === null ? 0 : s.max_abs, maxAbs);
    if (maxAbs !== null && t.type === 'float16') s.headroom = Math.max(s.headroom === null ? 0 : s.headroom, maxAbs / FP16_MAX);
    if (t.dims.length && t.dims[0] === n) {
      rows.forEach((r, j) => { union[j].nan ||= r.nan; union[j].inf ||= r.inf; union[j].zero ||= r.zero; });
      return;
    }
    const c = (k) => rows.filter((r) => r[k]).length;
    most('rows', rows.length); most('nan_rows', c('nan')); most('inf_rows', c('inf')); most('zero_rows', c('zero'));
    most('nonfinite_rows', Math.max(c('nan'), c('inf')));
  });
  const u = (f) => union.filter(f).length;
  most('rows', union.length); most('nan_rows', u((r) => r.nan)); most('inf_rows', u((r) => r.inf));
  most('nonfinite_rows', u((r) => r.nan || r.inf)); most('zero_rows', u((r) => r.zero));
  return s;
}

/** [holds, what was measured] of one condition (harness.verdicts._measure): holds is null when it cannot tell. */
function measure(kind, b, s) {
  if (kind === 'nan-or-inf') return [s.nan_rows > 0 || s.inf_rows > 0, `${s.nan_rows} NaN rows, ${s.inf_rows} Inf rows of ${s.rows}`];
  if (kind === 'nan') return [s.nan_rows > 0, `${s.nan_rows} NaN rows of ${s.rows}`];
  if (kind === 'zero-rows') return [s.zero_rows > 0, `${s.zero_rows} all-zero rows of ${s.rows}`];
  if (kind === 'max-abs') return [s.max_abs === null || s.max_abs > b, s.max_abs === null ? 'no finite value' : `max |x| ${g(s.max_abs, 6)}`];
  if (kind === 'headroom') return s.headroom === null ? [null, 'no fp16 output with a finite value'] : [s.headroom > b, `fp16 headroom ${g(s.headroom, 3)}`];
  return [false, 'loads and runs']; // error, crash: it did
}

/** [verdict, why] of one run of the model: 'good', 'bad', or null when a condition cannot tell. */
function judge(feeds, values, conditions) {
  const s = rowCounts(feeds, values);
  const measured = conditions.map(([kind, bound]) => [kind, ...measure(kind, bound, s)]);
  const held = measured.filter(([, holds]) => holds === true).map(([, , what]) => what);
  if (held.length) return ['bad', held.join('; ')];
  const unknown = measured.filter(([, holds]) => holds === null);
  if (unknown.length) return [null, unknown[0][2]];
  let numeric = measured.filter(([kind]) => kind !== 'error' && kind !== 'crash').map(([, , what]) => what);
  if (!numeric.length) numeric = [`loads and runs (${s.nan_rows} NaN rows, ${s.inf_rows} Inf rows of ${s.rows})`];
  return ['good', [...new Set(numeric)].join('; ')];
}
"""

MAIN = r"""
// -- the repro ------------------------------------------------------------------------------------------------

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BINDINGS = ['onnxruntime-node', 'onnxruntime-web'];

/** Stop with status 2: 1 would say bad. */
function noVerdict(why) {
  console.error(why);
  process.exit(2);
}

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');
// a word of a shell line on one line: its control characters shown as escapes (as harness.report.escape.printable
// shows them), then quoted as Python's shlex.quote quotes it
const sh = (w) => {
  const shown = w.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
    (c) => (c.charCodeAt(0) < 0x100 ? `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}` : `\\u${c.charCodeAt(0).toString(16)}`));
  return /^[\w@%+=:,./-]+$/.test(shown) ? shown : `'${shown.replace(/'/g, `'"'"'`)}'`;
};

let attachment = null;
/** The bytes of one part: embedded, or from the attachment beside this script (null: neither). */
function part(name, embedded) {
  if (embedded != null) return Buffer.from(embedded.join(''), 'base64');
  if (!R.attached || !R.attached.parts.includes(name)) return null;
  if (attachment === null) {
    let data;
    try {
      data = fs.readFileSync(path.join(HERE, R.attached.file));
    } catch (e) {
      noVerdict(`put ${R.attached.file} (sha256 ${R.attached.sha256}) beside this script: it holds what the report could not embed`);
    }
    if (sha256(data) !== R.attached.sha256) noVerdict(`${R.attached.file} is not the file the report names (its sha256 differs): no verdict`);
    attachment = readZip(data);
  }
  const member = attachment[`${name}.npy`];
  return member === undefined ? null : Buffer.from(readNpy(name, member).data);
}

/** `name` (a file the report names) under the directory `where`, or stop: never a path out of it. */
function inside(where, name) {
  const p = path.normalize(path.join(where, name));
  if (path.isAbsolute(name) || !p.startsWith(where + path.sep)) noVerdict(`${JSON.stringify(name)} is not a file name under ${where}: no verdict`);
  return p;
}

/** The full model this report carries, or null: its bytes, or, with external data, the path of a copy written with
 * its data files beside it under repro-model/ (onnxruntime reads external data from beside the model file). */
function fullModelOfReport() {
  const data = part('full_model', R.full.model);
  if (data === null || !R.full.data.length) return data;
  const where = path.join(HERE, 'repro-model');
  const files = [[R.full.file, data], ...R.full.data.map(([loc], i) => [loc, part(`full_data_${i}`, null)])];
  for (const [name, blob] of files) {
    if (blob === null) noVerdict(`${name} is not in ${R.attached ? R.attached.file : 'this script'}: no verdict`);
    const p = inside(where, name);
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, blob);
  }
  return inside(where, R.full.file);
}

/** A model given by path reads its external data from beside it: each file the report names must be there. */
function dataBeside(model) {
  const home = path.dirname(path.resolve(model));
  for (const [loc, sha, size] of R.full.data) {
    const p = inside(home, loc);
    if (!fs.existsSync(p)) noVerdict(`${model} reads its external data from ${loc} beside it (${size} bytes, sha256 ${sha}): put that file there`);
    if (sha256(fs.readFileSync(p)) !== sha) console.error(`warning: the sha256 of ${loc} differs from the reported one`);
  }
}

/** The binding npm installed in the working directory or beside this script: its entry point and version. */
function installed() {
  if (!BINDINGS.includes(R.package)) noVerdict(`${JSON.stringify(R.package)} is not a binding this script runs`);
  const require = createRequire(import.meta.url);
  let main;
  try {
    main = require.resolve(R.package, { paths: [process.cwd(), HERE] });
  } catch (e) {
    noVerdict(`${R.package} is not installed here: npm install --ignore-scripts ${R.package}@VERSION`);
  }
  let dir = path.dirname(main);
  while (path.basename(dir) !== R.package && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return { require, main, version: JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version };
}

/** Run in a child process (a crash is a verdict, so it must not be this process's own): its exit status, or 1 when
 * it died by a signal. */
function crashed(argv) {
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), ...argv], { stdio: 'inherit',
    env: { ...process.env, REPRO_CHILD: '1' } });
  if (child.signal) {
    console.log(`${R.package} ${installed().version}: bad (the process died by signal ${child.signal})`);
    return 1;
  }
  return child.status;
}

async function main(argv) {
  if (!R.conditions.length) noVerdict(R.note);
  if (R.conditions.some(([kind]) => kind === 'crash') && !process.env.REPRO_CHILD) return crashed(argv);
  const full = argv.includes('--full') || R.reduced === null;
  const args = argv.filter((a) => a !== '--full');
  let model = null;
  if (full || R.reduced.model_is_full) {
    model = args.length ? args[0] : fullModelOfReport();
    if (model === null) {
      // the file's name is the record's: one quoted word of the line a reader pastes
      const fetch = R.full.hub ? ` (from the hub: repo ${R.full.hub.repo_id} at revision ${R.full.hub.revision}, files ${R.full.hub.files.join(', ')}, in one directory)` : '';
      noVerdict(`give the model${fetch}: ${['node', process.argv[1], ...(full ? ['--full'] : []), R.full.file].map(sh).join(' ')}`);
    }
    if (args.length && R.full.sha256 && sha256(fs.readFileSync(model)) !== R.full.sha256) console.error("warning: the model's sha256 differs from the reported one");
    if (args.length && R.full.data.length) dataBeside(model);
  }
  let batch, outputs, what;
  if (full) {
    batch = part('full_inputs', R.full.inputs);
    if (batch === null) noVerdict(`the batch is not in this script: ${R.not_embedded.join('; ')}`);
    [outputs, what] = [R.full.outputs, 'full model'];
  } else {
    if (!R.reduced.model_is_full) model = part('reduced_model', R.reduced.model);
    [batch, outputs, what] = [part('reduced_inputs', R.reduced.inputs), R.reduced.outputs, 'reduced model'];
  }
  const found = installed();
  const binding = { pkg: R.package, version: found.version, web: R.package === 'onnxruntime-web' };
  let feeds;
  try {
    binding.ort = found.require(found.main);
    feeds = feedsOf(binding.ort, batch);
  } catch (exc) {
    noVerdict(`${R.package} ${found.version}: no verdict (${exc && exc.message ? exc.message : exc})`);
  }
  let values;
  try {
    // the WebAssembly backend takes the model as bytes (it reads no files of its own), as the worker gives it
    const given = typeof model === 'string' ? (binding.web ? new Uint8Array(fs.readFileSync(model)) : model) : new Uint8Array(model);
    const sess = await binding.ort.InferenceSession.create(given, sessionOptions(binding, R.session_options, R.providers));
    const out = await sess.run(feeds);
    values = (outputs.length ? outputs : sess.outputNames).map((n) => {
      if (out[n] === undefined) throw new Error(`the session gave no output ${n}`);
      return out[n];
    });
  } catch (exc) {
    const why = String(exc && exc.message !== undefined ? exc.message : exc).split('\n')[0].slice(0, 300);
    const bad = R.conditions.some(([kind]) => kind === 'error');
    console.log(`${R.package} ${found.version}, ${what}: ${bad ? 'bad' : 'no verdict'} (fails: ${why})`);
    return bad ? 1 : 2;
  }
  const [verdict, why] = judge(feeds, values, R.conditions);
  console.log(`${R.package} ${found.version}, ${what}: ${verdict || 'no verdict'} (${why})`);
  return verdict === 'good' ? 0 : verdict === 'bad' ? 1 : 2;
}

main(process.argv.slice(2)).then((status) => process.exit(status), (exc) => {
  console.error(exc && exc.stack ? exc.stack : exc);
  process.exit(2);
});
"""
