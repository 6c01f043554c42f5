package proxy

import (
	"go/parser"
	"strconv"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestCoreImportsNoDubbo: the core speaks to Dubbo 2 only through wire.Codec (issue 26 item 7,
// docs/design.md §14.6 step 5a); the codec is handed in by the binary (Options.Codec). This reads
// the package's non-test sources and fails on any import of proxy/dubbo. Tests may import it: they
// wire the codec in as cmd/sidecar does.
func TestCoreImportsNoDubbo(t *testing.T) {
	fset, files := testkit.ParseOwn(t, parser.ImportsOnly)
	for _, f := range files {
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasSuffix(p, "/proxy/dubbo") {
				t.Errorf("%s imports %s: use wire.Codec (s.codec) instead", fset.Position(imp.Pos()), p)
			}
		}
	}
}

// TestCoreImportsNoProtocol: HTTP/2 is a protocol the binary passes in (Options.Protocol, package
// proxy/triple; docs/design.md §14.6 step 5b), and the core reaches it only through protocol.go's
// interfaces: no non-test file imports proxy/triple or the codec proxy/h2. (The snapshot's HTTP/2 part,
// which the core carries, is package proxy/h2snap's.)
func TestCoreImportsNoProtocol(t *testing.T) {
	fset, files := testkit.ParseOwn(t, parser.ImportsOnly)
	for _, f := range files {
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasSuffix(p, "/proxy/triple") || strings.HasSuffix(p, "/proxy/h2") {
				t.Errorf("%s imports %s: the core holds HTTP/2 as Protocol, Downstream and Upstream (protocol.go)", fset.Position(imp.Pos()), p)
			}
		}
	}
}

// TestNewRequiresCodec: a Server without a codec is refused with what to pass, not a nil
// dereference at the first consumer.
func TestNewRequiresCodec(t *testing.T) {
	_, err := New(testConfig("127.0.0.1:1"), Options{})
	if err == nil || !strings.Contains(err.Error(), "dubbo.Codec{}") {
		t.Errorf("New without a codec: %v", err)
	}
}

// TestNewRequiresProtocolForTriple: a Config whose upstream.protocol names Triple, without the protocol
// passed in, is refused with what to pass; a Dubbo-only one needs none, and its consumers are all Dubbo's.
func TestNewRequiresProtocolForTriple(t *testing.T) {
	for _, p := range []Protocols{ProtoTriple, ProtoDubbo | ProtoTriple} {
		cfg := testConfig("127.0.0.1:1")
		cfg.Protocols = p
		_, err := New(cfg, Options{Codec: dubbo.Codec{}})
		if err == nil || !strings.Contains(err.Error(), "triple.New") {
			t.Errorf("New for upstream.protocol %d without Options.Protocol: %v", p, err)
		}
	}
	if _, err := New(testConfig("127.0.0.1:1"), Options{Codec: dubbo.Codec{}}); err != nil {
		t.Errorf("New for Dubbo alone without Options.Protocol: %v", err)
	}
}
