package main

import (
	"os"
	"runtime/pprof"
)

// profiler returns functions that start and stop a CPU profile into path;
// both do nothing when path is empty. Only the first start profiles.
func profiler(path string) (start func() error, stop func()) {
	if path == "" {
		return func() error { return nil }, func() {}
	}
	var f *os.File
	done := false
	start = func() error {
		if done || f != nil {
			return nil
		}
		var err error
		if f, err = os.Create(path); err != nil {
			return err
		}
		return pprof.StartCPUProfile(f)
	}
	stop = func() {
		if f == nil || done {
			return
		}
		pprof.StopCPUProfile()
		f.Close()
		done = true
	}
	return start, stop
}
