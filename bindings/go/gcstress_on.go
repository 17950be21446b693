//go:build fulmen_gcstress

package fulmen

import "runtime"

// gcStress runs a full garbage collection around every C call when built
// with the fulmen_gcstress tag, so that a wrapper missing a
// runtime.KeepAlive has its handle finalized (freed) while C still uses
// it, which then shows up as an INVALID_HANDLE error in the tests.
func gcStress() {
	runtime.GC()
	runtime.Gosched()
}
