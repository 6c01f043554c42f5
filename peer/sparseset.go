package peer

// sparseSet is a set of uint64 stored as 4096-bit blocks: compact for what the echo
// provider tracks (request ids and body keys, which come in dense runs), at 512 bytes
// per run of 4,096 values instead of a map entry per value. Not safe for concurrent use.
type sparseSet struct {
	blocks map[uint64]*[64]uint64
	n      int
}

// add inserts x and reports whether it was new.
func (s *sparseSet) add(x uint64) bool {
	if s.blocks == nil {
		s.blocks = make(map[uint64]*[64]uint64)
	}
	b := s.blocks[x>>12]
	if b == nil {
		b = new([64]uint64)
		s.blocks[x>>12] = b
	}
	w, bit := (x>>6)&63, uint64(1)<<(x&63)
	if b[w]&bit != 0 {
		return false
	}
	b[w] |= bit
	s.n++
	return true
}

func (s *sparseSet) len() int { return s.n }
