#!/usr/bin/env node
// Generates tests/data/gpt2_golden.json: GPT-2 BPE token ids produced by
// js-tiktoken for hand-written edge cases plus seeded random strings.
//
// Usage: node tools/js/gen_gpt2_golden.mjs [output path]
//   (default: <repo root>/tests/data/gpt2_golden.json, where the repo root is
//    two directories above this script)
//
// Requires `npm ci --prefix tools/js` first.
//
// Output format (one case per line, so diffs stay readable):
//   {"generator": "js-tiktoken@<version> gpt2", "note": "...", "cases": [
//   {"name": "...", "text": "...", "allowed_special": "all" | "none", "ids": [...]},
//   ...
//   ]}
//  "all":  enc.encode(text, "all")  -> "<|endoftext|>" becomes id 50256
//  "none": enc.encode(text, [], []) -> "<|endoftext|>" is encoded as ordinary text
//
// Everything is deterministic: random cases come from a seeded PRNG
// (mulberry32) defined below, never Math.random.

import { createRequire } from "node:module";
import { writeFileSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, resolve, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "..", "..");
const require = createRequire(import.meta.url);

// js-tiktoken's "exports" map hides package.json, so find it from the entry point.
function packageVersion(name) {
  let dir = dirname(require.resolve(name));
  while (dir !== dirname(dir)) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      const meta = JSON.parse(readFileSync(pj, "utf8"));
      if (meta.name === name) return meta.version;
    }
    dir = dirname(dir);
  }
  throw new Error(`cannot find package.json of ${name}`);
}

let getEncoding;
let tiktokenVersion;
try {
  ({ getEncoding } = await import("js-tiktoken"));
  tiktokenVersion = packageVersion("js-tiktoken");
} catch (err) {
  console.error(
    `gen_gpt2_golden: cannot load js-tiktoken (${err.message}).\n` +
      `Run: npm ci --prefix ${join(repoRoot, "tools", "js")}`,
  );
  process.exit(2);
}

const SEED = 0x6e616e6f; // "nano"
const NUM_RANDOM = 1600;
const MAX_RANDOM_LEN = 200; // code points
const EOT = "<|endoftext|>";
// JavaScript's \s and tiktoken's (Rust regex) Unicode White_Space disagree on
// exactly these two code points; we follow tiktoken, so they never appear.
const EXCLUDED = new Set([0x85, 0xfeff]);

// ---------------------------------------------------------------------------
// Seeded PRNG (mulberry32).
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(SEED);
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = (arr) => arr[Math.floor(rand() * arr.length)];

// ---------------------------------------------------------------------------
// Character pools. Each pool entry is a string of one or more code points
// (multi-code-point entries are emoji sequences, "\r\n", etc.).
const cps = (s) => Array.from(s);
const range = (lo, hi) => {
  const out = [];
  for (let c = lo; c <= hi; c++) out.push(String.fromCodePoint(c));
  return out;
};

