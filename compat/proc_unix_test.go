//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package compat

import (
	"os"
	"os/exec"
	"syscall"
)

// killGroup makes cmd the leader of a new process group and has its
// cancellation kill the whole group: node --test runs each test file in a
// child process, which must not outlive a timeout.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// lockFile holds an exclusive lock on path until unlock is called, so that
// concurrent test runs do not install node_modules at the same time.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
