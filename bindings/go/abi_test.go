package fulmen

import (
	"errors"
	"strings"
	"testing"
)

func TestABICheck(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatalf("CheckABI: %v", err)
	}
	// Version "MAJOR.MINOR.PATCH" as MAJOR*1000000 + MINOR*1000 + PATCH.
	header := uint32(0)
	for _, part := range strings.Split(Version(), ".") {
		n := uint32(0)
		for _, c := range part {
			n = n*10 + uint32(c-'0')
		}
		header = header*1000 + n
	}
	if header != ABIVersion() {
		t.Fatalf("ABIVersion %d, Version %s", ABIVersion(), Version())
	}
	for _, refused := range []uint32{header + 1, header + 1000, header + 1000000} {
		err := checkABI(refused)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), Version()) {
			t.Fatalf("checkABI(%d) = %v, want ErrUnsupported naming %s", refused, err, Version())
		}
	}
}