const POOLS = {
  lower: range(0x61, 0x7a),
  upper: range(0x41, 0x5a),
  digit: range(0x30, 0x39),
  space: [" "],
  apostrophe: ["'"],
  // Contraction suffixes (including upper-case ones GPT-2 does not special-case).
  contraction: ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'T", "'D", "'Re"],
  punct: cps("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~"),
  whitespace: [
    "\t", "\n", "\r", "\r\n", "\v", "\f", "\n\n",
    "\u00a0", "\u1680", "\u2000", "\u2003", "\u2009", "\u200a", "\u2028", "\u2029",
    "\u202f", "\u205f", "\u3000",
  ],
  // Not White_Space although they look like it (format chars, Cf).
  notspace: ["\u200b", "\u200c", "\u200d", "\u2060", "\u180e"],
  latin1: cps("àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖØÙÚÛÜÝÞßªº"),
  latinExt: cps("ĀāĂăĄąĆćČčĐđĘęĞğİıŁłŃńŐőŒœŘřŚśŞşŠšŢţŰűŸŹźŻżŽžǅǈǋʰʲˆ"),
  greek: cps("αβγδεζηθικλμνξοπρστυφχψωάέήίόύώΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ"),
  cyrillic: cps("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґ"),
  arabic: cps("ابتثجحخدذرزسشصضطظعغفقكلمنهويةىءأإآ"),
  hebrew: cps("אבגדהוזחטיכלמנסעפצקרשתםןףץך"),
  devanagari: cps("अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसहक्षािीुूेैोौंःँ़्"),
  cjk: cps("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年日本語漢字中文"),
  hangul: cps("한국어안녕하세요가나다라마바사아자차카타파하"),
  kana: cps("あいうえおかきくけこさしすせそアイウエオカキクケコサシスセソンーゃゅょッ"),
  // Unicode numbers: Nd (non-ASCII decimal digits), Nl (letter numbers), No (other numbers).
  numNd: cps("٠١٢٣٤٥٦٧٨٩۰۱۲۳०१२३४५६७८९০১২৩๐๑๒๓０１２３４５６７８９").concat(["𝟘", "𝟙", "𝟚"]),
  numNl: cps("ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫⅰⅱⅲⅳⅻ〇〡〢〣"),
  numNo: cps("½¼¾²³¹⅓⅔⅛①②③④⑤⑩⑳⓪❶❷⁰⁴⁵₀₁₂"),
  // Combining marks, Mn/Mc: NOT letters for \p{L}.
  marks: cps("\u0300\u0301\u0302\u0303\u0308\u030a\u0327\u0332\u0361\u064b\u064e\u0650\u05b7\u05bc\u093f\u0940\u094d\u0902\u0e31\u0e34\u20dd\u20e3"),
  astral: ["𝐀", "𝐁", "𝒜", "𝔄", "𠀀", "𠜎", "𐐀", "𐐨", "𓀀", "🄰"],
  emoji: [
    "😀", "😂", "🤖", "👍", "🔥", "🎉", "❤️", "☃", "✨", "🫠", "🥲",
    "👍🏽", "👋🏿", "🧑‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️‍🔥",
    "🇺🇸", "🇯🇵", "🇩🇪", "🇪🇺", "1️⃣", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
  ],
  symbol: cps("€£¥©®™°±×÷§¶•…—–‘’“”«»←→↑↓∑∏√∞≈≠≤≥∈∂∆★☆♠♥♦♣♪©¬¦¤¢"),
  control: ["\u0000", "\u0001", "\u0007", "\u001b", "\u001f", "\u007f", "\u0080", "\u009f"],
  special: [EOT],
  partialSpecial: ["<|", "|>", "<|endoftext", "endoftext|>", "<|endoftext|", "<||>", "<|endoftext|>>", "<<|endoftext|>"],
};

// [pool name, weight, max run length]
const MIX = [
  ["lower", 30, 10],
  ["upper", 6, 5],
  ["digit", 7, 12],
  ["space", 18, 6],
  ["apostrophe", 3, 3],
  ["contraction", 3, 1],
  ["punct", 9, 5],
  ["whitespace", 6, 4],
  ["notspace", 0.5, 2],
  ["latin1", 3, 6],
  ["latinExt", 2, 6],
  ["greek", 2, 8],
  ["cyrillic", 2, 8],
  ["arabic", 1.5, 8],
  ["hebrew", 1, 6],
  ["devanagari", 1.5, 8],
  ["cjk", 2, 6],
  ["hangul", 1, 5],
  ["kana", 1, 6],
  ["numNd", 1, 5],
  ["numNl", 0.7, 3],
  ["numNo", 0.7, 3],
  ["marks", 1.2, 3],
  ["astral", 0.6, 3],
  ["emoji", 2.5, 3],
  ["symbol", 2.5, 3],
  ["control", 0.5, 2],
  ["special", 0.4, 2],
  ["partialSpecial", 0.4, 1],
];
const MIX_TOTAL = MIX.reduce((s, [, w]) => s + w, 0);

function pickPool() {
  let r = rand() * MIX_TOTAL;
  for (const entry of MIX) {
    r -= entry[1];
    if (r < 0) return entry;
  }
  return MIX[MIX.length - 1];
}

// A random string of exactly `len` code points: a sequence of runs, each run
// drawn from one pool (so we get words, space runs, digit runs, emoji runs ...),
// then cut to `len` code points. Cutting may split a multi-code-point entry
// (an emoji sequence, "\r\n", "<|endoftext|>"), which is intended; cutting on
// code point boundaries never creates a lone surrogate.
function randomText(len) {
  const out = [];
  while (out.length < len) {
    const [name, , maxRun] = pickPool();
    const run = rand() < 0.5 ? 1 : randInt(1, maxRun);
    for (let i = 0; i < run; i++) out.push(...cps(pick(POOLS[name])));
  }
  return out.slice(0, len).join("");
}

