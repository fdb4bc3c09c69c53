// Helper of tests/etcdpb/capture.sh: decodes each raw gRPC answer with
// pbtool and compares it with the gateway's JSON for the same request;
// unless --check, then writes the fixtures.
//
//   node compare.js PBTOOL GWDIR GRPCDIR [--check] FIXTURES CORPUS
//
// Values that differ between two runs of the same requests whatever the
// client, and so are compared loosely: the simple auth token (random), a
// lease's remaining TTL (a second may pass), Status's db sizes and raft
// indexes (compaction and auth writes are timed by etcd). Everything else,
// names, presence, types and values, must be equal. The fixtures keep the
// decoded JSON, which is the gateway's but for those values.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const assert = require('assert');

const args = process.argv.slice(2);
const check = args.includes('--check');
const [pbtool, gwdir, grpcdir, fixtures, corpus] = args.filter((a) => a !== '--check');

const loose = {
  token: (a, b) => /^[A-Za-z]{16}\.\d+$/.test(a) && /^[A-Za-z]{16}\.\d+$/.test(b),
  TTL: (a, b) => Math.abs(Number(a) - Number(b)) <= 1,
  dbSize: (a, b) => /^\d+$/.test(a) && /^\d+$/.test(b),
  dbSizeInUse: (a, b) => /^\d+$/.test(a) && /^\d+$/.test(b),
  raftIndex: (a, b) => /^\d+$/.test(a) && /^\d+$/.test(b),
  raftAppliedIndex: (a, b) => /^\d+$/.test(a) && /^\d+$/.test(b),
};

// Copies b's loose values into a where loose says they agree.
function reconcile(a, b, where) {
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    for (const k of Object.keys(a)) {
      if (k in loose && k in b && typeof a[k] === 'string' && loose[k](a[k], b[k])) a[k] = b[k];
      else if (k in b) reconcile(a[k], b[k], where + '.' + k);
    }
  }
}

let failed = 0;
const writes = [];
for (const line of fs.readFileSync(path.join(grpcdir, 'index.txt'), 'utf8').trim().split('\n')) {
  const [name, p, wantStr] = line.split(' ');
  const want = Number(wantStr);
  const gwText = fs.readFileSync(path.join(gwdir, name + '.json'), 'utf8').trim().split('\n');
  const bins = want ? [...Array(want).keys()].map((i) => `${name}.${i}`) : [name];
  bins.forEach((bin, i) => {
    const raw = fs.readFileSync(path.join(grpcdir, bin + '.bin'));
    const dec = execFileSync(pbtool, ['dec', p, 'res'], { input: raw }).toString();
    const got = JSON.parse(dec);
    const gw = JSON.parse(gwText[i]);
    reconcile(gw, got, bin);
    try {
      assert.deepStrictEqual(got, gw);
      console.log(`ok - ${bin} (${p})`);
    } catch (e) {
      failed++;
      console.log(`not ok - ${bin} (${p})\n#  etcdpb: ${dec.trim()}\n# gateway: ${gwText[i]}`);
    }
    writes.push([bin, p, raw, JSON.stringify(got)]);
  });
}
if (failed) { console.error(`${failed} answers differ from the gateway's`); process.exit(1); }
if (!check) {
  fs.mkdirSync(fixtures, { recursive: true });
  fs.mkdirSync(corpus, { recursive: true });
  const index = [];
  const streams = {};
  for (const [bin, p, raw, json] of writes) {
    fs.writeFileSync(path.join(fixtures, bin + '.bin'), raw);
    fs.writeFileSync(path.join(fixtures, bin + '.json'), json + '\n');
    index.push(`${bin} ${p}`);
    // a seed: one byte that picks how the fuzz target splits the rest,
    // then the answer as gRPC frames it (the answers of a stream together)
    const frame = Buffer.alloc(5);
    frame.writeUInt32BE(raw.length, 1);
    const base = bin.replace(/\.\d+$/, '');
    streams[base] = Buffer.concat([streams[base] || Buffer.from([0]), frame, raw]);
  }
  for (const [base, buf] of Object.entries(streams)) fs.writeFileSync(path.join(corpus, base), buf);
  fs.writeFileSync(path.join(fixtures, 'index.txt'), index.join('\n') + '\n');
  console.log(`wrote ${writes.length} fixtures to ${fixtures}, ${Object.keys(streams).length} seeds to ${corpus}`);
}
