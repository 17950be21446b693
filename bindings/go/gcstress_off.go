//go:build !fulmen_gcstress

package fulmen

// gcStress is a no-op without the fulmen_gcstress build tag.
func gcStress() {}
