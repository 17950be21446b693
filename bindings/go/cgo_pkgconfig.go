//go:build !fulmen_checkout

package fulmen

// Links the library that pkg-config finds (fulmen.pc: an install, an
// unpacked release, or build/fulmen.pc of a checkout).

/*
#cgo pkg-config: fulmen
*/
import "C"
