package nft

// WithFlush replaces Conn.Flush: the ENOBUFS tests.
var WithFlush = withFlush
