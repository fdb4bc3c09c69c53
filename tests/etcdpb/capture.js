// Helper of tests/etcdpb/capture.sh: runs one scripted sequence of etcd
// requests against a fresh etcd, either through its JSON gateway
// (MODE gw: writes OUT/NAME.json, the gateway's answer; for a stream, one
// answer per line, each the "result" of the gateway's line) or through
// gRPC (MODE grpc: each request body encoded by pbtool, sent with
// @grpc/grpc-js passing bytes through untouched; writes OUT/NAME.bin, the
// raw answer, or OUT/NAME.N.bin for the Nth answer of a stream), and
// OUT/index.txt, a line "NAME PATH ANSWERS" a request (ANSWERS 0: unary).
//
//   node capture.js gw|grpc URL PBTOOL OUT
'use strict';
const fs = require('fs');
const path = require('path');
const http = require('http');
const { execFileSync } = require('child_process');
const grpc = require('@grpc/grpc-js');

const [mode, url, pbtool, out] = process.argv.slice(2);
const b = (s) => Buffer.from(s, 'latin1').toString('base64');

const ctl = (...args) => execFileSync(process.env.ETCDCTL || 'etcdctl', ['--endpoints=' + url, ...args],
  { env: { ...process.env, ETCDCTL_API: '3' }, stdio: ['ignore', 'ignore', 'inherit'] });

// name, gateway path, gRPC method, body, answers to wait for (streams); or
// a function to run between them
const steps = [
  ['put', '/v3/kv/put', 'KV/Put', { key: b('a'), value: b('1') }],
  ['put-prev', '/v3/kv/put', 'KV/Put', { key: b('a'), value: b('2'), prev_kv: true }],
  ['put-nul', '/v3/kv/put', 'KV/Put', { key: b('b\0c'), value: b('\0\x01\x02\xff') }],
  ['lease-grant', '/v3/lease/grant', 'Lease/LeaseGrant', { ID: '1000', TTL: '600' }],
  ['put-lease', '/v3/kv/put', 'KV/Put', { key: b('c'), value: '', lease: '1000' }],
  ['put-lease-prev', '/v3/kv/put', 'KV/Put', { key: b('c'), value: b('x'), lease: '1000', prev_kv: true }],
  ['range-more', '/v3/kv/range', 'KV/Range', { key: b('\0'), range_end: b('\0'), limit: '2' }],
  ['range-all', '/v3/kv/range', 'KV/Range', { key: b('\0'), range_end: b('\0'), sort_order: 'DESCEND', sort_target: 'MOD' }],
  ['range-count', '/v3/kv/range', 'KV/Range', { key: b('\0'), range_end: b('\0'), count_only: true }],
  ['range-keys', '/v3/kv/range', 'KV/Range', { key: b('a'), range_end: b('z'), keys_only: true }],
  ['range-none', '/v3/kv/range', 'KV/Range', { key: b('nothing') }],
  ['txn-ok', '/v3/kv/txn', 'KV/Txn', {
    compare: [{ key: b('a'), target: 'CREATE', result: 'GREATER', create_revision: '0' }],
    success: [{ request_range: { key: b('a') } }, { request_put: { key: b('d'), value: b('D'), prev_kv: true } }],
    failure: [] }],
  ['txn-fail-nested', '/v3/kv/txn', 'KV/Txn', {
    compare: [{ key: b('a'), target: 'VALUE', result: 'EQUAL', value: b('nope') },
              { key: b('a'), range_end: b('b'), target: 'VERSION', result: 'LESS', version: '100' }],
    success: [{ request_put: { key: b('e'), value: b('E') } }],
    failure: [{ request_txn: { compare: [{ key: b('zz'), target: 'CREATE', result: 'EQUAL', create_revision: '0' }],
                               success: [{ request_delete_range: { key: b('d'), prev_kv: true } },
                                         { request_put: { key: b('a'), value: b('3'), prev_kv: true } }] } },
              { request_range: { key: b('a'), count_only: true } }] }],
  ['txn-empty', '/v3/kv/txn', 'KV/Txn', { compare: [{ key: b('none'), target: 'MOD', result: 'NOT_EQUAL', mod_revision: '0' }] }],
  ['delete-prev', '/v3/kv/deleterange', 'KV/DeleteRange', { key: b('b'), range_end: b('c'), prev_kv: true }],
  ['delete-none', '/v3/kv/deleterange', 'KV/DeleteRange', { key: b('nothing') }],
  ['lease-ttl', '/v3/lease/timetolive', 'Lease/LeaseTimeToLive', { ID: '1000', keys: true }],
  ['lease-ttl-gone', '/v3/lease/timetolive', 'Lease/LeaseTimeToLive', { ID: '999' }],
  ['lease-leases', '/v3/lease/leases', 'Lease/LeaseLeases', {}],
  ['lease-keepalive', '/v3/lease/keepalive', 'Lease/LeaseKeepAlive', { ID: '1000' }, 1],
  ['watch', '/v3/watch', 'Watch/Watch', { create_request: { key: b('\0'), range_end: b('\0'), start_revision: '1', prev_kv: true } }, 2],
  ['compaction', '/v3/kv/compaction', 'KV/Compact', { revision: '3', physical: true }],
  ['watch-compacted', '/v3/watch', 'Watch/Watch', { create_request: { key: b('a'), start_revision: '2' } }, 2],
  ['lease-revoke', '/v3/lease/revoke', 'Lease/LeaseRevoke', { ID: '1000' }],
  ['status', '/v3/maintenance/status', 'Maintenance/Status', {}],
  // auth set up as tests/harness/etcd does it (baton makes no admin calls)
  () => {
    ctl('user', 'add', 'root:pw');
    ctl('role', 'add', 'root');
    ctl('user', 'grant-role', 'root', 'root');
    ctl('auth', 'enable');
  },
  ['authenticate', '/v3/auth/authenticate', 'Auth/Authenticate', { name: 'root', password: 'pw' }],
];

