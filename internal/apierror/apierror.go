// Package apierror writes the API's error answer as the upstream writes it
// and the SDKs read it: a JSON body {"error": "...", "message": "..."},
// Cache-Control: no-store, and Retry-After in whole seconds when the
// client should wait. Every endpoint that answers an error itself (the
// REST side's, the WebSocket endpoint's) writes it here, so that the
// format is one, and makes its refusals of one type, Error.
package apierror

import (
	"net/http"
	"strconv"
	"time"
)

// Error is a refusal that streamgate answers itself, before or instead of
// an upstream call: its status, its Msg (a text safe to show to the
// client) and, when the client should wait, its RetryAfter.
type Error struct {
	Status     int
	Msg        string
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Msg }

// New returns the refusal of status with msg, to be answered as it is.
func New(status int, msg string) *Error { return &Error{Status: status, Msg: msg} }

// Write writes the error answer of status with msg, a text safe to show to
// the client: "error" is the catalog's field and "message" the field the
// TypeScript SDK shows. A retryAfter above zero is sent rounded up to whole
// seconds.
func Write(w http.ResponseWriter, status int, msg string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	b := make([]byte, 0, 2*len(msg)+32)
	b = append(b, `{"error":`...)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"message":`...)
	b = strconv.AppendQuote(b, msg)
	b = append(b, "}\n"...)
	w.Write(b)
}
