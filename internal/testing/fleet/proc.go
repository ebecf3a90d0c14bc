package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Build compiles the streamgate command (pkg, e.g. "streamgate/cmd/streamgate"
// or "." inside it) into out, with the race detector when race is set.
func Build(ctx context.Context, pkg, out string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	b, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fleet: building %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Line is one line of the gateway's JSON log; a line that is not JSON is
// {"raw": line}.
type Line map[string]any

// Str is the line's string field key, or "".
func (l Line) Str(key string) string {
	s, _ := l[key].(string)
	return s
}

// ProcConfig is how to run one gateway process.
type ProcConfig struct {
	Binary string // the streamgate binary
	// Dir is where the configuration file (streamgate.yaml) and Files are
	// written; it must exist and is the process's alone.
	Dir    string
	Config string            // the YAML configuration
	Files  map[string]string // more files written beside it: name → content
	// Networks are the networks whose listener Start waits for.
	Networks []string
	Args     []string // more arguments after -config FILE
	// Log, when not nil, receives each line of the process's stderr as
	// it is read, before any wait sees it.
	Log func(pid int, line string)
	// StartTimeout bounds the wait for the listeners (default 20s).
	StartTimeout time.Duration
}

// Proc is a running streamgate process: its log (stderr, JSON lines) is
// read as it comes, and the listeners' addresses are learnt from it. A
// Proc is safe for concurrent use.
type Proc struct {
	cmd     *exec.Cmd
	cfgPath string

	mu      sync.Mutex
	lines   []Line
	raw     []string
	changed chan struct{} // closed and replaced when a line arrives

	exited  chan struct{} // closed when the process has ended
	exitErr error

	Net   map[string]string // network → base URL (http:// or https://)
	Admin string            // admin base URL
}

// StartProc writes the configuration and runs "streamgate -config FILE
// args...", returning once the admin listener and every network of
// pc.Networks serve. On error the process, if started, is killed.
func StartProc(pc ProcConfig) (*Proc, error) {
	if pc.StartTimeout <= 0 {
		pc.StartTimeout = 20 * time.Second
	}
	p := &Proc{cfgPath: filepath.Join(pc.Dir, "streamgate.yaml"), changed: make(chan struct{}),
		exited: make(chan struct{}), Net: map[string]string{}}
	for name, content := range pc.Files {
		if err := os.WriteFile(filepath.Join(pc.Dir, name), []byte(content), 0o600); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
	}
	if err := p.WriteConfig(pc.Config); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(pc.Binary, append([]string{"-config", p.cfgPath}, pc.Args...)...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("fleet: starting streamgate: %w", err)
	}
	go p.read(stderr, pc.Log)
	deadline := time.Now().Add(pc.StartTimeout)
	l, _, err := p.WaitLogFrom(0, time.Until(deadline), func(l Line) bool { return l.Str("msg") == "admin listening" })
	if err != nil {
		p.Kill()
		return nil, err
	}
	p.Admin = "http://" + l.Str("addr")
	for _, name := range pc.Networks {
		l, _, err := p.WaitLogFrom(0, time.Until(deadline), func(l Line) bool {
			return l.Str("msg") == "serving network" && l.Str("network") == name
		})
		if err != nil {
			p.Kill()
			return nil, err
		}
		scheme := "http://"
		if tls, _ := l["tls"].(bool); tls {
			scheme = "https://"
		}
		p.Net[name] = scheme + l.Str("listen")
	}
	return p, nil
}

// ConfigPath is the configuration file's path.
func (p *Proc) ConfigPath() string { return p.cfgPath }

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// WriteConfig replaces the configuration file atomically, as an
// operator's tooling would (a reader never sees half a file).
func (p *Proc) WriteConfig(cfg string) error {
	tmp := p.cfgPath + ".new"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if err := os.Rename(tmp, p.cfgPath); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

func (p *Proc) read(r io.Reader, sink func(int, string)) {
	pid := p.cmd.Process.Pid
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		raw := sc.Text()
		var l Line
		if json.Unmarshal([]byte(raw), &l) != nil {
			l = Line{"raw": raw}
		}
		if sink != nil {
			sink(pid, raw)
		}
		p.mu.Lock()
		p.raw = append(p.raw, raw)
		p.lines = append(p.lines, l)
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	io.Copy(io.Discard, r)
	p.exitErr = p.cmd.Wait()
	close(p.exited)
}

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Done reports whether the process has ended.
func (p *Proc) Done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Raw returns the log's lines so far, as written.
func (p *Proc) Raw() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.raw...)
}

// Mark is the number of log lines so far: waits from it see only later
// ones.
func (p *Proc) Mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// FindLog returns the first line from index from on that matches and the
// index after it; when none does, a nil line, the number of lines and a
// channel closed at the next line.
func (p *Proc) FindLog(from int, match func(Line) bool) (Line, int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := from; i < len(p.lines); i++ {
		if match(p.lines[i]) {
			return p.lines[i], i + 1, nil
		}
	}
	return nil, len(p.lines), p.changed
}

// WaitLogFrom waits for a log line from index from on that matches; it
// returns the line and the index after it, for the next wait. It fails
// after timeout or when the process ends first.
func (p *Proc) WaitLogFrom(from int, timeout time.Duration, match func(Line) bool) (Line, int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l, next, changed := p.FindLog(from, match)
		if l != nil {
			return l, next, nil
		}
		from = next
		select {
		case <-changed:
		case <-p.exited:
			if l, next, _ := p.FindLog(from, match); l != nil {
				return l, next, nil
			}
			return nil, from, fmt.Errorf("fleet: streamgate exited (%v) before the awaited log line", p.exitErr)
		case <-deadline.C:
			return nil, from, fmt.Errorf("fleet: no awaited log line within %s", timeout)
		}
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Wait waits (at most timeout) for the process to end and returns its
// exit code.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		return 0, fmt.Errorf("fleet: streamgate still running %s after being asked to stop", timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return ee.ExitCode(), nil
	}
	if p.exitErr != nil {
		return 0, fmt.Errorf("fleet: %w", p.exitErr)
	}
	return 0, nil
}

