package h2

import (
	"math"
	"testing"
	"time"
)

func TestNotRun(t *testing.T) {
	hf := func(kv ...string) []HeaderField {
		var out []HeaderField
		for i := 0; i < len(kv); i += 2 {
			out = append(out, HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	// What x/net's h2c server sends for http.NotFound (dubbo-go v3.3.0's ServeMux), date aside.
	notFound := []string{":status", "404", "content-type", "text/plain; charset=utf-8",
		"x-content-type-options", "nosniff", "content-length", "19"}
	for _, c := range []struct {
		name string
		head []HeaderField
		want string
	}{
		{"dubbo-go's ServeMux 404", hf(notFound...), NotRunDubboGoNotFound},
		{"the same with a date", hf(append(notFound, "date", "Thu, 03 Dec 2026 05:40:00 GMT")...), NotRunDubboGoNotFound},
		{"a gRPC answer", hf(":status", "200", "content-type", "application/grpc"), ""},
		{"a gRPC 404 trailers-only", hf(":status", "404", "content-type", "application/grpc", "grpc-status", "12"), ""},
		{"404 with a grpc-status", hf(append(notFound, "grpc-status", "12")...), ""},
		{"404 of another length", hf(":status", "404", "content-type", "text/plain; charset=utf-8",
			"x-content-type-options", "nosniff", "content-length", "20"), ""},
		{"404 without a length", hf(":status", "404", "content-type", "text/plain; charset=utf-8",
			"x-content-type-options", "nosniff"), ""},
		{"404 html", hf(":status", "404", "content-type", "text/html", "x-content-type-options", "nosniff",
			"content-length", "19"), ""},
		{"404 without nosniff", hf(":status", "404", "content-type", "text/plain; charset=utf-8",
			"content-length", "19"), ""},
		{"503 text/plain", hf(":status", "503", "content-type", "text/plain; charset=utf-8",
			"x-content-type-options", "nosniff", "content-length", "19"), ""},
		{"trailers", hf("grpc-status", "0"), ""},
		// Java Dubbo 3.3 (GrpcRequestHandlerMapping.notFound: trailers-only, raw message) and 3.2.
		{"java 3.3 not found", hf(":status", "404", "content-type", "application/grpc", "grpc-status", "12",
			"grpc-message", "Invoker for gRPC not found"), NotRunJavaNotFound},
		{"java 3.3 not found, encoded", hf(":status", "404", "content-type", "application/grpc", "grpc-status", "12",
			"grpc-message", "Invoker%20for%20gRPC%20not%20found"), NotRunJavaNotFound},
		{"java 3.2 service not found", hf(":status", "200", "content-type", "application/grpc+proto",
			"grpc-status", "12", "grpc-message", "Service not found:org.example.Greeter"), NotRunJavaNotFound},
		{"java 3.2 service not found, encoded", hf(":status", "200", "content-type", "application/grpc+proto",
			"grpc-status", "12", "grpc-message", "Service%20not%20found:org.example.Greeter"), NotRunJavaNotFound},
		{"java: UNIMPLEMENTED thrown by a method that ran", hf(":status", "500", "content-type", "application/grpc",
			"grpc-status", "12", "grpc-message", "UNIMPLEMENTED : Invoker for gRPC not found"), ""},
		{"java: unknown method (500, UNKNOWN)", hf(":status", "500", "content-type", "application/grpc",
			"grpc-status", "2", "grpc-message", "unimplemented method:SayHi"), ""},
		{"java: 404 with another message", hf(":status", "404", "content-type", "application/grpc",
			"grpc-status", "12", "grpc-message", "Invoker for gRPC not found!"), ""},
		{"java: the message with another code", hf(":status", "404", "content-type", "application/grpc",
			"grpc-status", "14", "grpc-message", "Invoker for gRPC not found"), ""},
		{"java: 503 while stopping (apache/dubbo#16398, not merged)", hf(":status", "503", "content-type",
			"application/grpc", "grpc-status", "14", "grpc-message", "Invoker for gRPC not found"), ""},
		{"grpc-go unknown service", hf(":status", "200", "content-type", "application/grpc", "grpc-status", "12",
			"grpc-message", "unknown service org.example.Greeter"), ""},
		{"3.2 message at 404", hf(":status", "404", "content-type", "application/grpc", "grpc-status", "12",
			"grpc-message", "Service not found:org.example.Greeter"), ""},
	} {
		if got := NotRun(c.head); got != c.want {
			t.Errorf("%s: NotRun = %q, want %q", c.name, got, c.want)
		}
	}
	for _, head := range [][]HeaderField{hf(notFound...), hf(":status", "200", "grpc-status", "12", "grpc-message",
		"Service not found:x")} {
		if n := testing.AllocsPerRun(100, func() { _ = NotRun(head) }); n != 0 {
			t.Errorf("NotRun allocates %v times", n)
		}
	}
}

func TestGRPCTimeout(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"2999m", 2999 * time.Millisecond, true},
		{"1S", time.Second, true},
		{"5M", 5 * time.Minute, true},
		{"1H", time.Hour, true},
		{"99999999H", math.MaxInt64, true}, // more than a Duration holds
		{"2562047H", 2562047 * time.Hour, true},
		{"250u", 250 * time.Microsecond, true},
		{"7n", 7, true},
		{"0m", 0, true},
		{"", 0, false},
		{"m", 0, false},
		{"100", 0, false},
		{"100x", 0, false},
		{"123456789m", 0, false}, // 9 digits: more than the 8 gRPC allows
		{"-1m", 0, false},
		{"1.5S", 0, false},
	} {
		fields := []HeaderField{{Name: ":path", Value: "/s/m"}, {Name: "grpc-timeout", Value: c.v}}
		if d, ok := GRPCTimeout(fields); d != c.want || ok != c.ok {
			t.Errorf("grpc-timeout %q: %v %v, want %v %v", c.v, d, ok, c.want, c.ok)
		}
	}
	if _, ok := GRPCTimeout([]HeaderField{{Name: ":path", Value: "/s/m"}}); ok {
		t.Error("no grpc-timeout: ok")
	}
}
