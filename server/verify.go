// This file holds the report verification of each network as a
// configuration states it: built by New (build.verification) and put in
// force again by Reload.

package server

import (
	"fmt"

	"go.uber.org/zap"

	"streamgate/config"
	"streamgate/don"
)

// gateState is the verification of one network as a configuration states
// it.
type gateState struct {
	mode string
	v    *don.Verifier
}

// gateStates builds the verification of every network of cfg: its mode
// and the DON configurations to trust; an embedded upstream with none
// configured trusts the simulator's DON.
func (a *assembly) gateStates(cfg *config.Config) (map[string]gateState, error) {
	out := map[string]gateState{}
	for _, name := range cfg.NetworkNames() {
		n := cfg.Networks[name]
		mode := n.VerifyMode()
		if mode == config.VerifyOff {
			out[name] = gateState{mode: don.ModeOff}
			continue
		}
		vf := n.Verify
		if !vf.Configured() && n.Upstream.Embedded() && a.emb != nil {
			vf.DONs = append(vf.DONs, a.emb.dons(name)...)
		}
		v, err := vf.Verifier()
		if err != nil {
			return nil, fmt.Errorf("networks.%s.verify: %w", name, err)
		}
		out[name] = gateState{mode: mode, v: v}
	}
	return out, nil
}

// setGates puts the verification of cfg in force.
func (a *assembly) setGates(cfg *config.Config) error {
	states, err := a.gateStates(cfg)
	if err != nil {
		return err
	}
	for name, st := range states {
		a.gates[name].Set(st.mode, st.v)
		if st.mode != don.ModeOff {
			a.log.Info("reports verified against the DON's signatures", zap.String("network", name),
				zap.String("mode", st.mode), zap.Int("don_configurations", st.v.Len()))
		} else {
			a.log.Info("reports not verified: no DON configuration", zap.String("network", name))
		}
	}
	return nil
}
