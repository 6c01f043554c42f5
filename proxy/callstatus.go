package proxy

import "github.com/stormgate/stormgate/proxy/h2"

// The status label's values (stormgate_method_requests_total, the access log's "status"): one
// vocabulary for every protocol, each status named in its own protocol's words. A Dubbo 2 answer is
// named by its status byte (dubboStatusIndex: the first 13 names), an HTTP/2 answer (Triple, gRPC) by
// its gRPC status (grpcStatusIndex: the 17 canonical codes, and OTHER for any other number but
// dubbo-go's business error, which is OK with an exception: h2calls.go). The two protocols share the
// names they share: OK, and UNKNOWN (Dubbo's for a status byte it does not define, gRPC's code 2;
// both say "failed, kind unknown"). So a service called over both protocols has one OK series, and
// its failures are told apart by name; there is no protocol label on the per-method series (it would
// double them for the few services called both ways: docs/design.md §13).
var callStatusNames = append(dubboStatusNames[:len(dubboStatusNames):len(dubboStatusNames)],
	"CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
	"RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
	"UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED", "OTHER")

// Indexes in callStatusNames (TestCallStatusNames checks them against the names).
const (
	statusOK        = 0
	statusUnknown   = 12 // Dubbo's last name
	grpcFirst       = 13 // CANCELLED, the first name Dubbo does not have
	statusCancelled = grpcFirst
	grpcOther       = grpcFirst + h2.NumGRPCCodes - 2
)

// grpcStatusIndex maps a gRPC status code to its index in callStatusNames.
func grpcStatusIndex(code int) int {
	switch {
	case code == h2.GRPCOK:
		return statusOK
	case code == h2.GRPCUnknown:
		return statusUnknown
	case code == h2.GRPCCancelled:
		return grpcFirst
	case code > h2.GRPCUnknown && code < h2.NumGRPCCodes:
		return grpcFirst + code - h2.GRPCUnknown
	}
	return grpcOther
}
