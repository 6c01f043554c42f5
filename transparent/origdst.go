package transparent

import "errors"

// ErrNoOriginalDst means the kernel has no nat record for the connection: it was not redirected (or the
// conntrack module is not loaded in this network namespace).
var ErrNoOriginalDst = errors.New("original destination: connection has no conntrack entry (not redirected)")
