'use strict';
/*
 * Probe worker of the JavaScript bindings: runs one model on one batch with onnxruntime-node (the CPU
 * provider, through N-API) or onnxruntime-web (its WebAssembly backend, in Node.js), inside one release's
 * npm prefix. The twin of worker.py: a leaf that uses only the binding and Node's own modules, reads a
 * request (JSON), writes one result (JSON, atomically) and the outputs (.npz), and never decides good or bad.
 * What every worker reports in the same words (row counts, hashes, the CPU) the harness works out from the
 * outputs it writes (harness/runners/node.py), so those words are defined once, in worker.py.
 *
 *     node worker.js REQUEST.json
 *     node worker.js --serve [--import-first]   (request paths on stdin, a status line each on stdout)
 *
 * The binding is the package named by ORTBISECT_BINDING_PACKAGE, resolved only inside the npm prefix
 * ORTBISECT_NODE_PREFIX: a module elsewhere on the machine is never loaded in its place.
 *
 * Exit status as worker.py's: 0 result written, 3 result written with an error, 5 the harness is gone,
 * 6 the request ran past its deadline, anything else: no result.
 */
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const readline = require('readline');
const { Worker } = require('worker_threads');

const EXIT_OK = 0;
const EXIT_ERROR = 3;
const EXIT_HELD_ORPHAN = 4;
const EXIT_ORPHAN = 5;
const EXIT_DEADLINE = 6;
const PARENT_ENV = 'ORTBISECT_WORKER_PARENT';
const WATCH_MS = 200;

// session option words (harness.vocabulary) -> the JavaScript API's
const GRAPH_LEVELS = { disable: 'disabled', basic: 'basic', extended: 'extended', layout: 'layout', all: 'all' };
const EXEC_MODES = { sequential: 'sequential', parallel: 'parallel' };
// onnxruntime's provider names (what requests and records say) -> the JavaScript API's
const EP_NAMES = { CPUExecutionProvider: 'cpu', WebAssemblyExecutionProvider: 'wasm' };
// npy descr -> [onnxruntime tensor type, typed array]; float16 travels as its bits (Node 20 has no Float16Array)
const DTYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<f2': ['float16', Uint16Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array], '<i2': ['int16', Int16Array], '|i1': ['int8', Int8Array],
  '<u8': ['uint64', BigUint64Array], '<u4': ['uint32', Uint32Array], '<u2': ['uint16', Uint16Array], '|u1': ['uint8', Uint8Array],
  '|b1': ['bool', Uint8Array],
};
const DESCR_OF = {};
for (const [descr, [type]] of Object.entries(DTYPES)) if (!(type in DESCR_OF)) DESCR_OF[type] = descr;
DESCR_OF.uint16 = '<u2';

function now() { return Number(process.hrtime.bigint()) / 1e9; }

// -- .npz in and out -------------------------------------------------------------------------------------

/** The members of a zip file (what np.savez writes: stored or deflated, no zip64), as {name: Buffer}. */
function readZip(buf) {
  let eocd = -1;
  for (let i = buf.length - 22; i >= Math.max(0, buf.length - 22 - 65535); i--) {
    if (buf.readUInt32LE(i) === 0x06054b50) { eocd = i; break; }
  }
  if (eocd < 0) throw new Error('not a zip file (no end of central directory)');
  const count = buf.readUInt16LE(eocd + 10);
  let at = buf.readUInt32LE(eocd + 16);
  const members = {};
  for (let n = 0; n < count; n++) {
    if (buf.readUInt32LE(at) !== 0x02014b50) throw new Error('a damaged zip central directory');
    const method = buf.readUInt16LE(at + 10);
    const size = buf.readUInt32LE(at + 20);
    const nameLen = buf.readUInt16LE(at + 28), extraLen = buf.readUInt16LE(at + 30), commentLen = buf.readUInt16LE(at + 32);
    const local = buf.readUInt32LE(at + 42);
    const name = buf.toString('utf8', at + 46, at + 46 + nameLen);
    if (name in members) throw new Error(`two members named ${name}`);
    const start = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    const data = buf.subarray(start, start + size);
    if (method === 0) members[name] = data;
    else if (method === 8) members[name] = zlib.inflateRawSync(data);
    else throw new Error(`${name}: zip compression method ${method}`);
    at += 46 + nameLen + extraLen + commentLen;
  }
  return members;
}

/** One .npy file as {descr, shape, data: Buffer}. */
function readNpy(name, buf) {
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    throw new Error(`${name}: not an .npy array`);
  }
  const major = buf.readUInt8(6);
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const offset = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', offset, offset + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${name}: an .npy header this worker cannot read`);
  if (fortran[1] === 'True') throw new Error(`${name}: a Fortran-ordered array`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  return { descr: descr[1], shape: dims, data: buf.subarray(offset + headerLen) };
}

