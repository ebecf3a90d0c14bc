// The official TypeScript SDK's WebSocket stream (createStream) through
// streamgate: every report of a few streams for a sustained period, each
// once and in order, decoded with decodeReport; HA mode falling back to one
// connection; and an upstream drop the SDK never notices. Configured only
// by the environment (see README.md); run with `node --test
// stream.test.mjs`. compat_test.go runs it against a gateway on the
// simulator and drops the simulator's connections when asked.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import sdk from '@chainlink/data-streams-sdk';

const { createClient, decodeReport, LogLevel } = sdk;
const sdkVersion = createRequire(import.meta.url)('@chainlink/data-streams-sdk/package.json').version;

// ---- configuration ------------------------------------------------------

function env(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (fallback !== undefined) return fallback;
    throw new Error(`environment variable ${name} is required (see README.md)`);
  }
  return v;
}

const list = (v) => v.split(',').map((s) => s.trim()).filter(Boolean);

const cfg = {
  keyID: env('STREAMGATE_KEY_ID'),
  keySecret: env('STREAMGATE_KEY_SECRET'),
  seconds: Number(env('COMPAT_STREAM_SECONDS', '5')),
  control: env('COMPAT_CONTROL_URL', ''),
  summary: env('COMPAT_STREAM_SUMMARY', ''),
  networks: Object.fromEntries(['mainnet', 'testnet'].map((name) => {
    const N = name.toUpperCase();
    return [name, { name, url: env(`STREAMGATE_${N}_URL`), feeds: list(env(`COMPAT_${N}_STREAM`)) }];
  })),
};
assert.ok(cfg.seconds >= 3 && cfg.seconds <= 20, 'COMPAT_STREAM_SECONDS between 3 and 20');
for (const net of Object.values(cfg.networks)) assert.ok(net.feeds.length >= 2, `COMPAT_${net.name.toUpperCase()}_STREAM: at least two streams`);

const wsOf = (url) => url.replace(/^http/, 'ws');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nowSec = () => Math.floor(Date.now() / 1000);
const schemaOf = (feedID) => ({ '0003': 'V3', '0007': 'V7', '000b': 'V11' })[feedID.slice(2, 6).toLowerCase()];

function client(net, extra = {}) {
  return createClient({
    apiKey: cfg.keyID,
    userSecret: cfg.keySecret,
    endpoint: net.url,
    wsEndpoint: wsOf(net.url),
    logging: {
      logLevel: LogLevel.WARN,
      logger: {
        warn: (msg) => console.log(`  [sdk warn] ${msg}`),
        error: (msg) => console.log(`  [sdk error] ${msg}`),
      },
    },
    ...extra,
  });
}

// reportBlob returns the reportBlob inside fullReport, read independently of
// the SDK: fullReport is the ABI encoding of (bytes32[3] reportContext,
// bytes reportBlob, bytes32[] rawRs, bytes32[] rawSs, bytes32 rawVs).
function reportBlob(fullReport) {
  const b = Buffer.from(fullReport.slice(2), 'hex');
  const word = (off) => Number(BigInt('0x' + b.subarray(off, off + 32).toString('hex')));
  const at = word(3 * 32);
  const len = word(at);
  assert.ok(at + 32 + len <= b.length, 'reportBlob lies inside fullReport');
  return b.subarray(at + 32, at + 32 + len);
}

// ---- a watched stream ---------------------------------------------------

// Every event of every stream, for the summary.
const allEvents = [];
// Every stream opened, closed at the end whatever failed.
const streams = [];
const opened = { mainnet: 0, testnet: 0 };

// The events a stream emits when its own connection is in trouble.
const troubleEvents = ['connection-lost', 'all-connections-lost', 'reconnecting', 'connection-restored', 'disconnected', 'error'];

