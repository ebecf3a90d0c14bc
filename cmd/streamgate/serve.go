package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"streamgate/config"
	"streamgate/server"
)

// serve runs the gateway until ctx ends (SIGTERM, SIGINT), then drains.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default: the embedded demo configuration)")
	watch := fs.Bool("watch", false, "also reload when the configuration file changes (checked every "+watchInterval.String()+"), as on SIGHUP")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nFlags of serve:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	demo := *path == ""
	if demo && *watch {
		fmt.Fprintln(stderr, "streamgate: -watch needs -config FILE")
		return usageError{code: 2}
	}

	// SIGHUP is caught from the start: one that arrives while the gateway
	// starts waits for the loop below instead of killing the process.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)

	var (
		cfg     *config.Config
		err     error
		fileSum [sha256.Size]byte // of the configuration file last loaded
		banner  func(io.Writer, *server.Server)
	)
	if demo {
		if cfg, banner, err = demoSetup(); err != nil {
			fmt.Fprintf(stderr, "streamgate: %v\n", err)
			return usageError{code: 2}
		}
	} else {
		fileSum, _ = sumFile(*path)
		if cfg, err = config.Load(*path); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return usageError{code: 1}
		}
	}
	log, access, stopAccess := server.NewLoggers(cfg.Log, stderr)
	defer stopAccess()
	defer log.Sync()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// STREAMGATE_STATUS_INTERVAL (a Go duration) samples the status page
	// more often than every 10 s: for tests.
	statusInterval, _ := time.ParseDuration(os.Getenv("STREAMGATE_STATUS_INTERVAL"))
	srv, err := server.New(cfg, server.Options{Logger: log, AccessLog: access, Registry: reg, Version: version, StatusInterval: statusInterval})
	if err != nil {
		return err
	}
	srv.Start()
	if banner != nil {
		banner(stdout, srv)
	}

	// reloadConfig applies the configuration file again; a configuration
	// with problems is refused and the one in force stays.
	reloadConfig := func(trigger string) {
		if sum, err := sumFile(*path); err == nil {
			fileSum = sum
		}
		next, err := config.Load(*path)
		if err != nil {
			log.Error("reload refused: the new configuration has problems; the old one stays in force",
				zap.String("trigger", trigger), zap.Error(err))
			srv.ReloadRefused(err)
			return
		}
		restartOnly, err := srv.Reload(next)
		if err != nil {
			log.Warn("reload incomplete", zap.String("trigger", trigger), zap.Error(err))
			return
		}
		if len(restartOnly) > 0 {
			log.Warn("reload: these settings only change with a restart; the running values stay in force",
				zap.Strings("settings", restartOnly))
		}
		log.Info("configuration reloaded", zap.String("trigger", trigger), zap.Int("teams", len(next.Teams)))
	}
	var watchTick <-chan time.Time
	if *watch {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		watchTick = t.C
		log.Info("watching the configuration file", zap.String("path", *path), zap.Duration("interval", watchInterval))
	}
	watchFailing := false
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-reload:
			if demo {
				log.Info("SIGHUP ignored: the demo has no configuration file")
				continue
			}
			reloadConfig("SIGHUP")
		case <-watchTick:
			sum, err := sumFile(*path)
			if err != nil {
				if !watchFailing {
					log.Warn("config watch: cannot read the configuration file; the one in force stays", zap.Error(err))
				}
				watchFailing = true
				continue
			}
			watchFailing = false
			if sum != fileSum {
				reloadConfig("watch")
			}
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3"; the status page shows it.
var version = "dev"

// watchInterval is how often -watch looks at the configuration file.
const watchInterval = 2 * time.Second

// sumFile returns the SHA-256 of the file's contents.
func sumFile(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}
