package proxy

import (
	"fmt"
	"slices"
)

// statusVocab is the status label's values (stormgate_method_requests_total, the access log's
// "status"): one vocabulary for every protocol, each status named in its own protocol's words. New
// builds it from each protocol's names in turn: the codec's first (wire.CallReader.StatusNames: for
// Dubbo 2, a name per status byte and UNKNOWN for a byte Dubbo does not define), so that the codec's
// indexes are the vocabulary's, then HTTP/2's (h2.StatusNames: gRPC's 17 canonical codes, and OTHER
// for any other number but dubbo-go's business error, which is OK with an exception: proxy/triple/calls.go). The
// protocols share the names they share: OK, and UNKNOWN (Dubbo's for a status byte it does not
// define, gRPC's code 2; both say "failed, kind unknown"). So a service called over both protocols
// has one OK series, and its failures are told apart by name; there is no protocol label on the
// per-method series (it would double them for the few services called both ways: docs/design.md §13).
type statusVocab struct {
	names []string
	// of maps each protocol's own index (its position in the list it gave, after the first's)
	// to the vocabulary's.
	of [][]uint8
}

// newStatusVocab builds the vocabulary from each protocol's names, in order. It refuses a list that
// names a status twice and a vocabulary the per-method counts cannot hold (maxStatuses).
func newStatusVocab(lists ...[]string) (statusVocab, error) {
	var v statusVocab
	for _, list := range lists {
		of := make([]uint8, len(list))
		for i, n := range list {
			if slices.Index(list, n) != i {
				return statusVocab{}, fmt.Errorf("proxy: a protocol names status %q twice", n)
			}
			j := slices.Index(v.names, n)
			if j < 0 {
				j = len(v.names)
				v.names = append(v.names, n)
			}
			of[i] = uint8(min(j, 255))
		}
		v.of = append(v.of, of)
	}
	if len(v.names) > maxStatuses {
		return statusVocab{}, fmt.Errorf("proxy: %d status names, the per-method counts hold %d", len(v.names), maxStatuses)
	}
	return v, nil
}

// The protocols' lists, in the order New gives them.
const (
	statusesCodec = iota // the codec's (Dubbo 2): its indexes are the vocabulary's
	statusesH2           // h2.StatusNames, indexed by h2.StatusIndex
)

// statusList is the position of protocol p's list.
func statusList(p Protocols) int {
	if p == ProtoTriple {
		return statusesH2
	}
	return statusesCodec
}

// index is the vocabulary's index of status i of protocol p's list.
func (v *statusVocab) index(p, i int) int { return int(v.of[p][i]) }

// name is the status at index i; out of range (never, for an index this vocabulary gave): the last.
func (v *statusVocab) name(i int) string { return v.names[min(max(i, 0), len(v.names)-1)] }
