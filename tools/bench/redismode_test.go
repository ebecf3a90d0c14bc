package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// infoCPUSample is INFO cpu as redis-server 7.0 answers it.
const infoCPUSample = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\nused_cpu_sys_children:0.001\r\n" +
	"used_cpu_user_children:0.002\r\nused_cpu_sys_main_thread:1.2\r\nused_cpu_user_main_thread:0.7\r\n"

func TestInfoCPU(t *testing.T) {
	got, err := infoCPU(infoCPUSample)
	require.NoError(t, err)
	assert.InDelta(t, 2.0, got, 1e-9, "used_cpu_sys + used_cpu_user, not the children's or the main thread's")
	for _, bad := range []string{"", "# CPU\r\nused_cpu_sys:1\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"} {
		_, err := infoCPU(bad)
		assert.Error(t, err, bad)
	}
}

func FuzzInfoCPU(f *testing.F) {
	f.Add(infoCPUSample)
	f.Add("used_cpu_sys:1\nused_cpu_user:2\nused_cpu_user:3\n")
	f.Fuzz(func(t *testing.T, info string) {
		v, err := infoCPU(info)
		if err == nil && strings.Count(info, "used_cpu_") < 2 {
			t.Fatalf("%q: %v without both fields", info, v)
		}
	})
}
