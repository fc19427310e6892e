package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("1500ms", "2s")
// in the config file.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// durationError is a value that is not a duration string.
type durationError struct{ msg string }

func (e *durationError) Error() string { return e.msg }

// UnmarshalJSON accepts a duration string such as "1500ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &durationError{fmt.Sprintf("want a duration string such as \"1500ms\", got %s", b)}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &durationError{fmt.Sprintf("bad duration %q: %v", s, err)}
	}
	*d = Duration(v)
	return nil
}
