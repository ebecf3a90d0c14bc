// The decoded view of streamgate (Accept: application/vnd.streamgate.decoded+json)
// against the official SDK's decodeReport: for every report the Go test
// fetched through the gateway (and the real testnet V3 report), each field the
// SDK decodes has the value the gateway states, the 18-decimal forms place the
// point where the SDK's integers put it, the view has no field the SDK's
// schema lacks (but the header the SDK leaves out), and every schema is
// covered; a schema the SDK does not decode (V1, V14) it refuses.
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

// The schemas the SDK's decodeReport reads (1.2.1: V2 to V13); the others
// (V1, which only the Go SDK decodes, and V14 of the documentation) it
// refuses as an unknown version, and the view still decodes them.
const sdkSchemas = new Set(['V2', 'V3', 'V4', 'V5', 'V6', 'V7', 'V8', 'V9', 'V10', 'V11', 'V12', 'V13']);
const wantSchemas = (process.env.COMPAT_SCHEMAS || 'V3,V7,V11').split(',');

// The fields the SDK leaves out of what it returns: the blob's own header,
// also in the record; and the names the view adds.
const header = new Set(['feedId', 'validFromTimestamp', 'observationsTimestamp']);
const added = new Set(['schema', 'marketStatusName', 'ripcordName']);

test('the decoded view agrees with decodeReport on every schema', () => {
  const schemas = new Set();
  const refused = new Set();
  assert.ok(records.length > 0, 'records to compare');
  for (const rec of records) {
    const where = `${rec.feedID}@${rec.observationsTimestamp}`;
    const schema = rec.decoded.schema;
    schemas.add(schema);
    if (!sdkSchemas.has(schema)) {
      assert.throws(() => decodeReport(rec.fullReport, rec.feedID), /Unknown report version/, `${where}: the SDK does not decode ${schema}`);
      refused.add(schema);
    } else {
      const d = decodeReport(rec.fullReport, rec.feedID);
      assert.equal(schema, d.version, `${where}: schema`);
      for (const [k, v] of Object.entries(d)) {
        if (k === 'version') continue;
        assert.ok(k in rec.decoded, `${where}: the decoded view has the SDK's field ${k}`);
        if (typeof v === 'number') {
          // The SDK turns some integers into Numbers (timestamps, statuses,
          // V13's volumes): a nanosecond timestamp loses its last digits
          // there, so the view's exact integer is compared as a Number.
          assert.equal(Number(BigInt(rec.decoded[k])), v, `${where}: ${k}`);
        } else {
          assert.equal(rec.decoded[k], String(v), `${where}: ${k}`);
        }
        if (k in rec.decimal) {
          assert.equal(typeof v, 'bigint', `${where}: ${k} is an integer`);
          assert.equal(rec.decimal[k], decimal18(v), `${where}: ${k} with 18 decimals`);
        }
      }
      // The same fields: every field of the view is the SDK's, or the
      // header the SDK leaves out, or a name the view adds.
      for (const k of Object.keys(rec.decoded)) {
        assert.ok(k in d || header.has(k) || added.has(k), `${where}: the view's ${k} is not a field of the SDK's ${schema}`);
      }
      for (const k of Object.keys(rec.decimal)) {
        assert.equal(typeof d[k], 'bigint', `${where}: the view's scaled ${k} is an SDK integer`);
      }
    }
    // The fields the SDK leaves out are the blob's own, also in the record.
    assert.equal(rec.decoded.feedId, rec.feedID.toLowerCase(), `${where}: feedId`);
    assert.equal(rec.decoded.observationsTimestamp, String(rec.observationsTimestamp), `${where}: observationsTimestamp`);
    if ('validFromTimestamp' in rec.decoded || schema !== 'V1') {
      assert.equal(rec.decoded.validFromTimestamp, String(rec.validFromTimestamp), `${where}: validFromTimestamp`);
    }
  }
  assert.deepEqual([...schemas].sort(), [...wantSchemas].sort(), 'every schema compared');
  console.log(`compared ${records.length} records of ${[...schemas].sort().join(' ')}; decodeReport refuses ${[...refused].sort().join(' ') || 'none'}`);
});
