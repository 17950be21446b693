//go:build fulmen_checkout

package fulmen

// With the fulmen_checkout tag: links the library built in this
// repository (target/release), with an rpath to it, and no pkg-config.

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -Wl,-rpath,${SRCDIR}/../../target/release -lfulmen
*/
import "C"
