package proxy

import (
	"bufio"
	"net/http"
	"path"
	"strings"
	"testing"

	"streamgate/feedid"
)

func TestCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/api/v1/reports/latest": true, "/api/v1/ws": true, "/api/v1/a-b_c": true,
		"": false, "api/v1": false, "/api/v1/": false, "//api/v1": false, "/api//v1": false,
		"/api/v1/.": false, "/api/v1/./x": false, "/api/v1/../x": false, "/..": false,
		"/api/v1/%2e%2e/x": false, "/api/v1/%2E/x": false, "/api/v1/a%2fb": false, "/api/v1/a%2Fb": false,
		"/api/v1/a%5cb": false, "/api/v1/a\\b": false, "/api/v1/a%": false, "/api/v1/a%2": false,
		"/api/v1/%41": true, // an encoded letter means that letter: harmless
	} {
		if got := CleanPath(p); got != want {
			t.Errorf("CleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// FuzzTarget fuzzes a request target as the server reads it: the path
// checks, and for /api/v1/ws the stream list. Whatever is accepted routes
// to a path that cleaning does not change and that holds no encoded
// separator, and yields well-formed, distinct, lower-case stream IDs.
func FuzzTarget(f *testing.F) {
	f.Add("/api/v1/ws?feedIDs=" + feedV3 + "%2C" + feedV3)
	f.Add("/api/v1/ws?feedIDs=" + feedV3 + "," + strings.ToUpper(feedV3[2:]))
	f.Add("/api/v1/../../admin/secrets")
	f.Add("/api/v1/%2e%2e/%2fadmin")
	f.Add("/api/v1//ws?feedIDs=,")
	f.Add("/api/v1/ws?feedIDs=0x01&feedIDs=" + feedV3)
	f.Fuzz(func(t *testing.T, target string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			return
		}
		if checkTarget(r) != nil {
			return
		}
		p := r.URL.Path
		if path.Clean(p) != p {
			t.Fatalf("accepted %q: cleaning gives %q", target, path.Clean(p))
		}
		raw := r.URL.EscapedPath()
		for _, enc := range []string{"%2e", "%2f", "%5c"} {
			if strings.Contains(strings.ToLower(raw), enc) {
				t.Fatalf("accepted %q with %s in its path", target, enc)
			}
		}
		if strings.Contains(p, "\\") {
			t.Fatalf("accepted %q with a backslash", target)
		}
		if p != "/api/v1/ws" {
			return
		}
		var q query
		scanQuery(r.URL.RawQuery, &q)
		ids, err := q.feedIDs()
		if err != nil {
			return
		}
		seen := map[feedid.ID]bool{}
		for _, id := range ids {
			if !feedid.Valid(id) || string(id) != strings.ToLower(string(id)) || seen[id] {
				t.Fatalf("accepted stream %q of %q", id, target)
			}
			seen[id] = true
		}
		if len(ids) == 0 || len(ids) > maxBulkStreams {
			t.Fatalf("accepted %d streams", len(ids))
		}
	})
}
