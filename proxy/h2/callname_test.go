package h2

import (
	"strings"
	"testing"
)

func TestCallOf(t *testing.T) {
	head := func(path string, extra ...HeaderField) []HeaderField {
		return append([]HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path}, {Name: "content-type", Value: "application/grpc"}}, extra...)
	}
	for _, tc := range []struct {
		fields []HeaderField
		want   Call
		ok     bool
	}{
		{head("/org.example.Greeter/SayHello"), Call{Service: "org.example.Greeter", Method: "SayHello"}, true},
		{head("/org.example.Greeter/SayHello", HeaderField{Name: HeaderServiceGroup, Value: "blue"},
			HeaderField{Name: HeaderServiceVersion, Value: "1.2.0"}),
			Call{Service: "org.example.Greeter", Method: "SayHello", Group: "blue", Version: "1.2.0"}, true},
		{head("/s/m", HeaderField{Name: HeaderServiceVersion, Value: "0.0.0"}), Call{Service: "s", Method: "m"}, true},
		{head("/grpc.health.v1.Health/Check"), Call{Service: "grpc.health.v1.Health", Method: "Check"}, true},
		{head("/s/Grüße"), Call{Service: "s", Method: "Grüße"}, true},
		{head("/nonsense"), Call{}, false},
		{head("/a/b/c"), Call{}, false},
		{head("/s/m\x01"), Call{}, false},
		{head("/s/m\x7f"), Call{}, false},
		{head("/s/m\xc2\x85"), Call{}, false}, // C1 control
		{head("/s/m\xff"), Call{}, false},     // invalid UTF-8
		{head("/s/m\uFFFD"), Call{}, false},
		{head("/s/" + strings.Repeat("m", MaxNameLen+1)), Call{}, false},
		{head("/s/m", HeaderField{Name: HeaderServiceGroup, Value: "bad\x02group"}), Call{}, false},
		{head("/s/m", HeaderField{Name: HeaderServiceVersion, Value: strings.Repeat("1", MaxNameLen+1)}), Call{}, false},
		{[]HeaderField{{Name: ":method", Value: "POST"}}, Call{}, false},
	} {
		got, ok := CallOf(tc.fields)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%v: %+v %v, want %+v %v", tc.fields, got, ok, tc.want, tc.ok)
		}
	}
	f := head("/org.example.Greeter/SayHello", HeaderField{Name: HeaderServiceGroup, Value: "blue"})
	if n := testing.AllocsPerRun(100, func() { _, _ = CallOf(f) }); n != 0 {
		t.Errorf("CallOf: %v allocs/op", n)
	}
}

func TestGRPCStatusMapping(t *testing.T) {
	for _, tc := range []struct {
		v     string
		code  int
		found bool
	}{{"0", 0, true}, {"14", 14, true}, {"99", 99, true}, {"x", -1, true}, {"", -1, true}, {"1234567890", -1, true}} {
		f := []HeaderField{{Name: HeaderGRPCStatus, Value: tc.v}}
		if code, found := GRPCCode(f); code != tc.code || found != tc.found {
			t.Errorf("grpc-status %q: %d %v", tc.v, code, found)
		}
	}
	if _, found := GRPCCode([]HeaderField{{Name: ":status", Value: "200"}}); found {
		t.Error("grpc-status found where there is none")
	}
	if s, ok := HTTPStatus([]HeaderField{{Name: ":status", Value: "404"}}); s != 404 || !ok {
		t.Errorf(":status 404: %d %v", s, ok)
	}
	for s, want := range map[int]int{400: GRPCInternal, 401: GRPCUnauthenticated, 403: GRPCPermissionDenied,
		404: GRPCUnimplemented, 429: GRPCUnavailable, 502: GRPCUnavailable, 503: GRPCUnavailable, 504: GRPCUnavailable,
		500: GRPCUnknown, 418: GRPCUnknown} {
		if got := GRPCFromHTTPStatus(s); got != want {
			t.Errorf("HTTP %d: %s, want %s", s, GRPCCodeName(got), GRPCCodeName(want))
		}
	}
	for code, want := range map[ErrCode]int{ErrCodeNo: GRPCInternal, ErrCodeRefusedStream: GRPCUnavailable,
		ErrCodeCancel: GRPCCancelled, ErrCodeEnhanceYourCalm: GRPCResourceExhausted, ErrCodeFlowControl: GRPCResourceExhausted,
		ErrCodeInadequateSecurity: GRPCPermissionDenied, ErrCodeHTTP11Required: GRPCInternal, 0x99: GRPCUnknown} {
		if got := GRPCFromReset(code); got != want {
			t.Errorf("RST_STREAM %v: %s, want %s", code, GRPCCodeName(got), GRPCCodeName(want))
		}
	}
	if GRPCCodeName(1) != "CANCELLED" || GRPCCodeName(16) != "UNAUTHENTICATED" || GRPCCodeName(17) != "" || GRPCCodeName(-1) != "" {
		t.Error("code names")
	}
}
