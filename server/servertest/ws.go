package servertest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"streamgate/auth"
)

// Frame is the part of a stream frame the tests read; a report answer's
// body has the same shape.
type Frame struct {
	Report struct {
		FeedID                string `json:"feedID"`
		ValidFromTimestamp    int64  `json:"validFromTimestamp"`
		ObservationsTimestamp int64  `json:"observationsTimestamp"`
		FullReport            string `json:"fullReport"`
	} `json:"report"`
}

// DialWS opens a WebSocket to the gateway at base (http://…) for target,
// signed by c at the wall clock over signedTarget (the target itself when
// empty).
func (c *Client) DialWS(ctx context.Context, base, target, signedTarget string) (*websocket.Conn, *http.Response, error) {
	if signedTarget == "" {
		signedTarget = target
	}
	req, err := http.NewRequest(http.MethodGet, base+"/", nil)
	if err != nil {
		return nil, nil, err
	}
	path, query, _ := strings.Cut(signedTarget, "?")
	req.URL.Opaque, req.URL.RawQuery = path, query
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
	h := http.Header{}
	for _, name := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
		h.Set(name, req.Header.Get(name))
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+target, &websocket.DialOptions{HTTPHeader: h})
}

// ReadFrames reads n frames from conn, each a binary frame of one report,
// or fails t.
func ReadFrames(t testing.TB, ctx context.Context, conn *websocket.Conn, n int) []Frame {
	t.Helper()
	var out []Frame
	for len(out) < n {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("servertest: reading a frame: %v", err)
		}
		if typ != websocket.MessageBinary {
			t.Fatalf("servertest: reports come in binary frames, got %v", typ)
		}
		var f Frame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("servertest: one report per frame: %s: %v", data, err)
		}
		out = append(out, f)
	}
	return out
}

// MetricValue returns the value of the counter or gauge name with exactly
// labels in reg, 0 if absent.
func MetricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("servertest: gathering the metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}
