package wsupgrade

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequested(t *testing.T) {
	for _, c := range []struct {
		conn, up []string
		want     bool
	}{
		{[]string{"Upgrade"}, []string{"websocket"}, true},
		{[]string{"keep-alive, Upgrade"}, []string{"WebSocket"}, true},
		{[]string{"keep-alive", "upgrade"}, []string{"h2c, websocket"}, true},
		{[]string{"keep-alive"}, []string{"websocket"}, false},
		{[]string{"Upgrade"}, []string{"h2c"}, false},
		{nil, []string{"websocket"}, false},
		{[]string{"upgraded"}, []string{"websocket"}, false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://x/api/v1/ws", nil)
		for _, v := range c.conn {
			r.Header.Add("Connection", v)
		}
		for _, v := range c.up {
			r.Header.Add("Upgrade", v)
		}
		assert.Equal(t, c.want, Requested(r), "%v %v", c.conn, c.up)
	}
}
