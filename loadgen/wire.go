package loadgen

import (
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// requestFrame builds the two-way hessian2 request service.method(String arg) with id 0; each send
// copies it and patches the id (dubbo.SetID).
func requestFrame(service, method, arg string) []byte {
	return dubbo.AppendRequest(nil, 0, true, service, method, arg)
}

// isException reports a status-20 response whose body type says it carries a Throwable
// (RESPONSE_WITH_EXCEPTION 0x90, or 0x93 with attachments). Only the first byte is read.
func isException(body []byte) bool {
	return len(body) > 0 && (body[0] == 0x90 || body[0] == 0x93)
}

// appendBodyRequest appends a request (two-way or one-way, hessian2 flag) whose body is the checked
// body (key, size) of package peer: raw bytes an echo provider returns unchanged.
func appendBodyRequest(dst []byte, id int64, twoWay bool, key uint64, size int) []byte {
	flags := byte(dubbo.FlagRequest | dubbo.SerialHessian2)
	if twoWay {
		flags |= dubbo.FlagTwoWay
	}
	dst = dubbo.AppendHeader(dst, dubbo.Header{Flags: flags, ID: id, BodyLen: int32(size)})
	return peer.AppendBody(dst, key, size)
}
