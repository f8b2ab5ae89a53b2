'use strict';
// The client-matrix scenarios through memjs (binary protocol only), run with `node --test`.
// Server: env TAC_HOST (default 127.0.0.1) and TAC_PORT (required); TAC_ITEM_MAX is the
// server's -I in bytes (default 1 MiB).
//
// memjs 1.3.2 has no multi-get and no CAS API, and its prepend() is broken.  Those two scenarios go through memjs's own
// connection and response parser (Server#write / onResponse, Utils.makeRequestBuffer) with
// hand-built binary requests: GETKQ... NOOP for the multi-get, GET + SET-with-CAS for cas,
// PREPEND for prepend.

const test = require('node:test');
const assert = require('node:assert/strict');
const memjs = require('memjs');

const HOST = process.env.TAC_HOST || '127.0.0.1';
const PORT = process.env.TAC_PORT;
const ITEM_MAX = parseInt(process.env.TAC_ITEM_MAX || '1048576', 10);
if (!PORT) {
  throw new Error('TAC_PORT is not set');
}

const quietLogger = { messages: [], log(...args) { this.messages.push(args.join(' ')); } };
const clients = [];

function newClient() {
  const c = memjs.Client.create(`${HOST}:${PORT}`, { timeout: 5, retries: 1, logger: quietLogger });
  clients.push(c);
  return c;
}

const mc = newClient();
const P = 'memjs-';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test.after(() => {
  for (const c of clients) c.close();
});

async function getStr(client, key) {
  const { value } = await client.get(key);
  return value === null ? null : value.toString();
}

