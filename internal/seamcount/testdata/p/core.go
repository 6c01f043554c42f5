package p

type conn struct{ open bool }

func (c *conn) write(b []byte) {}

// Conn is exported: a protocol may use it.
type Conn struct{ c *conn }

func (c Conn) Write(b []byte) { c.c.write(b) }

var budget int
