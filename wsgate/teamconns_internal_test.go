package wsgate

import (
	"testing"
	"time"
)

// Gate.Close waits for the open clients' handlers: with none it returns at
// once; else once the last one is removed, and not while one is open.
func TestTeamConnsWait(t *testing.T) {
	var tc teamConns
	tc.wait() // none open

	a, b := &wsClient{}, &wsClient{}
	tc.add(a)
	tc.add(b)
	done := make(chan struct{})
	go func() { tc.wait(); close(done) }()
	tc.remove(a)
	select {
	case <-done:
		t.Fatal("wait returned while a client was open")
	default:
	}
	tc.remove(b)
	select {
	case <-done:
	case <-time.After(wsEndWait / 2): // far below its bound: not its timer
		t.Fatal("wait did not return when the last client was removed")
	}
}
