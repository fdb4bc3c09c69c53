// The reference client of tests/bench/etcd-rtt and tests/bench/lock: etcd's
// native gRPC API through the npm package etcd3 (pinned in package.json),
// one request at a time, each timed. Run as
//
//   node rtt.js URL WORKLOAD N
//
// WORKLOAD is one of
//   put   N puts of /bench/rtt with a 64-byte value (tests/bench/etcd-rtt.lua)
//   get   N gets of /bench/rtt
//   lock  N pairs of what baton's uncontended mutex lock and unlock send
//         (lua/baton/mutex.lua): a txn putting the lock key on a lease if
//         it does not exist and reading the queue's head, then a
//         deleterange of the key
// after a warm-up of 20. Prints "p50_us=.. p99_us=.. n=..".
'use strict';
const { Etcd3 } = require('etcd3');

const [url, workload, nArg] = process.argv.slice(2);
const n = Number(nArg);
if (!url || !workload || !(n > 0)) {
  console.error('usage: node rtt.js URL put|get|lock N');
  process.exit(2);
}

async function main() {
  const client = new Etcd3({ hosts: url });
  const kv = client.kv;
  const key = Buffer.from('/bench/rtt');
  const value = Buffer.from('v'.repeat(64));
  let op;
  if (workload === 'put') {
    op = () => kv.put({ key, value });
  } else if (workload === 'get') {
    await kv.put({ key, value });
    op = () => kv.range({ key });
  } else if (workload === 'lock') {
    const lease = (await client.leaseClient.leaseGrant({ TTL: 60 })).ID;
    const lk = Buffer.from('/bench/lock/ref/x');
    const head = {
      key: Buffer.from('/bench/lock/ref/'), range_end: Buffer.from('/bench/lock/ref0'),
      sort_target: 'Create', sort_order: 'Ascend', limit: 1,
    };
    op = async () => {
      const r = await kv.txn({
        compare: [{ key: lk, target: 'Create', result: 'Equal', create_revision: 0 }],
        success: [{ request_put: { key: lk, value: Buffer.alloc(0), lease } }, { request_range: head }],
        failure: [{ request_range: { key: lk } }, { request_range: head }],
      });
      if (!r.succeeded) throw new Error('lock txn: the key exists');
      await kv.deleteRange({ key: lk });
    };
  } else {
    throw new Error(`unknown workload ${workload}`);
  }
  for (let i = 0; i < 20; i++) await op();
  const t = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await op();
    t.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  t.sort((a, b) => a - b);
  const pct = (p) => Math.round(t[Math.max(0, Math.ceil(t.length * p) - 1)]);
  console.log(`p50_us=${pct(0.5)} p99_us=${pct(0.99)} n=${n}`);
  client.close();
}

main().catch((err) => {
  console.error(`rtt.js: ${err.stack || err}`);
  process.exit(1);
});
