package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"streamgate/auth"
	"streamgate/internal/apierror"
	"streamgate/ratelimit"
	"streamgate/wsgate"
)

// The middlewares of a network's chain (see network.chain): each a value
// built with what it needs, whose wrap returns the step in front of next.
// What one learns for the next travels in the request's reqState.

// requestCheck is the first step after observe: the route table and the
// target's shape.
type requestCheck struct {
	// passPaths are the paths under /api/v1/ the operator listed for
	// pass-through; every other unknown path is 404.
	passPaths map[string]bool
}

// checkRequest matches the route and refuses, before anything else, a
// target that could mean another path upstream, an unknown path (404,
// unless listed for pass-through), a method the route does not answer
// (405 with Allow) and a declared body (400: the API takes none).
func (c requestCheck) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkTarget(r); err != nil {
			refuseBody(w, r)
			writeError(w, err)
			return
		}
		st := stateOf(r.Context())
		rt := st.route // observe looked it up
		if rt == nil {
			rt = routeByPath[r.URL.Path]
		}
		if rt == nil && c.passPaths[r.URL.Path] {
			rt = passThroughRoute
		}
		if rt == nil {
			refuseBody(w, r)
			writeError(w, errNotFound)
			return
		}
		// The API is read-only: GET everywhere, HEAD where the upstream
		// answers it (origin discovery on the root, listed pass-through
		// paths).
		if r.Method != http.MethodGet && !(r.Method == http.MethodHead && rt.allow != "GET") {
			refuseBody(w, r)
			w.Header().Set("Allow", rt.allow)
			writeError(w, errMethod)
			return
		}
		if hasBody(r) {
			refuseBody(w, r)
			writeError(w, errBody)
			return
		}
		st.route = rt
		next.ServeHTTP(w, r)
	})
}

// refuseBody makes the server close the connection after an answer given
// without reading a declared body, rather than wait for a body that may
// never come: net/http would otherwise read up to 256 KiB of it after the
// handler returns, until the read timeout.
func refuseBody(w http.ResponseWriter, r *http.Request) {
	if hasBody(r) {
		w.Header().Set("Connection", "close")
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// anonymous reports whether a request is served unsigned: an anonymous
// route, allowed by auth.anonymous_catalog, sent without credentials.
func anonymous(st *reqState, pol *policy, r *http.Request) bool {
	return st.route.anonymous && pol.anonymousCatalog && !auth.HasCredentials(r.Header)
}

// authenticator verifies the signature and its timestamp, looks the
// signature up in the replay record (without recording it yet), and checks
// the key's team may use this network.
type authenticator struct {
	network string
	pol     *atomic.Pointer[policy] // its verifier and key store
	metrics *Metrics
	now     func() time.Time // the verifier's clock is the network's
}

func (a authenticator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, pol := stateOf(r.Context()), a.pol.Load()
		if anonymous(st, pol, r) {
			st.startServerSpan(r, false)
			next.ServeHTTP(w, r)
			return
		}
		// The verifier's clock is the network's (Gateway's now).
		res, err := pol.verifier.CheckAt(pol.keys, r, st.clock(a.now))
		if errors.Is(err, auth.ErrBadSignature) && st.route.name == "ws" {
			res, err = pol.verifier.Check(pol.keys, wsgate.AltTarget(r))
		}
		if err == nil || errors.Is(err, auth.ErrSkew) || errors.Is(err, auth.ErrReplay) {
			// Only a verified signature's skew is a sample: anyone can
			// send an arbitrary timestamp with a wrong signature.
			a.metrics.skew(res.Skew)
		}
		if err == nil {
			st.team, st.keyID = res.Principal.Team.Name, res.Principal.KeyID
			switch {
			case !res.Principal.Team.UsesNetwork(a.network):
				err = errNetwork
			case !res.Principal.Cert.Matches(r.TLS):
				err = auth.ErrClientCert
			}
		}
		if err != nil {
			st.authError = auth.Reason(err)
			if err == errNetwork {
				st.authError = "network"
			}
			a.metrics.authFailure(a.network, st.authError)
			writeError(w, err)
			return
		}
		st.principal, st.verified = res.Principal, res
		st.startServerSpan(r, true)
		next.ServeHTTP(w, r)
	})
}

// admission applies the quotas: for a signed request the key's rate, the
// team's rate and the team's daily quota, in that order (a key refused by
// its own, tighter limit takes nothing from its team's rate, so that it
// cannot starve the team's other keys); for an unsigned one the rate of its
// client address. Refusals are 429 with Retry-After; every decision's state
// is reported in the RateLimit headers. With an Admitter and the shared
// replay record in its Redis (auth.RedisReplay), a signed request's
// signature is checked there first and recorded if admitted, in the same
// call: a replay is 401 and a team at its share 503, as the recorder
// answers them, before any rate or quota is taken.
type admission struct {
	network  string
	limiter  ratelimit.Limiter
	quota    ratelimit.Quota
	admitter ratelimit.Admitter // nil: the checks one by one
	pol      *atomic.Pointer[policy]
	metrics  *Metrics
	now      func() time.Time
}

