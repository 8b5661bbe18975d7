// redlock_peer.js - the uncontended and contended scenarios of dlock-bench,
// run with node-redlock (npm redlock 4.2.0, the current "latest", on ioredis)
// against the same server. Prints one JSON object per figure on stdout.
// Node has no fork(): the K contenders are worker threads, each with its own
// event loop, Redis connection and Redlock, sharing a SharedArrayBuffer.
'use strict';

const { Worker, isMainThread, workerData } = require('worker_threads');
const Redis = require('ioredis');
const Redlock = require('redlock');

const IMPL = 'node-redlock';
const MAX_SAMPLES = 50000;
// Slots of the shared BigInt64Array; samples follow them.
const F = { go: 0, stop: 1, ready: 2, acq: 3, counter: 4, lastOwner: 5, ownerChanges: 6,
            releaseStart: 7, maxWait: 8, nsamples: 9, inside: 10, overlaps: 11, errors: 12 };
const NFIELDS = 16;

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, shared by all threads

function parseUrl(url) {
  const hostport = url.split('://')[1].split('/')[0].split('@').pop();
  const [host, port] = hostport.split(':');
  return { host, port: Number(port || 6379) };
}

function pctUs(samples, p) {
  if (samples.length === 0) return 0;
  const s = Array.from(samples).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const rank = Math.max(1, Math.min(s.length, Math.ceil((p / 100) * s.length)));
  return Number(s[rank - 1]) / 1000;
}

async function contender() {
  const { url, name, me, target, runMs, buf } = workerData;
  const sh = new BigInt64Array(buf);
  const { host, port } = parseUrl(url);
  const client = new Redis({ host, port, lazyConnect: false, maxRetriesPerRequest: 1 });
  // Defaults (retryDelay 200 ms, retryJitter 200 ms), except retry without a
  // count limit: the run's time bound is the limit.
  const redlock = new Redlock([client], { retryCount: -1 });
  redlock.on('clientError', () => {});
  Atomics.add(sh, F.ready, 1n);
  for (let i = 0; i < 30000 && Atomics.load(sh, F.go) === 0n; i++)
    await new Promise((r) => setTimeout(r, 1));
  const end = Date.now() + runMs;
  for (let i = 0; i < target && Atomics.load(sh, F.stop) === 0n && Date.now() < end; i++) {
    const t0 = now();
    let lock;
    try {
      lock = await redlock.lock(name, 10000);
    } catch (e) {
      Atomics.add(sh, F.errors, 1n);
      break;
    }
    const t1 = now();
    for (let tries = 0; tries < 100; tries++) {
      const cur = Atomics.load(sh, F.maxWait);
      if (t1 - t0 <= cur || Atomics.compareExchange(sh, F.maxWait, cur, t1 - t0) === cur) break;
    }
    const rs = Atomics.load(sh, F.releaseStart);
    if (rs > 0n) {
      const n = Number(Atomics.add(sh, F.nsamples, 1n));
      if (n < MAX_SAMPLES) Atomics.store(sh, NFIELDS + n, t1 - rs);
    }
    const prev = Atomics.exchange(sh, F.lastOwner, BigInt(me));
    if (prev >= 0n && prev !== BigInt(me)) Atomics.add(sh, F.ownerChanges, 1n);
    if (Atomics.add(sh, F.inside, 1n) !== 0n) Atomics.add(sh, F.overlaps, 1n);
    // A plain read-modify-write: two holders at once would lose an update.
    const v = Atomics.load(sh, F.counter);
    Atomics.store(sh, F.counter, v + 1n);
    if (Atomics.add(sh, F.acq, 1n) + 1n >= BigInt(target)) Atomics.store(sh, F.stop, 1n);
    Atomics.sub(sh, F.inside, 1n);
    Atomics.store(sh, F.releaseStart, now());
    try {
      await lock.unlock();
    } catch (e) {
      Atomics.add(sh, F.errors, 1n);
      break;
    }
  }
  client.disconnect();
}

function emit(layout, scenario, metric, value, unit = '', note = '') {
  process.stdout.write(JSON.stringify({ scenario, impl: IMPL, metric, value, unit, layout, note }) + '\n');
}

