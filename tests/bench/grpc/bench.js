// Helper of tests/bench/etcd-transport: the reference half (etcd's native
// gRPC API through the npm package etcd3, pinned in package.json). Run as
//
//   node bench.js URL WORKLOAD ETCD_PID N CONC BASE [RATE]
//
// with the same workloads, keys, values, concurrency, pacing and warm-up as
// tests/bench/etcd-transport.lua (see there), through etcd3's raw KV client
// (client.kv.txn / client.kv.range: the request objects of etcd's
// rpc.proto, which nest txns as request_txn, which etcd3's high-level
// builder cannot). Prints "ticks=.. wall_us=.. n=.. self_ticks=..
// etcd_syscr=.. etcd_syscw=..", etcd's utime+stime from /proc/ETCD_PID/stat,
// its read and write system calls from /proc/ETCD_PID/io and this process's
// CPU (every thread) from /proc/self/stat around the N requests only.
'use strict';
const fs = require('fs');
const { Etcd3 } = require('etcd3');

const [url, workload, pid, nArg, concArg, base, rateArg] = process.argv.slice(2);
const n = Number(nArg), conc = Number(concArg), rate = Number(rateArg || 0);
if (!url || !workload || !pid || !(n >= 0) || !(conc > 0) || !base) {
  console.error('usage: node bench.js URL WORKLOAD ETCD_PID N CONC BASE');
  process.exit(2);
}
const NESTED = 32;
const value = Buffer.from('v'.repeat(100));
const marker = Buffer.from(base + '/marker');
const keys = [];
for (let i = 0; i < 1000; i++) keys.push(Buffer.from(`${base}/k/${String(i).padStart(3, '0')}`));
const key = (i) => keys[i % 1000];

// utime + stime of etcd, or with 'self' of this process (fields 14 and 15 of /proc/PID/stat, counted after
// the ")" that ends the command name)
function ticks(p) {
  const s = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

// read and write system calls of a process (syscr, syscw of /proc/PID/io)
function syscalls(p) {
  const s = fs.readFileSync(`/proc/${p}/io`, 'utf8');
  return [Number(/syscr: (\d+)/.exec(s)[1]), Number(/syscw: (\d+)/.exec(s)[1])];
}

async function main() {
  const client = new Etcd3({ hosts: url });
  const kv = client.kv;
  const m = await kv.range({ key: marker });
  if (!m.kvs.length) throw new Error(`${base}/marker missing: run etcd-transport.lua's setup first`);
  const fence = m.kvs[0].create_revision;
  const putTxn = (i) => ({
    compare: [{ key: marker, target: 'Create', result: 'Equal', create_revision: fence }],
    success: [{ request_put: { key: key(i), value } }],
  });
  const ops = {
    async put(i) {
      const r = await kv.txn(putTxn(i));
      if (!r.succeeded) throw new Error('put txn: compare failed');
    },
    async get(i) {
      const r = await kv.range({ key: key(i) });
      if (!r.kvs.length) throw new Error('get: no key');
    },
    async nested(i) {
      const success = [];
      for (let j = 1; j <= NESTED; j++) success.push({ request_txn: putTxn(i * NESTED + j) });
      const r = await kv.txn({ success });
      if (!r.succeeded || r.responses.length !== NESTED) throw new Error('nested txn: wrong answer');
      for (const x of r.responses) {
        if (!x.response_txn.succeeded) throw new Error('nested txn: compare failed');
      }
    },
  };
  const op = ops[workload];
  if (!op) throw new Error(`unknown workload ${workload}`);

  // CONC workers take the next index until count are done; paced: request
  // i starts no earlier than i/RATE seconds after the first
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  async function run(count, paced) {
    let next = 0;
    const t0 = performance.now();
    const worker = async () => {
      while (next < count) {
        next += 1;
        const i = next;
        if (paced) {
          const wait = t0 + ((i - 1) * 1000) / rate - performance.now();
          if (wait > 0) await sleep(wait);
        }
        await op(i);
      }
    };
    await Promise.all(Array.from({ length: conc }, worker));
  }
  await run(4 * conc);
  const [r0, w0] = syscalls(pid);
  const t0 = process.hrtime.bigint(), c0 = ticks(pid), s0 = ticks('self');
  await run(n, rate > 0);
  const t1 = process.hrtime.bigint(), c1 = ticks(pid), s1 = ticks('self');
  const [r1, w1] = syscalls(pid);
  console.log(`ticks=${c1 - c0} wall_us=${(t1 - t0) / 1000n} n=${n} self_ticks=${s1 - s0} ` +
    `etcd_syscr=${r1 - r0} etcd_syscw=${w1 - w0}`);
  client.close();
}

main().catch((err) => {
  console.error(`bench.js: ${err.stack || err}`);
  process.exit(1);
});
