package dubbo

import (
	"bufio"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// dubbogoAnswers reads testdata/dubbogo_answers.txt: frames written by dubbo-go
// v3.3.0's own code (see the file's header for how each was obtained).
func dubbogoAnswers(t testing.TB) map[string][]byte {
	t.Helper()
	return hexFixtures(t, "testdata/dubbogo_answers.txt")
}

// hexFixtures reads a fixture file of "<name> <TAB> <hex>" lines; # starts a comment.
func hexFixtures(t testing.TB, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad fixture line %q", line)
		}
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h, err := ParseHeader(b, 0); err != nil || h.FrameLen() != len(b) {
			t.Fatalf("%s: not one whole frame: %+v %v", name, h, err)
		}
		out[name] = b
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// javaStack is the text Java's StringUtils.toString(Throwable) appends after the
// first line: the exception printed again by printStackTrace, then its frames.
const javaStack = "\n%s\n\tat org.apache.dubbo.rpc.protocol.dubbo.DubboProtocol.getInvoker(DubboProtocol.java:315)\n" +
	"\tat org.apache.dubbo.rpc.protocol.dubbo.DubboProtocol$1.reply(DubboProtocol.java:155)\n" +
	"\tat org.apache.dubbo.remoting.exchange.support.header.HeaderExchangeHandler.handleRequest(HeaderExchangeHandler.java:110)\n"

// javaError builds the frame a Java provider writes for a non-OK status:
// ExchangeCodec.encodeResponse writes the error message as one hessian2 string
// (out.writeUTF), which for these texts (over 1,023 characters once the stack trace
// is in) is the 'S' form, or 'R' chunks beyond 32,768.
func javaError(status byte, msg string) []byte {
	return AppendErrorResponse(nil, 9, SerialHessian2, status, msg)
}

// withStack is StringUtils.toString(e) for an exception whose toString() is first.
func withStack(first string) string {
	return first + strings.Replace(javaStack, "%s", first, 1) + strings.Repeat("\tat java.lang.Thread.run(Thread.java:750)\n", 30)
}

// Each not-executed form, with bytes from the providers' own code paths, and
// look-alikes that must stay Ran.
func TestNotExecuted(t *testing.T) {
	dg := dubbogoAnswers(t)
	// Java 2.7-3.3: DubboProtocol.getInvoker throws this RemotingException; HeaderExchangeHandler
	// answers SERVICE_ERROR with StringUtils.toString(e).
	notExported := withStack("org.apache.dubbo.remoting.RemotingException: Not found exported service: " +
		"20880/org.stormgate.Greeter:1.0.0 in [20880/org.apache.dubbo.metadata.MetadataService], " +
		"may be version or group mismatch , channel: consumer: /127.0.0.1:53422 --> provider: /127.0.0.1:20880, " +
		"message:RpcInvocation [methodName=echo, parameterTypes=[class java.lang.String]]")
	// Java 2.6: the same from com.alibaba.dubbo.
	notExported26 := withStack("com.alibaba.dubbo.remoting.RemotingException: Not found exported service: " +
		"org.stormgate.Greeter:20880 in [], may be version or group mismatch , channel: consumer: " +
		"/127.0.0.1:53422 --> provider: /127.0.0.1:20880, message:RpcInvocation [methodName=echo]")
	// Java 2.7-3.3: DecodeableRpcInvocation throws IllegalArgumentException("Service not found:" + path +
	// ", " + method); HeaderExchangeHandler answers BAD_REQUEST "Fail to decode request due to: " + toString.
	decodeNotFound := "Fail to decode request due to: " +
		withStack("java.lang.IllegalArgumentException: Service not found:org.stormgate.Greeter, echo")
	// Java 2.6-3.3: WrappedChannelHandler.sendFeedback / ExecutionChannelHandler.
	pool := "Server side(192.168.1.7,20880) thread pool is exhausted, detail msg:Thread pool is EXHAUSTED! " +
		"Thread Name: DubboServerHandler-192.168.1.7:20880, Pool Size: 200 (active: 200, core: 200, max: 200, largest: 200)"
	pool6 := "Server side(fe80::1ff:fe23:4567:890a,20880) thread pool is exhausted, detail msg:x"
	huge := withStack("org.apache.dubbo.remoting.RemotingException: Not found exported service: " + strings.Repeat("x", 40000))

	cases := []struct {
		name  string
		frame []byte
		want  NotRun
	}{
		{"dubbo-go v3.3.0 startup window, from the real provider", dg["live_no_exporter"], NotRunNoExporter},
		{"dubbo-go no exporter, from its encoder", dg["enc_no_exporter"], NotRunNoExporter},
		{"dubbo-go no invoker, from its encoder", dg["enc_no_invoker"], NotRunNoExporter},
		{"java status 70 not exported", javaError(StatusServiceError, notExported), NotRunNotExported},
		{"java 2.6 status 70 not exported", javaError(StatusServiceError, notExported26), NotRunNotExported},
		{"java status 70, message in 'R' chunks", javaError(StatusServiceError, huge), NotRunNotExported},
		{"java status 40 service not found at decode", javaError(StatusBadRequest, decodeNotFound), NotRunDecodeNotFound},
		{"java status 100 thread pool", javaError(StatusThreadpoolExhausted, pool), NotRunThreadpool},
		{"java status 100 thread pool, IPv6 provider", javaError(StatusThreadpoolExhausted, pool6), NotRunThreadpool},

		// Look-alikes: the method ran, or nothing proves it did not.
		{"dubbo-go business error with exactly the same text (ran)", dg["live_error_same_text"], Ran},
		{"dubbo-go business error containing the text (ran)", dg["live_fail_business"], Ran},
		{"dubbo-go OK answer", dg["live_echo"], Ran},
		{"dubbo-go rejected during shutdown: null value", dg["enc_rejected_null"], Ran},
		{"java status 70 from a method that ran (RpcException)", javaError(StatusServiceError,
			withStack("org.apache.dubbo.rpc.RpcException: Failed to invoke remote method: echo, cause: Not found exported service: x")), Ran},
		{"java status 70 business text containing the words", javaError(StatusServiceError,
			"java.lang.IllegalStateException: Not found exported service: the order service is closed"), Ran},
		{"status 70 with the dubbo-go text", javaError(StatusServiceError, "don't have this exporter, key: x"), Ran},
		{"status 40 other decode failure", javaError(StatusBadRequest,
			"Fail to decode request due to: "+withStack("java.io.IOException: Unexpected serialization id:7")), Ran},
		{"status 40 not-found text from another exception class", javaError(StatusBadRequest,
			"Fail to decode request due to: java.lang.IllegalStateException: Service not found:x"), Ran},
		{"status 100 from Stormgate itself", javaError(StatusThreadpoolExhausted,
			"stormgate: the provider is not keeping up (every connection's queue and the hold queue are full)"), Ran},
		{"status 100 without the pool text", javaError(StatusThreadpoolExhausted, "Server side(1.2.3.4,1) busy"), Ran},
		{"status 100 pool text too far away", javaError(StatusThreadpoolExhausted,
			"Server side("+strings.Repeat("9", 200)+") thread pool is exhausted, detail msg:"), Ran},
		{"status 35 lost", javaError(StatusChannelInactive, "Not found exported service: "), Ran},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NotExecuted(tc.frame); got != tc.want {
				t.Fatalf("NotExecuted = %v, want %v", got, tc.want)
			}
		})
	}

	// Changed envelopes of a real not-executed frame are not recognised.
	base := dg["live_no_exporter"]
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), base...)) }
	for name, frame := range map[string][]byte{
		"request flag":       mut(func(b []byte) []byte { b[2] |= FlagRequest | FlagTwoWay; return b }),
		"event flag":         mut(func(b []byte) []byte { b[2] |= FlagEvent; return b }),
		"other serializer":   mut(func(b []byte) []byte { b[2] = b[2]&^SerialMask | 6; return b }),
		"bad magic":          mut(func(b []byte) []byte { b[0] = 0; return b }),
		"status 70":          mut(func(b []byte) []byte { b[3] = StatusServiceError; return b }),
		"type 0x93":          mut(func(b []byte) []byte { b[HeaderLen] = respWithExceptionAttachments; return b }),
		"cut in the message": base[:HeaderLen+1+len(dubbogoThrowable)+10],
		"header only":        base[:HeaderLen],
		"empty":              nil,
	} {
		if got := NotExecuted(frame); got != Ran {
			t.Errorf("%s: NotExecuted = %v, want Ran", name, got)
		}
	}
}

func TestNotRunNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range NotRunReasons() {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Fatalf("reason %d has name %q", r, s)
		}
		seen[s] = true
	}
	if Ran.String() != "" || NotRun(200).String() != "unknown" {
		t.Fatal("names of Ran / out of range")
	}
}

func TestClosingAttachment(t *testing.T) {
	dg := dubbogoAnswers(t)
	for name, want := range map[string]bool{
		"enc_closing_value":          true,
		"enc_closing_exception":      true,
		"enc_closing_null":           true,
		"enc_closing_false":          false,
		"enc_lookalike_value_string": false,
		"enc_lookalike_value_map":    false,
		"enc_lookalike_value_list":   false,
		"enc_rejected_null":          false,
		"live_echo":                  false,
		"live_error_same_text":       false,
		"live_no_exporter":           false,
	} {
		if got := ClosingAttachment(dg[name]); got != want {
			t.Errorf("%s: ClosingAttachment = %v, want %v", name, got, want)
		}
	}
	// The value before the attachments is walked, whatever its shape.
	att := []byte("H\x05dubbo\x052.0.2\x07closing\x04trueZ")
	for name, value := range map[string][]byte{
		"class and object":   append(append([]byte{}, dubbogoThrowable...), "\x01xNNN"...),
		"two objects":        []byte("X\x92C\x01T\x92\x01a\x01b\x60\x07closing\x04true\x60\x91\x92"),
		"typed list":         []byte("V\x04[int\x93\x91\x92\x93"),
		"typed map":          []byte("M\x01m\x07closing\x04trueZ"),
		"type reference":     []byte("X\x92V\x01t\x91\x01aV\x90\x91\x01b"),
		"binary chunks":      append([]byte("X\x92A\x00\x03abcB\x00\x02de"), 0x22, 'x', 'y'),
		"binary 0-1023":      append([]byte{0x34, 0x05}, "\x07closing\x04true"[:5]...),
		"numbers":            []byte("X\xa3\x90\xc8\x01\xd4\x01\x02I\x00\x00\x00\x01\xe0\xf8\x01\x38\x01\x02Y\x00\x00\x00\x01L\x00\x00\x00\x00\x00\x00\x00\x01[\\\x5d\x01\x5e\x00\x01\x5f\x00\x00\x00\x00D\x00\x00\x00\x00\x00\x00\x00\x00J\x00\x00\x00\x00\x00\x00\x00\x00K\x00\x00\x00\x00TF"),
		"reference":          []byte("Q\x90"),
		"untyped var list":   []byte("W\x07closing\x04trueZ"),
		"short typed list":   []byte("\x72\x01t\x91\x92"),
		"short untyped list": []byte("\x7a\x91\x92"),
		"long string":        AppendHessianString(nil, strings.Repeat("\x07closing\x04true", 5000)),
	} {
		for _, closing := range []bool{true, false} {
			a := att
			if !closing {
				a = []byte("H\x05dubbo\x052.0.2Z")
			}
			frame := AppendHeader(nil, Header{Flags: SerialHessian2, Status: StatusOK, ID: 3})
			frame = append(append(append(append(frame, respValueAttachments), value...), a...), 'N')
			putBodyLen(frame)
			if got := ClosingAttachment(frame); got != closing {
				t.Errorf("%s (closing %v): got %v", name, closing, got)
			}
		}
	}
	// Malformed or unsupported bodies report false, never panic.
	frame := append([]byte(nil), dg["enc_closing_value"]...)
	for cut := HeaderLen; cut < len(frame)-3; cut++ { // the last three bytes are 'e' 'Z' 'N'
		f := append([]byte(nil), frame[:cut]...)
		if ClosingAttachment(f) {
			t.Fatalf("cut at %d: reported closing", cut)
		}
	}
	deep := AppendHeader(nil, Header{Flags: SerialHessian2, Status: StatusOK, ID: 3})
	deep = append(deep, respValueAttachments)
	deep = append(deep, strings.Repeat("W", 100)...)
	deep = append(append(deep, strings.Repeat("Z", 100)...), att...)
	putBodyLen(deep)
	if ClosingAttachment(deep) {
		t.Fatal("a value nested 100 deep was walked")
	}
}

func TestNotRunAndClosingDoNotAllocate(t *testing.T) {
	dg := dubbogoAnswers(t)
	frames := [][]byte{dg["live_no_exporter"], dg["live_echo"], dg["enc_closing_value"], dg["enc_lookalike_value_list"],
		javaError(StatusThreadpoolExhausted, "Server side(1.2.3.4,20880) thread pool is exhausted, detail msg:x")}
	if n := testing.AllocsPerRun(200, func() {
		for _, f := range frames {
			NotExecuted(f)
			ClosingAttachment(f)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
