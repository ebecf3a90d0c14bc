// The official TypeScript SDK (@chainlink/data-streams-sdk, from npm,
// unchanged) calling every REST method through streamgate and decoding every
// report it gets. Configured only by the environment (see README.md); run
// with `node --test sdk.test.mjs`. compat_test.go runs it against a gateway
// on the simulator.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import sdk from '@chainlink/data-streams-sdk';

const { createClient, decodeReport, APIError, ValidationError, LogLevel } = sdk;
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
  researchKeyID: env('STREAMGATE_RESEARCH_KEY_ID', ''),
  researchKeySecret: env('STREAMGATE_RESEARCH_KEY_SECRET', ''),
  timestamp: Number(env('COMPAT_TIMESTAMP')),
  exactFeeds: env('COMPAT_FEEDS_EXACT', '') === '1',
  summary: env('COMPAT_SUMMARY', ''),
  networks: ['mainnet', 'testnet'].map((name) => {
    const N = name.toUpperCase();
    return {
      name,
      url: env(`STREAMGATE_${N}_URL`),
      v3: list(env(`COMPAT_${N}_V3`)),
      v7: list(env(`COMPAT_${N}_V7`)),
      v11: list(env(`COMPAT_${N}_V11`)),
      feeds: list(env(`COMPAT_${N}_FEEDS`, '')),
      noData: env(`COMPAT_${N}_NODATA`, ''),
      lagging: env(`COMPAT_${N}_LAGGING`, ''),
    };
  }),
  researchFeeds: list(env('COMPAT_RESEARCH_FEEDS', '')),
  researchDenied: env('COMPAT_RESEARCH_DENIED', ''),
};
assert.ok(Number.isInteger(cfg.timestamp) && cfg.timestamp > 0, 'COMPAT_TIMESTAMP must be a Unix timestamp in seconds');

// ---- what the SDK puts on the wire --------------------------------------

// The SDK calls the global fetch at request time; wrapping it records every
// request it sends (retries included) and the status it got, without
// changing either.
const wire = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const url = new URL(typeof input === 'string' ? input : input.url);
  const rec = {
    origin: url.origin,
    path: url.pathname,
    target: url.pathname + url.search,
    method: init.method ?? 'GET',
    headers: Object.fromEntries(new Headers(init.headers)),
    status: 0,
    cache: null,
  };
  wire.push(rec);
  try {
    const res = await realFetch(input, init);
    rec.status = res.status;
    rec.cache = res.headers.get('x-cache');
    return res;
  } catch (err) {
    rec.error = String(err);
    throw err;
  }
};

// sent runs fn and returns its outcome with the requests it sent.
async function sent(fn) {
  const from = wire.length;
  let value, error;
  try {
    value = await fn();
  } catch (err) {
    error = err;
  }
  return { value, error, requests: wire.slice(from) };
}

const wsOf = (url) => url.replace(/^http/, 'ws');

function client(url, keyID, secret) {
  return createClient({
    apiKey: keyID,
    userSecret: secret,
    endpoint: url,
    wsEndpoint: wsOf(url),
    timeout: 20000,
    logging: {
      logLevel: LogLevel.WARN,
      logger: {
        warn: (msg) => console.log(`  [sdk warn] ${msg}`),
        error: (msg) => console.log(`  [sdk error] ${msg}`),
      },
    },
  });
}

// ---- report checks ------------------------------------------------------

const schemaOf = (feedID) => ({ '0003': 'V3', '0007': 'V7', '000b': 'V11' })[feedID.slice(2, 6).toLowerCase()];
const blobWords = { V3: 9, V7: 7, V11: 14 };
const ZERO = 0n;

// reportBlob returns the reportBlob inside fullReport, read independently of
// the SDK: fullReport is the ABI encoding of (bytes32[3] reportContext,
// bytes reportBlob, bytes32[] rawRs, bytes32[] rawSs, bytes32 rawVs).
function reportBlob(fullReport) {
  const b = Buffer.from(fullReport.slice(2), 'hex');
  assert.equal(b.length * 2, fullReport.length - 2, 'fullReport is whole bytes of hex');
  const word = (off) => BigInt('0x' + b.subarray(off, off + 32).toString('hex'));
  const at = Number(word(3 * 32));
  const len = Number(word(at));
  assert.ok(at + 32 + len <= b.length, 'reportBlob lies inside fullReport');
  return b.subarray(at + 32, at + 32 + len);
}

