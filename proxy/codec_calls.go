package proxy

import "github.com/stormgate/stormgate/proxy/dubbo"

// dubboStatusNames are the status label's values for Dubbo 2, in the order of
// dubboStatusIndex; UNKNOWN stands for a status byte Dubbo does not define. They are the
// first names of callStatusNames (callstatus.go).
var dubboStatusNames = []string{"OK", "SERIALIZATION_ERROR", "CLIENT_TIMEOUT", "SERVER_TIMEOUT", "CHANNEL_INACTIVE",
	"BAD_REQUEST", "BAD_RESPONSE", "SERVICE_NOT_FOUND", "SERVICE_ERROR", "SERVER_ERROR", "CLIENT_ERROR",
	"SERVER_THREADPOOL_EXHAUSTED", "UNKNOWN"}

// dubboStatusIndex maps a Dubbo status byte to its index in dubboStatusNames.
func dubboStatusIndex(status byte) int {
	switch status {
	case dubbo.StatusOK:
		return 0
	case dubbo.StatusSerializationError:
		return 1
	case dubbo.StatusClientTimeout:
		return 2
	case dubbo.StatusServerTimeout:
		return 3
	case dubbo.StatusChannelInactive:
		return 4
	case dubbo.StatusBadRequest:
		return 5
	case dubbo.StatusBadResponse:
		return 6
	case dubbo.StatusServiceNotFound:
		return 7
	case dubbo.StatusServiceError:
		return 8
	case dubbo.StatusServerError:
		return 9
	case dubbo.StatusClientError:
		return 10
	case dubbo.StatusThreadpoolExhausted:
		return 11
	}
	return 12
}

// Call implements CallReader: dubbo.IdentifyRequest.
func (Dubbo) Call(frame []byte) (CallName, bool) {
	var c dubbo.Call
	ok := dubbo.IdentifyRequest(frame, &c)
	return CallName(c), ok
}

// Outcome implements CallReader: the status byte, and the body type for business
// exceptions (dubbo.ResponseException).
func (Dubbo) Outcome(resp []byte) (int, bool) {
	if len(resp) < dubbo.HeaderLen {
		return dubboStatusIndex(0), false
	}
	return dubboStatusIndex(resp[3]), dubbo.ResponseException(resp)
}

// FailureStatus implements CallReader.
func (Dubbo) FailureStatus(why Failure) int { return dubboStatusIndex(dubboFailureStatus(why)) }
