package redisconn

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The kinds of failed calls, the values of the label "kind" of
// streamgate_redis_command_errors_total.
const (
	KindTimeout     = "timeout"      // no reply within the deadline
	KindConnection  = "connection"   // refused, reset, closed: no connection to the server
	KindCircuitOpen = "circuit_open" // not sent: the breaker is open
	KindReadOnly    = "readonly"     // a replica answered a write (a failover is under way)
	KindLoading     = "loading"      // the server is loading its data set
	KindClusterDown = "clusterdown"  // the cluster cannot serve the slot now
	KindMasterDown  = "masterdown"   // a replica lost its master
	KindTryAgain    = "tryagain"     // a multi-key call during a slot's migration
	KindMoved       = "moved"        // a redirect the client's redirects did not resolve
	KindAsk         = "ask"          // the same, during a migration
	KindCrossSlot   = "crossslot"    // keys of one call in different slots
	KindReply       = "reply"        // another error reply (a script's, WRONGTYPE, NOSCRIPT)
	KindOther       = "other"
)

// kinds lists every kind, for the metrics to start at zero.
var kinds = []string{KindTimeout, KindConnection, KindCircuitOpen, KindReadOnly, KindLoading,
	KindClusterDown, KindMasterDown, KindTryAgain, KindMoved, KindAsk, KindCrossSlot, KindReply, KindOther}

// kindOf classifies the error of a call.
func kindOf(err error) string {
	if errors.Is(err, ErrCircuitOpen) {
		return KindCircuitOpen
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for prefix, kind := range map[string]string{
			"READONLY": KindReadOnly, "LOADING": KindLoading, "CLUSTERDOWN": KindClusterDown,
			"MASTERDOWN": KindMasterDown, "TRYAGAIN": KindTryAgain, "MOVED": KindMoved,
			"ASK": KindAsk, "CROSSSLOT": KindCrossSlot,
		} {
			if strings.HasPrefix(msg, prefix+" ") || msg == prefix {
				return kind
			}
		}
		return KindReply
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return KindTimeout
	case errors.As(err, new(*net.OpError)), errors.Is(err, redis.ErrClosed), isEOF(err):
		return KindConnection
	}
	return KindOther
}

func isEOF(err error) bool {
	s := err.Error()
	return strings.HasSuffix(s, "EOF") || strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe")
}

// unavailable reports whether a reply of kind says the server cannot serve
// now, as during a failover.
func unavailable(kind string) bool {
	switch kind {
	case KindReadOnly, KindLoading, KindClusterDown, KindMasterDown, KindTryAgain, KindMoved, KindAsk:
		return true
	}
	return false
}
