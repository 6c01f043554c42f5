package proxy

import "testing"

func TestResolvePollers(t *testing.T) {
	for _, c := range []struct{ flag, procs, want int }{
		{0, 2, 2}, // default: one per P
		{0, 16, 16},
		{0, 0, 1}, // never none
		{1, 2, 1}, // the flag wins
		{4, 2, 4},
	} {
		if got := ResolvePollers(c.flag, c.procs); got != c.want {
			t.Errorf("ResolvePollers(%d, %d) = %d, want %d", c.flag, c.procs, got, c.want)
		}
	}
}
