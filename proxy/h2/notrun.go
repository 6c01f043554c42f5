package h2

import "strings"

// Answers that prove a call never ran, read from the response head alone (the body is not awaited): the
// HTTP/2 counterpart of proxy/dubbo's NotExecuted. Only exact forms count; a look-alike (another
// content type, a grpc-status, another length) is an answer like any other.
//
//	| reason                    | provider                      | the head                                   | when
//	|---------------------------|-------------------------------|--------------------------------------------|----------------------------
//	| dubbogo_triple_not_found  | dubbo-go v3.3.0 Triple        | :status 404, content-type text/plain;      | the path is not registered
//	|                           | (Go's http.ServeMux NotFound  | charset=utf-8, x-content-type-options      | yet (startup) or any more
//	|                           | through x/net's h2c server)   | nosniff, content-length 19 ("404 page not  |
//	|                           |                               | found\n"), no grpc-status                  |
//	| java_triple_not_found     | Java Dubbo 3.3 (h12 stack:    | trailers-only: :status 404, grpc-status 12,| the service is not exported
//	|                           | GrpcRequestHandlerMapping     | grpc-message exactly "Invoker for gRPC not | yet, or any more (its
//	|                           | .notFound, answered by        | found"                                     | shutdown unexports before
//	|                           | AbstractServerHttpChannel-    |                                            | its GOAWAY)
//	|                           | Observer before any invoker)  |                                            |
//	| java_triple_not_found     | Java Dubbo 3.2 (TripleServer- | trailers-only: :status 200, grpc-status 12,| the same
//	|                           | Stream: UNIMPLEMENTED)        | grpc-message "Service not found:<service>" |
//
// Java's forms are read from its sources (apache/dubbo tags dubbo-3.3.1 and dubbo-3.2.16), not checked
// against a real Java provider, which this lab cannot run; the message is compared as sent and with its
// spaces percent-encoded. Look-alikes: Java's UNIMPLEMENTED thrown by a method that ran (:status 500),
// a 404 with another message, grpc-go's UNIMPLEMENTED for an unknown service (:status 200, "unknown
// service ..."), grpc-status 12 alone.

// The reasons NotRun returns.
const (
	NotRunDubboGoNotFound = "dubbogo_triple_not_found" // dubbo-go's 404 for a path nothing serves
	NotRunJavaNotFound    = "java_triple_not_found"    // Java Dubbo's UNIMPLEMENTED from routing
)

// NotRunReasons lists the reasons NotRun returns, for the metric's series.
func NotRunReasons() []string { return []string{NotRunDubboGoNotFound, NotRunJavaNotFound} }

// Java Dubbo's messages for a service it does not export, as sent and with spaces percent-encoded.
const (
	javaInvokerNotFound        = "Invoker for gRPC not found"
	javaInvokerNotFoundEncoded = "Invoker%20for%20gRPC%20not%20found"
	javaServiceNotFound        = "Service not found:"
	javaServiceNotFoundEncoded = "Service%20not%20found:"
)

// NotRun reports why a response head proves its call never ran, "" when it does not. It does not allocate.
func NotRun(head []HeaderField) string {
	var status, msg string
	var plain, nosniff, length, grpcStatus, code12 bool
	for _, f := range head {
		switch f.Name {
		case HeaderStatus:
			status = f.Value
		case HeaderContentType:
			plain = f.Value == "text/plain; charset=utf-8"
		case "x-content-type-options":
			nosniff = f.Value == "nosniff"
		case "content-length":
			length = f.Value == "19"
		case HeaderGRPCStatus:
			grpcStatus, code12 = true, f.Value == "12"
		case HeaderGRPCMessage:
			msg = f.Value
		}
	}
	switch {
	case status == "404" && !grpcStatus && plain && nosniff && length:
		return NotRunDubboGoNotFound
	case status == "404" && code12 && (msg == javaInvokerNotFound || msg == javaInvokerNotFoundEncoded):
		return NotRunJavaNotFound
	case status == "200" && code12 && (strings.HasPrefix(msg, javaServiceNotFound) ||
		strings.HasPrefix(msg, javaServiceNotFoundEncoded)):
		return NotRunJavaNotFound
	}
	return ""
}
