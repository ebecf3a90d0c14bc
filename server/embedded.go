//go:build !nosimulator

package server

import (
	"fmt"
	"net/http"

	"streamgate/config"
	"streamgate/simulator"
)

// EmbeddedUpstream reports whether this build carries the embedded
// upstream, the simulator that networks with upstream.url "embedded" (and
// so the demo) run on. It does by default; a build with the tag
// nosimulator (the container image's) leaves the simulator out of the
// binary, and New refuses a configuration that asks for it.
const EmbeddedUpstream = true

// simUpstream is the embedded upstream of this build: one simulator
// serving every embedded network.
type simUpstream struct{ sim *simulator.Simulator }

func newEmbedded() (embedded, error) {
	sim, err := simulator.New(simulator.Default())
	if err != nil {
		return nil, fmt.Errorf("starting the embedded upstream: %w", err)
	}
	return simUpstream{sim}, nil
}

func (u simUpstream) handler(network string) http.Handler {
	return u.sim.Handler(simulator.NetworkFor(network))
}

func (u simUpstream) credentials() (key, secret string) {
	return simulator.OrgKeyID, simulator.OrgKeySecret
}

func (u simUpstream) dons(network string) []config.DON {
	var out []config.DON
	for _, c := range u.sim.DON(simulator.NetworkFor(network)) {
		out = append(out, config.DON{ConfigDigest: c.ConfigDigest, F: c.F, Signers: c.Signers})
	}
	return out
}

func (u simUpstream) close() { u.sim.Close() }

// Simulator is the embedded upstream, or nil without one: for the demo's
// banner and the tools that look inside. It exists only in builds that
// carry the simulator.
func (s *Server) Simulator() *simulator.Simulator {
	if u, ok := s.emb.(simUpstream); ok {
		return u.sim
	}
	return nil
}
