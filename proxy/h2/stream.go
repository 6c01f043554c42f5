package h2

import "strings"

// StreamState is a stream's state (RFC 9113 §5.1). Stormgate disables push, so the reserved states never
// occur.
type StreamState uint8

// Stream states.
const (
	StateIdle StreamState = iota
	StateOpen
	StateHalfClosedLocal  // this side sent END_STREAM; the peer may still send
	StateHalfClosedRemote // the peer sent END_STREAM; this side may still send
	StateClosed
)

var stateNames = [...]string{"idle", "open", "half-closed (local)", "half-closed (remote)", "closed"}

func (s StreamState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// stream is one stream's state in a Conn.
type stream struct {
	id           uint32
	state        StreamState
	send         sendWindow
	recv         recvWindow
	headersIn    uint8 // HEADERS blocks received: 1 request/response head, 2 with trailers
	headersOut   uint8 // HEADERS blocks sent
	blockedSince int64 // when the owner last wanted to send and had no window; 0: not blocked
}

// remoteOpen reports whether the peer may still send DATA or HEADERS on the stream.
func (s *stream) remoteOpen() bool { return s.state == StateOpen || s.state == StateHalfClosedLocal }

// localOpen reports whether this side may still send on the stream.
func (s *stream) localOpen() bool { return s.state == StateOpen || s.state == StateHalfClosedRemote }

// closeRemote records the peer's END_STREAM.
func (s *stream) closeRemote() {
	switch s.state {
	case StateOpen:
		s.state = StateHalfClosedRemote
	case StateHalfClosedLocal:
		s.state = StateClosed
	}
}

// closeLocal records this side's END_STREAM.
func (s *stream) closeLocal() {
	switch s.state {
	case StateOpen:
		s.state = StateHalfClosedLocal
	case StateHalfClosedRemote:
		s.state = StateClosed
	}
}

// Header section kinds, for CheckHeaders.
type sectionKind uint8

const (
	sectionRequest sectionKind = iota
	sectionResponse
	sectionTrailers
)

// CheckRequestHeaders applies RFC 9113 §8.2-§8.3 to a request's header section: lower-case names without
// forbidden characters, values without NUL, CR or LF or surrounding white space, pseudo-header fields first,
// each of :method, :scheme and a non-empty :path exactly once (CONNECT is refused), no other pseudo-header
// than :authority, no connection-specific field, "te" only as "trailers". A malformed request is a stream
// error PROTOCOL_ERROR (§8.1.1): it must never reach a provider.
func CheckRequestHeaders(fields []HeaderField) bool { return checkSection(fields, sectionRequest) }

// CheckResponseHeaders is CheckRequestHeaders for a response head: exactly one :status, three digits.
func CheckResponseHeaders(fields []HeaderField) bool { return checkSection(fields, sectionResponse) }

// CheckTrailers is CheckRequestHeaders for trailers: no pseudo-header fields at all.
func CheckTrailers(fields []HeaderField) bool { return checkSection(fields, sectionTrailers) }

func checkSection(fields []HeaderField, kind sectionKind) bool {
	var method, scheme, path, authority, status int
	regular := false
	for _, f := range fields {
		if !validName(f.Name) || !validValue(f.Value) {
			return false
		}
		if f.Name[0] == ':' {
			if regular || kind == sectionTrailers {
				return false
			}
			switch {
			case kind == sectionRequest && f.Name == ":method":
				method++
				if f.Value == "CONNECT" {
					return false
				}
			case kind == sectionRequest && f.Name == ":scheme":
				scheme++
			case kind == sectionRequest && f.Name == ":path":
				path++
				if f.Value == "" {
					return false
				}
			case kind == sectionRequest && f.Name == ":authority":
				authority++
			case kind == sectionResponse && f.Name == ":status":
				status++
				if len(f.Value) != 3 || !allDigits(f.Value) {
					return false
				}
			default:
				return false
			}
			continue
		}
		regular = true
		switch f.Name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			return false
		case "te":
			if f.Value != "trailers" {
				return false
			}
		}
	}
	switch kind {
	case sectionRequest:
		return method == 1 && scheme == 1 && path == 1 && authority <= 1
	case sectionResponse:
		return status == 1
	}
	return true
}

// validName: non-empty, a token of lower-case characters (§8.2.1), an optional leading ':'.
func validName(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == ':' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue: no NUL, CR or LF, and no leading or trailing space or tab (§8.2.1).
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c == '\r' || c == '\n' {
			return false
		}
	}
	if s != "" {
		if c := s[0]; c == ' ' || c == '\t' {
			return false
		}
		if c := s[len(s)-1]; c == ' ' || c == '\t' {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
