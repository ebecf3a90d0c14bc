package deploy

// There is no Docker engine in the test environment, so the Dockerfile is
// read as text: its stages, the final image's user, ports, entrypoint and
// command, and how the binaries are built. The build itself is exercised
// where Docker runs (deploy/README.md).

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stage is one FROM section of a Dockerfile.
type stage struct {
	from, name string
	lines      []string // instructions after FROM, continuation lines joined
}

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		stages  []stage
		args    = map[string]string{} // global ARG defaults, for FROM
		pending string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" && pending == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "ARG":
			if len(stages) == 0 {
				for _, a := range strings.Fields(rest) {
					k, v, _ := strings.Cut(a, "=")
					args[k] = v
				}
				continue
			}
		case "FROM":
			fields := strings.Fields(rest)
			fields = slices.DeleteFunc(fields, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := stage{from: os.Expand(fields[0], func(k string) string { return args[k] })}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", line)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// instruction returns the arguments of the last instruction named word in
// the stage, or "".
func (s stage) instruction(word string) string {
	out := ""
	for _, l := range s.lines {
		if w, rest, _ := strings.Cut(l, " "); strings.EqualFold(w, word) {
			out = strings.TrimSpace(rest)
		}
	}
	return out
}

func jsonArray(t *testing.T, what, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Errorf("%s %s: want the exec (JSON array) form: %v", what, s, err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	byName := map[string]stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	final := stages[len(stages)-1]
	if final.name != "streamgate" {
		t.Errorf("the last (default) stage is %q, want streamgate", final.name)
	}

	// The binaries: static, reproducible, from the module's own commands.
	builds := 0
	for _, s := range stages {
		for _, l := range s.lines {
			if !strings.Contains(l, "go build") {
				continue
			}
			builds++
			if !strings.HasPrefix(s.from, "golang:1.26") && byName[s.from].from == "" {
				t.Errorf("stage %s builds on %s, want golang:1.26", s.name, s.from)
			}
			for _, want := range []string{"-trimpath", `-ldflags "-s -w"`} {
				if !strings.Contains(l, want) {
					t.Errorf("stage %s: go build without %s", s.name, want)
				}
			}
			pkg := l[strings.LastIndex(l, " ")+1:]
			if _, err := os.Stat(filepath.Join("..", pkg)); err != nil {
				t.Errorf("stage %s builds %s: %v", s.name, pkg, err)
			}
		}
	}
	if builds == 0 {
		t.Error("no go build")
	}
	if env := byName["build"].instruction("ENV"); !strings.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("stage build: ENV %q, want CGO_ENABLED=0 (a static binary for distroless/static)", env)
	}

	// The runtime images: distroless, non-root, exec-form entrypoints.
	for _, name := range []string{"streamgate", "streams-sim"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no stage %s", name)
			continue
		}
		if s.from != "gcr.io/distroless/static-debian12:nonroot" && s.from != "scratch" {
			t.Errorf("stage %s is FROM %s, want gcr.io/distroless/static-debian12:nonroot", name, s.from)
		}
		if user := s.instruction("USER"); user != "65532:65532" && user != "65532" {
			t.Errorf("stage %s: USER %q, want 65532 (numeric, so that runAsNonRoot can verify it)", name, user)
		}
		if ep := jsonArray(t, "ENTRYPOINT", s.instruction("ENTRYPOINT")); len(ep) != 1 || ep[0] != "/"+name {
			t.Errorf("stage %s: ENTRYPOINT %v, want [\"/%s\"]", name, ep, name)
		}
	}
	if got := strings.Fields(final.instruction("EXPOSE")); !slices.Equal(got, []string{"8080", "8081", "9090"}) {
		t.Errorf("EXPOSE %v, want 8080 8081 9090", got)
	}
	cmd := jsonArray(t, "CMD", final.instruction("CMD"))
	if !slices.Equal(cmd, []string{"-config", "/etc/streamgate/config.yaml"}) {
		t.Errorf("CMD %v, want -config /etc/streamgate/config.yaml", cmd)
	}

	// The manifests and the compose file read the config where CMD says.
	m := loadManifests(t)
	args := container(t, m.deployment(t, gatewayName), gatewayCtr).Args
	if configPathFromArgs(t, args) != cmd[len(cmd)-1] {
		t.Errorf("the Deployment's args %v read another file than the image's CMD %v", args, cmd)
	}
	var cf composeFile
	readYAML(t, "compose/compose.yaml", &cf)
	for name, s := range cf.Services {
		if s.Build == nil {
			continue
		}
		if _, ok := byName[s.Build.Target]; !ok {
			t.Errorf("compose service %s builds target %q, which the Dockerfile lacks", name, s.Build.Target)
		}
	}
}
