package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/internal/apierror"
	"streamgate/internal/ctxsleep"
	"streamgate/ratelimit"
	"streamgate/tracing"
)

// maxUpstreamBody bounds what is read of one upstream answer.
const maxUpstreamBody = 64 << 20

// The values of the credential label of
// streamgate_upstream_credential_refused_total: which credential the
// upstream refused.
const (
	// CredentialNetwork is the network's upstream credential
	// (networks.<name>.upstream.api_key), the organisation's.
	CredentialNetwork = "network"
	// CredentialTeam is a team's own upstream credential
	// (teams[].upstream.<network>.api_key).
	CredentialTeam = "team"
)

// credential signs upstream calls: the organisation's for a network, or a
// team's own. A nil *credential makes an unsigned call (the anonymous catalog).
type credential struct {
	scope  string // "" for the organisation, else the team name; part of cache keys
	key    string
	secret []byte
	// part is the stream partition the credential's teams are served from
	// (config.Config.TeamPartition): "" for the network's, which is every
	// credential's but with sharing: credential.
	part string

	// refused is set when the upstream last answered a call signed with
	// this credential with 401 or 403 on an endpoint where that can only
	// mean the credential itself (the catalog), and cleared by a success.
	refused atomic.Bool
}

// upstream calls one network's upstream API. It is safe for concurrent use.
type upstream struct {
	network string
	base    *url.URL
	client  *http.Client
	timeout time.Duration    // per attempt
	retries int              // extra attempts on 500, 502, 503, 504, timeouts and transport failures
	budget  ratelimit.Budget // per endpoint of this network
	limit   ratelimit.Limit
	log     *zap.Logger
	metrics *Metrics
	// store holds the credentials' catalog views: a stream checked
	// against a view held exists for that credential, so an upstream 401
	// for it means the credential, not the stream, was refused
	// (catalogHeld).
	store *cache.Store

	answered atomic.Bool // the upstream has answered at least once

	propagate bool // send the attempt's traceparent (tracing.propagate_upstream)
}

// upstreamResponse is one upstream answer, read whole.
type upstreamResponse struct {
	status      int
	body        []byte
	contentType string
	retryAfter  time.Duration
	maxAge      time.Duration // from Cache-Control, when given
}

// deadline is the overall bound on a call with its retries.
func (u *upstream) deadline() time.Duration {
	return time.Duration(u.retries+1)*u.timeout + time.Second
}

// get calls GET target (a path with its query) on the upstream, signing each
// attempt afresh with cred, retrying 500, 502, 503, 504, timeouts and
// transport failures with backoff and jitter for as long as ctx allows (a
// GET is safe to repeat; 429 is never retried, it pauses the endpoint).
// An upstream 401 or 403 to the gateway's own credential is an error of
// its own (see refusedCredential). Any other answer is returned with a nil
// error, whatever its status; an error means no answer.
func (u *upstream) get(ctx context.Context, endpoint, target string, cred *credential) (*upstreamResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, u.deadline())
	defer cancel()
	budgetKey := budgetKey(endpoint, cred)
	var (
		last    *upstreamResponse
		lastErr error
	)
	for attempt := 0; attempt <= u.retries; attempt++ {
		if attempt > 0 {
			if !u.backoff(ctx, attempt) {
				break
			}
		}
		sent, err := u.waitBudget(ctx, budgetKey)
		if err != nil {
			u.metrics.upstreamError(u.network, endpoint, "budget")
			if last != nil {
				return last, nil
			}
			return nil, err
		}
		resp, err := u.attempt(ctx, endpoint, target, cred, sent)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if retryableErr(err) {
				continue
			}
			return nil, err
		}
		last, lastErr = resp, nil
		if err := u.refusedCredential(endpoint, cred, resp.status); err != nil {
			return nil, err
		}
		switch resp.status {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			continue
		case http.StatusTooManyRequests:
			u.throttled(budgetKey, resp.retryAfter)
		}
		return resp, nil
	}
	if last != nil {
		return last, nil
	}
	return nil, lastErr
}

