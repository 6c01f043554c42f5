//go:build race

package admission_test

// raceEnabled: the race detector slows the accept path several times over, which voids the
// storm acceptance's timing figures (they are checked without -race).
const raceEnabled = true
