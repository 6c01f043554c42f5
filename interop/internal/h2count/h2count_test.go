package h2count

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

func TestRelayCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		_, _ = c.Write([]byte{0, 0, 8, typePing, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
		c.Close()
		got <- b
	}()
	r, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ping := []byte{0, 0, 8, typePing, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	ack := []byte{0, 0, 8, typePing, flagAck, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}
	data := append([]byte{0, 0, 12, 0, 1, 0, 0, 0, 1}, "PINGPINGPING"...) // payload looks like nothing
	in := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), settings...)
	in = append(in, ping...)
	in = append(in, data...)
	in = append(in, ack...)
	in = append(in, ping...)
	// Byte by byte, so frame headers straddle reads.
	for i := range in {
		if _, err := c.Write(in[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	back, _ := io.ReadAll(c)
	select {
	case b := <-got:
		if !bytes.Equal(b, in) {
			t.Fatal("bytes changed on the way")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("target got nothing")
	}
	if len(back) != 17 {
		t.Fatalf("back %d bytes", len(back))
	}
	// The relay may still be counting the target's side after the client read it; wait briefly.
	deadline := time.Now().Add(2 * time.Second)
	for r.Counts().PingsBack == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	want := Counts{Conns: 1, Frames: 5, Pings: 2, PingAcks: 1, PingsBack: 1}
	if got := r.Counts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}