// fetch is the upstream call of a fill: it counts the call for the
// request that started the fill (calls, the only part of the request the
// fill keeps: the fill's own context is detached from the request; nil for
// the refresher's calls), calls the upstream, and turns an answer whose
// status is not one of ok into the error that passes it on to every
// waiter, uncached.
func (u *upstream) fetch(ctx context.Context, calls *callCount, endpoint, target string, cred *credential, ok ...int) (*upstreamResponse, error) {
	calls.add()
	resp, err := u.get(ctx, endpoint, target, cred)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ok, resp.status) {
		return nil, passOn(resp)
	}
	return resp, nil
}

// catalogHeld reports whether cred's hidden view (the one report requests
// are checked against) is in the cache, fresh or stale.
func (u *upstream) catalogHeld(cred *credential) bool {
	if u.store == nil {
		return false
	}
	_, state := u.store.Get(cache.CatalogKey(u.network, cred.scope, string(viewHidden)))
	return state != cache.Missing
}

// refusedCredential tells a refusal of the gateway's credential (the
// operator's problem: 502, counted, logged) from a refusal of what the
// client asked (its business: passed on). On the catalog a 401 or 403 can
// only mean the credential; on a report endpoint, whose streams
// were checked against the credential's catalog, it does when that catalog
// is held or the credential was refused on the catalog already.
func (u *upstream) refusedCredential(endpoint string, cred *credential, status int) error {
	if cred == nil {
		return nil
	}
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		if status < 300 {
			cred.refused.Store(false)
		}
		return nil
	}
	switch endpoint {
	case "reports", "latest", "bulk", "page":
		if !cred.refused.Load() && !u.catalogHeld(cred) {
			return nil
		}
	default:
		cred.refused.Store(true)
	}
	kind, where, which := CredentialNetwork, "networks."+u.network+".upstream", "the upstream credential of network "+u.network
	if cred.scope != "" {
		kind, where, which = CredentialTeam, "the upstream: credential of team "+cred.scope+" for network "+u.network,
			"your team's own upstream credential (team "+cred.scope+", network "+u.network+")"
	}
	u.metrics.credentialRefused(u.network, kind, cred.scope)
	if u.log != nil {
		u.log.Error("the upstream refused a credential the gateway signs with: check the api_key and api_secret of "+where,
			zap.String("network", u.network), zap.String("endpoint", endpoint), zap.Int("status", status),
			zap.String("credential", kind), zap.String("team_credential", cred.scope))
	}
	return &apierror.Error{Status: http.StatusBadGateway, RetryAfter: 30 * time.Second,
		Msg: "the upstream refused " + which + " (HTTP " + strconv.Itoa(status) + "); this is not your streamgate key: the gateway's operator must fix that upstream credential"}
}

// waitBudget waits for a token of key's budget, but only as long as leaves
// the attempt its whole timeout before ctx's deadline: a token that came
// later would keep the caller waiting, then spend the budget on an attempt
// with no time to answer. Such a wait is refused at once with a
// *ratelimit.BudgetError, whose Retry-After the caller gets. When less than
// a timeout is left (a late retry), it waits within ctx as it is. The
// attempt reports its write to the Sent returned (see sentTrace): the
// budget paces the times calls leave.
func (u *upstream) waitBudget(ctx context.Context, key string) (sent ratelimit.Sent, err error) {
	ctx, span := tracing.Start(ctx, "budget wait", attribute.String("streamgate.budget", key))
	defer func() { endSpan(span, err) }()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > u.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-u.timeout))
		defer cancel()
	}
	return u.budget.Depart(ctx, key, u.limit)
}

// sentTrace returns ctx with a client trace that reports to sent when the
// request has been written whole to the upstream connection: the time the
// call left, from which the budget spaces the next one. The caller also
// calls sent with the zero time once the call is over, for a request that
// was never written (only the first report counts).
func sentTrace(ctx context.Context, sent ratelimit.Sent) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { sent(time.Now()) },
	})
}