/** The arrays of an .npz (its bytes) as the binding's tensors, by name. */
function feedsOf(ort, npz) {
  const feeds = {};
  for (const [member, buf] of Object.entries(readZip(npz))) {
    const name = member.endsWith('.npy') ? member.slice(0, -4) : member;
    const arr = readNpy(name, buf);
    const dt = DTYPES[arr.descr];
    if (!dt) throw new Error(`${name}: dtype ${arr.descr} is not one this worker feeds`);
    const [type, Typed] = dt;
    const copy = Buffer.from(arr.data); // aligned, and owned by the tensor
    const data = new Typed(copy.buffer, copy.byteOffset, copy.byteLength / Typed.BYTES_PER_ELEMENT);
    feeds[name] = new ort.Tensor(type, type === 'bool' ? new Uint8Array(data) : data, arr.shape);
  }
  return feeds;
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(buf) {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function npyBytes(descr, dims, data) {
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.writeUInt8(0x93, 0); pre.write('NUMPY', 1, 'latin1'); pre.writeUInt8(1, 6); pre.writeUInt8(0, 7);
  pre.writeUInt16LE(header.length, 8);
  return Buffer.concat([pre, Buffer.from(header, 'latin1'), data]);
}

/** The arrays as an .npz (a stored zip, as np.savez writes), written atomically. */
function writeNpz(file, arrays) {
  const parts = [], central = [];
  let offset = 0;
  for (const [name, bytes] of arrays) {
    const fname = Buffer.from(`${name}.npy`, 'utf8');
    const crc = crc32(bytes);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0); local.writeUInt16LE(20, 4); local.writeUInt16LE(0x0800, 6);
    local.writeUInt32LE(crc, 14); local.writeUInt32LE(bytes.length, 18); local.writeUInt32LE(bytes.length, 22);
    local.writeUInt16LE(fname.length, 26);
    const entry = Buffer.alloc(46);
    entry.writeUInt32LE(0x02014b50, 0); entry.writeUInt16LE(20, 4); entry.writeUInt16LE(20, 6);
    entry.writeUInt16LE(0x0800, 8); entry.writeUInt32LE(crc, 16); entry.writeUInt32LE(bytes.length, 20);
    entry.writeUInt32LE(bytes.length, 24); entry.writeUInt16LE(fname.length, 28); entry.writeUInt32LE(offset, 42);
    parts.push(local, fname, bytes);
    central.push(entry, fname);
    offset += 30 + fname.length + bytes.length;
  }
  const dir = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0); end.writeUInt16LE(arrays.length, 8); end.writeUInt16LE(arrays.length, 10);
  end.writeUInt32LE(dir.length, 12); end.writeUInt32LE(offset, 16);
  const tmp = `${file}.tmp.npz`;
  fs.writeFileSync(tmp, Buffer.concat([...parts, dir, end]));
  fs.renameSync(tmp, file);
}

function outputBytes(name, tensor) {
  if (tensor === undefined) throw new Error(`the session gave no output ${name}`);
  const descr = DESCR_OF[tensor.type];
  if (!descr || !ArrayBuffer.isView(tensor.data)) throw new Error(`output ${name}: type ${tensor.type} is not one this worker saves`);
  const d = tensor.data;
  return npyBytes(descr, tensor.dims, Buffer.from(d.buffer, d.byteOffset, d.byteLength));
}

// -- the binding and its session -------------------------------------------------------------------------

function loadBinding() {
  const prefix = process.env.ORTBISECT_NODE_PREFIX;
  const pkg = process.env.ORTBISECT_BINDING_PACKAGE;
  if (!prefix || !pkg) throw new Error('ORTBISECT_NODE_PREFIX and ORTBISECT_BINDING_PACKAGE name the binding');
  const modules = path.join(fs.realpathSync(prefix), 'node_modules');
  const main = require.resolve(pkg, { paths: [modules] });
  if (!fs.realpathSync(main).startsWith(modules + path.sep)) throw new Error(`${pkg} resolved outside its prefix: ${main}`);
  const ort = require(main);
  const version = JSON.parse(fs.readFileSync(path.join(modules, pkg, 'package.json'), 'utf8')).version;
  return { ort, pkg, version, web: pkg === 'onnxruntime-web' };
}

