//go:build !nosimulator

package server

import (
	"fmt"
	"net/http"

	"streamgate/config"
	"streamgate/upstreamsim"
)

// EmbeddedUpstream reports whether this build carries the embedded
// upstream, the simulator that networks with upstream.url "embedded" (and
// so the demo) run on. It does by default; a build with the tag
// nosimulator (the container image's) leaves the simulator out of the
// binary, and New refuses a configuration that asks for it.
const EmbeddedUpstream = true

// simUpstream is the embedded upstream of this build: one simulator
// serving every embedded network.
type simUpstream struct{ sim *upstreamsim.Simulator }

func newEmbedded() (embedded, error) {
	sim, err := upstreamsim.New(upstreamsim.Default())
	if err != nil {
		return nil, fmt.Errorf("starting the embedded upstream: %w", err)
	}
	return simUpstream{sim}, nil
}

func (u simUpstream) handler(network string) http.Handler {
	return u.sim.Handler(upstreamsim.NetworkFor(network))
}

func (u simUpstream) credentials() (key, secret string) {
	return upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret
}

func (u simUpstream) dons(network string) []config.DON {
	var out []config.DON
	for _, c := range u.sim.DON(upstreamsim.NetworkFor(network)) {
		out = append(out, config.DON{ConfigDigest: c.ConfigDigest, F: c.F, Signers: c.Signers})
	}
	return out
}

func (u simUpstream) close() { u.sim.Close() }

// Simulator is the embedded upstream, or nil without one: for the demo's
// banner and the tools that look inside. It exists only in builds that
// carry the simulator.
func (a *assembly) Simulator() *upstreamsim.Simulator {
	if u, ok := a.emb.(simUpstream); ok {
		return u.sim
	}
	return nil
}
