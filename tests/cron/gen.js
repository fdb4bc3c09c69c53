#!/usr/bin/env node
// Differential fixtures for baton's cron engine, computed by npm cron-parser
// (exact version pinned in package.json / package-lock.json).
//
//   node tests/cron/gen.js > tests/cron/fixtures.tsv
//
// Deterministic: a seeded PRNG makes the same expressions, zones and start
// instants every run, so the output only changes with cron-parser's version
// (or the generator). Each line:
//
//   <tag> TAB <zone> TAB <from epoch s> TAB <expression> TAB <t1,t2,...|ERR>
//
// <tag> is "ok" for a case both implementations must agree on, or
// "x:<reason>" for a case in a documented divergence (docs/schedules.md,
// tests/cron/README.md). tests/c/test-cron-diff.c checks every "ok" line,
// counts the "x:" lines by reason and fails on an unknown reason.
'use strict';
const { CronExpressionParser } = require('cron-parser');
const { DateTime } = require('luxon');

const COUNT = Number(process.env.CRON_DIFF_COUNT || 4000);
const NEXT = 5;

let seed = 0x5eed1234;
function rnd() {                         // mulberry32
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (a, b) => a + Math.floor(rnd() * (b - a + 1));
const pick = (xs) => xs[int(0, xs.length - 1)];

const ZONES = ['UTC', 'America/New_York', 'Europe/London', 'Europe/Berlin',
  'Australia/Lord_Howe', 'America/Sao_Paulo', 'Asia/Kolkata',
  'Pacific/Chatham'];

// Start instants near DST transitions of several years, and anywhere.
const TRANSITIONS = [
  '2024-03-10T06:00:00Z', '2024-11-03T05:00:00Z', '2025-03-09T06:00:00Z',
  '2025-11-02T05:00:00Z', '2026-03-08T06:00:00Z', '2026-11-01T05:00:00Z',
  '2024-03-31T00:30:00Z', '2024-10-27T00:30:00Z', '2025-03-30T00:30:00Z',
  '2025-10-26T00:30:00Z', '2026-03-29T00:30:00Z', '2026-10-25T00:30:00Z',
  '2025-04-05T14:30:00Z', '2025-10-04T15:00:00Z', '2026-04-04T14:30:00Z',
  '2026-10-03T15:00:00Z', '2017-10-15T02:00:00Z', '2018-02-18T01:00:00Z',
  '2018-11-04T02:00:00Z', '2019-02-17T01:00:00Z', '2025-04-05T13:45:00Z',
  '2025-09-27T13:45:00Z', '2026-04-04T13:45:00Z', '2026-09-26T13:45:00Z',
].map((s) => Date.parse(s) / 1000);

const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP',
  'OCT', 'NOV', 'DEC'];
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

// One item of a field with values lo..hi.
function item(lo, hi, names) {
  const val = () => {
    const v = int(lo, hi);
    return names && rnd() < 0.3 ? names[v - (names === MONTHS ? 1 : 0)] : String(v);
  };
  switch (int(0, 5)) {
    case 0: case 1: return val();
    case 2: { const a = int(lo, hi), b = int(a, hi); return `${a}-${b}`; }
    case 3: { const a = int(lo, hi), b = int(a, hi); return `${a}-${b}/${int(1, Math.max(1, hi - lo))}`; }
    case 4: return `${int(lo, hi)}/${int(1, Math.max(1, hi - lo))}`;
    default: return `*/${int(1, Math.max(1, hi - lo))}`;
  }
}

// A field: *, one item, or a list of distinct values (cron-parser rejects
// lists that repeat a value; the few that still do are tagged below).
function field(lo, hi, names, pStar) {
  if (rnd() < pStar) return '*';
  if (rnd() < 0.75) return item(lo, hi, names);
  const vs = new Set();
  for (let n = int(2, 3); vs.size < n;) vs.add(int(lo, hi));
  const xs = [...vs].map(String);
  if (rnd() < 0.3) xs.push(item(lo, hi, names));
  return xs.join(',');
}

function domField() {
  const r = rnd();
  if (r < 0.45) return pick(['*', '*', '?']);
  if (r < 0.55) return pick(['L', '1,L', 'L,15']);
  return field(1, 28, null, 0);
}

function dowField() {
  const r = rnd();
  if (r < 0.45) return pick(['*', '*', '?']);
  if (r < 0.55) return `${int(0, 6)}L`;
  if (r < 0.65) return `${int(0, 6)}#${int(1, 5)}`;
  if (r < 0.70) return pick(['MON-FRI', 'SAT,SUN', '1-5', '0,6', '7', '5-7']);
  return field(0, 6, DAYS, 0);
}

function expression() {
  const secs = rnd() < 0.3;
  const f = [];
  if (secs) f.push(field(0, 59, null, 0.4));
  f.push(field(0, 59, null, 0.2));
  f.push(field(0, 23, null, 0.35));
  f.push(domField());
  f.push(field(1, 12, MONTHS, 0.7));
  f.push(dowField());
  return f.join(' ');
}

// Documented divergences (tests/cron/README.md), decided from the
// expression (and cron-parser's own error message), never from comparing
// the two results.
function divergence(expr, err, zone, from, last) {
  const f = expr.split(' ');
  const dom = f[f.length - 3], dow = f[f.length - 1];
  const restricted = (x) => x !== '*' && x !== '?';
  // Vixie: a day field that starts with * (like */2) makes the rule AND;
  // cron-parser treats only a bare * or ? as unrestricted, so it ORs.
  if ((dom.startsWith('*') && dom !== '*' && restricted(dow)) ||
      (dow.startsWith('*') && dow !== '*' && restricted(dom)))
    return 'vixie-star-step';
  // cron-parser rejects a list that names a value twice (1,1 or 5,*/5);
  // baton accepts it, as Vixie cron does.
  if (/duplicate values/.test(err)) return 'duplicate-values';
  // cron-parser gives up ("loop limit exceeded") on some schedules around
  // Australia/Lord_Howe's 30-minute DST changes; baton's answers for these
  // are checked by hand in tests/c/test-cron.c.
  if (/loop limit exceeded/.test(err)) return 'reference-loop-limit';
  // In Lord Howe's repeated half hour (01:30-02:00 happens at +11, then at
  // +10:30) baton fires a schedule whose hour starts with * at both
  // instants, as it does in every other zone; cron-parser only at the
  // first. Tagged when the case's window contains that fall-back.
  const hour = f[f.length - 4];
  const off = (t) => DateTime.fromSeconds(t, { zone }).offset;
  if (zone === 'Australia/Lord_Howe' && hour.startsWith('*') && last &&
      off(from) > off(last))
    return 'lord-howe-overlap';
  return null;
}

const out = [];
for (let i = 0; i < COUNT; i++) {
  const zone = ZONES[i % ZONES.length];
  const expr = expression();
  const from = rnd() < 0.7
    ? pick(TRANSITIONS) - int(0, 36 * 3600)
    : int(946684800, 2082758400);           // 2000 .. 2036
  let res, err = '';
  try {
    const it = CronExpressionParser.parse(expr, {
      currentDate: new Date(from * 1000), tz: zone,
    });
    const ts = [];
    for (let k = 0; k < NEXT; k++) ts.push(it.next().getTime() / 1000);
    res = ts.join(',');
  } catch (e) {
    res = 'ERR';
    err = e.message;
  }
  const why = divergence(expr, err, zone, from,
    res === 'ERR' ? 0 : Number(res.split(',').pop()));
  out.push([why ? `x:${why}` : 'ok', zone, from, expr, res].join('\t'));
}
process.stdout.write(out.join('\n') + '\n');