// checkReport checks a report record of feedID and everything its fullReport
// decodes to, with the SDK's decodeReport and with reportBlob. It returns the
// SDK's decoding.
function checkReport(rec, feedID, what) {
  const where = `${what}: ${feedID}@${rec?.observationsTimestamp}`;
  assert.equal(typeof rec, 'object', `${what}: a report record`);
  assert.match(rec.feedID, /^0x[0-9a-fA-F]{64}$/, `${where}: feedID is 0x and 64 hex digits`);
  assert.equal(rec.feedID.toLowerCase(), feedID.toLowerCase(), `${where}: the record is of the stream asked for`);
  assert.ok(Number.isInteger(rec.validFromTimestamp), `${where}: validFromTimestamp is a JSON number`);
  assert.ok(Number.isInteger(rec.observationsTimestamp), `${where}: observationsTimestamp is a JSON number`);
  assert.ok(rec.validFromTimestamp <= rec.observationsTimestamp, `${where}: validFrom <= observations`);
  assert.match(rec.fullReport, /^0x([0-9a-fA-F]{2})+$/, `${where}: fullReport is 0x and hex`);

  const schema = schemaOf(feedID);
  assert.ok(schema, `${where}: schema V3, V7 or V11 from the stream ID`);
  const blob = reportBlob(rec.fullReport);
  assert.equal(blob.length, blobWords[schema] * 32, `${where}: reportBlob length of ${schema}`);
  const word = (i) => BigInt('0x' + blob.subarray(i * 32, i * 32 + 32).toString('hex'));
  assert.equal('0x' + blob.subarray(0, 32).toString('hex'), feedID.toLowerCase(), `${where}: blob feedId is the stream`);
  assert.equal(Number(word(1)), rec.validFromTimestamp, `${where}: blob validFromTimestamp is the record's`);
  assert.equal(Number(word(2)), rec.observationsTimestamp, `${where}: blob observationsTimestamp is the record's`);

  const d = decodeReport(rec.fullReport, rec.feedID);
  assert.equal(d.version, schema, `${where}: decodeReport version`);
  assert.equal(typeof d.nativeFee, 'bigint');
  assert.equal(typeof d.linkFee, 'bigint');
  assert.equal(d.nativeFee, word(3), `${where}: nativeFee`);
  assert.equal(d.linkFee, word(4), `${where}: linkFee`);
  assert.ok(d.nativeFee >= ZERO && d.linkFee >= ZERO, `${where}: fees are not negative`);
  assert.ok(Number.isInteger(d.expiresAt) && d.expiresAt > rec.observationsTimestamp, `${where}: expiresAt ${d.expiresAt} > observationsTimestamp`);
  switch (schema) {
    case 'V3':
      for (const f of ['price', 'bid', 'ask']) assert.equal(typeof d[f], 'bigint', `${where}: V3 ${f}`);
      assert.ok(d.price > ZERO, `${where}: V3 price > 0`);
      assert.ok(d.bid <= d.price && d.price <= d.ask, `${where}: V3 bid ${d.bid} <= price ${d.price} <= ask ${d.ask}`);
      break;
    case 'V7':
      assert.equal(typeof d.exchangeRate, 'bigint', `${where}: V7 exchangeRate`);
      assert.ok(d.exchangeRate > ZERO, `${where}: V7 exchangeRate ${d.exchangeRate} > 0`);
      break;
    case 'V11':
      for (const f of ['mid', 'lastSeenTimestampNs', 'bid', 'bidVolume', 'ask', 'askVolume', 'lastTradedPrice']) {
        assert.equal(typeof d[f], 'bigint', `${where}: V11 ${f} present`);
      }
      assert.ok(Number.isInteger(d.marketStatus) && d.marketStatus >= 0 && d.marketStatus <= 5, `${where}: V11 marketStatus ${d.marketStatus} in 0..5`);
      assert.ok(d.bid <= d.mid && d.mid <= d.ask, `${where}: V11 bid <= mid <= ask`);
      assert.ok(d.bidVolume >= ZERO && d.askVolume >= ZERO, `${where}: V11 volumes are not negative`);
      assert.ok(d.lastSeenTimestampNs <= BigInt(rec.observationsTimestamp + 1) * 1000000000n, `${where}: V11 lastSeenTimestampNs not after the observation`);
      break;
  }
  decoded.push(schema);
  return d;
}
const decoded = [];

