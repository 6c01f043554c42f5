package main

import (
	"fmt"
	"testing"
)

// The protocol's file (x*.go) uses the core's unexported type conn (as a parameter's type), its method
// write, its field open and the variable budget: each counted; the exported Conn and Write are not.
func TestCount(t *testing.T) {
	uses, err := count("testdata/p", "x")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(uses)
	want := "[{*conn.open 1 xproto.go} {*conn.write 1 xproto.go} {pkg budget 1 xproto.go} {pkg conn 1 xproto.go}]"
	if got != want {
		t.Errorf("uses:\n got %s\nwant %s", got, want)
	}
}
