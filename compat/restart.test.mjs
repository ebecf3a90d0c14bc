// The official TypeScript SDK's createStream, plain and in haMode, through
// a gateway that is restarted mid-stream: every second of every stream
// reaches the application, in order. Configured only by the environment
// (see README.md); `node --test restart.test.mjs`. restart_test.go runs it
// against a gateway process behind a balancer, which it replaces when
// asked (the successor ready first, then the old one SIGTERMed).

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import sdk from '@chainlink/data-streams-sdk';

const { createClient, LogLevel } = sdk;

function env(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (fallback !== undefined) return fallback;
    throw new Error(`environment variable ${name} is required (see README.md)`);
  }
  return v;
}

const cfg = {
  url: env('STREAMGATE_MAINNET_URL'),
  keyID: env('STREAMGATE_KEY_ID'),
  keySecret: env('STREAMGATE_KEY_SECRET'),
  feeds: env('COMPAT_MAINNET_STREAM').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean),
  restart: env('COMPAT_RESTART_URL'),
  seconds: Number(env('COMPAT_STREAM_SECONDS', '8')),
};
assert.ok(cfg.feeds.length >= 1, 'COMPAT_MAINNET_STREAM: at least one stream');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nowSec = () => Math.floor(Date.now() / 1000);
const streams = [];

// watch opens a stream of the feeds and records the reports the SDK emits
// (after its own deduplication: what the application sees), the raw frames
// of its connections, and its events.
async function watch(label, extra) {
  const w = { label, reports: new Map(cfg.feeds.map((f) => [f, []])), raw: new Map(cfg.feeds.map((f) => [f, []])), events: [] };
  const c = createClient({
    apiKey: cfg.keyID,
    userSecret: cfg.keySecret,
    endpoint: cfg.url,
    wsEndpoint: cfg.url.replace(/^http/, 'ws'),
    logging: { logLevel: LogLevel.WARN, logger: { warn: (m) => console.log(`  [${label} sdk warn] ${m}`), error: (m) => console.log(`  [${label} sdk error] ${m}`) } },
    ...extra,
  });
  const s = c.createStream(cfg.feeds);
  w.stream = s;
  streams.push(s);
  for (const name of ['connection-lost', 'all-connections-lost', 'reconnecting', 'connection-restored', 'disconnected', 'error']) {
    s.on(name, (arg) => w.events.push(`${name}${arg?.message ? ': ' + arg.message : ''}`));
  }
  s.connectionManager.on('message', (data) => {
    try {
      const m = JSON.parse(data.toString());
      w.raw.get(m.report.feedID.toLowerCase())?.push(m.report.observationsTimestamp);
    } catch {
      // counted by the SDK itself
    }
  });
  s.on('report', (r) => w.reports.get(r.feedID.toLowerCase())?.push(r.observationsTimestamp));
  await s.connect();
  return w;
}

// tally returns per stream the seconds received, the seconds missing
// between the first and the last, and those received out of order.
function tally(w) {
  const out = {};
  for (const [feed, ts] of w.reports) {
    const seen = new Set(ts);
    let missing = 0;
    const missed = [];
    for (let t = ts[0]; t <= ts.at(-1); t++) {
      if (!seen.has(t)) {
        missing++;
        if (missed.length < 10) missed.push(t);
      }
    }
    const raw = w.raw.get(feed);
    out[feed.slice(0, 10)] = {
      reports: ts.length, first: ts[0], last: ts.at(-1), missing, missed,
      disordered: ts.filter((t, i) => i > 0 && t <= ts[i - 1]).length,
      rawRepeated: raw.length - new Set(raw).size,
    };
  }
  return out;
}

test('createStream, plain and haMode, through a gateway restarted mid-stream: every second received', { timeout: 120000 }, async () => {
  const plain = await watch('plain', {});
  const ha = await watch('haMode', { haMode: true });
  console.log(`# haMode: connection type ${ha.stream.getConnectionType()}, origins ${JSON.stringify(ha.stream.getOrigins())}`);
  // Reports flow (bounded wait), then the gateway is restarted.
  const until = Date.now() + 15000;
  const flowing = () => [plain, ha].every((w) => cfg.feeds.every((f) => w.reports.get(f).length >= 2));
  while (Date.now() < until && !flowing()) await sleep(100);
  assert.ok(flowing(), 'reports flow before the restart');
  const res = await fetch(`${cfg.restart}/restart`, { method: 'POST' });
  const body = await res.text();
  assert.equal(res.status, 200, `restart: ${body}`);
  console.log(`# gateway restarted: ${body}`);
  const restartedAt = nowSec();
  // The streams go on; wait until both have reports of seconds after
  // the restart, then a few more seconds.
  const until2 = Date.now() + 60000;
  const current = () => [plain, ha].every((w) => cfg.feeds.every((f) => (w.reports.get(f).at(-1) ?? 0) >= restartedAt));
  while (Date.now() < until2 && !current()) await sleep(100);
  await sleep(cfg.seconds * 1000);
  await Promise.all([plain.stream.close(), ha.stream.close()]);

  const tallies = [plain, ha].map((w) => [w, tally(w)]);
  for (const [w, t] of tallies) {
    console.log(`# ${w.label}: ${JSON.stringify(t)}; events ${JSON.stringify(w.events)}; metrics ${JSON.stringify(w.stream.getMetrics())}`);
  }
  for (const [w, t] of tallies) {
    for (const [feed, r] of Object.entries(t)) {
      assert.ok(r.last >= restartedAt, `${w.label} ${feed}…: reports after the restart (last ${r.last}, restart at ${restartedAt})`);
      assert.equal(r.missing, 0, `${w.label} ${feed}…: every second from ${r.first} to ${r.last}; missing ${r.missed.join(',')}`);
      assert.equal(r.disordered, 0, `${w.label} ${feed}…: in order`);
      if (w.label === 'plain') assert.equal(r.rawRepeated, 0, `${w.label} ${feed}…: no report sent twice`);
    }
  }
  assert.equal(ha.stream.getConnectionType(), 'multiple', 'haMode holds two connections to the gateway');
});

after(async () => {
  await Promise.allSettled(streams.map((s) => s.close()));
});
