package containercli

import (
	"os"
	"testing"

	"github.com/nctk/nctk/internal/driverprobe"
)

func TestMain(m *testing.M) {
	if driverprobe.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}