// ---------------------------------------------------------------------------
// Hand-written edge cases: [name, text, modes]. modes defaults to ["none"];
// anything containing "<|endoftext|>" is emitted in both modes.
const rep = (s, n) => s.repeat(n);
const EDGE = [
  ["empty", ""],
  ["single_space", " "],
  ["single_letter", "a"],
  ["hello_world", "hello world"],
  ["hello_world_cap", "Hello World!"],
  // contractions
  ["contractions_all", "it's don't you're we've I'm we'll he'd"],
  ["contractions_bare", "'s 't 're 've 'm 'll 'd"],
  ["contractions_glued", "'s't're've'm'll'd"],
  ["contractions_upper", "IT'S DON'T WE'LL HE'D YOU'RE I'M WE'VE"],
  ["contractions_upper_bare", "'S 'LL 'T 'RE 'VE 'M 'D"],
  ["contractions_mixed_case", "'Re 'rE 'Ll 'lL 'Ve"],
  ["contraction_prefix_only", "'sa 'tt 'red 'vex 'mm 'lll 'dd"],
  ["apostrophe_in_punct", "!'s ?'t ,'re .'ve"],
  ["double_apostrophe", "''"],
  ["double_apostrophe_s", "''s ''t '''"],
  ["apostrophe_space", "' s ' t 'x"],
  ["apostrophe_end", "rock 'n' roll'"],
  ["curly_apostrophe", "it’s don’t"],
  ["apostrophe_digits", "'99 '1 '2000s"],
  ["apostrophe_unicode", "'été 'ñ 'Σ"],
  // spaces
  ["leading_space", " hello"],
  ["trailing_space", "hello "],
  ["leading_trailing_spaces", "   hello world   "],
  ["spaces_1_to_5", "a b  c   d    e     f"],
  ["spaces_before_digits", "1 2  3   4    5     6"],
  ["spaces_before_punct", "! ?  .   ,    ;     :"],
  ["spaces_only_5", "     "],
  ["spaces_only_2", "  "],
  ["space_newline", " \n"],
  ["newline_space_word", "\n hello"],
  ["tabs", "\thello\tworld\t"],
  ["tab_runs", "a\t\tb\t\t\tc"],
  ["crlf", "line1\r\nline2\r\n"],
  ["crlf_runs", "a\r\n\r\nb"],
  ["newlines_3", "a\n\n\nb"],
  ["newlines_only", "\n\n\n"],
  ["mixed_ws_before_letter", " \t\n x"],
  ["mixed_ws_before_digit", "\n\t 7"],
  ["mixed_ws_before_punct", "\r\n  !"],
  ["mixed_ws_at_end", "end \t\r\n \n"],
  ["ws_vt_ff", "a\u000bb\u000cc \u000b \u000c"],
  ["space_then_newline_then_spaces", "x  \n   y"],
  ["space_before_nonspace_ws", "a \u00a0b"],
  // numbers
  ["digits_long", "1234567890123456789012345678901234567890"],
  ["digits_spaced", "3.14159 2,718 1e10 0x1F -42 +7"],
  ["digits_letters", "abc123def456 7up 2nd"],
  ["year_range", "1999-2024, 12:30pm, $1,000,000.00"],
  // Unicode letters
  ["latin1_accents", "café naïve résumé Zoë façade über Ærø"],
  ["greek", "Καλημέρα κόσμε, ΑΒΓ αβγ"],
  ["cyrillic", "Привет, мир! Ёжик"],
  ["arabic", "مرحبا بالعالم"],
  ["arabic_harakat", "مَرْحَبًا"],
  ["hebrew", "שלום עולם"],
  ["hebrew_niqqud", "שָׁלוֹם"],
  ["devanagari", "नमस्ते दुनिया"],
  ["devanagari_marks", "क्षत्रिय हिन्दी"],
  ["thai", "สวัสดีครับ"],
  ["cjk", "你好，世界。漢字"],
  ["hangul", "안녕하세요 세계"],
  ["japanese_kana", "こんにちは カタカナ ひらがな"],
  ["japanese_mixed", "日本語のテキスト、テスト。"],
  ["combining_acute_decomposed", "cafe\u0301 e\u0301t\u00e9"],
  ["combining_alone", "\u0301\u0301 \u0308x"],
  ["titlecase_letters", "ǅemal ǈ ǋ"],
  ["modifier_letters", "ʰʲ kʰa ˆ"],
  ["astral_letters", "𝐀𝐁𝐂 𝒜 𠀀𠜎 𐐀𐐨"],
  // Unicode numbers
  ["num_Nd", "٣ ४ ٠١٢ ０１２ 𝟘𝟙 ৩"],
  ["num_Nd_mixed_ascii", "12٣4४5"],
  ["num_Nl", "Ⅻ ⅰⅱⅲ 〇 Chapter Ⅳ"],
  ["num_No", "½ ² ① ¼cup x² H₂O ❶"],
  ["num_mixed_kinds", "3½ Ⅻ² ①②③"],
  // emoji and symbols
  ["emoji_simple", "😀😂🤖 👍 🔥"],
  ["emoji_zwj", "👨‍👩‍👧‍👦 🧑‍💻 🏳️‍🌈 ❤️‍🔥"],
  ["emoji_skin_tones", "👍🏻👍🏼👍🏽👍🏾👍🏿 👋🏿"],
  ["emoji_flags", "🇺🇸🇯🇵🇩🇪 🇪🇺 🏴󠁧󠁢󠁳󠁣󠁴󠁿"],
  ["emoji_keycaps", "1️⃣ #️⃣ *️⃣"],
  ["emoji_text", "I ❤️ NY 🙂!"],
  ["symbols", "€100 £5 ¥ © ® ™ ° ± × ÷ § ¶ → ∑ √ ∞ ≠ ★ ♥"],
  ["quotes_dashes", "“Hello” — ‘world’ – «ok» …"],
  ["zero_width", "a\u200bb\u200cc\u200dd\u2060e"],
  ["control_chars", "a\u0000b\u0001c\u001bd\u007fe\u0080f"],
  ["nul_alone", "\u0000"],
  // special token
  ["eot_alone", EOT],
  ["eot_repeated", EOT + EOT + EOT],
  ["eot_spaced", `${EOT} ${EOT}`],
  ["eot_glued_words", `hello${EOT}world`],
  ["eot_space_before", `hello ${EOT}`],
  ["eot_space_after", `${EOT} hello`],
  ["eot_newlines", `doc one\n${EOT}\ndoc two`],
  ["eot_in_punct", `!!${EOT}!!`],
  ["eot_contraction", `'${EOT}s`],
  ["partial_special_open", "<|endoftext|"],
  ["partial_special_close", "<|endoftext|>>"],
  ["partial_special_double_open", "<<|endoftext|>"],
  ["partial_special_variants", "<|endoftext <endoftext|> <| endoftext |> <|EndOfText|> <||>"],
  ["partial_special_glued", `x<|endoftext|${EOT}>`],
  // Unicode whitespace
  ["nbsp", "a\u00a0b \u00a0c\u00a0\u00a0d\u00a0"],
  ["ideographic_space", "日本\u3000語\u3000\u3000テスト\u3000"],
  ["em_space", "a\u2003b\u2003\u2003c \u2003d"],
  ["line_separator", "a\u2028b\u2028\u2028c\u2028"],
  ["paragraph_separator", "a\u2029b \u2029c\u2029"],
  ["unicode_ws_before_word", "\u2003\u3000\u00a0word"],
  ["unicode_ws_mixed_end", "end\u00a0\u2003\u3000\u2028\u2029"],
  ["ogham_narrow_mmsp", "a\u1680b\u202fc\u205fd"],
  // long runs
  ["long_letter_run", rep("a", 3000)],
  ["long_space_run", rep(" ", 3000)],
  ["long_space_run_then_word", rep(" ", 3000) + "word"],
  ["long_newline_run", rep("\n", 500)],
  ["long_digit_run", rep("9", 1000)],
  ["long_punct_run", rep("!?", 500)],
  ["long_cjk_run", rep("語", 500)],
  ["long_emoji_run", rep("😀", 300)],
  // ordinary English
  [
    "english_paragraph",
    "It was the best of times, it was the worst of times, it was the age of wisdom, " +
      "it was the age of foolishness, it was the epoch of belief, it was the epoch of " +
      "incredulity, it was the season of Light, it was the season of Darkness, it was " +
      "the spring of hope, it was the winter of despair. We had everything before us, " +
      "we had nothing before us; we were all going direct to Heaven, we were all going " +
      "direct the other way -- in short, the period was so far like the present period, " +
      "that some of its noisiest authorities insisted on its being received, for good or " +
      "for evil, in the superlative degree of comparison only.\n\n" +
      "    \"Don't you think so?\" she asked. \"I'd rather we'd left at 5:30 p.m.\"\n",
  ],
  [
    "code_snippet",
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:>3}\\t{argv[i]!r}\")  # comment\n\treturn 0\n",
  ],
  ["url_email", "See https://example.com/a/b?c=1&d=two#frag or mail me@example.org."],
];

