package share

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/internal/ctxsleep"
)

// Session is one upstream connection of another replica's chunk, as this
// replica hears of it: valid until its holder says it ended, its
// heartbeats stop naming it, or the holder goes silent.
type Session struct{ up atomic.Bool }

// Valid reports whether the connection is up, as far as this replica
// heard.
func (s *Session) Valid() bool { return s.up.Load() }

func newSession() *Session {
	s := &Session{}
	s.up.Store(true)
	return s
}

// relay is a Sharer's side of the channel <prefix>{<network>}:frames:
// it publishes the messages of the chunks this replica holds (frames,
// heartbeats, ends of sessions, its presence) and hands the frames of the
// other replicas' chunks to the hub (deliver), keeping what it hears of
// each remote chunk (its holder, digest and sessions).
type relay struct {
	c       redis.UniversalClient
	id      string // this replica
	channel string
	tick    time.Duration
	deliver func(frame []byte, src *Session)
	log     *zap.Logger
	mx      shareMetrics

	pub chan []byte // to the publisher

	// The receiver's check of its subscription: the presence message the
	// publisher sent last that the receiver has not heard back (Unix ns,
	// 0 none), and how many times it subscribed again.
	echoSent atomic.Int64
	resubs   atomic.Int64

	mu     sync.Mutex // guards remote
	remote map[string]*remoteChunk

	published, received atomic.Int64 // frames, for Stats
}

// remoteChunk is what a replica has heard from another chunk's holder.
type remoteChunk struct {
	seen   time.Time
	holder string
	digest uint64
	sess   map[string]*Session // by holder and session number
}

// heartbeat queues the heartbeat of held chunk t: its feeds' digest and
// the numbers of its upstream sessions that are up.
func (r *relay) heartbeat(t string, feeds []string, up []uint64) {
	var b bytes.Buffer
	b.WriteString("sg1 H " + t + " " + r.id + " " + strconv.FormatUint(digest(feeds), 16) + " ")
	for i, id := range up {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	b.WriteByte('\n')
	r.queue(b.Bytes())
}

// SessionDown queues, at once, the end of upstream session sess of held
// chunk t: the followers stop answering Latest from its reports without
// waiting for the next heartbeat.
func (r *relay) SessionDown(t string, sess uint64) {
	r.queue([]byte("sg1 D " + t + " " + r.id + " " + strconv.FormatUint(sess, 10) + "\n"))
}

// Publish queues a frame read by upstream session sess of held chunk t.
func (r *relay) Publish(t string, sess uint64, frame []byte) {
	hdr := "sg1 F " + t + " " + r.id + " " + strconv.FormatUint(sess, 10) + "\n"
	m := make([]byte, 0, len(hdr)+len(frame))
	m = append(append(m, hdr...), frame...)
	r.queue(m)
}
func (r *relay) queue(m []byte) {
	select {
	case r.pub <- m:
	default:
		r.mx.publishFailed(1)
	}
}

// publisher sends the queued messages, in order, in pipelines.
func (r *relay) publisher(ctx context.Context) {
	batch := make([][]byte, 0, publishBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-r.pub:
			batch = append(batch[:0], m)
		}
	more:
		for len(batch) < publishBatch {
			select {
			case m := <-r.pub:
				batch = append(batch, m)
			default:
				break more
			}
		}
		pipe := r.c.Pipeline()
		frames, echo := 0, false
		for _, m := range batch {
			pipe.SPublish(ctx, r.channel, m)
			switch m[4] {
			case 'F':
				frames++
			case 'P':
				echo = true
			}
		}
		// The presence message is awaited from before it is sent: the
		// receiver may hear it before Exec returns.
		sent := time.Now().UnixNano()
		awaited := echo && r.echoSent.CompareAndSwap(0, sent)
		if _, err := pipe.Exec(ctx); err != nil {
			if awaited {
				r.echoSent.CompareAndSwap(sent, 0)
			}
			r.mx.publishFailed(len(batch))
			continue
		}
		r.published.Add(int64(frames))
		r.mx.published(frames)
	}
}

