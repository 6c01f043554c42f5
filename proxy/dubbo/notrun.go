package dubbo

import "bytes"

// NotRun names a provider answer that proves its request was never executed: the
// provider refused it before any business code ran (the service was not exported
// yet or any more, or its thread pool was full). The zero value, Ran, means the
// answer proves nothing of the kind; it is what every ordinary answer, business
// exception included, classifies as.
type NotRun uint8

// The answers recognised, each exactly: the status, the serialization, and the first
// bytes of the body, which are the message or exception text the provider's own code
// writes. Anything else, however similar, is Ran.
const (
	Ran NotRun = iota
	// NotRunNoExporter: dubbo-go v3.x (protocol/dubbo/dubbo_protocol.go doHandleRequest)
	// has no exporter (or no invoker) for the service key yet, as between opening its
	// port and exporting the service. Status 20, hessian2, body type 0x90 (exception,
	// no attachments: the invoker never ran, so the request's attachments are not
	// echoed), a java.lang.Throwable written by dubbo-go-hessian2 v1.12 whose
	// detailMessage starts "don't have this exporter, key: " or "don't have the
	// invoker, key: ". A business error with the same text travels as 0x93 (with the
	// echoed attachments) and is not this.
	NotRunNoExporter
	// NotRunNotExported: Java Dubbo 2.6-3.3 (DubboProtocol.getInvoker, answered by
	// HeaderExchangeHandler.handleRequest) has no exporter for the service key.
	// Status 70, hessian2 string starting
	// "org.apache.dubbo.remoting.RemotingException: Not found exported service: "
	// (2.7+) or "com.alibaba.dubbo.remoting.RemotingException: ..." (2.6).
	NotRunNotExported
	// NotRunDecodeNotFound: Java Dubbo 2.7-3.3 could not decode the request because
	// the service is not in its repository yet (DecodeableRpcInvocation). Status 40,
	// hessian2 string starting "Fail to decode request due to:
	// java.lang.IllegalArgumentException: Service not found:".
	NotRunDecodeNotFound
	// NotRunThreadpool: Java Dubbo 2.6-3.3 could not hand the request to its thread
	// pool (WrappedChannelHandler.sendFeedback, ExecutionChannelHandler). Status 100,
	// hessian2 string "Server side(<ip>,<port>) thread pool is exhausted, detail msg:...".
	NotRunThreadpool

	notRunCount
)

var notRunNames = [notRunCount]string{"", "dubbogo_no_exporter", "java_not_exported", "java_decode_not_found", "threadpool_exhausted"}

// String returns the reason's metric label; "" for Ran.
func (r NotRun) String() string {
	if r < notRunCount {
		return notRunNames[r]
	}
	return "unknown"
}

// NotRunReasons lists every reason NotExecuted can return, Ran excluded.
func NotRunReasons() []NotRun {
	return []NotRun{NotRunNoExporter, NotRunNotExported, NotRunDecodeNotFound, NotRunThreadpool}
}

// Texts the providers write; see the constants above for where each comes from.
var (
	// dubbogoThrowable is what dubbo-go-hessian2 v1.12 writes for a Go error after the
	// response type: the class definition of java.lang.Throwable, an instance of it
	// (0x60, class 0) and its serialVersionUID (0xe0, long 0); detailMessage follows.
	dubbogoThrowable = []byte("C\x13java.lang.Throwable\x95\x10serialVersionUID\x0ddetailMessage" +
		"\x14suppressedExceptions\x0astackTrace\x05cause\x60\xe0")
	dubbogoNoExporter = []byte("don't have this exporter, key: ")
	dubbogoNoInvoker  = []byte("don't have the invoker, key: ")
	javaNotExported   = []byte("org.apache.dubbo.remoting.RemotingException: Not found exported service: ")
	javaNotExported26 = []byte("com.alibaba.dubbo.remoting.RemotingException: Not found exported service: ")
	javaDecodeNotFnd  = []byte("Fail to decode request due to: java.lang.IllegalArgumentException: Service not found:")
	javaPoolPrefix    = []byte("Server side(")
	javaPoolMiddle    = []byte(") thread pool is exhausted, detail msg:")
)

// javaPoolAddrMax bounds the "<ip>,<port>" part of the thread-pool message searched
// for its end: an IPv6 address, a comma and a port fit.
const javaPoolAddrMax = 64

// NotExecuted classifies a whole response frame (header and body). It reads only the
// header and the first bytes of the body, decodes nothing else, never allocates and
// never panics; any frame it does not recognise exactly (a request, an event, another
// serialization, a truncated or different body) is Ran.
func NotExecuted(frame []byte) NotRun {
	body, ok := hessianResponseBody(frame)
	if !ok {
		return Ran
	}
	switch frame[3] {
	case StatusOK:
		if body[0] != respWithException || !bytes.HasPrefix(body[1:], dubbogoThrowable) {
			return Ran
		}
		msg := stringHead(body[1+len(dubbogoThrowable):])
		if bytes.HasPrefix(msg, dubbogoNoExporter) || bytes.HasPrefix(msg, dubbogoNoInvoker) {
			return NotRunNoExporter
		}
	case StatusServiceError:
		msg := stringHead(body)
		if bytes.HasPrefix(msg, javaNotExported) || bytes.HasPrefix(msg, javaNotExported26) {
			return NotRunNotExported
		}
	case StatusBadRequest:
		if bytes.HasPrefix(stringHead(body), javaDecodeNotFnd) {
			return NotRunDecodeNotFound
		}
	case StatusThreadpoolExhausted:
		msg := stringHead(body)
		if !bytes.HasPrefix(msg, javaPoolPrefix) {
			return Ran
		}
		rest := msg[len(javaPoolPrefix):]
		if len(rest) > javaPoolAddrMax+len(javaPoolMiddle) {
			rest = rest[:javaPoolAddrMax+len(javaPoolMiddle)]
		}
		if bytes.Contains(rest, javaPoolMiddle) {
			return NotRunThreadpool
		}
	}
	return Ran
}

// hessianResponseBody returns the non-empty body of a whole frame that is a hessian2
// response to a request (not an event), and whether it is one.
func hessianResponseBody(frame []byte) ([]byte, bool) {
	if len(frame) <= HeaderLen || frame[0] != Magic0 || frame[1] != Magic1 {
		return nil, false
	}
	flags := frame[2]
	if flags&(FlagRequest|FlagEvent) != 0 || flags&SerialMask != SerialHessian2 {
		return nil, false
	}
	return frame[HeaderLen:], true
}

// stringHead returns the data bytes of the first chunk of the hessian2 string at the
// start of b, cut at the end of b; nil when b does not start with a string. The chunk
// length counts UTF-16 units, so the result may hold more bytes than the chunk's
// first units when the text is not ASCII; callers only compare ASCII prefixes, which
// is exact either way.
func stringHead(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	var units, pos int
	switch tag := b[0]; {
	case tag <= hessianDirectMax:
		units, pos = int(tag), 1
	case tag >= hessianShort && tag <= hessianShort+3:
		if len(b) < 2 {
			return nil
		}
		units, pos = int(tag-hessianShort)<<8|int(b[1]), 2
	case tag == hessianFinal || tag == hessianChunk:
		if len(b) < 3 {
			return nil
		}
		units, pos = int(b[1])<<8|int(b[2]), 3
	default:
		return nil
	}
	end := pos + units
	if end > len(b) {
		end = len(b)
	}
	return b[pos:end]
}
