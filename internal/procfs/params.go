package procfs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Param is one "Key: value" line of /proc/driver/nvidia/params. Value is
// as printed, blanks trimmed (strings keep their quotes: `""`).
type Param struct {
	Key, Value string
}

// Params are the driver's module parameters in file order.
type Params []Param

// Get returns the value of key.
func (ps Params) Get(key string) (string, bool) {
	for _, p := range ps {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// Uint returns the value of key as a decimal unsigned number.
func (ps Params) Uint(key string) (uint64, bool, error) {
	v, ok := ps.Get(key)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("param %s %q: not a decimal number", key, v)
	}
	return n, true, nil
}

// Parameter names the toolkit reads.
const (
	ParamModifyDeviceFiles = "ModifyDeviceFiles"
	ParamDeviceFileUID     = "DeviceFileUID"
	ParamDeviceFileGID     = "DeviceFileGID"
	ParamDeviceFileMode    = "DeviceFileMode"
	ParamImexChannelCount  = "ImexChannelCount"
)

// ParseParams parses /proc/driver/nvidia/params. Blank lines are skipped;
// any other line must be "Key: value" with a non-empty key without blanks.
func ParseParams(data []byte) (Params, error) {
	var ps Params
	err := lines(data, func(n int, line string) error {
		if isBlank(line) {
			return nil
		}
		k, v, ok := keyValue(line)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("line %d: %q is not a \"Key: value\" line", n, line)
		}
		ps = append(ps, Param{Key: k, Value: v})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ps, nil
}

// DisableDeviceFileModification returns a copy of a params file in which a
// "ModifyDeviceFiles: 1" line reads "ModifyDeviceFiles: 0", so that driver
// code in a container never tries to create or chmod device nodes. Every
// other byte is unchanged; the input is not modified.
func DisableDeviceFileModification(params []byte) []byte {
	out := bytes.Clone(params)
	if out == nil {
		out = []byte{}
	}
	for start := 0; start < len(out); {
		end := bytes.IndexByte(out[start:], '\n')
		if end < 0 {
			end = len(out)
		} else {
			end += start
		}
		line := out[start:end]
		if k, v, ok := bytes.Cut(line, []byte(":")); ok &&
			string(bytes.Trim(k, " \t")) == ParamModifyDeviceFiles &&
			string(bytes.Trim(v, " \t\r")) == "1" {
			i := bytes.IndexByte(v, '1')
			v[i] = '0'
		}
		start = end + 1
	}
	return out
}
