package config

import (
	"fmt"
	"math"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the YAML path of the key at fault, such as
	// teams[1].keys[0].secret; empty for a problem of the text itself.
	Path string
	// Line is the line in the file, when known; else 0.
	Line int
	// Msg says what is wrong. It never contains a secret.
	Msg string
}

// Error returns "path: msg (line N)", or "line N: msg" without a path.
func (p Problem) Error() string {
	switch {
	case p.Path != "" && p.Line > 0:
		return fmt.Sprintf("%s: %s (line %d)", p.Path, p.Msg, p.Line)
	case p.Path != "":
		return p.Path + ": " + p.Msg
	case p.Line > 0:
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	default:
		return p.Msg
	}
}

// Problems is every problem found in a configuration, in the order of the
// file: problems of the whole document first, then by line. Parse, Load and Validate return it as their error; use errors.As to
// get the list.
type Problems []Problem

// Error returns one line per problem.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Limits that Validate enforces.
const (
	// MinKeySecretLen is the shortest client key secret accepted, in bytes.
	MinKeySecretLen = 16
)

// Validate checks the whole configuration and returns every problem found
// as Problems, or nil. It does not change the Config and reads no file:
// Load and Parse read the secret files (secret_file, api_secret_file,
// password_file) before they validate, and Validate reports a file that
// could not be read or was empty. A secret file set on a Config built in
// code is not read, and is reported as such. Parse and Load call Validate;
// call it again after changing a Config in code.
//
// Each section of the file is checked on its own (validateServer,
// validateNetworks, ... one file each), and their problems are listed
// together.
func (c *Config) Validate() error {
	ck := check{src: c.src, at: pathsOf(c)}
	var problems Problems
	for _, section := range sections {
		problems = append(problems, section(ck, c)...)
	}
	if len(problems) == 0 {
		return nil
	}
	problems.sortByLine()
	return problems
}

// sections are the checks of the sections of a configuration, in the order
// their problems are listed within a line.
var sections = []func(check, *Config) Problems{
	validateServer,
	validateLog,
	validateNetworks,
	validateAuth,
	validateCache,
	validateRealtime,
	validateTracing,
	validateRateLimit,
	validateArchive,
	validateTeams,
	validateSharing,
}

// sortByLine orders problems by line, those without a line first, keeping
// the order of problems on the same line.
func (ps Problems) sortByLine() {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
}

// check is what every section's check reads besides the Config: where the
// file put each key, and the path of each setting.
type check struct {
	src *source
	at  paths
}

// validator collects the problems of one section (each section's check
// makes its own) and holds the checks of the kinds of setting that more
// than one section has: a listen address, a duration, a rate, a secret or
// its file, credentials, a TLS block (validate_networks.go), a Redis target
// (validate_redis.go). What only one section checks is on that section's
// own type, which embeds it: networksCheck, teamsCheck.
type validator struct {
	check
	problems Problems
}

func (ck check) validator() *validator { return &validator{check: ck} }

// add reports a problem of the setting that field points to.
func (v *validator) add(field any, format string, args ...any) {
	v.addAt(v.at.of(field), format, args...)
}

// addAt reports a problem at a path that is not a setting's: a list item
// read from another file, a map entry without a value.
func (v *validator) addAt(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Line: v.src.line(path), Msg: fmt.Sprintf(format, args...)})
}

// adopt indexes the settings of a struct that is not reachable by YAML keys
// (a DON read from dons_file, a stand-in for a missing value) at path.
func (v *validator) adopt(ptr any, path string) {
	v.at.walk(reflect.ValueOf(ptr).Elem(), path)
}

func (v *validator) positive(d *time.Duration) {
	if *d <= 0 {
		v.add(d, "must be positive")
	}
}

// listen checks a host:port listen address. Port 0 (any free port) is
// allowed.
func (v *validator) listen(field *string) {
	addr := *field
	if addr == "" {
		v.add(field, "required (host:port, such as 127.0.0.1:8080 or :8080)")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(field, "%q is not host:port", addr)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.add(field, "%q: port must be a number from 0 to 65535", addr)
	}
}

// anyPort reports whether addr asks for a free port, which is never shared.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// secretFile reports the outcome of reading a secret file, recorded in st
// by readSecretFiles; secret is what was read. It reports whether the file
// gave a non-empty secret.
func (v *validator) secretFile(field *string, st fileState, secret Secret) bool {
	switch {
	case !st.read:
		v.add(field, "not read: Load and Parse read secret files, Validate does not")
	case st.err != nil:
		v.add(field, "%v", st.err)
	case secret == "":
		v.add(field, "the file is empty")
	default:
		return true
	}
	return false
}

// rate checks a token bucket. A budget must be positive; a team's or a
// key's rate may be 0 (no limit).
func (v *validator) rate(r *Rate, budget bool) {
	switch {
	case math.IsNaN(r.RPS) || math.IsInf(r.RPS, 0):
		v.add(&r.RPS, "must be a finite number")
	case budget && r.RPS <= 0:
		v.add(&r.RPS, "must be positive")
	case r.RPS < 0:
		v.add(&r.RPS, "must not be negative")
	case r.RPS > 0 && r.Burst < 1:
		v.add(&r.Burst, "must be at least 1 when rps is set")
	}
	if r.Burst < 0 {
		v.add(&r.Burst, "must not be negative")
	}
}

// loopbackAddr reports whether the host of host:port addr is a loopback
// address or localhost.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func without(list []string, s string) []string {
	out := make([]string, 0, len(list))
	for _, e := range list {
		if e != s {
			out = append(out, e)
		}
	}
	return out
}