// Stop sends sig and waits (at most timeout) for the process to end.
func (p *Proc) Stop(sig syscall.Signal, timeout time.Duration) error {
	if err := p.Signal(sig); err != nil {
		return err
	}
	if _, err := p.Wait(timeout); err != nil {
		return fmt.Errorf("%w: %s", err, p.Tail(20))
	}
	return nil
}

// Kill kills the process if it runs and waits for its end.
func (p *Proc) Kill() {
	if !p.Done() {
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// Tail is the last n lines of the log, one a line.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.raw[max(0, len(p.raw)-n):], "\n")
}

// Metrics reads the admin listener's /metrics.
func (p *Proc) Metrics() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(p.Admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("fleet: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fleet: metrics: status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fleet: metrics: %w", err)
	}
	return fams, nil
}

// Values returns the value of each sample of family name whose labels
// include labels: a counter's or gauge's value, a histogram's count.
func Values(fams map[string]*dto.MetricFamily, name string, labels map[string]string) []float64 {
	var out []float64
	for _, m := range fams[name].GetMetric() {
		match := true
		for k, want := range labels {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == k && lp.GetValue() == want
			}
			match = match && found
		}
		switch {
		case !match:
		case m.Counter != nil:
			out = append(out, m.GetCounter().GetValue())
		case m.Gauge != nil:
			out = append(out, m.GetGauge().GetValue())
		case m.Histogram != nil:
			out = append(out, float64(m.GetHistogram().GetSampleCount()))
		default:
			out = append(out, 0)
		}
	}
	return out
}

// Sum adds up Values.
func Sum(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, v := range Values(fams, name, labels) {
		sum += v
	}
	return sum
}