func (a admission) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, pol := stateOf(r.Context()), a.pol.Load()
		var err error
		if st.principal == nil {
			err = a.anonymous(r.Context(), w, r, pol)
		} else {
			err = a.team(r.Context(), w, pol, st.principal)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a admission) team(ctx context.Context, w http.ResponseWriter, pol *policy, p *auth.Principal) error {
	tp := pol.teams[p.Team.Name]
	if tp == nil {
		return nil
	}
	// The decisions of the admitted request are advertised together at
	// the end; a refusal advertises those made until then, as each check
	// would have.
	var made [3]admitted
	nMade := 0
	refuse := func(d ratelimit.Decision, limit string, msg string) error {
		h := w.Header()
		for _, a := range made[:nMade] {
			a.d.SetHeaders(h, a.name)
		}
		d.SetHeaders(h, limit)
		a.metrics.limited(p.Team.Name, limit)
		return &apierror.Error{Status: http.StatusTooManyRequests, Msg: msg, RetryAfter: d.RetryAfter}
	}
	check := func(limit string, lp *limitPolicy) error {
		if lp.limit.Unlimited() {
			return nil
		}
		d, err := a.limiter.Allow(ctx, lp.key, lp.limit)
		if err != nil {
			return err
		}
		if !d.Allowed {
			return refuse(d, limit, "rate limit exceeded for "+limit+": slow down and retry after the time in Retry-After")
		}
		made[nMade] = admitted{name: limit, d: d, policy: lp}
		nMade++
		return nil
	}
	if a.admitter != nil {
		st := stateOf(ctx)
		fu, keys := a.firstUse(pol, st)
		ds, names, policies, ok, err := a.together(ctx, tp, p, fu)
		switch {
		case errors.Is(err, ratelimit.ErrSeen):
			return a.replayRefused(st, auth.ErrReplay)
		case errors.Is(err, ratelimit.ErrGroupFull):
			return a.replayRefused(st, keys.FullError(fu.At))
		case err != nil:
			return err
		}
		if ok {
			st.sharedRecorded = fu != nil // (refused: nothing to record)
			for i, d := range ds {
				switch {
				case d.Allowed:
					made[nMade] = admitted{name: names[i], d: d, policy: policies[i]}
					nMade++
				case names[i] == "daily":
					return refuse(d, "daily", "daily quota exhausted for this team")
				default:
					return refuse(d, names[i], "rate limit exceeded for "+names[i]+": slow down and retry after the time in Retry-After")
				}
			}
			if nMade > 0 {
				stateOf(ctx).rateLimitHeaders(w.Header(), made[:nMade])
			}
			return nil
		}
	}
	if lp, ok := tp.keyRates[p.KeyID]; ok {
		if err := check("key", &lp); err != nil {
			return err
		}
	}
	if err := check("team", &tp.rate); err != nil {
		return err
	}
	if tp.daily > 0 {
		d, err := a.quota.Take(ctx, tp.quota.key, tp.daily, stateOf(ctx).clock(a.now))
		if err != nil {
			return err
		}
		if !d.Allowed {
			return refuse(d, "daily", "daily quota exhausted for this team")
		}
		made[nMade] = admitted{name: "daily", d: d, policy: &tp.quota}
		nMade++
	}
	if nMade > 0 {
		stateOf(ctx).rateLimitHeaders(w.Header(), made[:nMade])
	}
	return nil
}

// firstUse returns the replay record's check of a signed request for
// the Admitter's call, with its keys, when the shared replay record is
// the Admitter's Redis (an auth.RedisReplay); nil when it is not, or
// replay protection is off: the recorder then records it.
func (a admission) firstUse(pol *policy, st *reqState) (*ratelimit.AdmitFirstUse, auth.RedisKeys) {
	u, store, ok := pol.verifier.SharedUse(st.verified)
	if !ok {
		return nil, auth.RedisKeys{}
	}
	rr, ok := store.(*auth.RedisReplay)
	if !ok {
		return nil, auth.RedisKeys{}
	}
	k := rr.Keys(u)
	return &ratelimit.AdmitFirstUse{Key: k.Sig, Counts: k.Counts, At: u.Now, TTL: k.TTL, Grace: u.Grace, Most: u.TeamMax}, k
}

// replayRefused refuses a request whose signature the shared replay
// record refused in the admission's call, as the recorder refuses one.
func (a admission) replayRefused(st *reqState, err error) error {
	st.authError = auth.Reason(err)
	a.metrics.authFailure(a.network, st.authError)
	return err
}

