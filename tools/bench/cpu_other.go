//go:build !unix

package main

import "time"

// processCPU is unknown here: CPU per request is not reported.
func processCPU() time.Duration { return 0 }
