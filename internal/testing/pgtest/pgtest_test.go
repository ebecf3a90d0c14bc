package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func connect(t *testing.T, s *Server) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.URL())
	require.NoError(t, err)
	cfg.Password = Password
	return pgx.ConnectConfig(context.Background(), cfg)
}

// A server is reachable over loopback with its password, refuses a wrong
// one, and keeps its data across a stop and a restart on the same port.
func TestServerStopRestart(t *testing.T) {
	s := New(t)
	c, err := connect(t, s)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
	require.NoError(t, err)
	c.Close(ctx)

	cfg, err := pgx.ParseConfig(s.URL())
	require.NoError(t, err)
	cfg.Password = "wrong"
	_, err = pgx.ConnectConfig(ctx, cfg)
	require.Error(t, err, "a wrong password is refused")

	s.Stop()
	_, err = connect(t, s)
	require.Error(t, err, "a stopped server accepts nothing")
	s.Restart()
	c, err = connect(t, s)
	require.NoError(t, err)
	defer c.Close(ctx)
	var v int
	require.NoError(t, c.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 7, v)
}
