package nadpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// node is one JSON value as written: objects keep every member in document
// order, duplicates included. encoding/json into a map would keep only the
// last of two equal keys, while a plugin in another language may use the
// first: the policy must see both.
type node struct {
	kind    kind
	str     string      // kindString
	num     json.Number // kindNumber
	boolean bool        // kindBool
	members []member    // kindObject
	elems   []*node     // kindArray
}

type member struct {
	key   string
	value *node
}

type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

// String renders a scalar for messages (objects and arrays by kind).
func (n *node) String() string {
	switch n.kind {
	case kindString:
		b, _ := json.Marshal(n.str)
		return string(b)
	case kindNumber:
		return n.num.String()
	case kindBool:
		if n.boolean {
			return "true"
		}
		return "false"
	case kindObject:
		return "an object"
	case kindArray:
		return "a list"
	}
	return "null"
}

var errTrailing = errors.New("data after the JSON value")

// parse decodes exactly one JSON value (numbers as json.Number).
func parse(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errTrailing
		}
		return nil, err
	}
	return n, nil
}

func parseValue(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			n := &node{kind: kindObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", kt)
				}
				val, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key: key, value: val})
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &node{kind: kindArray}
			for dec.More() {
				e, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
		return nil, fmt.Errorf("unexpected %q", v)
	case string:
		return &node{kind: kindString, str: v}, nil
	case json.Number:
		return &node{kind: kindNumber, num: v}, nil
	case bool:
		return &node{kind: kindBool, boolean: v}, nil
	case nil:
		return &node{kind: kindNull}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}
