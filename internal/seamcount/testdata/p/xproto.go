package p

func protoCall(c *conn, pub Conn) {
	c.write(nil) // write: 1
	_ = c.open   // open: 1
	budget++     // budget: 1
	pub.Write(nil)
}
