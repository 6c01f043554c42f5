package wire

// CallName is what a request calls, as a codec reads it from the request: byte slices
// of the request (valid while it is), each at most 255 bytes of printable UTF-8. A Dubbo
// request carries them in its body (dubbo.IdentifyRequest); a Triple request carries the
// service and method in its :path ("/<service>/<method>") and the group and version in
// its tri-service-group and tri-service-version headers (h2.CallOf).
type CallName struct {
	Service, Version, Group, Method []byte
}

// CallReader is the part of a Codec that per-method metrics and the access log use.
//
// Statuses are a codec's own: StatusNames lists them, and Outcome and FailureStatus
// return indexes into that list. The proxy puts every protocol's names into the status
// label's one vocabulary, a name two protocols share (OK, UNKNOWN) once.
type CallReader interface {
	// Call identifies the call a whole request frame makes; false when it cannot (the
	// request is then counted as unknown). It must not allocate (a result by value: a
	// pointer through this interface would escape).
	Call(frame []byte) (CallName, bool)
	// Outcome classifies a whole response frame: its status, an index into StatusNames,
	// and whether it carries an exception thrown by the called method.
	Outcome(resp []byte) (status int, exception bool)
	// FailureStatus is the status (an index into StatusNames) of Stormgate's own reply
	// for a Failure.
	FailureStatus(why Failure) int
	// StatusNames are the status label's values for this protocol, each a name in the
	// protocol's own words, distinct, and the same on every call. They include "OK", the
	// status of an answer the called method returned (with or without an exception).
	StatusNames() []string
}