// watch opens an SDK stream of feeds on net and records everything: the
// reports it emits (decoded), the raw frames its connections received
// (before the SDK's own deduplication, which would hide a duplicate), its
// events and its status callbacks.
async function watch(label, net, feeds, extra = {}) {
  const w = { label, net: net.name, feeds, reports: new Map(), raw: new Map(), events: [], status: [], failures: [], decoded: 0 };
  for (const f of feeds) {
    w.reports.set(f, []);
    w.raw.set(f, []);
  }
  const c = client(net, { ...extra, connectionStatusCallback: (up, host) => w.status.push({ up, host, at: Date.now() }) });
  const s = c.createStream(feeds);
  w.stream = s;
  streams.push(s);
  const record = (name) => (arg) => {
    const e = { stream: label, event: name, at: Date.now(), detail: arg instanceof Error ? arg.message : (arg?.message ?? '') };
    w.events.push(e);
    allEvents.push(e);
  };
  for (const name of troubleEvents) s.on(name, record(name));
  // The SDK's connection manager (a plain property) emits what Stream
  // does not pass on: the HA fallback and every raw frame.
  const cm = s.connectionManager;
  assert.ok(cm && typeof cm.on === 'function', 'the SDK 1.2.1 Stream has its connectionManager');
  for (const name of ['ha-fallback-warning', 'partial-failure', 'max-reconnect-attempts-reached', 'connection-established']) cm.on(name, record(name));
  cm.on('message', (data) => {
    try {
      const m = JSON.parse(data.toString());
      const list = w.raw.get(m.report.feedID.toLowerCase());
      assert.ok(list, `a frame of ${m.report.feedID}, a stream it did not ask for`);
      list.push(m.report.observationsTimestamp);
    } catch (err) {
      w.failures.push(`raw frame: ${err.message}`);
    }
  });
  // A listener that throws inside the SDK is caught by it and reported
  // as "Failed to parse WebSocket message": failures are kept and checked.
  s.on('report', (r) => {
    try {
      onReport(r);
    } catch (err) {
      if (w.failures.push(String(err.message ?? err)) === 1) console.log(`  # ${label}: ${err.message}`);
    }
  });
  const onReport = (r) => {
    const feed = r.feedID.toLowerCase();
    const d = decodeReport(r.fullReport, r.feedID);
    assert.equal(d.version, schemaOf(feed), `${label}: decodeReport version of ${feed}`);
    const blob = reportBlob(r.fullReport);
    assert.equal('0x' + blob.subarray(0, 32).toString('hex'), feed, `${label}: the blob's feedId is the record's`);
    assert.equal(Number(BigInt('0x' + blob.subarray(64, 96).toString('hex'))), r.observationsTimestamp, `${label}: the blob's observationsTimestamp is the record's`);
    assert.equal(Number(BigInt('0x' + blob.subarray(32, 64).toString('hex'))), r.validFromTimestamp, `${label}: the blob's validFromTimestamp is the record's`);
    assert.ok(d.expiresAt > r.observationsTimestamp, `${label}: expiresAt after the observation`);
    w.decoded++;
    w.reports.get(feed).push({ ts: r.observationsTimestamp, at: Date.now() });
  };
  await s.connect();
  opened[net.name]++;
  w.connectedAt = Date.now();
  return w;
}

async function close(w) {
  await w.stream.close();
  w.metrics = w.stream.getMetrics();
}

// gaps returns the seconds missing between consecutive reports of list.
const gaps = (list) => list.slice(1).reduce((n, ts, i) => n + Math.max(0, ts - list[i] - 1), 0);

// check checks what w received: per stream at least minReports, strictly
// increasing, no raw frame twice (with ha: at most once per connection, the
// SDK emitting each once), and (when noGap) consecutive seconds.
function check(w, { minReports, noGap, ha = false }) {
  assert.deepEqual(w.failures.slice(0, 3), [], `${w.label}: ${w.failures.length} reports failed their checks`);
  const out = {};
  for (const feed of w.feeds) {
    const ts = w.reports.get(feed).map((r) => r.ts);
    const raw = w.raw.get(feed);
    const where = `${w.label} ${feed.slice(0, 10)}…`;
    assert.ok(ts.length >= minReports, `${where}: ${ts.length} reports, want at least ${minReports}`);
    if (ha) {
      const seen = new Map();
      for (const r of raw) seen.set(r, (seen.get(r) || 0) + 1);
      assert.ok([...seen.values()].every((n) => n <= 2), `${where}: a frame came more than once per connection: ${raw.join(',')}`);
      assert.deepEqual(ts, [...seen.keys()].sort((a, b) => a - b), `${where}: the SDK emitted every second the gateway sent, once`);
    } else {
      assert.equal(new Set(raw).size, raw.length, `${where}: a frame came twice: ${raw.join(',')}`);
      assert.deepEqual(ts, raw, `${where}: the SDK emitted every frame the gateway sent, as sent`);
    }
    for (let i = 1; i < ts.length; i++) assert.ok(ts[i] > ts[i - 1], `${where}: observationsTimestamp ${ts[i]} after ${ts[i - 1]}`);
    if (noGap) assert.equal(gaps(ts), 0, `${where}: consecutive seconds, got ${ts.join(',')}`);
    out[feed] = { reports: ts.length, first: ts[0], last: ts.at(-1), missing: gaps(ts) };
  }
  if (!ha) assert.equal(w.metrics.deduplicated, 0, `${w.label}: the SDK deduplicated ${w.metrics.deduplicated} reports`);
  return out;
}

const noTrouble = (w) => assert.deepEqual(w.events.filter((e) => troubleEvents.includes(e.event)), [], `${w.label}: no connection trouble`);

// ---- tests --------------------------------------------------------------

const results = {};

before(() => {
  console.log(`# @chainlink/data-streams-sdk ${sdkVersion}, node ${process.version}, ${cfg.seconds} s per stream`);
});