// One request on memjs's connection; resolves with the parsed response (header, key, extras, val).
function rawRequest(client, key, opcode, extras, value, cas) {
  return new Promise((resolve, reject) => {
    client.incrSeq();
    const seq = client.seq;
    const buf = memjs.Utils.makeRequestBuffer(opcode, key, extras, value, seq);
    if (cas) cas.copy(buf, 16);
    client.perform(key, buf, seq, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

function stats(client) {
  return new Promise((resolve, reject) => {
    client.stats((err, _server, st) => (err ? reject(err) : resolve(st)));
  });
}

const OP_GET = 0x00, OP_SET = 0x01, OP_NOOP = 0x0a, OP_GETKQ = 0x0d, OP_PREPEND = 0x0f;
const setExtras = (flags, exp) => {
  const b = Buffer.alloc(8);
  b.writeUInt32BE(flags, 0);
  b.writeUInt32BE(exp, 4);
  return b;
};

function pattern(n, seed) {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed + (i >>> 10)) & 0xff;
  return b;
}

test('set/get', async () => {
  assert.equal(await mc.set(P + 'sg', 'hello world'), true);
  assert.equal(await getStr(mc, P + 'sg'), 'hello world');
  assert.equal(await mc.set(P + 'sg', 'replaced'), true);
  assert.equal(await getStr(mc, P + 'sg'), 'replaced');
  assert.equal(await getStr(mc, P + 'sg-missing'), null);
  const bin = pattern(4096, 7);
  bin[0] = 0x0d;
  bin[1] = 0x0a;
  assert.equal(await mc.set(P + 'sg-bin', bin), true);
  assert.deepEqual((await mc.get(P + 'sg-bin')).value, bin);
  assert.equal(await mc.add(P + 'sg-add', 'a'), true);
  assert.equal(await mc.add(P + 'sg-add', 'b'), false);
  assert.equal(await mc.replace(P + 'sg-add', 'c'), true);
  assert.equal(await mc.replace(P + 'sg-none', 'c'), false);
  assert.equal(await getStr(mc, P + 'sg-add'), 'c');
});

test('multi-get', async () => {
  const n = 150;
  const keys = [];
  for (let i = 0; i < n; i++) keys.push(P + 'mg-' + i);
  const stored = await Promise.all(keys.map((k, i) => mc.set(k, 'value-' + i)));
  assert.ok(stored.every((x) => x === true));

  // memjs style: many gets pipelined on one connection
  const missing = [];
  for (let i = 0; i < 10; i++) missing.push(P + 'mg-missing-' + i);
  const got = await Promise.all(keys.concat(missing).map((k) => getStr(mc, k)));
  for (let i = 0; i < n; i++) assert.equal(got[i], 'value-' + i);
  for (let i = n; i < got.length; i++) assert.equal(got[i], null);

  // one batch of GETKQ ... NOOP on memjs's connection: only hits answer, NOOP ends it
  const found = await new Promise((resolve, reject) => {
    mc.incrSeq();
    const seq = mc.seq;
    const out = new Map();
    const reqs = keys.concat(missing).map((k) => memjs.Utils.makeRequestBuffer(OP_GETKQ, k, '', '', seq));
    reqs.push(memjs.Utils.makeRequestBuffer(OP_NOOP, '', '', '', seq));
    const handler = (response) => {
      if (response.header.opcode === OP_NOOP) {
        resolve(out);
      } else if (response.header.status !== 0) {
        reject(new Error('GETKQ status ' + response.header.status));
      } else {
        out.set(response.key.toString(), response.val.toString());
      }
    };
    handler.quiet = true; // keep the handler until the body-less NOOP response
    const serv = mc.servers[0];
    serv.onResponse(seq, handler);
    serv.onError(seq, reject);
    serv.write(Buffer.concat(reqs));
  });
  assert.equal(found.size, n);
  for (let i = 0; i < n; i++) assert.equal(found.get(keys[i]), 'value-' + i);
});

test('cas conflict', async () => {
  const key = P + 'cas';
  assert.equal(await mc.set(key, 'v1'), true);
  const first = await rawRequest(mc, key, OP_GET, '', '');
  assert.equal(first.header.status, 0);
  assert.equal(first.val.toString(), 'v1');
  const cas1 = Buffer.from(first.header.cas);
  assert.notDeepEqual(cas1, Buffer.alloc(8));

  const other = newClient();
  assert.equal(await other.set(key, 'other'), true);

  const conflict = await rawRequest(mc, key, OP_SET, setExtras(0, 0), 'mine', cas1);
  assert.equal(conflict.header.status, 2, 'cas with a stale token must answer EEXISTS');
  assert.equal(await getStr(mc, key), 'other');

  const again = await rawRequest(mc, key, OP_GET, '', '');
  const cas2 = Buffer.from(again.header.cas);
  assert.notDeepEqual(cas2, cas1);
  const ok = await rawRequest(mc, key, OP_SET, setExtras(0, 0), 'mine', cas2);
  assert.equal(ok.header.status, 0);
  assert.notDeepEqual(Buffer.from(ok.header.cas), cas2, 'a successful cas returns the new cas');
  assert.equal(await getStr(mc, key), 'mine');

  const stale = await rawRequest(other, key, OP_SET, setExtras(0, 0), 'stale', cas2);
  assert.equal(stale.header.status, 2);
  const absent = await rawRequest(mc, P + 'cas-missing', OP_SET, setExtras(0, 0), 'x', cas2);
  assert.equal(absent.header.status, 1, 'cas on a missing key must answer ENOENT');
});

test('incr/decr', async () => {
  const key = P + 'ctr';
  assert.equal(await mc.set(key, '10'), true);
  assert.deepEqual(await mc.increment(key, 5), { success: true, value: 15 });
  // (memjs 1.3.2's promise form of decrement() needs an options object)
  assert.deepEqual(await mc.decrement(key, 3, {}), { success: true, value: 12 });
  assert.deepEqual(await mc.decrement(key, 100, {}), { success: true, value: 0 });
  assert.equal((await getStr(mc, key)).trim(), '0'); // memcached may leave the old length, space-padded
  assert.deepEqual(await mc.increment(key, 7), { success: true, value: 7 });
  // memjs always sends an initial value: a missing counter is created with it
  assert.deepEqual(await mc.increment(P + 'ctr-new', 1, { initial: 42 }), { success: true, value: 42 });
  assert.deepEqual(await mc.increment(P + 'ctr-new', 1, { initial: 42 }), { success: true, value: 43 });
  assert.deepEqual(await mc.decrement(P + 'ctr-new2', 1, { initial: 3 }), { success: true, value: 3 });
  assert.equal(await mc.set(P + 'ctr-text', 'abc'), true);
  await assert.rejects(mc.increment(P + 'ctr-text', 1), /non-numeric/);
});

test('append/prepend', async () => {
  // memjs 1.3.2's prepend() sends the APPEND opcode (a client bug), so prepend goes out as a
  // hand-built PREPEND request on memjs's connection.
  const key = P + 'ap';
  assert.equal(await mc.set(key, 'mid'), true);
  assert.equal(await mc.append(key, '-end'), true);
  assert.equal((await rawRequest(mc, key, OP_PREPEND, '', 'start-')).header.status, 0);
  assert.equal(await getStr(mc, key), 'start-mid-end');
  // the server answers NOT_STORED, which memjs 1.3.2 reports as an error (it expects ENOENT)
  await assert.rejects(mc.append(P + 'ap-missing', 'x'), /Item not stored/);
  assert.equal((await rawRequest(mc, P + 'ap-missing', OP_PREPEND, '', 'x')).header.status, 5,
    'prepend to a missing key must answer NOT_STORED');
  assert.equal(await getStr(mc, P + 'ap-missing'), null);
});

test('touch + expiry', async () => {
  // memcached's clock ticks once a second, so an item with ttl 1 may be gone at once: only
  // ttls of 2 or more are relied upon right after the set.
  assert.equal(await mc.set(P + 'ttl-dies', 'a', { expires: 1 }), true);
  assert.equal(await mc.set(P + 'ttl-extended', 'b', { expires: 2 }), true);
  assert.equal(await mc.set(P + 'ttl-shortened', 'c', { expires: 100 }), true);
  assert.equal(await mc.set(P + 'ttl-forever', 'd'), true);
  assert.equal(await mc.touch(P + 'ttl-extended', 100), true);
  assert.equal(await mc.touch(P + 'ttl-shortened', 1), true);
  assert.equal(await mc.touch(P + 'ttl-missing', 100), false);
  await sleep(2500);
  assert.equal(await getStr(mc, P + 'ttl-dies'), null, 'an item set with ttl 1 is still there after 2.5 s');
  assert.equal(await getStr(mc, P + 'ttl-shortened'), null, "touch to ttl 1 did not shorten the item's life");
  assert.equal(await getStr(mc, P + 'ttl-extended'), 'b', "touch to ttl 100 did not extend the item's life");
  assert.equal(await getStr(mc, P + 'ttl-forever'), 'd');
  assert.equal(await mc.touch(P + 'ttl-dies', 100), false);
});

test('delete', async () => {
  const key = P + 'del';
  assert.equal(await mc.set(key, 'x'), true);
  assert.equal(await mc.delete(key), true);
  assert.equal(await getStr(mc, key), null);
  assert.equal(await mc.delete(key), false);
  assert.equal(await mc.add(key, 'y'), true);
  assert.equal(await getStr(mc, key), 'y');
});

test('large values', async () => {
  const big = pattern(ITEM_MAX - 1024, 3);
  assert.equal(await mc.set(P + 'big', big), true);
  assert.deepEqual((await mc.get(P + 'big')).value, big);

  const before = await stats(mc);
  await assert.rejects(mc.set(P + 'too-big', pattern(ITEM_MAX + 1024, 5)), /Value too large/);
  assert.equal(await getStr(mc, P + 'too-big'), null);
  assert.equal(await mc.set(P + 'after-big', 'still alive'), true);
  assert.equal(await getStr(mc, P + 'after-big'), 'still alive');
  assert.deepEqual((await mc.get(P + 'big')).value, big);
  const after = await stats(mc);
  assert.equal(after.total_connections, before.total_connections,
    'the server dropped the connection after rejecting a too-large value');
});

test('flush', async () => {
  for (let i = 0; i < 20; i++) assert.equal(await mc.set(P + 'fl-' + i, 'v' + i), true);
  assert.equal(await getStr(mc, P + 'fl-3'), 'v3');
  const res = await mc.flush();
  assert.deepEqual(Object.values(res), [true]);
  for (let i = 0; i < 20; i++) assert.equal(await getStr(mc, P + 'fl-' + i), null);
  assert.equal(await mc.set(P + 'fl-after', 'new'), true);
  assert.equal(await getStr(mc, P + 'fl-after'), 'new');
});
