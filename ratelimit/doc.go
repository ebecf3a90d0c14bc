// Package ratelimit gives streamgate its three kinds of limits: per-team
// request rates (Limiter, a token bucket per key), per-team daily quotas
// (Quota, a counter per key and UTC day) and the upstream budget (Budget, a
// GCRA bucket per network and upstream endpoint that every team shares and
// that callers wait on instead of being refused; its tokens come 1/rate +
// a margin apart, and its rate in force halves after an upstream 429 and
// recovers step by step).
//
// Each kind has a memory implementation, exact for one replica, and a Redis
// implementation shared by every replica that talks to the same Redis. When
// Redis fails, a Redis implementation either decides with a local memory
// implementation of its own (FailOpen: each replica enforces the full limit
// alone, so the fleet may admit up to replicas × limit) or refuses with
// ErrUnavailable (FailClosed). It tries Redis again after RetryInterval and
// goes back to it as soon as Redis answers.
//
// Package redisconn makes the Redis client of the process (a single node,
// Sentinel or Cluster): every call has a short deadline and goes through a
// circuit breaker, so that a Redis that hangs rather than refuses costs a
// few timeouts, not one per request.
//
// Decisions can be advertised to clients with Decision.SetHeaders, which
// writes the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10, and Retry-After.
package ratelimit
