// Reference side of tests/bench/cron: npm cron-parser (the version pinned in
// tests/cron/package.json) computing N next instants over the mix in
// tests/bench/cron-mix.tsv, the same way cron-bench.c does for baton: each
// expression parsed once, then chained next() calls, restarting from
// 2026-01-01T00:00:00Z every 1,000. Prints "<nexts> <nanoseconds>".
'use strict';
const path = require('path');
const fs = require('fs');
const root = path.join(__dirname, '..', '..');
const { CronExpressionParser } = require(path.join(root, 'tests/cron/node_modules/cron-parser'));

const n = Number(process.argv[2] || 100000);
const mix = fs.readFileSync(path.join(__dirname, 'cron-mix.tsv'), 'utf8')
  .split('\n').filter(Boolean).map((l) => l.split('\t'));
const start = new Date(Date.UTC(2026, 0, 1));
const its = mix.map(([tz, expr]) =>
  CronExpressionParser.parse(expr, { currentDate: start, tz }));
const per = Math.ceil(n / its.length);
let done = 0, sink = 0;
const t0 = process.hrtime.bigint();
for (const it of its) {
  for (let i = 0; i < per; i++) {
    if (i % 1000 === 0) it.reset(start);
    sink += it.next().getTime() & 1;
    done++;
  }
}
const t1 = process.hrtime.bigint();
process.stdout.write(`${done} ${t1 - t0} ${sink}\n`);
