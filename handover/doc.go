// Package handover moves a running sidecar into a new program image without closing a
// socket: the mechanics of `sidecar upgrade` (issue 14), independent of what the stages
// hand over. The process re-executes itself in place (execve keeps the PID: PID 1 in a
// container, systemd's MainPID), so neither Kubernetes nor systemd sees a restart.
//
//	old image                                            new image (same PID)
//	Preflight(new binary ... --preflight)  refuse? ──▶ keep serving, report why
//	stages freeze, sections encoded
//	OpenSelf (rollback target)
//	WriteMemfd(State) ─▶ Exec(binary, keep=FDs) ───────▶ FromEnv: State, memfd, old exe
//	  (execve failed: caller thaws)                      stages restore from sections
//	                                                     ok ──▶ Incoming.Done, serve
//	                                                     fail ─▶ Incoming.RollBack(reason)
//	old binary again, FromEnv with Rollback set ◀──────────────┘
//	restores the same State, serves, reports the rollback
//
// What crosses the exec: the State, in a memfd without FD_CLOEXEC whose number (and the old
// executable's) is in EnvState; the descriptors the State names, by number (FD_CLOEXEC
// cleared on them at the exec; every other descriptor gets it, so nothing leaks into the new
// image; FromEnv sets it again on them once the State is read, so nothing leaks into the
// new image's children either); the command line; the environment. Format versions the encoding: the preflight reports the
// format a binary reads, and a binary that reads another is refused before anything stops.
//
// What cannot be rolled back: a new binary that dies before it reaches FromEnv and the
// restore (a crash in its start-up code, a missing shared library; the preflight runs the
// same start-up code first, so this takes a binary that passes its preflight and then
// crashes anyway), or whose restore fails after it has read or written a handed-over socket.
// The connections are then lost with the process.
//
// Concurrency: nothing here is safe to run twice at once; the caller runs one handover at a
// time. Exec replaces the image and does not return on success.
package handover