function checkAPIError(err, status, what) {
  assert.ok(err, `${what}: the SDK throws`);
  assert.ok(err instanceof APIError, `${what}: an APIError, got ${err?.name}: ${err?.message}`);
  assert.equal(err.statusCode, status, `${what}: status ${status}, got ${err.statusCode} (${err.message})`);
  assert.ok(err.message && err.message !== 'undefined', `${what}: the error has a message`);
}

// checkSigned checks a request the SDK sent: the three headers and their
// signature over the raw request target.
function checkSigned(req, keyID, secret) {
  const h = req.headers;
  assert.equal(h['authorization'], keyID);
  assert.match(h['x-authorization-timestamp'], /^\d{13}$/, 'timestamp in Unix milliseconds');
  assert.match(h['x-authorization-signature-sha256'], /^[0-9a-f]{64}$/, 'signature is lowercase hex');
  const bodyHash = createHash('sha256').update('').digest('hex');
  const want = createHmac('sha256', secret)
    .update(`${req.method} ${req.target} ${bodyHash} ${keyID} ${h['x-authorization-timestamp']}`)
    .digest('hex');
  assert.equal(h['x-authorization-signature-sha256'], want, 'HMAC over "METHOD target sha256(body) key timestamp"');
}

const byFeed = (reports) => new Map(reports.map((r) => [r.feedID.toLowerCase(), r]));
const nowSec = () => Math.floor(Date.now() / 1000);

before(() => {
  console.log(`# @chainlink/data-streams-sdk ${sdkVersion}, node ${process.version}`);
});

test('the SDK is the pinned release', () => {
  assert.equal(sdkVersion, '1.2.1');
});

// ---- every network ------------------------------------------------------

