package ratelimit

// The keys of a team's admission. Each carries the team's name as a Redis
// Cluster hash tag ("{name}"), so that all of one team's keys (its rate,
// its keys' rates, its daily quota, its WebSocket connections) hash to one
// slot and one script, transaction or pipeline may touch them together on
// a cluster. Team names hold no braces (config checks them).

// TeamRateKey is the limiter key of a team's rate, and the key of its
// WebSocket connections' count (wsgate.Conns).
func TeamRateKey(team string) string { return "team:{" + team + "}" }

// KeyRateKey is the limiter key of the rate of one of team's keys.
func KeyRateKey(team, keyID string) string { return "key:{" + team + "}:" + keyID }

// DailyKey is the quota key of a team's daily quota.
func DailyKey(team string) string { return "daily:{" + team + "}" }