describe('createStream through the gateway', { timeout: 50000 }, () => {
  test('several streams on mainnet and one on testnet: every report once, in order, no gap', async () => {
    const m = cfg.networks.mainnet.feeds;
    const t = cfg.networks.testnet.feeds;
    const ws = await Promise.all([
      watch('mainnet all', cfg.networks.mainnet, m),
      watch('mainnet first two', cfg.networks.mainnet, m.slice(0, 2)),
      watch('mainnet last', cfg.networks.mainnet, m.slice(-1)),
      watch('mainnet all again', cfg.networks.mainnet, [...m].reverse()),
      watch('testnet all', cfg.networks.testnet, t),
    ]);
    await sleep(cfg.seconds * 1000);
    await Promise.all(ws.map(close));
    for (const w of ws) {
      noTrouble(w);
      assert.deepEqual(w.status.map((s) => s.up), [true], `${w.label}: connected once`);
      results[w.label] = check(w, { minReports: cfg.seconds - 1, noGap: true });
      // The newest report is at most a few seconds behind the clock
      // (Datalink streams publish up to 3 s late).
      for (const feed of w.feeds) assert.ok(w.reports.get(feed).at(-1).ts >= nowSec() - 6, `${w.label}: ${feed} is current`);
    }
    console.log(`# plain streams: ${JSON.stringify(results)}`);
  });

  test('haMode: the gateway advertises two origins, the SDK holds one connection to each and accepts each report once', async () => {
    const net = cfg.networks.mainnet;
    // What the gateway answers to the SDK's signed HEAD / (origin discovery).
    const head = await signedHead(wsOf(net.url));
    console.log(`# HEAD / at the gateway: ${head.status}, X-Cll-Available-Origins ${JSON.stringify(head.origins)}`);
    assert.equal(head.status, 200);
    assert.equal(head.origins, '{001,002}', 'the gateway advertises realtime.client_origins');

    const w = await watch('mainnet haMode', net, net.feeds, { haMode: true });
    assert.equal(w.stream.getConnectionType(), 'multiple', 'one connection per origin');
    assert.deepEqual(w.stream.getOrigins().length, 2);
    await sleep(cfg.seconds * 1000);
    await close(w);
    noTrouble(w);
    assert.equal(w.events.filter((e) => e.event === 'ha-fallback-warning').length, 0, 'no fallback to one connection');
    results[w.label] = check(w, { minReports: cfg.seconds - 1, noGap: true, ha: true });
    // Both connections carry every report: the SDK keeps one of each pair.
    assert.ok(w.metrics.deduplicated > 0, 'the second connection delivered the same reports');
    console.log(`# haMode: ${JSON.stringify(w.metrics)}`);
  });

  test('an upstream drop mid-stream: the SDK stays connected, reports continue, none twice', { skip: !cfg.control && 'no COMPAT_CONTROL_URL' }, async () => {
    const net = cfg.networks.mainnet;
    const w = await watch('mainnet drop', net, net.feeds);
    // Wait until reports flow (bounded), then have the test's owner drop
    // the gateway's upstream connections of this network.
    const until = Date.now() + 10000;
    while (Date.now() < until && !net.feeds.every((f) => w.reports.get(f).length >= 2)) await sleep(100);
    assert.ok(net.feeds.every((f) => w.reports.get(f).length >= 2), 'reports flow before the drop');
    const res = await fetch(`${cfg.control}/drop?network=${net.name}`, { method: 'POST' });
    assert.equal(res.status, 200);
    const { dropped } = await res.json();
    const droppedAt = Date.now();
    assert.ok(dropped >= 1, `the simulator closed ${dropped} upstream connections`);
    const before = Object.fromEntries(net.feeds.map((f) => [f, w.reports.get(f).length]));
    await sleep(cfg.seconds * 1000);
    await close(w);
    noTrouble(w);
    assert.deepEqual(w.status.map((s) => s.up), [true], 'the SDK never saw its connection go down');
    const got = check(w, { minReports: 4, noGap: false });
    for (const f of net.feeds) {
      const after = w.reports.get(f).filter((r) => r.at > droppedAt).length;
      got[f].afterDrop = after;
      assert.ok(w.reports.get(f).length - before[f] >= cfg.seconds - 3, `${f}: reports continue after the drop (${after})`);
    }
    results[w.label] = { dropped, ...got };
    console.log(`# upstream drop (${dropped} connections closed): ${JSON.stringify(got)}`);
  });
});

// signedHead sends the SDK's origin discovery request: HEAD / on the ws
// host, signed as the SDK signs it.
async function signedHead(wsURL) {
  const url = new URL('/', wsURL.replace(/^ws/, 'http'));
  const ts = Date.now().toString();
  const bodyHash = createHash('sha256').update('').digest('hex');
  const sig = createHmac('sha256', cfg.keySecret).update(`HEAD / ${bodyHash} ${cfg.keyID} ${ts}`).digest('hex');
  const res = await fetch(url, {
    method: 'HEAD',
    headers: { Authorization: cfg.keyID, 'X-Authorization-Timestamp': ts, 'X-Authorization-Signature-SHA256': sig },
  });
  return { status: res.status, origins: res.headers.get('x-cll-available-origins') };
}

after(async () => {
  await Promise.allSettled(streams.map((s) => s.close()));
  const events = {};
  for (const e of allEvents) events[e.event] = (events[e.event] ?? 0) + 1;
  console.log(`# SDK streams opened: ${JSON.stringify(opened)}; events seen: ${JSON.stringify(events)}`);
  if (cfg.summary) writeFileSync(cfg.summary, JSON.stringify({ sdkVersion, opened, events: allEvents, results }, null, 1));
});