// ---------------------------------------------------------------------------
function checkText(name, text) {
  if (!text.isWellFormed()) throw new Error(`case ${name}: text contains a lone surrogate`);
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (EXCLUDED.has(cp)) {
      throw new Error(`case ${name}: text contains excluded U+${cp.toString(16).toUpperCase().padStart(4, "0")}`);
    }
  }
}

const enc = getEncoding("gpt2");
const encodeMode = (text, mode) => (mode === "all" ? enc.encode(text, "all") : enc.encode(text, [], []));

const cases = [];
const names = new Set();
function addCase(name, text, mode) {
  if (names.has(name)) throw new Error(`duplicate case name ${name}`);
  names.add(name);
  checkText(name, text);
  const ids = encodeMode(text, mode);
  // Round-trip sanity: decoding must give the text back in both modes.
  const back = enc.decode(ids);
  if (back !== text) throw new Error(`case ${name}: js-tiktoken decode(encode(text)) != text`);
  cases.push({ name, text, allowed_special: mode, ids });
}

for (const [name, text] of EDGE) {
  if (text.includes(EOT)) {
    addCase(`${name}/all`, text, "all");
    addCase(`${name}/none`, text, "none");
  } else {
    addCase(name, text, "none");
  }
}
// A handful of edge cases without the special token in "all" mode too, so the
// "all" path is exercised on plain text.
for (const name of ["empty", "hello_world", "contractions_all", "english_paragraph", "emoji_zwj"]) {
  const text = EDGE.find(([n]) => n === name)[1];
  addCase(`${name}/all`, text, "all");
}

