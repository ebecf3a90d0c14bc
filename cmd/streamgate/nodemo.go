//go:build nosimulator

package main

import (
	"errors"
	"io"

	"streamgate/config"
	"streamgate/server"
)

// demoSetup refuses: this build (the container image's) leaves out the
// embedded upstream the demo runs on.
func demoSetup() (*config.Config, func(io.Writer, *server.Server), error) {
	return nil, nil, errors.New("this build leaves out the embedded upstream (built with -tags nosimulator), so it has no demo: run it with -config FILE")
}
