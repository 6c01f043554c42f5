package wire

import (
	"errors"
	"testing"
)

// TestClassify: a codec's error put under a sentinel matches both, and prints the codec's message
// alone, on one line.
func TestClassify(t *testing.T) {
	own := errors.New("dubbo: frame exceeds limit")
	err := Classify(ErrFrameTooLarge, own)
	if !errors.Is(err, ErrFrameTooLarge) || !errors.Is(err, own) || errors.Is(err, ErrBadLength) {
		t.Errorf("%v matches the wrong errors", err)
	}
	if err.Error() != own.Error() {
		t.Errorf("message %q, want %q", err, own)
	}
}

// TestForeignErrorIsBadMagic: bytes of another protocol are counted and answered as bad magic.
func TestForeignErrorIsBadMagic(t *testing.T) {
	var err error = &ForeignError{Msg: "not Dubbo 2: text"}
	var fe *ForeignError
	if !errors.Is(err, ErrBadMagic) || errors.Is(err, ErrShortHeader) || !errors.As(err, &fe) || err.Error() != fe.Msg {
		t.Errorf("%v", err)
	}
}
