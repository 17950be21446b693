//go:build fulmen_pkgconfig

package fulmen

// Links against an installed library found through pkg-config (fulmen.pc).

/*
#cgo pkg-config: fulmen
*/
import "C"