// departure is the budget's part of one attempt: the hold on its key
// that the Sent of Depart keeps from the time the call is let go until
// its request is written, given up when the connection is not ready
// within the key's interval. Connecting is not writing: an upstream that
// accepts and never completes the TLS handshake kept each call's hold for
// the whole attempt timeout, and the key's calls, every team's, went one
// per timeout instead of one per interval. A call that stepped out and
// gets its connection after all rejoins the spacing (Budget.Rejoin)
// before its request is written, so the calls still leave at least the
// interval apart.
type departure struct {
	u   *upstream
	key string

	mu        sync.Mutex
	sent      ratelimit.Sent // the hold in force; nil when none
	connected bool           // the client has the attempt's connection
	stepOut   *time.Timer    // steps the call out after the interval
}

// depart returns ctx with the client trace of an attempt let go with sent
// for key, and the function that ends the departure when the attempt is
// over (a request never written then counts as gone when it was let go).
func (u *upstream) depart(ctx context.Context, key string, sent ratelimit.Sent) (context.Context, func()) {
	if u.budget == nil || u.limit.Unlimited() || u.limit.Rate <= 0 {
		return sentTrace(ctx, sent), func() { sent(time.Time{}) }
	}
	d := &departure{u: u, key: key, sent: sent}
	d.mu.Lock()
	d.stepOut = time.AfterFunc(time.Duration(float64(time.Second)/u.limit.Rate), d.slow)
	d.mu.Unlock()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { d.got() },
		WroteRequest: func(httptrace.WroteRequestInfo) { d.report(time.Now()) },
	})
	return ctx, func() {
		d.mu.Lock()
		d.stepOut.Stop()
		d.mu.Unlock()
		d.report(time.Time{})
	}
}

// slow steps the call out of the key's hold: its connection outlasted the
// interval.
func (d *departure) slow() {
	d.mu.Lock()
	if d.connected {
		d.mu.Unlock()
		return
	}
	sent := d.sent
	d.sent = nil
	d.mu.Unlock()
	if sent != nil {
		sent(time.Time{})
	}
}

// got is the client's GotConn, called before the request is written: a
// call that holds the key goes on holding it; one that stepped out, or
// whose request was written already and is sent again on another
// connection by the client, rejoins the spacing first (the write waits
// for it).
func (d *departure) got() {
	d.mu.Lock()
	d.connected = true
	d.stepOut.Stop()
	holds := d.sent != nil
	d.mu.Unlock()
	if holds {
		return
	}
	sent := d.u.budget.Rejoin(d.key, d.u.limit)
	d.mu.Lock()
	d.sent = sent
	d.mu.Unlock()
}

// report passes the write (or, with the zero time, its absence) to the
// hold in force, if any.
func (d *departure) report(written time.Time) {
	d.mu.Lock()
	sent := d.sent
	d.sent = nil
	d.mu.Unlock()
	if sent != nil {
		sent(written)
	}
}

// fillShare is the part of the bulk endpoint's budget that stream
// backfills (gaps, resumes) may take: the rest is always left to the
// latest refreshes and the teams' own requests.
const fillShare = 0.5

// waitFillShare waits for a token of the fill share: a budget key of its
// own ("backfill", per credential like the others, shared by the replicas
// with the Redis budget) at fillShare of the configured rate, taken before
// the bulk endpoint's own token. So backfills never take more than half of
// the bulk calls, however many clients resume at once.
func (u *upstream) waitFillShare(ctx context.Context, cred *credential) error {
	if u.limit.Unlimited() {
		return nil
	}
	return u.budget.Wait(ctx, budgetKey("backfill", cred), ratelimit.Limit{Rate: u.limit.Rate * fillShare, Burst: 1})
}