async function uncontended(url, quick, layout) {
  const { host, port } = parseUrl(url);
  const client = new Redis({ host, port, maxRetriesPerRequest: 1 });
  const redlock = new Redlock([client], { retryCount: 0 });
  redlock.on('clientError', () => {});
  const name = 'bench:peer:node:uncontended';
  for (let i = 0; i < 200; i++) await (await redlock.lock(name, 30000)).unlock();
  const count = quick ? 2000 : 30000;
  const limit = Date.now() + (quick ? 1000 : 20000);
  const samples = [];
  const start = now();
  for (let i = 0; i < count && Date.now() < limit; i++) {
    const t0 = now();
    const lock = await redlock.lock(name, 30000);
    await lock.unlock();
    samples.push(now() - t0);
  }
  const secs = Number(now() - start) / 1e9;
  emit(layout, 'uncontended', 'cycle p50', pctUs(samples, 50), 'us',
       `${samples.length} cycles; redlock.lock(name, 30000) + unlock()`);
  emit(layout, 'uncontended', 'cycle p99', pctUs(samples, 99), 'us');
  emit(layout, 'uncontended', 'cycle p99.9', pctUs(samples, 99.9), 'us');
  emit(layout, 'uncontended', 'cycles per second', samples.length / secs, '/s');
  client.disconnect();
}

async function contended(url, quick, layout, k) {
  const target = quick ? 100 : 300;
  const runMs = quick ? 3000 : 15000;
  const name = `bench:peer:node:contended:${k}`;
  const buf = new SharedArrayBuffer(8 * (NFIELDS + MAX_SAMPLES));
  const sh = new BigInt64Array(buf);
  sh[F.lastOwner] = -1n;
  const workers = [];
  for (let me = 0; me < k; me++)
    workers.push(new Worker(__filename, { workerData: { url, name, me, target, runMs, buf } }));
  const exited = workers.map((w) => new Promise((resolve) => w.on('exit', resolve)));
  for (let i = 0; i < 30000 && Atomics.load(sh, F.ready) < BigInt(k); i++)
    await new Promise((r) => setTimeout(r, 1));
  const t0 = now();
  Atomics.store(sh, F.go, 1n);
  let timedOut = false;
  const bound = setTimeout(() => { timedOut = true; workers.forEach((w) => w.terminate()); },
                           runMs + 15000);
  await Promise.all(exited);
  clearTimeout(bound);
  const secs = Number(now() - t0) / 1e9;
  const acq = Number(sh[F.acq]);
  const counter = Number(sh[F.counter]);
  const n = Math.min(Number(sh[F.nsamples]), MAX_SAMPLES);
  const hand = Array.from(sh.subarray(NFIELDS, NFIELDS + n));
  const ok = counter === acq && sh[F.overlaps] === 0n && sh[F.errors] === 0n && !timedOut;
  const pre = `K=${k} `;
  emit(layout, 'contended', pre + 'acquisitions/s', acq / secs, '/s',
       `${acq} acquisitions in ${secs.toFixed(2)} s (bounds: ${target}, ${runMs / 1000} s); worker threads; retryDelay 200 ms default`);
  emit(layout, 'contended', pre + 'counter', counter, '',
       `${ok ? 'exact' : 'WRONG'} (must equal acquisitions ${acq})`);
  emit(layout, 'contended', pre + 'hand-off p50', pctUs(hand, 50), 'us');
  emit(layout, 'contended', pre + 'hand-off p99', pctUs(hand, 99), 'us');
  emit(layout, 'contended', pre + 'hand-off max', hand.length ? pctUs(hand, 100) : 0, 'us');
  emit(layout, 'contended', pre + 'longest wait', Number(sh[F.maxWait]) / 1e6, 'ms');
  emit(layout, 'contended', pre + 'owner changes / releases',
       acq > 1 ? (100 * Number(sh[F.ownerChanges])) / (acq - 1) : 0, '%');
  return ok;
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
  const url = opt('--url');
  if (!url) { console.error('usage: redlock_peer.js --url redis://127.0.0.1:PORT [--quick] [--layout L] [--scenario uncontended,contended]'); process.exit(2); }
  const quick = args.includes('--quick');
  const layout = opt('--layout', 'none');
  const wanted = opt('--scenario', 'uncontended,contended').split(',');
  if (wanted.includes('uncontended')) await uncontended(url, quick, layout);
  let ok = true;
  for (const k of wanted.includes('contended') ? [2, 8] : []) ok = (await contended(url, quick, layout, k)) && ok;
  process.exit(ok ? 0 : 1);
}

if (isMainThread) {
  main().catch((e) => { console.error('redlock peer:', e); process.exit(1); });
} else {
  contender().catch(() => process.exit(1));
}
