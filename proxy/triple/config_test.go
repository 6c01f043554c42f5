package triple

import (
	"testing"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// TestConfigWindowBoundIsTheCodecs: proxy's validation bounds http2.initial_window_size with its own copy
// of RFC 9113's largest window (config.go: the core does not import the codec); it must be the codec's,
// so that every window the settings allow is one h2ConnConfig can announce.
func TestConfigWindowBoundIsTheCodecs(t *testing.T) {
	for _, w := range []int{h2.MaxWindowSize, h2.MaxWindowSize + 1} {
		cfg := proxytest.Config("127.0.0.1:1")
		cfg.HTTP2.InitialWindowSize = w
		_, err := proxy.New(cfg, proxy.Options{Codec: dubbo.Codec{}, Protocol: New})
		if ok := err == nil; ok != (w <= h2.MaxWindowSize) {
			t.Errorf("http2.initial_window_size %d: %v", w, err)
		}
	}
}