// together makes the team checks (the key's rate, the team's, the daily
// quota) in one call of the Admitter, after the replay record's (fu), if
// any. It returns their decisions in order, up to the first refusal, each
// with its limit's name and policy; ok is false when the Admitter could
// not (ratelimit.ErrAdmitApart): the checks are then made one by one, and
// the recorder records the signature. fu's refusals are the Admitter's
// errors (ratelimit.ErrSeen, ratelimit.ErrGroupFull).
func (a admission) together(ctx context.Context, tp *teamPolicy, p *auth.Principal, fu *ratelimit.AdmitFirstUse) (
	ds []ratelimit.Decision, names [3]string, policies [3]*limitPolicy, ok bool, err error) {
	var rates [2]ratelimit.AdmitRate
	n := 0
	if lp, found := tp.keyRates[p.KeyID]; found && !lp.limit.Unlimited() {
		policies[n], names[n], rates[n] = &lp, "key", ratelimit.AdmitRate{Key: lp.key, Limit: lp.limit}
		n++
	}
	if !tp.rate.limit.Unlimited() {
		policies[n], names[n], rates[n] = &tp.rate, "team", ratelimit.AdmitRate{Key: tp.rate.key, Limit: tp.rate.limit}
		n++
	}
	adm := ratelimit.Admission{Rates: rates[:n], Now: stateOf(ctx).clock(a.now), FirstUse: fu}
	if tp.daily > 0 {
		adm.DailyKey, adm.Daily = tp.quota.key, tp.daily
		policies[n], names[n] = &tp.quota, "daily"
	} else if n == 0 && fu == nil {
		return nil, names, policies, true, nil // nothing to check
	}
	ds, err = a.admitter.Admit(ctx, adm)
	if errors.Is(err, ratelimit.ErrAdmitApart) {
		return nil, names, policies, false, nil
	}
	return ds, names, policies, err == nil, err
}

// admitted is a decision that let a request through.
type admitted struct {
	name   string
	d      ratelimit.Decision
	policy *limitPolicy
}

// The header names of ratelimit.SetHeaders, in canonical form.
var (
	canonRateLimitPolicy = http.CanonicalHeaderKey(ratelimit.HeaderRateLimitPolicy)
	canonRateLimit       = http.CanonicalHeaderKey(ratelimit.HeaderRateLimit)
)

// rateLimitHeaders writes the RateLimit fields of the admitted decisions
// as ratelimit.SetHeaders would, one member each, in order, rendered by
// the same Decision.Members: the policies from those made with the
// policy, the state into the request's own room.
func (st *reqState) rateLimitHeaders(h http.Header, made []admitted) {
	if len(h[canonRateLimitPolicy]) > 0 || len(h[canonRateLimit]) > 0 {
		for _, a := range made { // members already there: add to them
			a.d.SetHeaders(h, a.name)
		}
		return
	}
	var pols, states [3]string
	k := 0
	for _, a := range made {
		pol, state, ok := a.d.Members(a.name, a.policy.limit, a.policy.header, st.room.text.room())
		if !ok { // SetHeaders advertises no unlimited decision
			continue
		}
		pols[k], states[k] = pol, st.room.text.take(state)
		k++
	}
	if k > 0 {
		st.room.setHeader(h, canonRateLimitPolicy, pols[:k]...)
		st.room.setHeader(h, canonRateLimit, states[:k]...)
	}
}

// anonymous applies auth.anonymous_rate to an unsigned request, per
// client address (the connection's: a forwarded-for header is the client's
// word and not trusted).
func (a admission) anonymous(ctx context.Context, w http.ResponseWriter, r *http.Request, pol *policy) error {
	if pol.anonymousRate.Unlimited() {
		return nil
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	d, err := a.limiter.Allow(ctx, "anon:"+ip, pol.anonymousRate)
	if err != nil {
		return err
	}
	d.SetHeaders(w.Header(), "address")
	if !d.Allowed {
		a.metrics.limited("anonymous", "address")
		return &apierror.Error{Status: http.StatusTooManyRequests, Msg: "rate limit exceeded for unsigned catalog requests from this address: slow down, or sign the request", RetryAfter: d.RetryAfter}
	}
	return nil
}

// recorder enters the signature of an admitted request in the replay record
// (and the replicas' shared one, unless admission recorded it there in its
// call): a request refused earlier costs the record nothing. Of identical
// requests admitted at once, those past the replay grace are refused here.
type recorder struct {
	network string
	pol     *atomic.Pointer[policy]
	metrics *Metrics
}

func (rc recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateOf(r.Context())
		if st.principal != nil {
			v := rc.pol.Load().verifier
			var err error
			if st.sharedRecorded {
				err = v.RecordLocally(st.verified)
			} else {
				err = v.Record(r.Context(), st.verified)
			}
			if err != nil {
				st.authError = auth.Reason(err)
				rc.metrics.authFailure(rc.network, st.authError)
				writeError(w, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
