package proxy

import (
	"fmt"
	"slices"

	"github.com/stormgate/stormgate/proxy/h2"
)

// statusVocab is the status label's values (stormgate_method_requests_total, the access log's
// "status"): one vocabulary for every protocol, each status named in its own protocol's words. New
// builds it from the codec's names (wire.CallReader.StatusNames: for Dubbo 2, a name per status
// byte and UNKNOWN for a byte Dubbo does not define), so that the codec's indexes are the
// vocabulary's, then gRPC's names for HTTP/2 answers (Triple, gRPC: the 17 canonical codes, and
// OTHER for any other number but dubbo-go's business error, which is OK with an exception:
// h2calls.go). The protocols share the names they share: OK, and UNKNOWN (Dubbo's for a status byte
// it does not define, gRPC's code 2; both say "failed, kind unknown"). So a service called over
// both protocols has one OK series, and its failures are told apart by name; there is no protocol
// label on the per-method series (it would double them for the few services called both ways:
// docs/design.md §13).
type statusVocab struct {
	names []string
	// grpc is a gRPC code's index in names; its last entry, OTHER's, stands for any number
	// that is not a canonical code.
	grpc [h2.NumGRPCCodes + 1]uint8
}

// grpcOther is a name for gRPC codes that are not canonical.
const grpcOther = "OTHER"

// newStatusVocab builds the vocabulary from the codec's names, then gRPC's. It refuses names a
// codec repeats and a vocabulary the per-method counts cannot hold (maxStatuses).
func newStatusVocab(codec []string) (statusVocab, error) {
	v := statusVocab{names: slices.Clone(codec)}
	for i, n := range v.names {
		if slices.Index(v.names, n) != i {
			return statusVocab{}, fmt.Errorf("proxy: the codec names status %q twice", n)
		}
	}
	index := func(name string) uint8 {
		i := slices.Index(v.names, name)
		if i < 0 {
			i = len(v.names)
			v.names = append(v.names, name)
		}
		return uint8(min(i, 255))
	}
	for code := range h2.NumGRPCCodes {
		v.grpc[code] = index(h2.GRPCCodeName(code))
	}
	v.grpc[h2.NumGRPCCodes] = index(grpcOther)
	if len(v.names) > maxStatuses {
		return statusVocab{}, fmt.Errorf("proxy: %d status names, the per-method counts hold %d", len(v.names), maxStatuses)
	}
	return v, nil
}

// ofGRPC is a gRPC status code's index in names.
func (v *statusVocab) ofGRPC(code int) int {
	if code < 0 || code >= h2.NumGRPCCodes {
		return int(v.grpc[h2.NumGRPCCodes])
	}
	return int(v.grpc[code])
}

// name is the status at index i; out of range (never, for an index this vocabulary gave): the last.
func (v *statusVocab) name(i int) string { return v.names[min(max(i, 0), len(v.names)-1)] }
