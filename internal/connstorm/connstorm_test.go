package connstorm

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// server answers every connection's first request (one byte read) with answer, written in pieces of
// one byte so that answers arrive split; close instead closes the connection unanswered; silent reads
// and never answers. It returns the address and a stop function that closes every connection.
func server(t *testing.T, answer []byte, mode string) (netip.AddrPort, func()) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				switch mode {
				case "close":
					c.Close()
				case "silent":
				default:
					for i := range answer {
						if _, err := c.Write(answer[i : i+1]); err != nil {
							return
						}
					}
				}
			})
		}
	})
	stop := func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	t.Cleanup(stop)
	return netip.MustParseAddrPort(ln.Addr().String()), stop
}

func TestEveryConnectionAnsweredAndTimed(t *testing.T) {
	for _, window := range []int{0, 7} {
		answer := []byte("0123456789abcdefg")
		ap, _ := server(t, answer, "answer")
		res, err := Run(Spec{Target: ap, Count: 300, Window: window, Request: []byte{0xda}, AnswerLen: len(answer),
			Check: func(a []byte) string {
				if !bytes.Equal(a, answer) {
					return "not the answer"
				}
				return ""
			}, AnswerTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Connected != 300 || res.Answered != 300 || len(res.Failures) != 0 || len(res.FDs) != 300 {
			t.Fatalf("window %d: connected %d answered %d failures %v fds %d, want 300 300 none 300",
				window, res.Connected, res.Answered, res.Failures, len(res.FDs))
		}
		if len(res.Connect) != 300 || len(res.Answer) != 300 || len(res.First) != 300 || res.Issued <= 0 || res.Settled <= 0 {
			t.Fatalf("window %d: %d connect, %d answer, %d first times, issued %v settled %v", window,
				len(res.Connect), len(res.Answer), len(res.First), res.Issued, res.Settled)
		}
		for i := range res.First {
			if res.First[i] < res.Answer[i] {
				t.Fatalf("first answer %v sooner than answer after connect %v", res.First[i], res.Answer[i])
			}
		}
		CloseAll(res.FDs)
	}
}

func TestFailuresByKind(t *testing.T) {
	wrong, _ := server(t, []byte("XY"), "answer")
	closing, _ := server(t, nil, "close")
	silent, _ := server(t, nil, "silent")
	refused, stop := server(t, nil, "silent")
	stop() // nothing listens there now
	check := func(a []byte) string {
		if string(a) != "OK" {
			return "wrong bytes"
		}
		return ""
	}
	for _, tc := range []struct {
		name   string
		target netip.AddrPort
		spec   Spec
		kind   string
	}{
		{"wrong answer", wrong, Spec{AnswerTimeout: 20 * time.Second}, "answer: wrong bytes"},
		{"closed", closing, Spec{AnswerTimeout: 20 * time.Second}, KindAnswerClosed},
		{"answer timeout", silent, Spec{AnswerTimeout: 200 * time.Millisecond}, KindAnswerTimeout},
		{"deadline", silent, Spec{Deadline: 200 * time.Millisecond}, KindAnswerTimeout},
		{"refused", refused, Spec{AnswerTimeout: 20 * time.Second}, "connect: ECONNREFUSED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Target, spec.Count, spec.Request, spec.AnswerLen, spec.Check = tc.target, 20, []byte{1}, 2, check
			res, err := Run(spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Answered != 0 || res.Failures[tc.kind] != 20 || len(res.Failures) != 1 || len(res.FDs) != 0 {
				t.Fatalf("answered %d failures %v fds %d, want 0, 20 × %q, 0", res.Answered, res.Failures, len(res.FDs), tc.kind)
			}
		})
	}
}

func TestRefusesABadSpec(t *testing.T) {
	ap := netip.MustParseAddrPort("127.0.0.1:1")
	for _, s := range []Spec{
		{Target: netip.MustParseAddrPort("[::1]:1"), Count: 1, Request: []byte{1}, AnswerLen: 1, Deadline: time.Second},
		{Target: ap, Count: 0, Request: []byte{1}, AnswerLen: 1, Deadline: time.Second},
		{Target: ap, Count: 1, AnswerLen: 1, Deadline: time.Second},
		{Target: ap, Count: 1, Request: []byte{1}, Deadline: time.Second},
		{Target: ap, Count: 1, Request: []byte{1}, AnswerLen: 1},
	} {
		if _, err := Run(s); err == nil {
			t.Errorf("Run(%+v) ran", s)
		}
	}
}

// TestSettledAnswers: an answer of no fixed length settles when Settled says so, fails with its
// reason, or fails as too long past AnswerLen.
func TestSettledAnswers(t *testing.T) {
	answer := []byte("0123456789abcdefg")
	ap, _ := server(t, answer, "answer")
	for _, tc := range []struct {
		name      string
		answerLen int
		settled   func([]byte) (bool, string)
		kind      string // "" = answered
	}{
		{"done at its end", 64, func(a []byte) (bool, string) { return bytes.HasSuffix(a, []byte("g")), "" }, ""},
		{"wrong", 64, func(a []byte) (bool, string) { return false, "no g" }, "answer: no g"},
		{"too long", 10, func(a []byte) (bool, string) { return false, "" }, "answer: too long"},
	} {
		res, err := Run(Spec{Target: ap, Count: 20, Request: []byte{1}, AnswerLen: tc.answerLen, Settled: tc.settled,
			AnswerTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if tc.kind == "" && (res.Answered != 20 || len(res.Failures) != 0) || tc.kind != "" && res.Failures[tc.kind] != 20 {
			t.Errorf("%s: answered %d, failures %v", tc.name, res.Answered, res.Failures)
		}
		CloseAll(res.FDs)
	}
}
