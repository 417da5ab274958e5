package wsconn

// DiscardFactor bounds how far past its link's frame limit an inbound frame
// is read through and dropped (ReadLoopLimited): a frame longer than this
// many times the limit closes the link with 1009, as gorilla's read limit
// does, instead of being read to its end.
const DiscardFactor = 16

// Oversized is what a frame over the link's limit named, learned as it was
// read through and dropped, without holding it: the strings its top-level
// "type" and "runId" members hold, each "" unless the member appears once,
// holds a plain string and no top-level key is escaped (an escaped key
// could be either of them spelled otherwise). Two readers must never
// disagree about what a frame names, so anything less plain names nothing.
type Oversized struct {
	Type, RunID string
	Size        int64
}

// namesScan reads a JSON text as it streams by (Write), keeping only the
// plain short strings that its top-level object's "type" and "runId"
// members hold. It checks nothing else: the frame it reads is refused
// whatever it holds.
type namesScan struct {
	depth     int
	inStr     bool
	esc       bool
	escaped   bool // the string being read holds an escape
	str       []byte
	long      bool // the string being read was longer than maxName
	keyNext   bool // at depth 1, the next string is a key
	member    string
	valueNext bool // at depth 1, a member's value comes next
	notObject bool
	tangled   bool // a top-level key was escaped
	seen      map[string]int
	vals      map[string]string
	size      int64
}

// maxName bounds the strings namesScan keeps; a longer type or run id is
// none that funduq knows.
const maxName = 256

func (s *namesScan) Write(p []byte) (int, error) {
	s.size += int64(len(p))
	for _, c := range p {
		if s.inStr {
			s.strByte(c)
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			s.inStr, s.esc, s.escaped, s.long, s.str = true, false, false, false, s.str[:0]
		case '{', '[':
			if s.depth == 0 && c != '{' {
				s.notObject = true
			}
			s.valueAt1()
			s.depth++
			if s.depth == 1 {
				s.keyNext = true
			}
		case '}', ']':
			s.depth--
		case ':':
			if s.depth == 1 {
				s.valueNext = true
			}
		case ',':
			if s.depth == 1 {
				s.keyNext = true
			}
		default: // a number or a literal
			if s.depth == 0 {
				s.notObject = true
			}
			s.valueAt1()
		}
	}
	return len(p), nil
}

// valueAt1 notes a top-level member's value that is not a string.
func (s *namesScan) valueAt1() {
	if s.depth == 1 && s.valueNext {
		s.valueNext = false
		delete(s.vals, s.member)
	}
}

func (s *namesScan) strByte(c byte) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc, s.escaped = true, true
	case c == '"':
		s.inStr = false
		s.endString()
		return
	}
	if len(s.str) < maxName {
		s.str = append(s.str, c)
	} else {
		s.long = true
	}
}

func (s *namesScan) endString() {
	switch {
	case s.depth == 0:
		s.notObject = true
	case s.depth != 1:
	case s.keyNext:
		s.keyNext = false
		if s.escaped {
			s.tangled = true
		}
		s.member = string(s.str)
		if s.seen == nil {
			s.seen, s.vals = map[string]int{}, map[string]string{}
		}
		s.seen[s.member]++
	case s.valueNext:
		s.valueNext = false
		if (s.member == "type" || s.member == "runId") && !s.escaped && !s.long {
			s.vals[s.member] = string(s.str)
		} else {
			delete(s.vals, s.member)
		}
	}
}

// result is what the frame named.
func (s *namesScan) result() Oversized {
	o := Oversized{Size: s.size}
	if s.notObject || s.tangled || s.depth != 0 || s.inStr {
		return o
	}
	if s.seen["type"] == 1 {
		o.Type = s.vals["type"]
	}
	if s.seen["runId"] == 1 {
		o.RunID = s.vals["runId"]
	}
	return o
}
