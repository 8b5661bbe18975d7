// redlock_interop.js - node-redlock (npm redlock 4.2.0, pinned in
// bench/peers/package-lock.json) on the given Redis nodes, for
// test_redlock.sh: does it exclude dlock's Redlock and the reverse?
//   node redlock_interop.js hold NAME TTL_MS PORT...   take it, print "held TOKEN", keep it until SIGTERM (60 s at most)
//   node redlock_interop.js try NAME TTL_MS PORT...    one attempt: exit 0 "acquired" (released again) or 1 "busy"
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

const [mode, name, ttl, ...ports] = process.argv.slice(2);
const clients = ports.map((p) => new Redis({ host: '127.0.0.1', port: Number(p), maxRetriesPerRequest: 1 }));
const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
redlock.on('clientError', () => {});

(async () => {
  let code = 0;
  try {
    const lock = await redlock.lock(name, Number(ttl));
    if (mode === 'hold') {
      console.log('held ' + lock.value);
      await new Promise((resolve) => {
        process.once('SIGTERM', resolve);
        setTimeout(resolve, 60000);
      });
    } else {
      console.log('acquired');
    }
    await lock.unlock().catch(() => {});
  } catch (e) {
    console.log('busy: ' + e.message);
    code = 1;
  }
  clients.forEach((c) => c.disconnect());
  process.exit(code);
})();