function gw(p, body, want) {
  return new Promise((resolve, reject) => {
    const u = new URL(url + p);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST' }, (res) => {
      let text = '';
      const answers = [];
      res.setEncoding('utf8');
      res.on('data', (d) => {
        text += d;
        if (!want) return;
        let i;
        while ((i = text.indexOf('\n')) >= 0) {
          const line = text.slice(0, i).trim();
          text = text.slice(i + 1);
          if (line) answers.push(JSON.parse(line).result);
          if (answers.length === want) { req.destroy(); resolve(answers); }
        }
      });
      res.on('end', () => { if (!want) resolve(JSON.parse(text)); });
    });
    req.on('error', (e) => { if (!want) reject(e); });
    req.end(JSON.stringify(body));
  });
}

const id = (x) => x;
function grpcCall(client, method, body, want) {
  const bytes = execFileSync(pbtool, ['enc', method[0], 'req'], { input: JSON.stringify(body) });
  const full = '/etcdserverpb.' + method[1];
  return new Promise((resolve, reject) => {
    if (!want) {
      client.makeUnaryRequest(full, id, id, bytes, (err, res) => err ? reject(err) : resolve(res));
      return;
    }
    const s = client.makeBidiStreamRequest(full, id, id);
    const answers = [];
    s.on('data', (d) => { answers.push(d); if (answers.length === want) { s.cancel(); resolve(answers); } });
    s.on('error', (e) => { if (answers.length < want) reject(e); });
    s.write(bytes);
  });
}

async function main() {
  const client = mode === 'grpc'
    ? new grpc.Client(url.replace(/^http:\/\//, ''), grpc.credentials.createInsecure()) : null;
  fs.mkdirSync(out, { recursive: true });
  const index = [];
  for (const step of steps) {
    if (typeof step === 'function') { step(); continue; }
    const [name, p, method, body, want] = step;
    if (mode === 'gw') {
      const r = await gw(p, body, want);
      fs.writeFileSync(path.join(out, name + '.json'),
        want ? r.map((x) => JSON.stringify(x)).join('\n') + '\n' : JSON.stringify(r) + '\n');
    } else {
      const r = await grpcCall(client, [p, method], body, want);
      if (want) r.forEach((x, i) => fs.writeFileSync(path.join(out, `${name}.${i}.bin`), x));
      else fs.writeFileSync(path.join(out, name + '.bin'), r);
    }
    index.push(`${name} ${p} ${want || 0}`);
  }
  fs.writeFileSync(path.join(out, 'index.txt'), index.join('\n') + '\n');
  if (client) client.close();
}
main().catch((e) => { console.error(e); process.exit(1); });
