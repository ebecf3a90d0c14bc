package upstreamsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// ControlHandler returns the control API, to be served apart from the
// networks' APIs (faults never apply to it):
//
//	GET  /faults          the injected faults, as JSON
//	PUT  /faults          replace them: {"latency":"150ms","jitter":"50ms","errorRate":0.1,"hang":0,"force429":0,
//	                      "wsStall":false,"wsStallOrigin":"","wsRefuse":0,"forge":""} (absent fields are zero;
//	                      forge: "signature", "outsider", "too_few", "too_many", "duplicate", "unknown_digest",
//	                      "relabel", "duplicate_key", "duplicate_key_last", "trailing" or "oversize")
//	GET  /don             the DON configurations of each network: {"mainnet":[{"configDigest":…,"f":1,"signers":[…]}…],…}
//	POST /faults/ws-drop  close open WebSocket connections now (see DropWS); the optional body
//	                      {"network":"mainnet","origin":"001","abrupt":true} selects them and the
//	                      manner; answers {"dropped":N}
//	POST /faults/outage   a full outage (see Outage): {"for":"8s"} drops every WebSocket
//	                      connection now and answers every API request 503 for that long
//	                      ("0s" ends one); answers {"dropped":N,"for":"8s"}
//	GET  /counters        the request counters (see Counters.MarshalJSON)
//	POST /counters/reset  set the counters to zero and forget the refusals (204)
//	GET  /refusals        the latest requests the rate limit refused, with the call times
//	                      of their key and endpoint accepted before each (see RateRefusal)
//	GET  /streams         the streams of ?network= (mainnet or testnet) with their report
//	                      windows now: [{"feedID":…,"hidden":false,"first":…,"last":…}…]
//
// Errors are {"error":"...","message":"..."}.
func (s *Simulator) ControlHandler() http.Handler {
	return control{s}
}

// control is the simulator's control API (ControlHandler): it works the
// Simulator's exported methods, and serves nothing of the upstream API.
type control struct{ s *Simulator }

func (c control) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := c.s
	allow := ""
	switch r.URL.Path {
	case "/faults":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, mustJSON(s.Faults()))
			return
		case http.MethodPut:
			var f Faults
			dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				writeError(w, http.StatusBadRequest, "bad faults: "+err.Error(), false)
				return
			}
			if err := s.SetFaults(f); err != nil {
				writeError(w, http.StatusBadRequest, err.Error(), false)
				return
			}
			writeJSON(w, http.StatusOK, mustJSON(s.Faults()))
			return
		}
		allow = "GET, PUT"
	case "/don":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed", false)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(mustJSON(map[string][]DONConfig{Mainnet: s.DON(Mainnet), Testnet: s.DON(Testnet)}))
		return
	case "/faults/ws-drop":
		if r.Method == http.MethodPost {
			var d WSDrop
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			if err == nil && len(bytes.TrimSpace(body)) > 0 {
				dec := json.NewDecoder(bytes.NewReader(body))
				dec.DisallowUnknownFields()
				err = dec.Decode(&d)
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "bad ws-drop: "+err.Error(), false)
				return
			}
			if d.Network != "" && d.Network != Mainnet && d.Network != Testnet {
				writeError(w, http.StatusBadRequest, "bad ws-drop: unknown network "+strconv.Quote(truncate(d.Network)), false)
				return
			}
			writeJSON(w, http.StatusOK, mustJSON(struct {
				Dropped int `json:"dropped"`
			}{s.DropWS(d)}))
			return
		}
		allow = "POST"
	case "/faults/outage":
		if r.Method == http.MethodPost {
			var o struct {
				For *jsonDuration `json:"for"`
			}
			dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&o); err != nil {
				writeError(w, http.StatusBadRequest, "bad outage: "+err.Error(), false)
				return
			}
			if o.For == nil || time.Duration(*o.For) < 0 || time.Duration(*o.For) > time.Hour {
				writeError(w, http.StatusBadRequest, `bad outage: "for" must be a duration from 0s to 1h, such as "8s"`, false)
				return
			}
			d := time.Duration(*o.For)
			writeJSON(w, http.StatusOK, mustJSON(struct {
				Dropped int          `json:"dropped"`
				For     jsonDuration `json:"for"`
			}{s.Outage(d), jsonDuration(d)}))
			return
		}
		allow = "POST"
	case "/counters":
		if r.Method == http.MethodGet {
			writeJSON(w, http.StatusOK, mustJSON(s.Counters()))
			return
		}
		allow = "GET"
	case "/refusals":
		if r.Method == http.MethodGet {
			refusals := s.RateRefusals()
			if refusals == nil {
				refusals = []RateRefusal{}
			}
			writeJSON(w, http.StatusOK, mustJSON(refusals))
			return
		}
		allow = "GET"
	case "/streams":
		if r.Method == http.MethodGet {
			network := r.URL.Query().Get("network")
			if network != Mainnet && network != Testnet {
				writeError(w, http.StatusBadRequest, "bad streams: network must be mainnet or testnet, not "+strconv.Quote(truncate(network)), false)
				return
			}
			writeJSON(w, http.StatusOK, mustJSON(s.StreamStates(network)))
			return
		}
		allow = "GET"
	case "/counters/reset":
		if r.Method == http.MethodPost {
			s.ResetCounters()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		allow = "POST"
	default:
		writeError(w, http.StatusNotFound, "no such control endpoint: "+truncate(r.URL.Path), false)
		return
	}
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+truncate(r.Method), false)
}
