package upstreamsim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"streamgate/auth"
)

// benchRequest returns a request signed by the organisation key at t0.
func benchRequest(target string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, OrgKeyID, []byte(OrgKeySecret), t0)
	return r
}

// serveBench runs the handler end to end, through a recorder, on req.
func serveBench(b *testing.B, h http.Handler, req *http.Request, want int) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

func BenchmarkLatest(b *testing.B) {
	s := newTestSim(b, nil)
	eth := findStream(b, s, Mainnet, nameETH)
	serveBench(b, s.Handler(Mainnet), benchRequest("/api/v1/reports/latest?feedID="+eth), http.StatusOK)
}

func BenchmarkLatestParallel(b *testing.B) {
	s := newTestSim(b, nil)
	h := s.Handler(Mainnet)
	req := benchRequest("/api/v1/reports/latest?feedID=" + findStream(b, s, Mainnet, nameETH))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("status %d", w.Code)
				return
			}
		}
	})
}

func BenchmarkReportAt(b *testing.B) {
	s := newTestSim(b, nil)
	eth := findStream(b, s, Mainnet, nameETH)
	b.Run("Handler", func(b *testing.B) {
		serveBench(b, s.Handler(Mainnet), benchRequest("/api/v1/reports?feedID="+eth+"&timestamp="+ts(t0.Unix()-60)), http.StatusOK)
	})
	// The cost of a report that is not memoised: values, ABI, two secp256k1
	// signatures, hex, JSON.
	for _, name := range []string{nameETH, "AAPL/USD-RefPrice-Equity-DS-001", nameBUIDL} {
		st := s.networks[Mainnet].byID[findStream(b, s, Mainnet, name)]
		b.Run("Encode/"+st.schema.String(), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4096)
			t := t0.Unix()
			for b.Loop() {
				t--
				buf = st.appendReportJSON(buf[:0], t, s.networks[Mainnet].don, "", "")
			}
		})
	}
}

func BenchmarkPage100(b *testing.B) {
	s := newTestSim(b, nil)
	eth := findStream(b, s, Mainnet, nameETH)
	serveBench(b, s.Handler(Mainnet),
		benchRequest("/api/v1/reports/page?feedID="+eth+"&startTimestamp="+ts(t0.Unix()-1000)+"&limit=100"), http.StatusOK)
}

func BenchmarkBulk(b *testing.B) {
	s := newTestSim(b, nil)
	var ids []string
	for _, st := range s.Streams(Mainnet)[:20] {
		ids = append(ids, st.FeedID)
	}
	serveBench(b, s.Handler(Mainnet),
		benchRequest("/api/v1/reports/bulk?feedIDs="+strings.Join(ids, "%2C")+"&timestamp="+ts(t0.Unix()-60)), http.StatusPartialContent)
}

func BenchmarkDiscovery(b *testing.B) {
	s := newTestSim(b, nil)
	serveBench(b, s.Handler(Mainnet), httptest.NewRequest(http.MethodGet, "/api/v1/discovery?asset_class=crypto", nil), http.StatusOK)
}