const width = String(NUM_RANDOM - 1).length;
for (let i = 0; i < NUM_RANDOM; i++) {
  const len = randInt(0, MAX_RANDOM_LEN);
  const text = randomText(len);
  const mode = i % 2 === 0 ? "all" : "none";
  addCase(`random_${String(i).padStart(width, "0")}`, text, mode);
}

// ---------------------------------------------------------------------------
const header = {
  generator: `js-tiktoken@${tiktokenVersion} gpt2`,
  note:
    "GPT-2 BPE golden ids generated by tools/js/gen_gpt2_golden.mjs (do not edit by hand). " +
    'allowed_special "all" = enc.encode(text, "all") so <|endoftext|> -> 50256; ' +
    '"none" = enc.encode(text, [], []) so <|endoftext|> is ordinary text. ' +
    `Random cases: mulberry32 seed 0x${SEED.toString(16)}, ${NUM_RANDOM} strings of 0..${MAX_RANDOM_LEN} code points. ` +
    "U+0085 and U+FEFF never appear (JS \\s and Unicode White_Space disagree on them; tiktoken uses White_Space).",
};

const lines = [];
lines.push(`{"generator": ${JSON.stringify(header.generator)}, "note": ${JSON.stringify(header.note)}, "cases": [`);
cases.forEach((c, i) => {
  const line =
    `{"name": ${JSON.stringify(c.name)}, "text": ${JSON.stringify(c.text)}, ` +
    `"allowed_special": ${JSON.stringify(c.allowed_special)}, "ids": ${JSON.stringify(c.ids)}}`;
  lines.push(line + (i + 1 < cases.length ? "," : ""));
});
lines.push("]}");
const out = lines.join("\n") + "\n";

// Self-check: the file must parse back to exactly what we generated.
const parsed = JSON.parse(out);
if (parsed.cases.length !== cases.length || parsed.cases.some((c, i) => c.text !== cases[i].text)) {
  throw new Error("internal error: output JSON does not round-trip");
}

const outPath = resolve(process.argv[2] ?? join(repoRoot, "tests", "data", "gpt2_golden.json"));
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, out);
const nAll = cases.filter((c) => c.allowed_special === "all").length;
console.error(
  `gen_gpt2_golden: wrote ${cases.length} cases (${nAll} "all", ${cases.length - nAll} "none"), ` +
    `${Buffer.byteLength(out)} bytes to ${outPath}`,
);
