package certs

import (
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// watcher reloads a Source when something changes in the directories of
// its files. It watches directories, not files: an atomic rename replaces
// a file's inode (a watch on the file would follow the old one), and a
// mounted Kubernetes Secret swaps its "..data" symlink, which changes no
// file's own name. So any number of renames keeps it watching.
type watcher struct {
	w    *fsnotify.Watcher
	dirs []string
	done chan struct{}
}

// Watch starts reloading the Source when its files change, until Close.
// Calling it again does nothing.
func (s *Source) Watch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != nil {
		return nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	s.watch = &watcher{w: fw, done: make(chan struct{})}
	if err := s.addDirs(); err != nil {
		_ = fw.Close()
		s.watch = nil
		return err
	}
	go s.run(s.watch)
	return nil
}

// addDirs watches the directories of the current files; it is called with
// s.mu held.
func (s *Source) addDirs() error {
	want := map[string]bool{}
	for _, f := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if f != "" {
			want[filepath.Dir(f)] = true
		}
	}
	for _, d := range s.watch.dirs {
		if !want[d] {
			_ = s.watch.w.Remove(d)
		}
	}
	s.watch.dirs = s.watch.dirs[:0]
	for d := range want {
		if err := s.watch.w.Add(d); err != nil {
			return err
		}
		s.watch.dirs = append(s.watch.dirs, d)
	}
	return nil
}

// retarget follows new file paths; it is called with s.mu held.
func (s *Source) retarget() {
	if s.watch == nil {
		return
	}
	if err := s.addDirs(); err != nil {
		s.log.Warn("TLS certificate watch: cannot watch the new files' directories; SIGHUP still reloads",
			zap.String("listener", s.name), zap.Error(err))
	}
}

func (s *Source) run(wt *watcher) {
	defer close(wt.done)
	for {
		select {
		case ev, ok := <-wt.w.Events:
			if !ok {
				return
			}
			if s.concerns(ev.Name) {
				_, _ = s.Reload()
			}
		case err, ok := <-wt.w.Errors:
			if !ok {
				return
			}
			s.log.Warn("TLS certificate watch", zap.String("listener", s.name), zap.Error(err))
		}
	}
}

// concerns reports whether a change of path may change the Source's
// files: one of them, or a name beginning with ".." (a Kubernetes
// Secret's "..data" and its timestamped directories).
func (s *Source) concerns(path string) bool {
	s.mu.Lock()
	f := s.files
	s.mu.Unlock()
	base := filepath.Base(path)
	if strings.HasPrefix(base, "..") {
		return true
	}
	for _, p := range []string{f.Cert, f.Key, f.ClientCA} {
		if p != "" && filepath.Clean(p) == filepath.Clean(path) {
			return true
		}
	}
	return false
}

// Close stops the watch and a pending retry of a certificate not valid
// yet; the Source goes on serving its set in force.
func (s *Source) Close() error {
	s.mu.Lock()
	wt := s.watch
	s.watch = nil
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	s.mu.Unlock()
	if wt == nil {
		return nil
	}
	err := wt.w.Close()
	<-wt.done
	return err
}
