// The decoded view of streamgate (Accept: application/vnd.streamgate.decoded+json)
// against the official SDK's decodeReport: for every report the Go test
// fetched through the gateway (and the real testnet V3 report), each field the
// SDK decodes has the value the gateway states, the 18-decimal forms place the
// point where the SDK's integers put it, and every schema is covered.
//
// Run by TestSDKDecodedView (decoded_test.go), which writes the records to
// the file named by COMPAT_DECODED.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import sdk from '@chainlink/data-streams-sdk';

const { decodeReport } = sdk;

const records = JSON.parse(readFileSync(process.env.COMPAT_DECODED, 'utf8'));

// decimal18 places the point of an 18-decimal integer, all 18 digits kept.
function decimal18(v) {
  const neg = v < 0n;
  let s = (neg ? -v : v).toString().padStart(19, '0');
  s = s.slice(0, -18) + '.' + s.slice(-18);
  return (neg ? '-' : '') + s;
}

test('the decoded view agrees with decodeReport on every schema', () => {
  const schemas = new Set();
  assert.ok(records.length > 0, 'records to compare');
  for (const rec of records) {
    const where = `${rec.feedID}@${rec.observationsTimestamp}`;
    const d = decodeReport(rec.fullReport, rec.feedID);
    assert.equal(rec.decoded.schema, d.version, `${where}: schema`);
    schemas.add(d.version);
    for (const [k, v] of Object.entries(d)) {
      if (k === 'version') continue;
      assert.ok(k in rec.decoded, `${where}: the decoded view has the SDK's field ${k}`);
      assert.equal(rec.decoded[k], String(v), `${where}: ${k}`);
      if (k in rec.decimal) {
        assert.equal(typeof v, 'bigint', `${where}: ${k} is an integer`);
        assert.equal(rec.decimal[k], decimal18(v), `${where}: ${k} with 18 decimals`);
      }
    }
    // The fields the SDK leaves out are the blob's own, also in the record.
    assert.equal(rec.decoded.feedId, rec.feedID.toLowerCase(), `${where}: feedId`);
    assert.equal(rec.decoded.observationsTimestamp, String(rec.observationsTimestamp), `${where}: observationsTimestamp`);
    assert.equal(rec.decoded.validFromTimestamp, String(rec.validFromTimestamp), `${where}: validFromTimestamp`);
  }
  assert.deepEqual([...schemas].sort(), ['V11', 'V3', 'V7'], 'every schema compared');
});
