// Command streamgate is a caching, quota-enforcing gateway in front of the
// Data Streams API, for one organisation's teams.
//
// Usage:
//
//	streamgate [serve] [-config FILE] [-watch]
//	                                    run the gateway (no -config: the embedded demo);
//	                                    SIGHUP, or with -watch a change of FILE, reloads it
//	streamgate check [-config] FILE     validate a configuration, listing every problem
//	streamgate keygen                   print a new key id and secret
//	streamgate get [flags] PATH         make a signed request and pretty-print the answer
//	streamgate usage -admin URL [flags] print the usage ledger per day, network and team
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var ue usageError
		if !errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "streamgate:", err)
		}
		os.Exit(ue.exitCode())
	}
}

// usageError is a failure already reported to the user (bad flags, a
// configuration with problems); code is the exit status.
type usageError struct{ code int }

func (e usageError) Error() string { return "usage" }

func (e usageError) exitCode() int {
	if e.code == 0 {
		return 1
	}
	return e.code
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && isHelp(args[0]) {
		cmd = "help" // streamgate -h: every subcommand, not only serve's flags
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "check":
		return check(args, stdout, stderr)
	case "keygen":
		return keygen(stdout)
	case "get":
		return get(ctx, args, stdout, stderr)
	case "archive":
		return archiveCmd(ctx, args, stdout, stderr)
	case "usage":
		return usageCmd(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "streamgate: unknown command %q\n\n%s", cmd, usage)
	return usageError{code: 2}
}

const usage = `streamgate: a caching gateway in front of the Data Streams API

Usage:
  streamgate serve [-config FILE] [-watch]
                                      run the gateway (serve is the default command:
                                      streamgate -config FILE); without -config, the embedded demo
                                      (simulated upstream, demo keys, loopback only).
                                      SIGHUP reloads teams, keys, limits and lifetimes from
                                      FILE; -watch also reloads when FILE changes.
                                      SIGTERM drains within server.shutdown_timeout.
  streamgate check FILE               validate a configuration and list every problem
                                      (also: streamgate check -config FILE)
  streamgate keygen                   print a new key id and secret for a team
  streamgate get [flags] PATH         send a signed GET and pretty-print the JSON answer
                                      (streamgate get -h for its flags)
  streamgate archive fill|fills|export [flags]
                                      fill a stream's history into the archive, list the
                                      fills, export a span as JSON lines or CSV
                                      (streamgate archive -h for the flags)
  streamgate usage -admin URL [-from DAY] [-to DAY] [-team NAME] [-format table|csv]
                                      print the usage ledger (requests, reports, frames,
                                      upstream calls, bytes per UTC day, network and team)
  streamgate help                     print this text (also: streamgate -h)
`

// isHelp reports whether arg asks for help: -h, -help, --h or --help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help":
		return true
	}
	return false
}