function sessionOptions(binding, opts, providers) {
  const asked = providers && providers.length ? providers.map((p) => p[0]) : [binding.web ? 'WebAssemblyExecutionProvider' : 'CPUExecutionProvider'];
  const unknown = asked.filter((p) => !(p in EP_NAMES));
  if (unknown.length) throw new Error(`the ${binding.pkg} binding runs no ${unknown.join(', ')}`);
  const so = { executionProviders: asked.map((p) => EP_NAMES[p]) };
  if (opts.graph_optimization_level) so.graphOptimizationLevel = GRAPH_LEVELS[opts.graph_optimization_level];
  if (opts.execution_mode) so.executionMode = EXEC_MODES[opts.execution_mode];
  if (binding.web) {
    // the WebAssembly backend's threads are the environment's, set before its first session
    binding.ort.env.wasm.numThreads = opts.intra_op_num_threads != null ? Number(opts.intra_op_num_threads) : 1;
  } else {
    if (opts.intra_op_num_threads != null) so.intraOpNumThreads = Number(opts.intra_op_num_threads);
    if (opts.inter_op_num_threads != null) so.interOpNumThreads = Number(opts.inter_op_num_threads);
  }
  if (opts.optimized_model_filepath) so.optimizedModelFilePath = opts.optimized_model_filepath;
  const config = opts.config || {};
  if (Object.keys(config).length) {
    // session config entries ("session.x.y" = v) as the API's nested `extra`
    so.extra = {};
    for (const key of Object.keys(config).sort()) {
      const parts = key.split('.');
      let at = so.extra;
      for (const p of parts.slice(0, -1)) at = at[p] = at[p] || {};
      at[parts[parts.length - 1]] = String(config[key]);
    }
  }
  return so;
}

function fileIdentity(file) {
  const st = fs.statSync(file, { bigint: true });
  return [st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs].map(String);
}

function sessionKey(request) {
  return JSON.stringify([request.model, fileIdentity(request.model), request.session_options || {}, request.providers || null]);
}

function unsupported(request, binding) {
  const opts = request.session_options || {};
  if (opts.disabled_optimizers && opts.disabled_optimizers.length) return 'disabled_optimizers';
  if (opts.session_log_path) return 'a session log';
  if (request.profile_prefix) return "onnxruntime's profiler";
  if (binding.web && opts.optimized_model_filepath) return 'saving the optimized model';
  return null;
}

function hold(directory, parent) {
  fs.closeSync(fs.openSync(path.join(directory, `running-${process.pid}`), 'w'));
  const gates = [path.join(directory, `go-${process.pid}`), path.join(directory, 'go')];
  while (!gates.some((g) => fs.existsSync(g))) {
    if (process.ppid !== parent) process.exit(EXIT_HELD_ORPHAN);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
  }
}

async function probe(state, request, result) {
  const t0 = now();
  result.worker = 1;
  result.binding = { node: process.version, platform: `${process.platform}-${process.arch}` };
  result.stage = 'import';
  const binding = state.binding || (state.binding = loadBinding());
  const { ort } = binding;
  result.import_s = now() - t0;
  result.onnxruntime = { version: binding.version, device: 'CPU', providers: [binding.web ? 'wasm' : 'cpu'],
    build_info: '', package: binding.pkg, versions: ort.env.versions || null };
  result.stage = 'session'; // what the binding cannot do is the session's to refuse: the package imported
  const missing = unsupported(request, binding);
  if (missing) throw new Error(`the ${binding.pkg} binding has no ${missing}`);

  result.stage = 'inputs';
  const feeds = feedsOf(ort, fs.readFileSync(request.inputs));

  result.stage = 'session';
  const opts = request.session_options || {};
  result.session_options = opts;
  let t = now();
  const key = state.kept ? sessionKey(request) : null;
  let sess;
  if (key !== null && state.kept.key === key) {
    sess = state.kept.session;
    result.session_reused = true;
  } else {
    if (state.kept && state.kept.session && state.kept.session.release) await state.kept.session.release();
    if (state.kept) state.kept = {};
    const so = sessionOptions(binding, opts, request.providers);
    // the WebAssembly backend takes the model as bytes (it reads no files of its own)
    sess = await ort.InferenceSession.create(binding.web ? new Uint8Array(fs.readFileSync(request.model)) : request.model, so);
    if (key !== null) state.kept = { key, session: sess };
  }
  result.session_s = now() - t;
  // the JavaScript API does not say which provider ran a node: a session is made on the ones asked for, or fails
  result.providers_used = (request.providers && request.providers.length)
    ? request.providers.map((p) => p[0]) : [binding.web ? 'WebAssemblyExecutionProvider' : 'CPUExecutionProvider'];

  result.stage = 'run';
  const names = request.outputs && request.outputs.length ? request.outputs : sess.outputNames;
  if (request.hold_dir) hold(request.hold_dir, state.parent);
  t = now();
  // every output, then the ones asked for by name: onnxruntime-node up to 1.23.2 keys the outputs of a run asked
  // for some of them by the session's first output names (measured; fixed in 1.24.1)
  const out = await sess.run(feeds);
  result.run_s = now() - t;
  if (request.timing) {
    result.stage = 'timing';
    result.timing = await timedRuns(sess, feeds, request.timing, opts, !!result.session_reused);
    result.pinned_cpu = null; // Node.js cannot pin itself to one CPU
  }
  if (request.margin) result.margin_skipped = `the ${binding.pkg} binding reads no margin`;
  result.stage = 'done';
  // the harness works out every output's statistics and the batch's rows from the .npz (worker.py's words)
  const file = request.outputs_path || path.join(path.dirname(request.result_path), 'outputs.npz');
  writeNpz(file, names.map((n) => [n, outputBytes(n, out[n])]));
  result.output_names = names;
}

