// Package simulator is a faithful stand-in for the Data Streams upstream
// service: the gateway's embedded default upstream and the test double of
// every test and benchmark.
//
// The model: each network (mainnet, testnet) has a fixed, deterministic set
// of streams, and every stream has a report for every second of a sliding
// window [now-History, now-delay]; a report's values are a pure function of
// (network, stream, second), so two simulators with the same clock answer
// with identical bytes. Handler(network) serves the REST API of one network
// over plain HTTP; ControlHandler serves fault injection and request
// counters on a separate handler.
//
// # Choices the specification leaves open
//
//   - A timestamp without a report (before the window, after the stream's
//     publication point, before its creation or after its decommission) is
//     404 {"error":"...","message":"..."} on /api/v1/reports and
//     /api/v1/reports/latest; on /api/v1/reports/bulk the stream is left
//     out and the status is 206; /api/v1/reports/page answers 200 with the
//     reports that exist, possibly none ("reports": []).
//   - /api/v1/reports/page: limit defaults to 10; a limit above 100 is
//     clamped to 100 (not an error); a start before the window begins at the
//     window's first report. Reports are in ascending order from
//     startTimestamp inclusive, one per second.
//   - /api/v1/reports/bulk: reports in the order requested, duplicate IDs
//     answered once. Config.MaxBulkFeeds optionally caps the number of IDs.
//   - Publication delay: the newest report of a stream is at now minus a
//     per-stream delay: 0 s for crypto market data, 0-1 s for equities and
//     FX, 1-3 s for Datalink products (NAV, macro, SmartData). A bulk
//     request at the current second therefore gets 206 when it mixes kinds.
//   - Error bodies: the catalog endpoint answers {"error":"..."}; every
//     other endpoint {"error":"...","message":"..."} with the same text.
//   - A stream that does not exist or that the key may not read is 401, as
//     upstream; so is a bulk request naming any such stream.
//   - Rate limits are token buckets per network, per key and per endpoint,
//     counted only for requests with valid credentials (anonymous catalog
//     requests are not limited). A 429 carries Retry-After.
//   - Stream IDs: the schema in the first two bytes (0x0003 V3, 0x0007 V7,
//     0x000b V11), then bytes of a hash of the stream name; a stream listed
//     on both networks has the same ID on each, but its values differ
//     between networks, so a gateway that mixes them up is caught.
//   - Market hours are UTC approximations without daylight saving time or
//     holidays; outside them a price stays at its last traded value.
//   - /api/v1/ws is not simulated: after authentication it answers 426.
//
// A Simulator is safe for concurrent use.
package simulator