for (const net of cfg.networks) {
  describe(`${net.name}: demo key`, { timeout: 60000 }, () => {
    const c = client(net.url, cfg.keyID, cfg.keySecret);
    const all = [...net.v3, ...net.v7, ...net.v11];
    const firsts = { V3: net.v3[0], V7: net.v7[0], V11: net.v11[0] };

    test('listFeeds returns the team\'s streams', async () => {
      const { value: feeds, error, requests } = await sent(() => c.listFeeds());
      assert.ifError(error);
      assert.equal(requests.length, 1);
      assert.equal(requests[0].path, '/api/v1/feeds');
      checkSigned(requests[0], cfg.keyID, cfg.keySecret);
      assert.equal(requests[0].headers['content-type'], 'application/json');
      assert.ok(Array.isArray(feeds) && feeds.length > 0, 'a non-empty list');
      const ids = feeds.map((f) => f.feedID.toLowerCase());
      for (const id of ids) assert.match(id, /^0x[0-9a-f]{64}$/);
      assert.equal(new Set(ids).size, ids.length, 'no stream twice');
      for (const id of [...net.feeds, ...all]) assert.ok(ids.includes(id.toLowerCase()), `listFeeds holds ${id}`);
      if (cfg.exactFeeds && net.feeds.length > 0) {
        assert.deepEqual([...ids].sort(), net.feeds.map((s) => s.toLowerCase()).sort(), 'exactly the expected streams');
      }
    });

    for (const [schema, feed] of Object.entries(firsts)) {
      test(`getLatestReport ${schema}`, async () => {
        const before = nowSec();
        const { value: r, error, requests } = await sent(() => c.getLatestReport(feed));
        assert.ifError(error);
        assert.equal(requests.length, 1);
        assert.equal(requests[0].target, `/api/v1/reports/latest?feedID=${feed}`);
        checkReport(r, feed, 'latest');
        assert.ok(r.observationsTimestamp > cfg.timestamp, 'latest is newer than the fixed past timestamp');
        assert.ok(r.observationsTimestamp <= nowSec() + 1 && r.observationsTimestamp >= before - 60, 'latest is recent');
      });
    }

    test('getReportByTimestamp at a fixed past timestamp, asked three times', async () => {
      for (const [schema, feed] of Object.entries(firsts)) {
        const got = [];
        for (let i = 0; i < 3; i++) {
          const { value: r, error, requests } = await sent(() => c.getReportByTimestamp(feed, cfg.timestamp));
          assert.ifError(error);
          assert.equal(requests.length, 1);
          assert.equal(requests[0].target, `/api/v1/reports?feedID=${feed}&timestamp=${cfg.timestamp}`);
          checkReport(r, feed, `report ${schema}`);
          assert.equal(r.observationsTimestamp, cfg.timestamp, `${schema}: observationsTimestamp is the one asked`);
          got.push(r);
        }
        assert.deepEqual(got[1], got[0], `${schema}: the same report again`);
        assert.deepEqual(got[2], got[0], `${schema}: the same report a third time`);
      }
    });

    test('getReportByTimestamp with an upper-case stream ID (the SDK accepts it)', async () => {
      const feed = '0x' + firsts.V3.slice(2).toUpperCase();
      const r = await c.getReportByTimestamp(feed, cfg.timestamp - 1);
      checkReport(r, feed, 'upper-case ID');
      assert.equal(r.observationsTimestamp, cfg.timestamp - 1);
    });

    test('getReportsPage: ascending from startTimestamp, limit reports, asked three times', async () => {
      const start = cfg.timestamp - 100;
      const pages = [];
      for (let i = 0; i < 3; i++) {
        const { value: reports, error, requests } = await sent(() => c.getReportsPage(firsts.V3, start, 5));
        assert.ifError(error);
        assert.equal(requests[0].target, `/api/v1/reports/page?feedID=${firsts.V3}&startTimestamp=${start}&limit=5`);
        pages.push(reports);
      }
      assert.equal(pages[0].length, 5, 'count is the limit asked');
      pages[0].forEach((r, i) => {
        checkReport(r, firsts.V3, 'page');
        assert.equal(r.observationsTimestamp, start + i, 'ascending, consecutive, from startTimestamp inclusive');
      });
      assert.deepEqual(pages[1], pages[0]);
      assert.deepEqual(pages[2], pages[0]);
    });

    test('getReportsPage with the SDK default limit (10), V7 and V11', async () => {
      for (const feed of [firsts.V7, firsts.V11]) {
        const start = cfg.timestamp - 50;
        const { value: reports, error, requests } = await sent(() => c.getReportsPage(feed, start));
        assert.ifError(error);
        assert.ok(requests[0].target.endsWith('&limit=10'), 'the SDK sends limit=10 unless told otherwise');
        assert.equal(reports.length, 10);
        reports.forEach((r, i) => {
          checkReport(r, feed, 'page');
          assert.equal(r.observationsTimestamp, start + i);
        });
      }
    });

    test('getReportsBulk at a past timestamp: every stream, 200, asked three times', async () => {
      const ts = cfg.timestamp - 200;
      let first;
      for (let i = 0; i < 3; i++) {
        const { value: reports, error, requests } = await sent(() => c.getReportsBulk(all, ts));
        assert.ifError(error);
        assert.equal(requests.length, 1);
        assert.equal(requests[0].target, `/api/v1/reports/bulk?feedIDs=${all.join(',')}&timestamp=${ts}`, 'the SDK sends a raw comma');
        assert.equal(requests[0].status, 200);
        assert.equal(reports.length, all.length, 'one report per stream');
        const m = byFeed(reports);
        for (const feed of all) {
          const r = m.get(feed.toLowerCase());
          assert.ok(r, `bulk holds ${feed}`);
          checkReport(r, feed, 'bulk');
          assert.equal(r.observationsTimestamp, ts);
        }
        if (i === 0) first = reports;
        else assert.deepEqual(byFeed(reports), byFeed(first), 'the same reports again');
      }
    });

    test('getReportsBulk with a stream that has no data: 206, the SDK returns the others', { skip: !net.noData && 'no COMPAT_*_NODATA stream' }, async () => {
      const ids = [net.v3[0], net.noData, net.v7[0]];
      const { value: reports, error, requests } = await sent(() => c.getReportsBulk(ids, cfg.timestamp));
      assert.ifError(error);
      assert.equal(requests.length, 1, 'a 206 is a success to the SDK: no retry');
      assert.equal(requests[0].status, 206);
      const m = byFeed(reports);
      assert.equal(reports.length, 2);
      assert.ok(!m.has(net.noData.toLowerCase()), 'the stream without data is left out');
      for (const feed of [net.v3[0], net.v7[0]]) {
        checkReport(m.get(feed.toLowerCase()), feed, 'partial bulk');
        assert.equal(m.get(feed.toLowerCase()).observationsTimestamp, cfg.timestamp);
      }
    });

    test('getReportsBulk at the current second: 206 without the stream that publishes late', { skip: !net.lagging && 'no COMPAT_*_LAGGING stream' }, async () => {
      const ts = nowSec();
      const ids = [net.v3[0], net.lagging];
      const { value: reports, error, requests } = await sent(() => c.getReportsBulk(ids, ts));
      const elapsed = nowSec() - ts;
      assert.ifError(error);
      assert.equal(requests.length, 1);
      const m = byFeed(reports);
      checkReport(m.get(net.v3[0].toLowerCase()), net.v3[0], 'recent bulk');
      assert.equal(m.get(net.v3[0].toLowerCase()).observationsTimestamp, ts);
      if (elapsed < 2) {
        assert.equal(requests[0].status, 206);
        assert.equal(reports.length, 1);
        assert.ok(!m.has(net.lagging.toLowerCase()), 'the late stream has no report yet');
      } else if (m.has(net.lagging.toLowerCase())) {
        checkReport(m.get(net.lagging.toLowerCase()), net.lagging, 'recent bulk');
      }
    });

    test('getReportsBulk in the future: 206, the SDK returns an empty list', async () => {
      const ts = nowSec() + 3600;
      const { value: reports, error, requests } = await sent(() => c.getReportsBulk([net.v3[0], net.v11[0]], ts));
      assert.ifError(error);
      assert.equal(requests.length, 1);
      assert.equal(requests[0].status, 206);
      assert.deepEqual(reports, []);
    });

    test('getReportByTimestamp without a report: 404, retried once and signed afresh', { skip: !net.noData && 'no COMPAT_*_NODATA stream' }, async () => {
      const { error, requests } = await sent(() => c.getReportByTimestamp(net.noData, cfg.timestamp));
      checkAPIError(error, 404, 'no report');
      assert.equal(requests.length, 2, 'the SDK retries a 404 (every status but 400 and 401), once by default');
      for (const r of requests) {
        assert.equal(r.status, 404, 'the retry is answered like the first try, not refused as a replay');
        checkSigned(r, cfg.keyID, cfg.keySecret);
      }
      const [a, b] = requests;
      assert.equal(a.target, b.target);
      assert.notEqual(a.headers['x-authorization-timestamp'], b.headers['x-authorization-timestamp'], 'the retry has a new timestamp');
      assert.notEqual(a.headers['x-authorization-signature-sha256'], b.headers['x-authorization-signature-sha256'], 'the retry has a new signature');
    });

    test('an unknown stream: 401, not retried', async () => {
      const unknown = '0x0003' + 'f'.repeat(56) + '0001';
      const { error, requests } = await sent(() => c.getLatestReport(unknown));
      checkAPIError(error, 401, 'unknown stream');
      assert.equal(requests.length, 1);
      const bulk = await sent(() => c.getReportsBulk([net.v3[0], unknown], cfg.timestamp));
      checkAPIError(bulk.error, 401, 'bulk with an unknown stream');
    });

    test('a malformed stream ID: refused by the SDK before sending; 400 from the gateway', async () => {
      const bad = await sent(() => c.getLatestReport('0x1234'));
      assert.ok(bad.error instanceof ValidationError, 'the SDK validates stream IDs itself');
      assert.equal(bad.requests.length, 0, 'nothing is sent');
      // The SDK's own signed request path, which its public methods reach
      // only after that validation.
      const raw = await sent(() => c.withRetry(() => c.makeRequest('/api/v1/reports/latest?feedID=0x1234')));
      checkAPIError(raw.error, 400, 'malformed stream ID');
      assert.equal(raw.requests.length, 1, '400 is not retried');
      assert.match(raw.error.message, /feedID/i, 'the SDK shows the gateway\'s message');
    });

    test('a timestamp the SDK lets through but the API cannot read: 400', async () => {
      // Number.isInteger(1e21) holds; the SDK sends it as "1e+21".
      const { error, requests } = await sent(() => c.getReportByTimestamp(firsts.V3, 1e21));
      checkAPIError(error, 400, 'timestamp 1e21');
      assert.equal(requests.length, 1);
    });

    test('every report was decoded', () => {
      for (const s of ['V3', 'V7', 'V11']) assert.ok(decoded.includes(s), `a ${s} report was decoded`);
    });

    // Identical requests sent in the same millisecond carry identical
    // signatures; the gateway's replay protection lets such twins through
    // for auth.replay_grace, so both are answered, as the upstream would.
    //
    // The SDK signs with Date.now(). Two calls land in one millisecond
    // only by luck on a loaded machine, so the SDK's clock is held at one
    // real millisecond while the two calls are made: the twins are then
    // certain, and everything else about the requests is the SDK's own.
    test('identical concurrent requests in one millisecond', async () => {
      const realNow = Date.now;
      const held = realNow();
      Date.now = () => held;
      let pair;
      try {
        pair = await sent(() => Promise.allSettled([
          c.getReportByTimestamp(firsts.V3, cfg.timestamp - 2),
          c.getReportByTimestamp(firsts.V3, cfg.timestamp - 2),
        ]));
      } finally {
        Date.now = realNow;
      }
      const [a, b] = pair.requests;
      assert.equal(pair.requests.length, 2, 'two requests, neither retried');
      assert.equal(a.headers['x-authorization-timestamp'], b.headers['x-authorization-timestamp'], 'signed in one millisecond');
      assert.equal(a.headers['x-authorization-signature-sha256'], b.headers['x-authorization-signature-sha256'], 'identical signatures');
      console.log(`  # twin requests answered ${pair.requests.map((r) => r.status).join(' and ')}`);
      for (const s of pair.value) assert.equal(s.status, 'fulfilled', s.reason?.message);
    });
  });
}

