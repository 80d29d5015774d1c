package phase

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestError(t *testing.T) {
	inner := fmt.Errorf("open /dev/nvidia0: %w", fs.ErrNotExist)
	err := fmt.Errorf("generate CDI spec: %w", &Error{Phase: Device, Err: inner})
	if got, want := err.Error(), "generate CDI spec: device error: open /dev/nvidia0: file does not exist"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Phase != Device || pe.Err != inner {
		t.Errorf("errors.As found %+v", pe)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the wrapped error is not reachable with errors.Is")
	}
}
