// This file holds the listeners' TLS: certificate sources built, watched,
// reloaded and closed, the handshake failures counted, and check's expiry
// warnings.

package server

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"go.uber.org/zap"

	"streamgate/certs"
	"streamgate/config"
)

// certExpiryWarning is how close to its expiry a certificate makes
// `check` warn.
const certExpiryWarning = 14 * 24 * time.Hour

// CheckTLS returns a warning per listener whose certificate, as loaded
// with cfg, expires within 14 days of now. The files' problems themselves
// (a certificate expired or not valid yet among them) are validation
// problems (config.Load): a gateway does not start with them.
func CheckTLS(cfg *config.Config, now time.Time) []string {
	var out []string
	warn := func(path string, t *config.TLS) {
		if t == nil || t.Loaded() == nil {
			return
		}
		if set := t.Loaded(); set.ExpiresWithin(now, certExpiryWarning) {
			left := set.NotAfter.Sub(now).Round(time.Hour)
			out = append(out, fmt.Sprintf("%s: the certificate in %s expires on %s, in %s: renew it", path, t.CertFile, set.NotAfter.UTC().Format(time.RFC3339), left))
		}
	}
	warn("server.admin_tls", cfg.Server.AdminTLS)
	for _, name := range cfg.NetworkNames() {
		warn("networks."+name+".tls", cfg.Networks[name].TLS)
	}
	return out
}

// tlsListener gives a served listener its TLS when block asks for it:
// the certs.Source that reloads the files, watched from now on. name
// labels the listener in logs and metrics.
func (a *assembly) tlsListener(sv *served, name string, block func(*config.Config) *config.TLS, cfg *config.Config) error {
	t := block(cfg)
	if t == nil {
		return nil
	}
	src, err := certs.New(t.Files(), certs.Options{Name: name, Logger: a.log, Metrics: a.tlsMetrics()})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := src.Watch(); err != nil {
		// SIGHUP still reloads; the watch is a convenience.
		a.log.Warn("TLS certificate watch unavailable; SIGHUP reloads the files", zap.String("listener", name), zap.Error(err))
	}
	sv.tls, sv.tlsBlock = src, block
	sv.srv.TLSConfig = src.TLSConfig()
	return nil
}

// errorLog returns the http.Server.ErrorLog of a listener: the process
// log, sampled (errorLog), with the failed handshakes of a TLS listener
// counted by reason.
func (a *assembly) errorLog(listener string, tls bool) *log.Logger {
	var failed func(string)
	if tls {
		m := a.tlsMetrics()
		m.Listener(listener)
		failed = func(reason string) { m.HandshakeFailed(listener, reason) }
	}
	el := newErrorLog(a.log.Named("http").With(zap.String("listener", listener)), failed, errorLogInterval)
	a.errorLogs = append(a.errorLogs, el)
	return el.Logger()
}

func (a *assembly) tlsMetrics() *certs.Metrics {
	if a.certMetrics == nil {
		a.certMetrics = certs.NewMetrics(a.reg)
	}
	return a.certMetrics
}

// networkTLS returns the TLS block of a listener's networks (they share
// one: config validation).
func networkTLS(networks []string) func(*config.Config) *config.TLS {
	return func(cfg *config.Config) *config.TLS {
		if n := cfg.Networks[networks[0]]; n != nil {
			return n.TLS
		}
		return nil
	}
}

func adminTLS(cfg *config.Config) *config.TLS { return cfg.Server.AdminTLS }

func listenerName(networks []string) string { return strings.Join(networks, "+") }

// serve serves a listener, over TLS when it has a Source.
func (sv *served) serve() error {
	if sv.tls != nil {
		return sv.srv.ServeTLS(sv.ln, "", "") // the certificates come from sv.srv.TLSConfig
	}
	return sv.srv.Serve(sv.ln)
}

// reloadTLS reads every TLS listener's files again, with the paths and
// client policy of next (SIGHUP, or a configuration reload): new
// handshakes use them, open connections keep theirs. A set that does not
// load is refused (logged and counted by the Source) and the one in force
// stays; the error says which listeners refused. A listener whose block
// next removes keeps serving TLS until a restart (config.RestartOnly
// names it).
func (a *assembly) reloadTLS(next *config.Config) error {
	var errs []error
	for _, sv := range a.allServed() {
		if sv.tls == nil {
			continue
		}
		t := sv.tlsBlock(next)
		if t == nil {
			continue
		}
		if _, err := sv.tls.SetFiles(t.Files()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *assembly) allServed() []*served {
	out := append([]*served(nil), a.networks...)
	if a.admin != nil {
		out = append(out, a.admin)
	}
	return out
}

// closeTLS stops the certificate watches.
func (a *assembly) closeTLS() {
	for _, sv := range a.allServed() {
		if sv.tls != nil {
			_ = sv.tls.Close()
		}
	}
}
