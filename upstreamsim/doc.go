// Package simulator is a faithful stand-in for the Data Streams upstream
// service: the gateway's embedded default upstream and the test double of
// every test and benchmark.
//
// The model: each network (mainnet, testnet) has a fixed, deterministic set
// of streams, and every stream has a report for every second of a sliding
// window [now-History, now-delay]; a report's values are a pure function of
// (network, stream, second), so two simulators with the same clock answer
// with identical bytes. Handler(network) serves the REST API and the
// WebSocket stream (/api/v1/ws) of one network over plain HTTP;
// ControlHandler serves fault injection and counters on a separate handler.
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
//   - Rate limits are per network, per key and per endpoint, counted only
//     for requests with valid credentials (anonymous catalog requests are
//     not limited), in one of three modes (Config.RateMode), since the
//     service does not publish how it counts: a token bucket (Default: a
//     burst of 1, the strictest), a calendar-second counter, or a sliding
//     one-second window. A 429 carries Retry-After.
//   - Stream IDs: the schema in the first two bytes (0x0001 V1 to 0x000e
//     V14; every schema has live streams, V3, V7 and V11 the most), then
//     bytes of a hash of the stream name; a stream listed
//     on both networks has the same ID on each, but its values differ
//     between networks, so a gateway that mixes them up is caught.
//   - Market hours are UTC approximations without daylight saving time or
//     holidays; outside them a price stays at its last traded value.
//   - HEAD / (and GET /) answers 200; it advertises X-Cll-Available-Origins
//     only when Config.HAOrigins is set (off by default: the official Go
//     client then uses one connection). Credentials are checked when sent
//     and not required.
//
// # The WebSocket stream
//
//   - GET /api/v1/ws?feedIDs=a,b upgrades to a WebSocket (no subprotocol, no
//     compression, any Origin header). Checks, all before the upgrade, in
//     this order: a WSRefuse fault (its status); credentials (400 missing or
//     malformed, 401 unknown key, bad signature or stale timestamp), where
//     the signature may cover the request target as received or
//     "/api/v1/ws?" and the raw query; the query (400: feedIDs missing,
//     given twice, an empty item or an ID not 0x and 64 hex digits; the
//     comma raw or %2C; duplicates dropped, other parameters ignored); the
//     streams (401 when any does not exist on the network or the key may
//     not read it, as on REST); the upgrade headers (426 without them); an
//     unknown X-Cll-Origin under HA (400); the connection limit (429). The
//     errors are JSON {"error","message"}. The REST rate limits do not
//     apply; the other faults (latency, errors, hangs, 429s) do.
//   - Config.WSMaxConnsPerKey (default 20) caps the open connections of a
//     key on one network, whatever their origin.
//   - Frames: one binary frame per report, exactly the body of
//     /api/v1/reports for that stream and second: {"report":{...}}. Per
//     stream, a connection gets every report published after it opened,
//     each second's once, in time order, following the stream's
//     publication delay; a stream without reports (decommissioned) is
//     accepted and sends nothing. Nothing else is ever sent. A connection
//     looks for new reports just after each whole second of the clock
//     (Config.WSTick sets a fixed interval instead) and sends at most the
//     last 10 seconds it missed per stream.
//   - Each connection has two goroutines (and a short-lived one per ping
//     the simulator sends): one reads (so pings are answered
//     at once, and a client's data message closes the connection with
//     1008), one writes the frames. Writes time out after WSWriteTimeout
//     (10 s), which closes the connection. The simulator pings every client
//     every WSPingInterval (15 s) and closes one whose pong is later than
//     min(WSPingInterval, 5 s).
//   - HA: every origin serves the same connections and the same bytes; the
//     origin only selects which connections a WSStall or DropWS hits.
//   - Faults: WSStall holds connections (no reads, no writes, so no frames
//     and no pongs) until it is cleared, new ones included once upgraded;
//     DropWS closes open connections with 1001 or abruptly (no close
//     frame); WSRefuse answers upgrades with a status. Close closes every
//     connection with 1001.
//
// A Simulator is safe for concurrent use.
package upstreamsim
