package triple

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy"
	"golang.org/x/net/http2"
)

// settingsProvider is an h2c provider that records the first SETTINGS frame of each connection
// Stormgate opens to it, answers with its own, and then reads (acknowledging SETTINGS) until the
// connection ends.
func settingsProvider(t *testing.T) (addr string, got <-chan map[http2.SettingID]uint32) {
	t.Helper()
	ch := make(chan map[http2.SettingID]uint32, 16)
	ln := serveLoopback(t, func(nc net.Conn) {
		go func() {
			defer nc.Close()
			preface := make([]byte, len(http2.ClientPreface))
			if _, err := io.ReadFull(nc, preface); err != nil || string(preface) != http2.ClientPreface {
				return
			}
			fr := http2.NewFramer(nc, bufio.NewReader(nc))
			first := true
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				sf, ok := f.(*http2.SettingsFrame)
				if !ok || sf.IsAck() {
					continue
				}
				if first {
					first = false
					select {
					case ch <- settingsOf(sf): // now: the framer reuses its buffer for the next frame
					default:
					}
					if err := fr.WriteSettings(); err != nil {
						return
					}
				}
				if err := fr.WriteSettingsAck(); err != nil {
					return
				}
			}
		}()
	})
	return ln.Addr().String(), ch
}

// consumerSettings opens an h2c connection to addr and returns the SETTINGS Stormgate sends first.
func consumerSettings(t *testing.T, addr string) map[http2.SettingID]uint32 {
	t.Helper()
	nc := dialWrite(t, addr, 10*time.Second, http2.ClientPreface)
	defer nc.Close()
	fr := http2.NewFramer(nc, bufio.NewReader(nc))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return settingsOf(firstSettings(t, fr))
}

// firstSettings reads the first frame Stormgate sends on a consumer connection, and wants it to be its
// SETTINGS.
func firstSettings(t *testing.T, fr *http2.Framer) *http2.SettingsFrame {
	t.Helper()
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want Stormgate's SETTINGS", f)
	}
	return sf
}

func settingsOf(sf *http2.SettingsFrame) map[http2.SettingID]uint32 {
	m := map[http2.SettingID]uint32{}
	_ = sf.ForeachSetting(func(s http2.Setting) error { m[s.ID] = s.Val; return nil })
	return m
}

// wantSettings fails unless got announces each of want (a value of 65,535 for the window may also be
// left out: it is the protocol's initial value).
func wantSettings(t *testing.T, who string, got map[http2.SettingID]uint32, want map[http2.SettingID]uint32) {
	t.Helper()
	for id, v := range want {
		g, ok := got[id]
		if !ok && id == http2.SettingInitialWindowSize && v == 65535 {
			continue
		}
		if !ok || g != v {
			t.Errorf("%s: %v = %d (sent: %v), want %d; all: %v", who, id, g, ok, v, got)
		}
	}
}

// TestH2SettingsAnnounced (issue 26 item 6): the http2.* settings are what a consumer and the provider
// read in Stormgate's SETTINGS frame; the stream limit is also capped by
// limits.max_inflight_per_connection; and a live change reaches the next consumer connection.
func TestH2SettingsAnnounced(t *testing.T) {
	provAddr, provSettings := settingsProvider(t)
	srv, addr := newH2Server(t, provAddr, proxy.ProtoTriple, func(c *proxy.Config) {
		c.HTTP2 = proxy.HTTP2Config{MaxConcurrentStreams: 7, InitialWindowSize: 1 << 20, MaxHeaderListSize: 8 << 10}
	})
	wantSettings(t, "consumer", consumerSettings(t, addr), map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: 7,
		http2.SettingInitialWindowSize:    1 << 20,
		http2.SettingMaxHeaderListSize:    8 << 10,
		http2.SettingHeaderTableSize:      0,
	})
	select {
	case got := <-provSettings:
		wantSettings(t, "provider", got, map[http2.SettingID]uint32{
			http2.SettingInitialWindowSize: 1 << 20,
			http2.SettingMaxHeaderListSize: 8 << 10,
			http2.SettingHeaderTableSize:   0,
			http2.SettingEnablePush:        0,
		})
	case <-time.After(10 * time.Second):
		t.Fatal("the provider saw no SETTINGS")
	}

	cfg := *envOf(srv).Config()
	cfg.HTTP2 = proxy.HTTP2Config{MaxConcurrentStreams: 50, InitialWindowSize: 32 << 10, MaxHeaderListSize: 16 << 10}
	cfg.MaxInflightPerConn = 20
	if err := srv.Update(cfg); err != nil {
		t.Fatal(err)
	}
	wantSettings(t, "consumer after a change", consumerSettings(t, addr), map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: 20, // limits.max_inflight_per_connection is lower
		http2.SettingInitialWindowSize:    32 << 10,
		http2.SettingMaxHeaderListSize:    16 << 10,
	})
}
