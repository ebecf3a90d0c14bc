package deploy

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The simulator is the demo's upstream and every test's, not production's.
// TestProductionBuild reads the build tags of the image's gateway binary
// from the Dockerfile and lists the packages that binary links with them:
// no package of the simulator. The same listing without the tags (the
// binary of go run ./cmd/streamgate, the demo) has it, so the check can
// tell the two apart.
func TestProductionBuild(t *testing.T) {
	var build string
	for _, s := range readDockerfile(t) {
		for _, l := range s.lines {
			if strings.Contains(l, "go build") && strings.Contains(l, "-o /out/streamgate ") {
				build = l
			}
		}
	}
	if build == "" {
		t.Fatal("the Dockerfile has no go build of /out/streamgate")
	}
	fields := strings.Fields(build)
	i := slices.Index(fields, "-tags")
	if i < 0 || i+1 >= len(fields) {
		t.Fatalf("the gateway's go build has no -tags: %s", build)
	}
	tags := fields[i+1]
	if !slices.Contains(strings.Split(tags, ","), "nosimulator") {
		t.Errorf("the gateway is built with -tags %s, want nosimulator among them", tags)
	}
	const simulator = "streamgate/upstreamsim"
	if deps := listDeps(t, "-tags", tags); slices.Contains(deps, simulator) {
		t.Errorf("the image's gateway (-tags %s) links %s", tags, simulator)
	} else if !slices.Contains(deps, "streamgate/server") {
		t.Errorf("the listing of the image's gateway lacks streamgate/server: %v", deps)
	}
	if deps := listDeps(t); !slices.Contains(deps, simulator) {
		t.Errorf("the demo's gateway (no tags) does not link %s: the check above proves nothing", simulator)
	}
}

// listDeps returns the packages cmd/streamgate links, built with args.
func listDeps(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"list", "-deps"}, args...), "streamgate/cmd/streamgate")...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}
