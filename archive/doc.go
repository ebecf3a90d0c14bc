// Package archive keeps the verified reports that pass through the
// gateway, each once per (network, stream, observationsTimestamp), so that
// reports at a timestamp, bulk, pages, resumes and replays can be served
// from it on any replica, after any restart, without an upstream call, byte
// for byte as the upstream served them.
//
// It is the storage layer only: a Report and its JSON record (Report,
// AppendJSON, FromRecord: a record the don package read), the Store interface with two implementations
// that behave alike (Pebble, a directory owned by one process, OpenPebble;
// PostgreSQL, shared by the replicas, OpenPostgres), the coverage of each
// stream (the spans of seconds for which the archive holds every report
// the upstream has), retention, and a Writer that puts the hot path's
// reports into a Store in batches without ever making it wait. The gateway
// (proxy, server) writes what it verified and serves from it.
package archive