// receiver reads the channel and hands the other replicas' frames to the
// hub; it also lets the remote sessions silent for two ticks die.
//
// The client reconnects the subscription when its connection breaks (on a
// failover, to the new master or the slot's new owner). The receiver
// subscribes afresh when that is not enough: Redis ended the subscription
// (SUNSUBSCRIBE, sent when the channel's slot leaves the node), refused it
// (an error reply, such as MOVED), or the subscription delivers nothing
// any more: this replica's own presence message, published every tick,
// not heard back within two ticks.
func (r *relay) receiver(ctx context.Context) {
	ps := r.subscribe(ctx)
	defer func() { ps.Close() }()
	echoWait := max(2*r.tick, minEchoWait)
	logged := false // a resubscription logged since the last message
	for {
		msg, err := ps.ReceiveTimeout(ctx, r.tick)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		r.expire(now)
		again, why := "", ""
		switch m := msg.(type) {
		case *redis.Message:
			logged = false
			r.receive([]byte(m.Payload))
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" || m.Kind == "unsubscribe" {
				again, why = "ended", "Redis ended the subscription"
			}
		}
		var reply redis.Error
		if err != nil && errors.As(err, &reply) {
			again, why = "refused", err.Error()
		}
		if sent := r.echoSent.Load(); again == "" && sent != 0 && now.Sub(time.Unix(0, sent)) > echoWait {
			again, why = "silent", "this replica's presence message not heard back within "+echoWait.String()
		}
		if again != "" {
			ps.Close()
			r.reloadState(ctx)
			r.resubs.Add(1)
			r.mx.resubscribed(again)
			if !logged { // once until a message comes through again
				logged = true
				r.log.Warn("stream sharing: subscribing to the channel again", zap.String("reason", again), zap.String("detail", why))
			}
			if !r.pause(ctx, min(r.tick, 100*time.Millisecond)) {
				return
			}
			ps = r.subscribe(ctx)
			continue
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// The connection broke and the client could not connect
			// again (the node is gone): on a cluster, it asks where the
			// slot is now before the next try.
			r.reloadState(ctx)
			if !r.pause(ctx, min(r.tick, 100*time.Millisecond)) {
				return
			}
		}
	}
}

// reloadState has a cluster client read the cluster's slots again (at
// most every 200 ms, in the background); other clients need not.
func (r *relay) reloadState(ctx context.Context) {
	if rc, ok := r.c.(interface{ ReloadState(context.Context) }); ok {
		rc.ReloadState(ctx)
	}
}

// subscribe opens the subscription to the channel; the presence message
// in flight is not waited for any more.
func (r *relay) subscribe(ctx context.Context) *redis.PubSub {
	r.echoSent.Store(0)
	return r.c.SSubscribe(ctx, r.channel)
}

// pause waits d, or until the hub closes (false).
func (r *relay) pause(ctx context.Context, d time.Duration) bool {
	return ctxsleep.Sleep(ctx, d)
}

// silent is how long a remote chunk may stay silent and still count.
func (r *relay) silent() time.Duration { return 2*r.tick + r.tick/2 }

// expire ends the remote chunks silent for too long.
func (r *relay) expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, rc := range r.remote {
		if now.Sub(rc.seen) > r.silent() {
			for _, ss := range rc.sess {
				ss.up.Store(false)
			}
			delete(r.remote, t)
		}
	}
}

// receive handles one message of the channel.
func (r *relay) receive(m []byte) {
	line, frame, ok := bytes.Cut(m, []byte{'\n'})
	if !ok || !bytes.HasPrefix(line, []byte("sg1 ")) {
		return
	}
	f := strings.Fields(string(line[4:]))
	if len(f) == 2 && f[0] == "P" {
		if f[1] == r.id {
			r.echoSent.Store(0) // heard: the subscription delivers
		}
		return
	}
	if len(f) < 4 || f[2] == r.id {
		return
	}
	kind, t, holder := f[0], f[1], f[2]
	now := time.Now()
	r.mu.Lock()
	rc := r.remote[t]
	if rc == nil || rc.holder != holder {
		if rc != nil {
			for _, ss := range rc.sess {
				ss.up.Store(false)
			}
		}
		rc = &remoteChunk{holder: holder, sess: map[string]*Session{}}
		r.remote[t] = rc
	}
	rc.seen = now
	switch kind {
	case "F":
		ss := rc.sess[f[3]]
		if ss == nil {
			ss = newSession()
			rc.sess[f[3]] = ss
		}
		r.mu.Unlock()
		r.received.Add(1)
		r.mx.received()
		r.deliver(frame, ss)
		return
	case "D":
		if ss := rc.sess[f[3]]; ss != nil {
			ss.up.Store(false)
			delete(rc.sess, f[3])
		}
	case "H":
		if d, err := strconv.ParseUint(f[3], 16, 64); err == nil {
			rc.digest = d
		}
		up := map[string]bool{}
		if len(f) > 4 {
			for _, id := range strings.Split(f[4], ",") {
				up[id] = true
			}
		}
		for id, ss := range rc.sess {
			if !up[id] {
				ss.up.Store(false)
				delete(rc.sess, id)
			}
		}
		for id := range up {
			if rc.sess[id] == nil {
				rc.sess[id] = newSession()
			}
		}
	}
	r.mu.Unlock()
}

// remoteLive reports whether chunk t of the layout has a holder heard
// from recently, carrying the feeds the layout gives it.
func (r *relay) remoteLive(t string, d uint64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.remote[t]
	return rc != nil && rc.digest == d && now.Sub(rc.seen) <= r.silent()
}

// takenOver reports whether each chunk of tags has a holder other than
// this replica with a connection up, heard from since.
func (r *relay) takenOver(tags []string, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range tags {
		rc := r.remote[t]
		if rc == nil || !rc.seen.After(since) || len(rc.sess) == 0 {
			return false
		}
	}
	return true
}
