package testkit

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RawCodec sends []byte messages as they are (the test providers echo bytes, whatever they encode):
// pass a *[]byte to Invoke, SendMsg and RecvMsg.
type RawCodec struct{}

// Marshal returns the message's bytes.
func (RawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

// Unmarshal copies b into the message.
func (RawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}

// Name is the codec's name in grpc-go's registry of codecs.
func (RawCodec) Name() string { return "raw" }

// GRPCClient is a grpc-go client connection to addr over h2c with RawCodec; the test's cleanup closes
// it.
func GRPCClient(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(RawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
