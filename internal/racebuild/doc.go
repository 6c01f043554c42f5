// Package racebuild tells a test whether its binary was built with the race detector.
//
// Tests that measure time (latency bounds, gaps, rates) skip under -race: the detector
// slows every memory access several times over, by how many bytes a path copies rather
// than by what it decides, and make race runs the packages' instrumented tests side by
// side, so their figures would measure the detector and the neighbours. make timing runs
// them without -race, one package at a time.
package racebuild
