package h2

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
//
// Java Dubbo 3.3's forms (":status 404" with grpc-status 12 "Invoker for gRPC not found", a Triple
// server's UNIMPLEMENTED for a service not exported yet) are not in the table: they are read from its
// sources, not checked against a real Java provider, which this lab cannot run.

// NotRunDubboGoNotFound is the reason of dubbo-go's 404 for a path nothing serves.
const NotRunDubboGoNotFound = "dubbogo_triple_not_found"

// NotRunReasons lists the reasons NotRun returns, for the metric's series.
func NotRunReasons() []string { return []string{NotRunDubboGoNotFound} }

// NotRun reports why a response head proves its call never ran, "" when it does not. It does not allocate.
func NotRun(head []HeaderField) string {
	var status, ctype, nosniff, length bool
	for _, f := range head {
		switch f.Name {
		case HeaderStatus:
			status = f.Value == "404"
		case HeaderContentType:
			ctype = f.Value == "text/plain; charset=utf-8"
		case "x-content-type-options":
			nosniff = f.Value == "nosniff"
		case "content-length":
			length = f.Value == "19"
		case HeaderGRPCStatus:
			return ""
		}
	}
	if status && ctype && nosniff && length {
		return NotRunDubboGoNotFound
	}
	return ""
}
