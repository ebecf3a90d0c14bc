//go:build nosimulator

package server

// EmbeddedUpstream reports whether this build carries the embedded
// upstream. This one, built with the tag nosimulator, does not: the
// simulator is not linked, and New refuses a configuration with an
// upstream.url "embedded" (CheckBuild says so).
const EmbeddedUpstream = false

// newEmbedded is not reached in this build: CheckBuild refuses first.
func newEmbedded() (embedded, error) { return nil, errNoEmbedded }
