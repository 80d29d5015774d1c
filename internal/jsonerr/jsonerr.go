// Package jsonerr words encoding/json's decoding errors for the person who
// wrote the input: the line, column and byte offset where it is wrong, the
// field path of a value of the wrong type.
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Describe turns a decoding error of data into a message naming where the
// input is wrong: line, column and byte offset for syntax errors (and a
// TrailingDataError), the field path for type errors, the end for input
// cut short. Other errors are returned as they are.
func Describe(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var trail TrailingDataError
	switch {
	case errors.As(err, &trail):
		line, col := lineCol(data, trail.Offset)
		return fmt.Errorf("malformed JSON at line %d, column %d (byte offset %d): %w", line, col, trail.Offset, err)
	case errors.As(err, &syn):
		// Offset counts the bytes read, the offending one included.
		line, col := lineCol(data, max(syn.Offset-1, 0))
		return fmt.Errorf("malformed JSON at line %d, column %d (byte offset %d): %w", line, col, syn.Offset, err)
	case errors.As(err, &typ):
		line, col := lineCol(data, typ.Offset)
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Errorf("field %s: JSON %s cannot be a %s (line %d, column %d, byte offset %d)",
			field, typ.Value, typ.Type, line, col, typ.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := lineCol(data, int64(len(data)))
		return fmt.Errorf("malformed JSON: unexpected end of file at line %d, column %d (byte offset %d)", line, col, len(data))
	}
	return err
}

// TrailingDataError reports data after the top-level JSON value, at byte
// Offset (a json.Decoder's InputOffset after the value).
type TrailingDataError struct{ Offset int64 }

func (e TrailingDataError) Error() string { return "unexpected data after the top-level value" }

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}
