//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package compat

import "os/exec"

// killGroup leaves cmd as it is: its cancellation kills node alone, and
// WaitDelay bounds the wait for any child.
func killGroup(*exec.Cmd) {}

// lockFile does not lock here: concurrent runs may race in npm ci.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
