//go:build !fulmen_pkgconfig

package fulmen

// Links against the library built in this repository (target/release).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -Wl,-rpath,${SRCDIR}/../../target/release -lfulmen
*/
import "C"
