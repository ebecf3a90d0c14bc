// This file holds Reload: a new configuration applied to a running
// gateway, and what a reload that tightens verification drops.

package server

import (
	"time"

	"go.uber.org/zap"

	"streamgate/config"
	"streamgate/status"
)

// Reload applies the teams, keys, limits and lifetimes of next. A next
// that the gateway refuses changes nothing. It returns the settings next
// changes that only a restart applies; they keep their running values.
func (s *Server) Reload(next *config.Config) (restartOnly []string, err error) {
	states, err := s.gateStates(next)
	if err != nil {
		s.ReloadRefused(err)
		return nil, err
	}
	if err := s.gw.Reload(next); err != nil {
		s.ReloadRefused(err)
		return nil, err
	}
	var stricter []string
	for name, st := range states {
		if g := s.gates[name]; g != nil && g.Set(st.mode, st.v) {
			stricter = append(stricter, name)
		}
	}
	s.recheckAdmitted(stricter)
	// A listener's files that do not load are refused by its Source
	// (logged, counted); the rest of next applies.
	_ = s.reloadTLS(next)
	running := s.cfg.Load()
	restartOnly = config.RestartOnly(running, next)
	s.cfg.Store(next)
	now := time.Now()
	s.loadedAt.Store(&now)
	s.reloaded.Store(&status.Reload{At: now, OK: true})
	return restartOnly, nil
}

// recheckAdmitted drops what was admitted under verification rules a
// reload made stricter on networks (mode enforce where it was not, a DON
// configuration removed or changed): the memory cache is emptied (its
// entries are not tagged by network; each is fetched again when asked,
// and whatever is read from the shared tier is verified as it enters, by
// the rules now in force), and the hub of each network drops the frames
// of its history and its newest reports that no longer pass.
func (s *Server) recheckAdmitted(networks []string) {
	if len(networks) == 0 {
		return
	}
	s.store.Clear()
	for _, name := range networks {
		frames := 0
		for _, p := range s.cfg.Load().Partitions(name) {
			if h := s.hubs[p.Label(name)]; h != nil {
				frames += h.Recheck(s.gates[name].AdmitsFrame)
			}
		}
		s.log.Info("report verification made stricter: the memory cache was emptied and the stream's held reports checked again",
			zap.String("network", name), zap.Int("stream_frames_dropped", frames))
	}
}

// ReloadRefused records a reload that did not happen (a configuration file
// with problems), for the status page.
func (s *Server) ReloadRefused(err error) {
	s.reloaded.Store(&status.Reload{At: time.Now(), OK: false, Error: err.Error()})
}