// ---- another team's key -------------------------------------------------

describe('research key', { skip: !cfg.researchKeyID && 'no STREAMGATE_RESEARCH_KEY_ID', timeout: 60000 }, () => {
  const [mainnet, testnet] = cfg.networks;
  const main = client(mainnet.url, cfg.researchKeyID, cfg.researchKeySecret);
  const test_ = client(testnet.url, cfg.researchKeyID, cfg.researchKeySecret);

  test('on mainnet, which the team may not use: 401', async () => {
    const feeds = await sent(() => main.listFeeds());
    checkAPIError(feeds.error, 401, 'listFeeds on mainnet');
    assert.equal(feeds.requests.length, 1, 'not retried');
    const latest = await sent(() => main.getLatestReport(mainnet.v3[0]));
    checkAPIError(latest.error, 401, 'getLatestReport on mainnet');
  });

  test('on testnet: listFeeds holds exactly its streams', { skip: cfg.researchFeeds.length === 0 && 'no COMPAT_RESEARCH_FEEDS' }, async () => {
    const feeds = await test_.listFeeds();
    assert.deepEqual(feeds.map((f) => f.feedID.toLowerCase()).sort(), cfg.researchFeeds.map((s) => s.toLowerCase()).sort());
  });

  test('on testnet: a permitted stream reads, a stream it may not read is 401', { skip: (!cfg.researchDenied || cfg.researchFeeds.length === 0) && 'no COMPAT_RESEARCH_DENIED' }, async () => {
    const allowed = cfg.researchFeeds[0];
    checkReport(await test_.getLatestReport(allowed), allowed, 'research latest');
    const denied = await sent(() => test_.getLatestReport(cfg.researchDenied));
    checkAPIError(denied.error, 401, 'a stream the key may not read');
    assert.equal(denied.requests.length, 1, 'not retried');
    const report = await sent(() => test_.getReportByTimestamp(cfg.researchDenied, cfg.timestamp));
    checkAPIError(report.error, 401, 'getReportByTimestamp of a stream the key may not read');
    const bulk = await sent(() => test_.getReportsBulk([allowed, cfg.researchDenied], cfg.timestamp));
    checkAPIError(bulk.error, 401, 'bulk naming a stream the key may not read');
  });
});

// ---- what was sent ------------------------------------------------------

after(() => {
  const nets = new Map(cfg.networks.map((n) => [new URL(n.url).origin, n.name]));
  const sample = wire.find((r) => r.path === '/api/v1/reports/bulk');
  if (sample) {
    const h = { ...sample.headers, 'x-authorization-signature-sha256': '<64 hex>' };
    console.log(`# a request as the SDK sends it: ${sample.method} ${sample.target}`);
    console.log(`#   headers ${JSON.stringify(h)}`);
  }
  const counts = {};
  for (const r of wire) {
    const k = `${nets.get(r.origin) ?? r.origin} ${r.path} ${r.status}`;
    counts[k] = (counts[k] ?? 0) + 1;
  }
  console.log(`# requests sent by the SDK (network path status: n): ${JSON.stringify(counts)}`);
  if (cfg.summary) {
    const requests = wire.map((r) => ({ network: nets.get(r.origin) ?? '', path: r.path, status: r.status, cache: r.cache ?? '' }));
    writeFileSync(cfg.summary, JSON.stringify({ sdkVersion, requests }, null, 1));
  }
});