// throttled takes an upstream 429 for key into account: the endpoint pauses
// for retryAfter (1 s when the upstream gave none), and, since the
// upstream counts differently or allows less than the budget, its rate in
// force slows until no 429 comes back.
func (u *upstream) throttled(key string, retryAfter time.Duration) {
	if retryAfter <= 0 {
		retryAfter = time.Second
	}
	u.budget.Pause(key, retryAfter)
	u.budget.Throttled(key, u.limit)
}

// parseRetryAfter reads a Retry-After of whole seconds; 0 when absent or
// in another form.
func parseRetryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// budgetKey names the budget a call spends: the endpoint's, or, for a team
// calling with its own credentials, that team's budget of the endpoint.
func budgetKey(endpoint string, cred *credential) string {
	if cred != nil && cred.scope != "" {
		return endpoint + " team=" + cred.scope
	}
	return endpoint
}

// backoff waits before attempt (1, 2, …): exponential from 50 ms, capped at
// 1 s, with full jitter. It reports false when ctx ends first or its deadline
// leaves no room for another attempt.
func (u *upstream) backoff(ctx context.Context, attempt int) bool {
	d := min(50*time.Millisecond<<(attempt-1), time.Second)
	d = time.Duration(rand.Int64N(int64(d)) + 1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d+10*time.Millisecond {
		return false
	}
	return ctxsleep.Sleep(ctx, d)
}

func (u *upstream) attempt(ctx context.Context, endpoint, target string, cred *credential, sent ratelimit.Sent) (out *upstreamResponse, err error) {
	ctx, span := tracing.Start(ctx, "upstream attempt", attribute.String("streamgate.network", u.network),
		attribute.String("streamgate.upstream.endpoint", endpoint), attribute.String("server.address", u.base.Host))
	defer func() {
		if out != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", out.status))
		}
		endSpan(span, err)
	}()
	actx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	tctx, departed := u.depart(actx, budgetKey(endpoint, cred), sent)
	defer departed()
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, u.base.String()+target, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy: building upstream request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "streamgate")
	if cred != nil {
		// The wall clock, not the injectable one: the signature must carry
		// the time the upstream will check it against.
		auth.Sign(req, cred.key, cred.secret, time.Now())
	}
	if u.propagate && span.IsRecording() {
		tracing.Propagator.Inject(actx, propagation.HeaderCarrier(req.Header))
	}
	start := time.Now()
	resp, err := u.client.Do(req)
	if err != nil {
		u.metrics.upstreamError(u.network, endpoint, errReason(err))
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	u.metrics.upstreamCall(u.network, endpoint, resp.StatusCode, time.Since(start))
	u.answered.Store(true)
	if err != nil {
		u.metrics.upstreamError(u.network, endpoint, errReason(err))
		return nil, fmt.Errorf("proxy: reading upstream answer: %w", err)
	}
	out = &upstreamResponse{status: resp.StatusCode, body: body, contentType: resp.Header.Get("Content-Type")}
	out.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
	out.maxAge = parseMaxAge(resp.Header.Get("Cache-Control"))
	if u.log != nil && resp.StatusCode >= 500 {
		if ce := u.log.Check(zap.DebugLevel, "upstream error"); ce != nil {
			ce.Write(zap.String("network", u.network), zap.String("endpoint", endpoint), zap.Int("status", resp.StatusCode))
		}
	}
	return out, nil
}

// parseMaxAge reads max-age from a Cache-Control value; 0 when absent.
func parseMaxAge(cc string) time.Duration {
	for cc != "" {
		var part string
		part, cc, _ = strings.Cut(cc, ",")
		part = strings.TrimSpace(part)
		if len(part) > 8 && part[:8] == "max-age=" {
			if s, err := strconv.Atoi(part[8:]); err == nil && s > 0 {
				return time.Duration(s) * time.Second
			}
		}
	}
	return 0
}

func retryableErr(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true // the attempt's own timeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true // refused, reset: the upstream may be restarting
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// errReason is a bounded label for a transport failure.
func errReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "transport"
	}
}
