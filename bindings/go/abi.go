package fulmen

/*
#include "shim.h"
*/
import "C"

// CheckABI reports whether the libfulmen loaded serves the fulmen.h this
// package was compiled with: the same ABI series (FULMEN_SONAME) and a
// library not older than the header. The package makes this check when the
// program starts and panics with the library's message on a mismatch.
func CheckABI() error { return checkABI(uint32(C.FULMEN_ABI_VERSION)) }

// ABIVersion is the loaded library's version as one number,
// MAJOR*1000000 + MINOR*1000 + PATCH.
func ABIVersion() uint32 { return uint32(C.fulmen_abi_version()) }

func checkABI(header uint32) error { return check(C.fulmen_abi_check(C.uint32_t(header))) }

func init() {
	if err := CheckABI(); err != nil {
		panic("fulmen: " + err.Error())
	}
}
