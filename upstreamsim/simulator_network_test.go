package upstreamsim

import "testing"

func TestNetworkFor(t *testing.T) {
	for name, want := range map[string]string{"mainnet": Mainnet, "testnet": Testnet, "arbitrum-testnet": Testnet, "prod": Mainnet} {
		if got := NetworkFor(name); got != want {
			t.Errorf("NetworkFor(%q) = %q, want %q", name, got, want)
		}
	}
}