async function timedRuns(sess, feeds, timing, opts, warm) {
  const warmup = warm ? 0 : Number(timing.warmup || 0);
  for (let i = 0; i < warmup; i++) await sess.run(feeds);
  const runsMin = Number(timing.runs_min || 1), runsMax = Number(timing.runs_max || 1000);
  const until = now() + Number(timing.seconds || 0);
  const latencies = [];
  while (latencies.length < runsMin || (latencies.length < runsMax && now() < until)) {
    const t = now();
    await sess.run(feeds);
    latencies.push(now() - t);
  }
  return { latencies_s: latencies, warmup, threads: opts.intra_op_num_threads == null ? null : opts.intra_op_num_threads };
}

function writeJson(file, doc) {
  const tmp = `${file}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  fs.writeSync(fd, JSON.stringify(doc));
  fs.fsyncSync(fd);
  fs.closeSync(fd);
  fs.renameSync(tmp, file);
}

async function handle(state, requestPath) {
  const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  state.watchdog.postMessage(request.deadline_s ? { deadline: Date.now() + 1000 * Number(request.deadline_s) } : { deadline: null });
  let status = EXIT_OK;
  const result = {};
  const t0 = now();
  try {
    await probe(state, request, result);
  } catch (exc) {
    status = EXIT_ERROR;
    const name = exc && exc.constructor && exc.constructor.name !== 'Object' ? exc.constructor.name : 'Error';
    result.error = `${name}: ${exc && exc.message !== undefined ? exc.message : String(exc)}`;
    result.traceback = exc && exc.stack ? String(exc.stack) : '';
  }
  state.watchdog.postMessage({ deadline: null });
  result.wall_s = now() - t0;
  result.peak_rss_mb = process.resourceUsage().maxRSS / 1024;
  if (state.served) result.served = state.served;
  writeJson(request.result_path, result);
  return status;
}

/** A thread of its own that ends the process when its harness is gone or a request's deadline passes: the
 * WebAssembly backend runs a model on the main thread, where no timer fires until it returns. */
function startWatchdog(parent) {
  const code = `
    const { parentPort, workerData } = require('worker_threads');
    let deadline = null;
    parentPort.on('message', (m) => { deadline = m.deadline; });
    const end = (status, why) => {
      try { require('fs').writeSync(2, 'worker ' + process.pid + ' ends: ' + why + '\\n'); } catch (e) {}
      process.kill(process.pid, 'SIGKILL');
    };
    setInterval(() => {
      if (process.ppid !== workerData.parent) end(${EXIT_ORPHAN}, 'its harness (pid ' + workerData.parent + ') is gone');
      if (deadline !== null && Date.now() > deadline) end(${EXIT_DEADLINE}, 'its request ran past its deadline');
    }, ${WATCH_MS});`;
  const w = new Worker(code, { eval: true, workerData: { parent } });
  w.unref();
  return w;
}

function expectedParent() {
  const pid = Number.parseInt(process.env[PARENT_ENV] || '', 10);
  return pid > 0 ? pid : process.ppid;
}

async function main(argv) {
  const parent = expectedParent();
  const state = { parent, served: 0, kept: null, binding: null, watchdog: startWatchdog(parent) };
  if (argv[0] !== '--serve') return handle(state, argv[0]);
  state.kept = {};
  if (argv[1] === '--import-first') {
    try { state.binding = loadBinding(); } catch (e) { /* the request loads it again and says why it fails */ }
  }
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const status = await handle(state, line.trim());
    state.served += 1;
    process.stdout.write(`${status}\n`);
  }
  return EXIT_OK;
}

main(process.argv.slice(2)).then((status) => process.exit(status), (exc) => {
  process.stderr.write(`${exc && exc.stack ? exc.stack : exc}\n`);
  process.exit(1);
});
