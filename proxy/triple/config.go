package triple

import (
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// h2ConnConfig is the h2.Config of an HTTP/2 connection Stormgate opens in role r, with what http2.*
// says it announces. Toward a provider the stream limit is left at the codec's: a provider may
// open no stream (ENABLE_PUSH is 0), so it limits nothing.
func h2ConnConfig(c *proxy.Config, r h2.Role) h2.Config {
	hc := h2.Config{
		Role:              r,
		InitialWindowSize: uint32(c.HTTP2.InitialWindowSize),
		MaxHeaderListSize: uint32(c.HTTP2.MaxHeaderListSize),
	}
	if r == h2.RoleServer {
		hc.MaxConcurrentStreams = uint32(min(c.HTTP2.MaxConcurrentStreams, c.MaxInflightPerConn))
	}
	return hc
}
