package status

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

//go:embed page.html.tmpl
var pageText string

//go:embed page.css
var pageCSS string

// CSP is the Content-Security-Policy of the page: nothing but its own
// inline style (by hash); no script, no image, no frame, no form, no
// connection anywhere.
var CSP = func() string {
	sum := sha256.Sum256([]byte(pageCSS))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"css":   func() template.CSS { return template.CSS(pageCSS) },
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f %%", f*100) },
	"bytes": humanBytes,
	"ms": func(p *float64) string {
		if p == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f ms", *p)
	},
	"when":  when,
	"ago":   func(t, now time.Time) string { return ago(t, now) },
	"spark": spark,
	"last": func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return xs[len(xs)-1]
	},
	"num":     func(f float64) string { return fmt.Sprintf("%.2f", f) },
	"answers": answers,
	"refresh": func(s *Snapshot) int { return max(int(math.Round(s.SampleInterval)), 1) },
	"ptr":     func(t time.Time) *time.Time { return &t },
	"chart":   chart,
	"unix":    func(s uint32) string { return time.Unix(int64(s), 0).UTC().Format("2006-01-02 15:04:05 UTC") },
}).Parse(pageText))

// Chart is one small time series on the page.
type Chart struct {
	Title, Now, Top string
	Line            Sparkline
}

// chart draws xs; unit "%" shows ratios (scale fixed at 1) as percents.
func chart(title string, xs []float64, fixedMax float64, unit string) Chart {
	c := Chart{Title: title, Line: spark(xs, fixedMax)}
	f := func(x float64) string {
		if unit == "%" {
			return fmt.Sprintf("%.0f %%", x*100)
		}
		return fmt.Sprintf("%.3g%s", x, unit)
	}
	var now float64
	if len(xs) > 0 {
		now = xs[len(xs)-1]
	}
	top := 0.0
	for _, x := range xs {
		top = math.Max(top, x)
	}
	c.Now, c.Top = f(now), f(math.Max(top, fixedMax))
	return c
}

// Handler serves the page at / and the JSON at /status.json from the
// sampler's latest snapshot. token, when not empty, is required as
// "Authorization: Bearer TOKEN" (compared in constant time); without it
// the answer is 401.
func Handler(s *Sampler, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if err := page.Execute(&buf, s.Snapshot()); err != nil {
			http.Error(w, "rendering the status page failed", http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		w.Write(buf.Bytes())
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.Snapshot())
	})
	return RequireToken(token, mux)
}

// RequireToken returns h behind token: when token is not empty, a request
// without "Authorization: Bearer TOKEN" (compared in constant time) is
// answered 401. An empty token returns h itself.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("WWW-Authenticate", `Bearer realm="streamgate admin"`)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized","message":"this page needs the admin token: Authorization: Bearer TOKEN"}`+"\n")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return t.UTC().Format("15:04:05 UTC")
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + now.Sub(t).Round(time.Second).String() + " ago)"
}

func answers(m map[string]int64) string {
	var parts []string
	for _, c := range []string{"1xx", "2xx", "3xx", "4xx", "429", "5xx", "other"} {
		if m[c] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, m[c]))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, " · ")
}

// Sparkline is a small chart drawn as an SVG polyline.
type Sparkline struct {
	Points string // the polyline's points attribute
	Max    string // the top of the scale
	N      int
}

const sparkW, sparkH = 180.0, 36.0

// spark scales xs into the chart's box; fixedMax > 0 fixes the top of the
// scale (ratios use 1).
func spark(xs []float64, fixedMax float64) Sparkline {
	top := fixedMax
	for _, x := range xs {
		top = math.Max(top, x)
	}
	if top <= 0 {
		top = 1
	}
	var b strings.Builder
	n := len(xs)
	for i, x := range xs {
		px := sparkW
		if n > 1 {
			px = float64(i) * sparkW / float64(n-1)
		}
		py := sparkH - 1 - x/top*(sparkH-2)
		fmt.Fprintf(&b, "%.1f,%.1f ", px, py)
	}
	return Sparkline{Points: strings.TrimSpace(b.String()), Max: fmt.Sprintf("%.3g", top), N: n}
}
